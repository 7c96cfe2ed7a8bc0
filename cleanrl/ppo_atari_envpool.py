"""PPO on Atari with EnvPool: the algorithm of ppo_atari.py, the environments stepped in C++ threads.

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347;
Schulman et al. (2016), GAE, arXiv:1506.02438; Mnih et al. (2015), Nature 518:529-533; Huang et
al. (2022), "The 37 Implementation Details of Proximal Policy Optimization" (ICLR blog track);
Weng et al. (2022), "EnvPool: A Highly Parallel Reinforcement Learning Environment Execution
Engine", arXiv:2206.10558. Network, hyperparameters and preprocessing are ppo_atari.py's.

What this file changes (against CleanRL's ppo_atari_envpool.py): EnvPool's reset step (the step
after done: action ignored, reward 0) is masked out of the advantages and losses; a truncation
bootstraps from V(real final observation), a termination (or lost life) does not;
``charts/episodic_return`` is the game score. The envs are not checkpointed: ``--resume`` makes
new ones (other games). Details and results: docs/scripts/ppo_atari_envpool.md.

Run:
    python cleanrl/ppo_atari_envpool.py --env-id Breakout-v5
"""

import os
import signal
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils.envpool_atari import GameStatistics, check_envpool_atari, check_rollout
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run

try:  # EnvPool comes with the envpool extra; without it, --env-id says so
    import envpool
except ImportError:
    envpool = None

FRAME_SKIP = 4
"""Frames per agent step (the action is repeated, the last two frames max-pooled)."""
MAX_EPISODE_STEPS = 27_000
"""Agent steps per game before a time-limit truncation (108,000 frames, 30 minutes at 60 Hz)."""


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "Breakout-v5"
    """EnvPool id of an Atari game (such as Breakout-v5, Pong-v5)"""
    env_mode: Literal["sync", "async"] = "sync"
    """sync only: EnvPool steps the envs in its own C++ threads (--num-threads); async is refused"""
    num_threads: Optional[int] = None
    """EnvPool's C++ threads stepping the envs; None: the number of CPU cores available"""
    total_timesteps: int = 10000000
    """total agent steps, summed over envs (4 frames each; EnvPool's reset steps included)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.1
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε]); also the value clip"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the reference implementation"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: Optional[float] = None
    """stop the epochs of an update early when the approximate KL exceeds this"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def make_envs(
    env_id: str,
    seed: int,
    capture_video: bool,
    video_dir: str,
    training: bool = True,
    video_episodes=None,
    num_envs: int = 1,
    num_threads: int = 1,
):
    """EnvPool's Atari envs with ppo_atari.py's preprocessing (with ``training``: episodic life, sign-clipped rewards),
    gymnasium API (next-step autoreset); :class:`GameStatistics` adds game scores and records env 0's videos if asked."""
    envs = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        num_threads=num_threads,
        episodic_life=training,
        reward_clip=training,
        noop_max=30,
        frame_skip=FRAME_SKIP,
        img_height=84,
        img_width=84,
        gray_scale=True,
        stack_num=4,
        use_fire_reset=True,
        repeat_action_probability=0.0,  # as the NoFrameskip-v4 ids: no sticky actions
        full_action_space=False,
        max_episode_steps=MAX_EPISODE_STEPS,
        **({"render_mode": "rgb_array"} if capture_video else {}),
    )
    return GameStatistics(envs, FRAME_SKIP, video_dir if capture_video else None, video_episodes)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN trunk (Mnih et al. 2015) shared by a policy head (logits) and a value head; frames uint8 0-255."""

    def __init__(self, envs):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, int(envs.single_action_space.n)), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features: frames uint8 ``[B, 4, 84, 84]`` -> ``[B, 512]`` (float, channels-last convolutions)."""
        return self.trunk(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): frames ``[B, 4, 84, 84]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action, log π(action|x), entropy, V(x))``, each ``[B]``, one pass of the trunk; ``action`` sampled when None."""
        hidden = self.hidden(x)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1)


def compute_gae(rewards, values, last_values, terminations, dones, resets, gamma: float, gae_lambda: float):
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16) over an EnvPool rollout, arrays ``[T, N]``.

    δ_t = r_t + γ (1 - terminated_t) V(s_{t+1}) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}. With the next-step
    reset, s_{t+1} after a done is the real final observation, so a truncation bootstraps from ``values[t+1]``
    (``last_values [N]`` at T-1). Reset steps (``resets``) get advantage 0 (return = value); the loss masks them.
    Returns ``(advantages, returns)``, returns = advantages + values.
    """
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    deltas = rewards + gamma * (1.0 - terminations) * next_values - values
    carry = gamma * gae_lambda * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    advantages = np.where(resets, 0.0, advantages).astype(values.dtype)
    return advantages, advantages + values


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (``[B]`` each); 0 when none is."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_losses(
    newlogprob: torch.Tensor,
    entropy: torch.Tensor,
    newvalue: torch.Tensor,
    oldlogprob: torch.Tensor,
    oldvalue: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
) -> dict[str, torch.Tensor]:
    """PPO's loss terms (ppo_atari.py's: clipped surrogate, clipped value loss, entropy, KL estimates, clip fraction)
    as means over the samples where ``mask`` ``[B]`` is 1 (0: EnvPool's reset steps, which change no value and no
    gradient); with ``norm_adv`` advantages are normalised over the masked-in samples. All inputs ``[B]``."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = masked_mean(-logratio, mask)
        approx_kl = masked_mean((ratio - 1) - logratio, mask)
        clipfrac = masked_mean(((ratio - 1.0).abs() > clip_coef).float(), mask)
    if norm_adv:
        count = mask.sum()
        mean = masked_mean(advantages, mask)
        std = ((mask * (advantages - mean) ** 2).sum() / (count - 1).clamp(min=1.0)).sqrt()
        advantages = (advantages - mean) / (std + 1e-8)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask)
    if clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)
    else:
        v_loss = 0.5 * masked_mean((newvalue - returns) ** 2, mask)
    return {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": masked_mean(entropy, mask),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require(args.env_mode == "sync", "--env-mode", "EnvPool already steps the envs in parallel C++ threads: set --num-threads")
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    require(args.num_threads is None or args.num_threads > 0, "--num-threads", f"must be positive, got {args.num_threads}")
    if args.num_threads is not None:
        require_range(args, num_threads=(1, 2**10))
    else:
        args.num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    batch = f"the batch of {args.batch_size} (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide {batch}")
    require(not args.norm_adv or args.minibatch_size >= 2, "--num-minibatches", "too small to normalise advantages")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_envpool_atari(args, envpool)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a saved model, in EnvPool: whole games, actions sampled from π as CleanRL
    evaluates. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, **options)
    agent = evaluation.load(Agent(evaluation.envs).to(memory_format=torch.channels_last), "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits = agent.actor(agent.hidden(torch.as_tensor(obs, device=evaluation.device)))
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the rollout ends, checkpoints, exits 128 + signum
            signal.signal(signum, run.stop)

    # The envs are not checkpointed: a resumed run makes new ones, seeded from --seed and its step (other games)
    seed = args.seed
    if resumed:
        seed = int(np.random.SeedSequence([args.seed, resumed["global_step"]]).generate_state(1)[0] % 2**31)
    # Next-step autoreset: the step after a done resets the env (its action ignored, its reward 0)
    envs = make_envs(
        args.env_id, seed, args.capture_video, run.video_dir, num_envs=args.num_envs, num_threads=args.num_threads
    )
    with run.stop_on_fault(envs):  # a fault ends the run in one line
        obs_shape = envs.single_observation_space.shape  # (4, 84, 84)
        # channels-last weights and inputs: faster convolutions on CPU (benchmark/README.md)
        agent = Agent(envs).to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch (frames uint8), the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        resets = np.zeros((T, N), dtype=bool)  # EnvPool's reset steps: not transitions of the game

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        state = {"agent": agent, "optimizer": optimizer}  # what a checkpoint holds, besides the generators: not the envs
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser and generators, in place; the envs are new
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
        next_obs, _ = envs.reset()
        next_done = np.zeros(N, dtype=bool)  # the last step's dones: the next step is a reset step

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                global_step += N
                obs[step] = torch.as_tensor(next_obs)
                resets[step] = next_done  # a reset step (masked out of training); V(s_t) bootstraps a truncation
                with torch.inference_mode():
                    action, logprob, _, value = agent.get_action_and_value(obs[step])
                actions[step], logprobs[step], values[step] = action, logprob, value

                next_obs, reward, termination, truncation, info = envs.step(action.cpu().numpy())
                next_done = termination | truncation
                rewards[step], terminations[step], dones[step] = reward, termination, next_done
                run.log_episodes(global_step, info)  # game scores: unclipped rewards over all lives (GameStatistics)

            check_rollout(global_step, reward=rewards)  # the first NaN or infinite reward stops the run (frames: uint8)
            with torch.no_grad():
                last_values = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, terminations, dones, resets, args.gamma, args.gae_lambda
            )

            # Flatten the batch; frames channels-last once per update (each minibatch's conversion is then elementwise)

            b_obs = obs.reshape((-1,) + obs_shape).contiguous(memory_format=torch.channels_last)
            b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), device=device)
            b_mask = torch.as_tensor((~resets).reshape(-1), dtype=torch.float32, device=device)

            # Optimise the policy and value networks on the game's transitions (reset steps masked out)
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                    losses = ppo_losses(
                        newlogprob,
                        entropy,
                        newvalue,
                        b_logprobs[mb_inds],
                        b_values[mb_inds],
                        b_advantages[mb_inds],
                        b_returns[mb_inds],
                        b_mask[mb_inds],
                        args.clip_coef,
                        args.clip_vloss,
                        args.norm_adv,
                    )
                    clipfracs.append(losses["clipfrac"])
                    loss = losses["policy_loss"] - args.ent_coef * losses["entropy"] + losses["value_loss"] * args.vf_coef

                    optimizer.zero_grad()
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()

                if args.target_kl is not None and losses["approx_kl"].item() > args.target_kl:
                    break

            valid = ~resets.reshape(-1)
            y_pred, y_true = b_values.cpu().numpy()[valid], returns.reshape(-1)[valid]
            var_y = np.var(y_true) if valid.any() else 0.0
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):
                writer.add_scalar(f"losses/{name}", losses[name].item(), global_step)
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

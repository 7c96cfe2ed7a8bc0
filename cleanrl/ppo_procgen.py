"""PPO on Procgen with the IMPALA CNN: procedurally generated games stepped in C++, 64x64 RGB frames.

Papers: Schulman et al. (2017), arXiv:1707.06347 (PPO); Schulman et al. (2016), arXiv:1506.02438 (GAE);
Espeholt et al. (2018), "IMPALA", arXiv:1802.01561 (the network); Cobbe et al. (2020), "Leveraging Procedural
Generation to Benchmark Reinforcement Learning", arXiv:1912.01588 (the games and hyperparameters: 64 envs x 256
steps, γ 0.999, 3 epochs of 8 minibatches, lr 5e-4, rewards scaled by the running std of the discounted return),
as CleanRL's ppo_procgen.py uses them.

What this file changes against CleanRL's ppo_procgen.py:
- a time-limit end is a truncation: it bootstraps from V of the episode's last observation (Procgen returns no
  final one); a termination does not bootstrap (CleanRL bootstraps at neither);
- episode statistics are Procgen's game rewards (GameStatistics);
- checkpoints hold the network, optimiser, reward-scaling statistics and generators, not the envs: --resume
  makes new envs (episodes in progress are abandoned).
Details and results: docs/scripts/ppo_procgen.md.

Run:
    python cleanrl/ppo_procgen.py --env-id starpilot
"""

import signal
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils.envpool_atari import GameStatistics, check_rollout
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.normalization import RewardNormalization
from cleanrl_utils.procgen import ProcgenVectorEnv, check_procgen
from cleanrl_utils.run import start_run

REWARD_CLIP = 10.0
"""Scaled rewards are clipped to ±this (CleanRL's ppo_procgen.py)."""


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "starpilot"
    """Procgen game, one of the 16 of cleanrl_utils/procgen.py's GAMES (starpilot, coinrun, jumper, maze ...)"""
    distribution_mode: Literal["easy", "hard"] = "easy"
    """Procgen's level difficulty: easy or hard"""
    num_levels: int = 0
    """levels to train on (0: every level)"""
    start_level: int = 0
    """the first level's seed, with --num-levels > 0"""
    env_mode: Literal["sync", "async"] = "sync"
    """sync only: Procgen steps its envs in C++; async is refused"""
    total_timesteps: int = 25000000
    """total agent steps, summed over envs"""
    learning_rate: float = 5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 64
    """number of parallel environments"""
    num_steps: int = 256
    """steps per environment in each rollout"""
    anneal_lr: bool = False
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.999
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 8
    """minibatches per epoch"""
    update_epochs: int = 3
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.2
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
    distribution_mode: str = "easy",
    num_levels: int = 0,
    start_level: int = 0,
):
    """``num_envs`` envs of a Procgen game (same-step autoreset), uint8 ``[num_envs, 64, 64, 3]``, with game statistics."""
    envs = ProcgenVectorEnv(env_id, num_envs, seed, num_levels, start_level, distribution_mode, render=capture_video)
    return GameStatistics(envs, frame_skip=1, video_dir=video_dir if capture_video else None, video_episodes=video_episodes)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), two 3x3 convolutions that keep the channels and the size."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W]`` -> ``[B, C, H, W]``."""
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """One IMPALA stack: a 3x3 convolution to ``out_channels``, a 3x3 max-pool of stride 2, two residual blocks."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.res_block0 = ResidualBlock(out_channels)
        self.res_block1 = ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, in_channels, H, W]`` -> ``[B, out_channels, ceil(H/2), ceil(W/2)]``."""
        x = nn.functional.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res_block1(self.res_block0(x))


class Agent(nn.Module):
    """The IMPALA CNN (16, 32, 32 channels, then 256 units) shared by a categorical ``actor`` and a ``critic``."""

    def __init__(self, envs):
        super().__init__()
        h, w, c = envs.single_observation_space.shape
        stacks = [ConvSequence(c, 16), ConvSequence(16, 32), ConvSequence(32, 32)]
        h, w = (((h + 1) // 2 + 1) // 2 + 1) // 2, (((w + 1) // 2 + 1) // 2 + 1) // 2  # three halvings, rounded up
        self.network = nn.Sequential(*stacks, nn.Flatten(), nn.ReLU(), nn.Linear(32 * h * w, 256), nn.ReLU())
        self.actor = layer_init(nn.Linear(256, int(envs.single_action_space.n)), std=0.01)
        self.critic = layer_init(nn.Linear(256, 1), std=1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features: frames uint8 ``[B, 64, 64, 3]`` -> ``[B, 256]`` (a channels-last view: no copy)."""
        return self.network(x.permute(0, 3, 1, 2).float() / 255.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): frames ``[B, 64, 64, 3]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action [B], log π(action|x), entropy of π(·|x), V(x))``; ``action`` sampled from π when None."""
        hidden = self.hidden(x)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_values: np.ndarray,
    terminations: np.ndarray,
    truncations: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over a Procgen rollout (same-step autoreset, no final observation; Schulman et al. 2016, eq. 16).

    δ_t = r_t + γ (1 - terminated_t) V'_t - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}. V'_t is V(s_{t+1}) within
    an episode; where step t was truncated it is V(s_t), the last observation seen. Returns ``(A, A + values)``.
    """
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    next_values = np.where(truncations > 0, values, next_values)
    deltas = rewards + gamma * (1.0 - terminations) * next_values - values
    carry = gamma * gae_lambda * (1.0 - np.maximum(terminations, truncations))
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def ppo_losses(
    newlogprob: torch.Tensor,
    entropy: torch.Tensor,
    newvalue: torch.Tensor,
    oldlogprob: torch.Tensor,
    oldvalue: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
) -> dict[str, torch.Tensor]:
    """PPO's loss terms over a minibatch: clipped surrogate (eq. 7), value loss (CleanRL's clipped form with
    ``clip_vloss``), entropy, the two KL estimates and the clip fraction; the first three carry gradients."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    if norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    v_loss_unclipped = (newvalue - returns) ** 2
    if clip_vloss:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * v_loss_unclipped.mean()
    return {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy.mean(),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require(args.env_mode == "sync", "--env-mode", "Procgen steps its envs in C++ already: use sync")
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require_range(args, num_levels=(0, 2**31 - 1), start_level=(0, 2**31 - 1))  # Procgen's int32 level seeds
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    batch = f"the batch of {args.batch_size} (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide {batch}")
    require(not args.norm_adv or args.minibatch_size >= 2, "--num-minibatches", "too small to normalise advantages")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_procgen(args)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` (game rewards) of a saved model in the levels it trained on; actions
    sampled from π (``deterministic``: the most probable). ``options``: :class:`cleanrl_utils.evals.Evaluation`."""
    levels = ("distribution_mode", "num_levels", "start_level")
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, env_args=levels, **options)
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

    # The envs are not checkpointed: a resumed run makes new ones, seeded from --seed and its step (other levels)
    seed = args.seed
    if resumed:
        seed = int(np.random.SeedSequence([args.seed, resumed["global_step"]]).generate_state(1)[0] % 2**31)
    # Same-step autoreset: the step that ends an episode returns the next episode's first observation, and
    # Procgen keeps the final one to itself. Rewards are scaled by the running standard deviation of the
    # discounted return and clipped (the episode statistics below them stay the game's).
    envs = make_envs(
        args.env_id,
        seed,
        args.capture_video,
        run.video_dir,
        num_envs=args.num_envs,
        distribution_mode=args.distribution_mode,
        num_levels=args.num_levels,
        start_level=args.start_level,
    )
    with run.stop_on_fault(envs):  # a fault ends the run in one line
        normalization = RewardNormalization(envs, args.gamma, REWARD_CLIP)
        obs_shape = envs.single_observation_space.shape  # (64, 64, 3)
        # channels-last weights: the frames, height-width-channels, are channels-last once permuted (Agent.hidden)
        agent = Agent(envs).to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch (frames uint8), the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, truncations = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        game_rewards = np.zeros((T, N), dtype=np.float32)  # the games' own, before scaling: checked after the rollout

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators: not the envs
        state = {"agent": agent, "optimizer": optimizer, "reward_normalization": normalization}
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, statistics and generators, in place; the envs are new
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
            normalization.reward.accumulated_reward[:] = 0.0  # the new envs start new episodes: their returns from 0
        next_obs, _ = normalization.envs.reset()

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                global_step += N
                obs[step] = torch.as_tensor(next_obs)
                with torch.inference_mode():
                    action, logprob, _, value = agent.get_action_and_value(obs[step])
                actions[step], logprobs[step], values[step] = action, logprob, value

                next_obs, reward, termination, truncation, info = normalization.envs.step(action.cpu().numpy())
                rewards[step], terminations[step], truncations[step] = reward, termination, truncation
                game_rewards[step] = info["reward"]
                run.log_episodes(global_step, info)  # game rewards, summed over the episode (GameStatistics)

            # the first NaN or infinite game reward stops the run (frames: uint8); the scaling mixes the envs' rewards
            check_rollout(global_step, reward=game_rewards)

            # GAE. A truncation bootstraps from V(s_t), the value of the episode's last observation: Procgen
            # returns no final observation (compute_gae); a termination does not bootstrap.
            with torch.no_grad():
                last_values = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, terminations, truncations, args.gamma, args.gae_lambda
            )

            # Flatten the batch
            b_obs = obs.reshape((-1,) + obs_shape)
            b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), device=device)

            # Optimise the policy and value networks
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

            y_pred, y_true = b_values.cpu().numpy(), returns.reshape(-1)
            var_y = np.var(y_true)
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

"""PPO for discrete actions on classic-control environments.

Papers: Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy Optimization
Algorithms", arXiv:1707.06347; Schulman, Moritz, Levine, Jordan, Abbeel (2016), "High-Dimensional
Continuous Control Using Generalized Advantage Estimation", arXiv:1506.02438; Huang et al. (2022),
"The 37 Implementation Details of Proximal Policy Optimization" (ICLR blog track).

What this file changes: a time-limit truncation is not a termination; the advantage bootstraps from
V(real final observation) (``infos["final_obs"]``), never from the observation after the reset.
Details, flags, metrics and results: docs/scripts/ppo.md.

Run:
    python cleanrl/ppo.py --env-id CartPole-v1
"""

import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "CartPole-v1"
    """gymnasium id of the environment (Discrete actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 500000
    """total environment steps, summed over envs"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 4
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
    clip_coef: float = 0.2
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε])"""
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


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with its episode statistics and output checks, and (``training``) its replay log;
    env 0 records videos into ``video_dir`` if asked, of the episodes ``video_episodes(index)`` picks."""

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate actor and critic MLPs, 64-64 tanh, sized for ``envs`` (flat observations, Discrete actions)."""

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        obs_dim, num_actions = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01),
        )

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): observations ``[B, obs_dim]`` -> values ``[B]``."""
        return self.critic(x).squeeze(-1)

    def get_action(self, x: torch.Tensor) -> torch.Tensor:
        """Sample actions ``[B]`` from π(·|x) by the Gumbel-max trick: argmax(logits + Gumbel noise)."""
        logits = self.actor(x)  # plain form: Categorical(logits=logits).sample(), the same distribution, more CPU time
        return (logits - torch.empty_like(logits).exponential_().log()).argmax(-1)  # -log(Exp(1)) is Gumbel noise

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action, log π(action|x), entropy, V(x))``, each ``[B]``; ``action`` sampled by :meth:`get_action` when None."""
        if action is None:
            action = self.get_action(x)
        log_probs = torch.log_softmax(self.actor(x), dim=-1)  # Categorical(logits=...).log_prob and .entropy, by hand
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, self.critic(x).squeeze(-1)


def compute_gae(rewards, values, last_values, final_values, terminations, dones, gamma: float, gae_lambda: float):
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16) over a rollout of T steps of N envs,
    correct at truncations.

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}, with s'_t the real
    next state: the final observation where an episode ended at t (``final_values``, read at truncations only),
    the observation after the rollout at T-1 (``last_values [N]``). The other arrays are ``[T, N]``.
    Returns ``(advantages, returns)``, returns = advantages + values (the critic's target).
    """
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    next_values = np.where(dones > 0, final_values, next_values)
    deltas = rewards + gamma * (1.0 - terminations) * next_values - values
    carry = gamma * gae_lambda * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
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
    check_env(args, gym.spaces.Discrete, gym.spaces.Box, obs_ndim=1)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = True, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script: the most probable action, or
    (``deterministic=False``) a sampled one. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    agent = evaluation.load(Agent(evaluation.envs), "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits = agent.actor(torch.as_tensor(obs, dtype=torch.float32, device=evaluation.device))
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

    # Same-step autoreset: an ended episode's last observation is in infos["final_obs"]
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(args.num_envs)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        agent = Agent(envs).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)  # fused: the same Adam

        # Rollout storage [num_steps, num_envs] in numpy (cheaper than torch per step); on the device once, after it
        T, N = args.num_steps, args.num_envs
        obs = np.zeros((T, N) + envs.single_observation_space.shape, dtype=np.float32)
        actions = np.zeros((T, N), dtype=np.int64)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
        final_obs = np.zeros((T, N) + envs.single_observation_space.shape, dtype=np.float32)  # its real final observation

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        state = {"agent": agent, "optimizer": optimizer, "envs": envs}  # what a checkpoint holds, besides the generators
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators and envs (replayed), in place
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration, next_obs = saved["global_step"], saved["iteration"] + 1, saved["obs"]
        else:
            next_obs, _ = envs.reset(seed=args.seed)

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            with torch.inference_mode():  # acting records nothing for autograd; one context for the whole rollout
                for step in range(T):
                    global_step += N
                    obs[step] = next_obs
                    action = agent.get_action(torch.as_tensor(next_obs, dtype=torch.float32, device=device)).cpu().numpy()
                    actions[step] = action

                    next_obs, reward, termination, truncation, infos = envs.step(action)
                    rewards[step], terminations[step], dones[step] = reward, termination, termination | truncation
                    # Truncated (not terminated) envs will bootstrap from their real final observation.
                    truncated[step] = truncation & ~termination
                    if truncated[step].any():
                        final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
                    run.log_episodes(global_step, infos)

            # log π(a|s) and V(s) of the rollout in one batch; V(final obs) at truncations, V(obs after the rollout); GAE

            b_obs = torch.from_numpy(obs.reshape((T * N,) + envs.single_observation_space.shape)).to(device)
            b_actions = torch.from_numpy(actions.reshape(-1)).to(device)
            with torch.no_grad():
                _, logprobs, _, values = agent.get_action_and_value(b_obs, b_actions)
                logprobs, values = logprobs.view(T, N), values.view(T, N)
                last_values = agent.get_value(torch.as_tensor(next_obs, dtype=torch.float32, device=device)).cpu().numpy()
                final_values = np.zeros((T, N), dtype=np.float32)
                if truncated.any():
                    final_values[truncated] = agent.get_value(torch.from_numpy(final_obs[truncated]).to(device)).cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )

            # flatten the batch
            b_logprobs, b_values = logprobs.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), dtype=torch.float32, device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), dtype=torch.float32, device=device)

            # Optimise the policy and value networks
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]

                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                    logratio = newlogprob - b_logprobs[mb_inds]
                    ratio = logratio.exp()

                    with torch.no_grad():
                        # http://joschu.net/blog/kl-approx.html
                        old_approx_kl = (-logratio).mean()
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

                    mb_advantages = b_advantages[mb_inds]
                    if args.norm_adv:
                        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                    # Policy loss (clipped surrogate, eq. 7)
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                    # Value loss
                    if args.clip_vloss:
                        v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                        v_clipped = b_values[mb_inds] + torch.clamp(
                            newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                        )
                        v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                    entropy_loss = entropy.mean()
                    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                    optimizer.zero_grad()
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()

                if args.target_kl is not None and approx_kl.item() > args.target_kl:
                    break

            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
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

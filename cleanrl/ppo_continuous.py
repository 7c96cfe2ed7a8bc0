"""PPO for continuous (Box) actions, with observation and reward normalisation (MuJoCo).

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347 (the
MuJoCo hyperparameters of Table 3); Schulman et al. (2016), "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", arXiv:1506.02438; Huang et al. (2022), "The 37
Implementation Details of Proximal Policy Optimization" (ICLR blog track), as CleanRL's
ppo_continuous_action.py has them (Gaussian policy with a state-independent log σ, observation
and reward normalisation).

What this file changes: a time-limit truncation is not a termination; the advantage bootstraps
from V(real final observation), normalised with that step's statistics. The normalisation
statistics live in the main process (one set with ``--env-mode async``), are saved with the
model, and evaluation uses them frozen. Details and results: docs/scripts/ppo_continuous.md.

Run:
    python cleanrl/ppo_continuous.py --env-id Hopper-v5          # needs the mujoco extra
    python cleanrl/ppo_continuous.py --env-id InvertedPendulum-v5 --total-timesteps 150000
"""

import math
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
from cleanrl_utils.normalization import Normalization, NormalizeObservation
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "Hopper-v5"
    """gymnasium id of the environment (Box actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 1000000
    """total environment steps, summed over envs"""
    learning_rate: float = 3e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 1
    """number of parallel environments"""
    num_steps: int = 2048
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ (also of the discounted return whose std scales the rewards)"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 32
    """minibatches per epoch"""
    update_epochs: int = 10
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε])"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the reference implementation"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: Optional[float] = None
    """stop the epochs of an update early when the approximate KL exceeds this"""
    obs_clip: float = 10.0
    """normalised observations are clipped to [-obs_clip, obs_clip]"""
    reward_clip: float = 10.0
    """normalised rewards are clipped to [-reward_clip, reward_clip]"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx``: actions clipped to the bounds, episode statistics, (``training``) a replay log;
    env 0 records videos into ``video_dir`` if asked. Normalisation is added on the vector env (:class:`Normalization`)."""

    def thunk():
        if env_id.startswith("dm_control/"):  # registered in each process, a fresh worker's too
            from cleanrl_utils import dmc

            dmc.register(env_id)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)  # dm_control's Dict of vectors -> one vector (a Box is unchanged)
        env = gym.wrappers.ClipAction(env)  # the Gaussian's sample, clipped to the bounds
        env = gym.wrappers.RecordEpisodeStatistics(env)  # raw return and length in the info of the episode's last step
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log N(a; μ, diag(σ²)) ``[B]`` = Σ_i [-(a_i - μ_i)² / (2 σ_i²) - log σ_i - ½ log(2π)]; μ, a ``[B, A]``."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std).sum(-1) - 0.5 * math.log(2 * math.pi) * mean.shape[-1]


def gaussian_entropy(log_std: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Entropy of N(μ, diag(σ²)), Σ_i [½ + ½ log(2π) + log σ_i], ``[batch_size]``; log σ ``[1, A]`` or ``[B, A]``."""
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
    return entropy.expand(batch_size)


class Agent(nn.Module):
    """Separate actor (Gaussian mean) and critic MLPs, 64-64 tanh, and a state-independent log σ, sized for ``envs``
    (flat observations, Box actions)."""

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        action_dim = int(np.prod(envs.single_action_space.shape))
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, action_dim), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): observations ``[B, obs_dim]`` -> values ``[B]``."""
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action [B, A], log π(action|x), entropy, V(x))`` under π(·|x) = N(μ(x), σ²); ``action`` sampled when None."""
        mean = self.actor_mean(x)
        if action is None:
            action = mean + self.actor_logstd.exp() * torch.randn_like(mean)
        log_prob = gaussian_log_prob(mean, self.actor_logstd, action)
        entropy = gaussian_entropy(self.actor_logstd, x.shape[0])
        return action, log_prob, entropy, self.critic(x).squeeze(-1)


def compute_gae(rewards, values, last_values, final_values, terminations, dones, gamma: float, gae_lambda: float):
    """Generalized advantage estimation, correct at truncations, as ppo.py's ``compute_gae`` (arrays ``[T, N]``,
    ``last_values [N]``), on normalised rewards and values of normalised observations. Returns (advantages, returns)."""
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
    require_positive(args, "max_grad_norm obs_clip reward_clip")
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
    _, action_space = check_env(args, gym.spaces.Box, gym.spaces.Box, obs_ndim=1, flatten=True)
    require(len(action_space.shape) == 1, "--env-id", f"{args.env_id} has actions of shape {action_space.shape}; 1-D only")
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = True, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a saved model: μ(s), or (``deterministic=False``) a sample of N(μ(s), σ²),
    observations normalised with the saved statistics, frozen. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    evaluation.envs = NormalizeObservation(evaluation.envs)
    evaluation.load_state(evaluation.envs, "obs_norm")  # checked: finite statistics of this env's shape
    evaluation.envs.update_running_mean = False  # frozen: the statistics of training
    agent = evaluation.load(Agent(evaluation.envs), "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        mean = agent.actor_mean(torch.as_tensor(obs, device=evaluation.device))
        if deterministic:
            return mean.cpu()
        return (mean + agent.actor_logstd.exp() * torch.randn(mean.shape, generator=generator, device=mean.device)).cpu()

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
    if args.env_mode == "async":  # one worker process per env, started from a fresh interpreter (forkserver)
        raw_envs = gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver")
    else:
        raw_envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(raw_envs):  # a fault ends the run in one line; any error ends the env workers too
        # Observations and rewards normalised on the vector env, in this process: one set of statistics in both env modes
        normalization = Normalization(TimedSteps(raw_envs, args.env_timeout), args.gamma, args.obs_clip, args.reward_clip)
        envs = normalization.envs
        agent = Agent(envs).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch, the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs_shape, action_shape = envs.single_observation_space.shape, envs.single_action_space.shape
        obs = torch.zeros((T, N) + obs_shape, device=device)
        actions = torch.zeros((T, N) + action_shape, device=device)  # the unclipped samples
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))  # rewards normalised, clipped
        truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
        final_obs = np.zeros((T, N) + obs_shape, dtype=np.float32)  # its real final observation, normalised

        model = {"agent": agent, "obs_norm": normalization.obs}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators: the envs below the normalisation, replayed without touching it
        state = {"agent": agent, "optimizer": optimizer, "normalization": normalization, "envs": raw_envs}
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators, statistics and envs (replayed), in place
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
            next_obs = normalization.obs.normalize(saved["obs"])  # the raw observation, as the observation layer returned it
        else:
            next_obs, _ = envs.reset(seed=args.seed)

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

                # a ~ N(μ(s), σ²), sent unclipped: the env's ClipAction clips it; async workers answer within --env-timeout
                next_obs, reward, termination, truncation, infos = envs.step(action.cpu().numpy())
                rewards[step], terminations[step], dones[step] = reward, termination, termination | truncation
                # Truncated (not terminated) envs will bootstrap from their real final observation (normalised)

                truncated[step] = truncation & ~termination
                if truncated[step].any():
                    final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
                run.log_episodes(global_step, infos)

            # Bootstrap values: V(final obs) at truncations and V(obs after the rollout); then GAE
            with torch.no_grad():
                last_values = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
                final_values = np.zeros((T, N), dtype=np.float32)
                if truncated.any():
                    final_values[truncated] = agent.get_value(torch.from_numpy(final_obs[truncated]).to(device)).cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )

            # flatten the batch
            b_obs, b_actions = obs.reshape((-1,) + obs_shape), actions.reshape((-1,) + action_shape)
            b_logprobs, b_values = logprobs.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), device=device)

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
            writer.add_scalar("charts/action_std", agent.actor_logstd.detach().exp().mean().item(), global_step)
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

"""A2C (synchronous advantage actor-critic) for discrete actions on classic-control environments.

Papers: Mnih et al. (2016), "Asynchronous Methods for Deep Reinforcement Learning",
arXiv:1602.01783 (Algorithm S3: n-step returns, policy gradient, value regression, entropy
bonus, RMSprop), in its synchronous form as OpenAI Baselines' and stable-baselines3's A2C run
it: one gradient step per rollout of ``--num-steps`` steps of all envs. Defaults are
stable-baselines3's (5 steps, RMSprop lr 7e-4) with the rl-baselines3-zoo's 8 CartPole envs.

What this file changes: a time-limit truncation bootstraps from V(real final observation);
returns come from GAE (Schulman et al. 2016, arXiv:1506.02438) whose default λ 1.0 gives the
paper's n-step returns; separate 64-64 tanh actor and critic. Details: docs/scripts/a2c.md.


Run:
    python cleanrl/a2c.py --env-id CartPole-v1
"""

import signal
from dataclasses import dataclass
from typing import Literal

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
    """A2C's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "CartPole-v1"
    """gymnasium id of the environment (Discrete actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 500000
    """total environment steps, summed over envs"""
    learning_rate: float = 7e-4
    """RMSprop learning rate (constant unless --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments (the rl-baselines3-zoo's 8 for CartPole-v1)"""
    num_steps: int = 5
    """steps per environment in each rollout: n of the n-step returns"""
    anneal_lr: bool = False
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 1.0
    """GAE λ; 1.0 gives the plain n-step returns of the paper"""
    norm_adv: bool = False
    """if toggled, normalise the advantages of each rollout (not in the paper)"""
    ent_coef: float = 0.0
    """entropy bonus coefficient β"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    rms_prop_alpha: float = 0.99
    """RMSprop smoothing constant α (decay of the squared-gradient average)"""
    rms_prop_eps: float = 1e-5
    """RMSprop ε, added to the root of the squared-gradient average"""
    log_interval: int = 100
    """updates between two writes of the losses to TensorBoard"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size, the number of updates (computed; not a flag)"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx``: the gymnasium env, its episode statistics, and (training) its replay log.

    Env 0 records videos into ``video_dir`` if asked, of the episodes ``video_episodes(index)``
    picks (gymnasium's schedule by default). ``training=False``: an evaluation env, without replay log.
    """

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
    """Orthogonal weights with gain ``std`` and constant bias (as stable-baselines3's ``ortho_init``)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate actor and critic MLPs, 64-64 tanh (stable-baselines3's A2C MlpPolicy), sized for ``envs``
    (flat observations, Discrete actions)."""

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
        """Actions ``[B]`` (int64) sampled from the categorical policy π(·|x), observations ``[B, obs_dim]``."""
        return torch.multinomial(torch.softmax(self.actor(x), dim=-1), 1).squeeze(-1)

    def get_log_prob_and_entropy(self, x: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Score ``action`` under the categorical policy π(·|x).

        Args:
            x: observations ``[B, obs_dim]``.
            action: actions ``[B]`` (int64).

        Returns:
            ``(log π(action|x) [B], entropy of π(·|x) [B])``, in nats.
        """
        log_probs = torch.log_softmax(self.actor(x), dim=-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return log_prob, entropy


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_values: np.ndarray,
    final_values: np.ndarray,
    terminations: np.ndarray,
    dones: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation over a rollout, correct at truncations (as ppo.py).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)
    A_t = δ_t + γ λ (1 - done_t) A_{t+1}
    (Schulman et al. 2016, arXiv:1506.02438, eq. 16, with the recursion cut at episode ends.)

    With λ = 1 the returns A_t + V(s_t) are the n-step returns of Mnih et al. 2016
    (Algorithm S3): R_t = r_t + γ R_{t+1}, started from V(s_T) after the rollout, from
    V(final observation) at a truncation and from 0 at a termination.

    s'_t is the real next state of step t: s_{t+1} within an episode, the episode's final
    observation where it ended at t (not the reset one), and the observation after the
    rollout at t = T-1. So a time limit still bootstraps from V(final observation); only a
    termination stops bootstrapping, and done_t (termination or truncation) stops the
    recursion, since step t+1 belongs to the next episode.

    Args:
        rewards: r_t, float ``[T, N]`` (T steps of N envs).
        values: V(s_t), float ``[T, N]``.
        last_values: V of the observations after the rollout, ``[N]``.
        final_values: V(final observation) where step t ended an episode, ``[T, N]``;
            read only at truncations (a termination does not bootstrap).
        terminations: 1.0 where step t ended the episode by termination, ``[T, N]``.
        dones: 1.0 where step t ended the episode (termination or truncation), ``[T, N]``.
        gamma: discount γ in [0, 1].
        gae_lambda: λ in [0, 1].

    Returns:
        ``(advantages [T, N], returns [T, N])`` with returns = advantages + values, the
        critic's regression target.
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


def a2c_loss(
    log_probs: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    ent_coef: float,
    vf_coef: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The A2C loss of one rollout (Mnih et al. 2016, Algorithm S3; stable-baselines3's A2C.train).

    policy_loss = -mean(A_t log π(a_t|s_t))      (A_t a constant: no gradient into the critic)
    value_loss  = mean((R_t - V(s_t))²)
    loss        = policy_loss - β mean(H[π(·|s_t)]) + c_v value_loss

    Args:
        log_probs: log π(a_t|s_t) ``[B]``, with gradient.
        entropy: H[π(·|s_t)] ``[B]`` in nats, with gradient.
        values: V(s_t) ``[B]``, with gradient.
        advantages: A_t ``[B]``, constants.
        returns: R_t ``[B]``, the critic's targets, constants.
        ent_coef: β.
        vf_coef: c_v.

    Returns:
        ``(loss, policy_loss, value_loss, entropy_loss)``, scalars; entropy_loss is the mean
        entropy (the bonus, logged as ``losses/entropy``).
    """
    policy_loss = -(advantages.detach() * log_probs).mean()
    value_loss = ((returns.detach() - values) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = policy_loss - ent_coef * entropy_loss + vf_coef * value_loss
    return loss, policy_loss, value_loss, entropy_loss


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps learning_rate max_grad_norm rms_prop_eps log_interval")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(0 <= args.rms_prop_alpha < 1, "--rms-prop-alpha", f"must be in [0, 1), got {args.rms_prop_alpha}")
    args.batch_size = args.num_envs * args.num_steps
    args.num_iterations = args.total_timesteps // args.batch_size
    require(not args.norm_adv or args.batch_size >= 2, "--norm-adv", f"a rollout of {args.batch_size} is too small")
    batch = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {batch}")
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

    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(args.num_envs)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        agent = Agent(envs).to(device)
        optimizer = optim.RMSprop(
            agent.parameters(), lr=args.learning_rate, alpha=args.rms_prop_alpha, eps=args.rms_prop_eps, foreach=True
        )

        # Rollout storage [num_steps, num_envs]: what the networks read in torch, the rest in numpy for the returns
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + envs.single_observation_space.shape, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
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

            for step in range(T):
                global_step += N
                obs[step] = torch.as_tensor(next_obs, dtype=torch.float32)
                with torch.inference_mode():
                    action = agent.get_action(obs[step])
                actions[step] = action

                next_obs, reward, termination, truncation, infos = envs.step(action.cpu().numpy())
                rewards[step], terminations[step], dones[step] = reward, termination, termination | truncation
                # Truncated (not terminated) envs will bootstrap from their real final observation.
                truncated[step] = truncation & ~termination
                if truncated[step].any():
                    final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
                run.log_episodes(global_step, infos)

            # One critic pass over the rollout's observations, the observations after it and the
            # final observations of truncated episodes; only V(s_t) keeps its gradient, the
            # bootstrap values enter the returns as constants.
            b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
            b_actions = actions.reshape(-1)
            next_and_final = np.concatenate([next_obs, final_obs[truncated]]).astype(np.float32)
            all_values = agent.get_value(torch.cat([b_obs, torch.from_numpy(next_and_final).to(device)]))
            b_values = all_values[: T * N]
            bootstrap = all_values[T * N :].detach().cpu().numpy()
            last_values = bootstrap[:N]
            final_values = np.zeros((T, N), dtype=np.float32)
            final_values[truncated] = bootstrap[N:]
            values = b_values.detach().cpu().numpy().reshape(T, N)
            advantages, returns = compute_gae(
                rewards, values, last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )
            b_advantages = torch.from_numpy(advantages.reshape(-1)).to(device)
            b_returns = torch.from_numpy(returns.reshape(-1)).to(device)
            if args.norm_adv:
                b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)

            # One gradient step on the whole rollout
            b_logprobs, b_entropy = agent.get_log_prob_and_entropy(b_obs, b_actions)
            loss, pg_loss, v_loss, entropy_loss = a2c_loss(
                b_logprobs, b_entropy, b_values, b_advantages, b_returns, args.ent_coef, args.vf_coef
            )
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
            check_finite(iteration, global_step, loss=loss, grad_norm=grad_norm)
            optimizer.step()

            if iteration % args.log_interval == 0 or iteration == args.num_iterations:
                var_y = np.var(returns)
                explained_var = np.nan if var_y == 0 else 1 - np.var(returns - values) / var_y
                writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
                writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
                writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
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

"""PQN (parallelised Q-network) for discrete actions on classic-control environments.

Q-learning from many parallel environments with neither a replay buffer nor a target network:
    Gallici et al. (2024), "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811
    (section 4, Algorithm 1), with Peng's Q(λ) returns (Peng & Williams 1996, "Incremental
    Multi-Step Q-Learning", Machine Learning 22). Defaults: CleanRL's pqn.py.

What this file changes: a time-limit truncation is not a termination (the Q(λ) return bootstraps
from the real final observation; λ-mixing never crosses an episode end). Details and results:
docs/scripts/pqn.md.

Run:
    python cleanrl/pqn.py --env-id CartPole-v1
"""

import signal
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
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
    """PQN's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "CartPole-v1"
    """gymnasium id of the environment (Discrete actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 500000
    """total environment steps, summed over envs"""
    learning_rate: float = 2.5e-4
    """RAdam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 4
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    q_lambda: float = 0.65
    """λ of the Q(λ) returns (0: one-step Q-learning targets, 1: returns to the episode's or the rollout's end)"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    start_e: float = 1.0
    """ε at the start of exploration"""
    end_e: float = 0.05
    """ε at the end of exploration"""
    exploration_fraction: float = 0.5
    """fraction of total_timesteps over which ε decays linearly from start_e to end_e"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


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
    """Orthogonal weights with gain ``std`` and constant bias (as CleanRL's pqn.py and ppo.py)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """MLP 120-84 with LayerNorm before each ReLU (Gallici et al. 2024, section 4), estimating Q(s, ·).

    Sized for ``envs`` (flat observations, Discrete actions). The same network acts in the
    rollouts, gives the bootstrap values of the targets and is trained: PQN has no target network.
    """

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        obs_dim, num_actions = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)
        self.network = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 120)),
            nn.LayerNorm(120),
            nn.ReLU(),
            layer_init(nn.Linear(120, 84)),
            nn.LayerNorm(84),
            nn.ReLU(),
            layer_init(nn.Linear(84, num_actions)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Observations ``[B, obs_dim]`` -> Q-values ``[B, num_actions]``."""
        return self.network(x)


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (the ε decay)."""
    return start + (end - start) * min(t / duration, 1.0)


def q_lambda_returns(
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    truncations: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Q(λ) returns of a rollout, computed backwards (Gallici et al. 2024, Algorithm 1; Peng & Williams 1996).

    Inputs ``[T, E]``; ``next_values[t]`` = max_a Q of the REAL next observation (the final one where the
    episode ended at t). G_t = r_t + γ (1 - term_t) next_values[t] where the episode ended at t or t = T-1,
    else r_t + γ [(1 - λ) next_values[t] + λ G_{t+1}]: a truncation bootstraps, λ never crosses an episode end.
    """
    ended = torch.maximum(terminations, truncations) > 0
    one_step = rewards + gamma * (1.0 - terminations) * next_values  # the target where the return cannot go on
    returns = torch.empty_like(rewards)
    returns[-1] = one_step[-1]
    for t in reversed(range(rewards.shape[0] - 1)):
        mixed = rewards[t] + gamma * ((1.0 - lam) * next_values[t] + lam * returns[t + 1])
        returns[t] = torch.where(ended[t], one_step[t], mixed)
    return returns


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), q_lambda=(0, 1), start_e=(0, 1), end_e=(0, 1))
    require(args.start_e >= args.end_e, "--end-e", f"{args.end_e} is above --start-e {args.start_e}")
    require(
        0 < args.exploration_fraction <= 1, "--exploration-fraction", f"must be in (0, 1], got {args.exploration_fraction}"
    )
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    batch = f"the batch of {args.batch_size} (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide {batch}")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_env(args, gym.spaces.Discrete, gym.spaces.Box, obs_ndim=1)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.0, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script, ε-greedy (greedy at ε = 0).
    ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    q_network = evaluation.load(QNetwork(evaluation.envs), "q_network")
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        actions = q_network(torch.as_tensor(obs, dtype=torch.float32, device=evaluation.device)).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(evaluation.envs.single_action_space.n, size=len(actions)), actions)

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
        q_network = QNetwork(envs).to(device)
        optimizer = optim.RAdam(q_network.parameters(), lr=args.learning_rate, foreach=True)
        num_actions = int(envs.single_action_space.n)
        rng = np.random.default_rng(args.seed)  # ε-greedy draws
        exploration_steps = args.exploration_fraction * args.total_timesteps

        # Rollout storage [num_steps, num_envs] in numpy; the rollout goes to the device once, after it
        T, N = args.num_steps, args.num_envs
        obs = np.zeros((T, N) + envs.single_observation_space.shape, dtype=np.float32)
        actions = np.zeros((T, N), dtype=np.int64)
        rewards, terminations, truncations = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        # s'_{t+1}: the real next observation of step t (the episode's final one where it ended at t)
        next_obs_real = np.zeros((T, N) + envs.single_observation_space.shape, dtype=np.float32)

        model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
        state = {"q_network": q_network, "optimizer": optimizer, "rng": rng, "envs": envs}  # besides the global generators
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's network, optimiser, generators and envs (replayed), in place
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
                    # ε-greedy: the network is only run when some env acts greedily.
                    epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step)
                    uniform = rng.random((2, N))  # one draw for ε, one for the random action
                    greedy = uniform[0] >= epsilon
                    action = (uniform[1] * num_actions).astype(np.int64)
                    if greedy.any():
                        q_values = q_network(torch.as_tensor(next_obs, dtype=torch.float32, device=device))
                        action = np.where(greedy, q_values.argmax(dim=1).cpu().numpy(), action)
                    actions[step] = action

                    next_obs, reward, termination, truncation, infos = envs.step(action)
                    rewards[step], terminations[step], truncations[step] = reward, termination, truncation
                    next_obs_real[step] = real_next_obs(next_obs, infos)
                    run.log_episodes(global_step, infos)

            # Q(λ) targets from the network that acted: max_a Q(s'_{t+1}, a) of every step's real next
            # observation in one batch, then the backward recursion
            b_obs = torch.from_numpy(obs.reshape((T * N,) + envs.single_observation_space.shape)).to(device)
            b_actions = torch.from_numpy(actions.reshape(-1)).to(device)
            with torch.no_grad():
                next_values = q_network(torch.from_numpy(next_obs_real.reshape(b_obs.shape)).to(device)).max(dim=1).values
                rollout = (torch.from_numpy(x).to(device) for x in (rewards, terminations, truncations))
                returns = q_lambda_returns(*rollout, next_values.view(T, N), args.gamma, args.q_lambda)
            b_returns = returns.reshape(-1)

            # Optimise the Q-network: epochs of minibatch regressions of Q(s_t, a_t) on G_t
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]
                    q_taken = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds].unsqueeze(1)).squeeze(1)
                    loss = F.mse_loss(q_taken, b_returns[mb_inds])

                    optimizer.zero_grad()
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, td_loss=loss, grad_norm=grad_norm)
                    optimizer.step()

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/epsilon", epsilon, global_step)
            writer.add_scalar("losses/td_loss", loss.item(), global_step)
            writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

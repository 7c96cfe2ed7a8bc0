"""QR-DQN: quantile-regression DQN for discrete actions on classic-control environments.

QR-DQN: Dabney, Rowland, Bellemare, Munos (2018), "Distributional Reinforcement Learning with
Quantile Regression", arXiv:1710.10044 (Algorithm 1; eq. 10 with κ = 1): N quantiles at the
midpoints τ̂_i = (2i - 1) / 2N, the quantile Huber loss; on DQN (Mnih et al. 2015, Nature 518).
Options:
    --double-q: a* = argmax of the online network's means (van Hasselt et al. 2016, arXiv:1509.06461).
    --n-step N: n-step returns (Hessel et al. 2018, "Rainbow", arXiv:1710.02298, eq. 2).

What this file changes: a time-limit truncation is not a termination (the target bootstraps from
the real final observation); dqn.py's hyperparameters with N = 50 quantiles (qrdqn_atari.py has
the paper's 200). Details, checkpoints and results: docs/scripts/qrdqn.md.

Run:
    python cleanrl/qrdqn.py --env-id CartPole-v1
    python cleanrl/qrdqn.py --env-id CartPole-v1 --double-q --n-step 3
    python cleanrl/qrdqn.py --checkpoint-interval 100000 --checkpoint-buffer   # then, if stopped:
    python cleanrl/qrdqn.py --resume runs/CartPole-v1__qrdqn__1__<time>
"""

import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """QR-DQN's hyperparameters; the flags every script takes (--seed, --track, --save-model ...) come from RunArgs."""

    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the replay buffer too (its size is printed) and --resume continues exactly"""
    env_id: str = "CartPole-v1"
    """gymnasium id of the environment (Discrete actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 500000
    """total environment steps, summed over envs"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    num_envs: int = 1
    """number of parallel environments"""
    n_quantiles: int = 50
    """quantiles N of each action's return distribution (the paper's 200 for Atari: a gradient step then costs about 13x)"""
    buffer_size: int = 10000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 1.0
    """target network update rate (1.0: hard copy)"""
    target_network_frequency: int = 500
    """vector steps between target network updates"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_e: float = 1.0
    """ε at the start of exploration"""
    end_e: float = 0.05
    """ε at the end of exploration"""
    exploration_fraction: float = 0.5
    """fraction of total_timesteps over which ε decays linearly from start_e to end_e"""
    learning_starts: int = 10000
    """environment steps of data collection before training starts (also the refill after resuming without a buffer)"""
    train_frequency: int = 10
    """vector steps between gradient steps"""
    double_q: bool = False
    """if toggled, the online network picks a* (van Hasselt et al. 2016)"""
    n_step: int = 1
    """n of the n-step return (1: one-step target)"""


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


class QNetwork(nn.Module):
    """MLP 120-84 ReLU giving, for each action, N quantiles θ_1..θ_N of its return distribution.

    Args:
        envs: the vector env it acts in (flat observations, Discrete actions).
        n_quantiles: quantiles N per action.
    """

    def __init__(self, envs: gym.vector.VectorEnv, n_quantiles: int = 50):
        super().__init__()
        obs_dim, num_actions = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)
        self.num_actions, self.n_quantiles = num_actions, n_quantiles
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_actions * n_quantiles)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Observations ``[B, obs_dim]`` -> quantiles ``[B, num_actions, n_quantiles]``."""
        return self.network(x).view(-1, self.num_actions, self.n_quantiles)


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (ε decay)."""
    return start + (end - start) * min(t / duration, 1.0)


def quantile_midpoints(n_quantiles: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """τ̂_i = (2i - 1) / 2N, i = 1..N, the quantile levels the network estimates (Dabney et al. 2018, Lemma 2): ``[N]``."""
    return (torch.arange(n_quantiles, dtype=torch.float32, device=device) + 0.5) / n_quantiles


def n_step_returns(
    rewards: torch.Tensor, terminations: torch.Tensor, next_obs_steps: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step returns G = sum_{j<m} γ^j r_{t+j} and their bootstrap discounts (Hessel et al. 2018, eq. 2).

    ``rewards``, ``terminations``: the replay's window ``[B, n]``; ``next_obs_steps``: m ``[B]`` (n, or fewer
    where the episode ended). Returns (G, γ^m, or 0 after a termination), float32 ``[B]`` each; a
    truncated episode still bootstraps, from its real final observation.
    """
    powers = gamma ** torch.arange(rewards.shape[1] + 1, dtype=torch.float64, device=rewards.device)
    returns = (rewards.double() * powers[:-1]).sum(dim=1)
    discounts = torch.where(terminations.any(dim=1), 0.0, powers[next_obs_steps])
    return returns.float(), discounts.float()


def quantile_td_target(
    returns: torch.Tensor,
    discounts: torch.Tensor,
    next_quantiles_target: torch.Tensor,
    next_quantiles_online: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Target quantiles T θ_j = G + γ^m θ_j(s', a*), j = 1..N (Dabney et al. 2018, Algorithm 1), γ^m = 0 after a termination.

    a* = argmax_a (1/N) sum_j θ_j(s', a), the greedy action in the mean, of the target network,
    or with ``next_quantiles_online`` of the online network (double Q-learning, van Hasselt et
    al. 2016, eq. 4); its quantiles always come from the target network. s' is the real next
    state, so a truncated transition bootstraps.

    Args:
        returns: G, the (n-step) return, ``[B]``.
        discounts: γ^m, or 0 where the episode terminated, ``[B]``.
        next_quantiles_target: θ(s', ·) of the target network, ``[B, A, N]``.
        next_quantiles_online: θ(s', ·) of the online network, ``[B, A, N]``; given, it picks a*.

    Returns:
        Target quantiles ``[B, N]``.
    """
    chooser = next_quantiles_target if next_quantiles_online is None else next_quantiles_online
    next_actions = chooser.mean(dim=2).argmax(dim=1)
    next_quantiles = next_quantiles_target[torch.arange(len(next_actions), device=next_actions.device), next_actions]
    return returns.unsqueeze(1) + discounts.unsqueeze(1) * next_quantiles


def quantile_huber_loss(quantiles: torch.Tensor, target_quantiles: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
    """Quantile Huber loss, κ = 1 (Dabney et al. 2018, eq. 10 and Algorithm 1).

    With u_ij = T θ_j - θ_i, ρ_τ(u) = |τ - 1{u < 0}| L(u), L the Huber loss (u²/2 for |u| <= 1,
    |u| - 1/2 beyond; dividing L by κ, as some write-ups do, changes nothing at κ = 1). The
    loss is sum_i mean_j ρ_τ̂_i(u_ij), averaged over the batch, as in Algorithm 1 and
    SB3-contrib's ``quantile_huber_loss``.

    Args:
        quantiles: θ_i(s, a) of the online network, ``[B, N]``.
        target_quantiles: T θ_j, ``[B, N']`` (no gradient flows into them).
        taus: the quantile levels τ̂_i of ``quantiles``, ``[N]``.

    Returns:
        The loss, a scalar.
    """
    pairs = quantiles.unsqueeze(2).expand(-1, -1, target_quantiles.shape[1])  # [B, N, N']: θ_i in row i
    targets = target_quantiles.unsqueeze(1).expand_as(pairs)  # T θ_j in column j
    huber = F.huber_loss(pairs, targets, reduction="none", delta=1.0)  # L(u_ij), one fused pass
    # |τ̂_i - 1{u_ij < 0}|: 1 - τ̂_i where θ_i lies above T θ_j, τ̂_i elsewhere
    weight = torch.where(pairs.detach() > targets, 1 - taus.unsqueeze(1), taus.unsqueeze(1))
    return (weight * huber).mean(dim=2).sum(dim=1).mean()


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size learning_rate target_network_frequency")
    require_positive(args, "train_frequency n_step n_quantiles")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40), n_step=(1, 2**16))
    require_range(args, n_quantiles=(1, 2**16), gamma=(0, 1), start_e=(0, 1), end_e=(0, 1))
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    require(
        0 < args.exploration_fraction <= 1, "--exploration-fraction", f"must be in (0, 1], got {args.exploration_fraction}"
    )
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.start_e >= args.end_e, "--end-e", f"{args.end_e} is above --start-e {args.start_e}")
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    pairs = args.batch_size * args.n_quantiles**2  # elements of each [B, N, N] tensor of the loss
    too_big = f"{args.n_quantiles} quantiles with --batch-size {args.batch_size} make the loss's [B, N, N] tensors"
    require(pairs <= 2**28, "--n-quantiles", f"{too_big} {pairs} elements each; at most 2**28")
    steps = args.buffer_size // args.num_envs
    per_env = f"{steps} steps per env with --num-envs {args.num_envs}"
    require(steps >= args.n_step + 2, "--buffer-size", f"{per_env}; --n-step {args.n_step} needs at least {args.n_step + 2}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.0, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script, ε-greedy (greedy at ε = 0).
    ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    n_quantiles = evaluation.saved_size("n_quantiles", 1, 2**16)  # checked before the network is built
    q_network = evaluation.load(QNetwork(evaluation.envs, n_quantiles), "q_network")
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        quantiles = q_network(torch.as_tensor(obs, dtype=torch.float32, device=evaluation.device))
        actions = quantiles.mean(dim=2).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(evaluation.envs.single_action_space.n, size=len(actions)), actions)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    observation_space, action_space = check_env(args, gym.spaces.Discrete, gym.spaces.Box, obs_ndim=1)
    N = args.num_envs
    try:  # Replay: n-step windows of raw transitions in [buffer_size / N, N] rows
        rb = ReplayBuffer(args.buffer_size // N, N, observation_space, action_space, n_step=args.n_step, seed=args.seed)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    rb.device = device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(N)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        q_network = QNetwork(envs, args.n_quantiles).to(device)
        optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size, fused=True)
        target_network = QNetwork(envs, args.n_quantiles).to(device)
        target_network.load_state_dict(q_network.state_dict())
        taus = quantile_midpoints(args.n_quantiles, device)
        num_actions = int(envs.single_action_space.n)
        rng = np.random.default_rng(args.seed)
        exploration_steps = args.exploration_fraction * args.total_timesteps

        model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the global random generators
        state = dict(
            q_network=q_network, target_network=target_network, optimizer=optimizer, rng=rng, envs=envs, replay_rng=rb.rng
        )
        if args.checkpoint_buffer:
            state["replay_buffer"] = rb
            print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.1f} MiB)")
        global_step, updates_start = 0, args.learning_starts  # updates once global_step > updates_start
        if run.resumed:  # the checkpoint's networks, optimiser, generators, envs (replayed) and buffer, in place
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, updates_start, obs = saved["global_step"], saved["updates_start"], saved["obs"]
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start = global_step + args.learning_starts
                print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        else:
            obs, _ = envs.reset(seed=args.seed)

        for iteration in range(global_step // N, args.total_timesteps // N):
            global_step += N
            # ε-greedy: the network is only run when some env acts greedily.
            epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step)
            uniform = rng.random((2, N))  # one draw for ε, one for the random action
            greedy = uniform[0] >= epsilon
            actions = (uniform[1] * num_actions).astype(np.int64)
            if greedy.any():  # a = argmax_a of the mean of θ(s, a); every env in one batch, the greedy ones taken
                with torch.inference_mode():
                    quantiles = q_network(torch.as_tensor(obs, dtype=torch.float32, device=device))
                actions = np.where(greedy, quantiles.mean(dim=2).argmax(dim=1).cpu().numpy(), actions)

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            run.log_episodes(global_step, infos)
            # s' is the real next observation: where an episode ended, its final observation.
            rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
            obs = next_obs

            if global_step > updates_start and len(rb) > 0:
                if iteration % args.train_frequency == 0:
                    data = rb.sample(args.batch_size)
                    returns, discounts = n_step_returns(data.rewards, data.terminations, data.next_obs_steps, args.gamma)
                    with torch.no_grad():
                        next_quantiles_target = target_network(data.next_obs)
                        next_quantiles_online = q_network(data.next_obs) if args.double_q else None
                        target = quantile_td_target(returns, discounts, next_quantiles_target, next_quantiles_online)
                    chosen = q_network(data.obs)[torch.arange(len(data.actions), device=device), data.actions]  # [B, N]
                    loss = quantile_huber_loss(chosen, target, taus)

                    optimizer.zero_grad()
                    loss.backward()
                    check_finite(iteration // args.train_frequency, global_step, quantile_loss=loss)  # stops a diverging run
                    optimizer.step()

                    if iteration % (100 * args.train_frequency) == 0:
                        writer.add_scalar("losses/quantile_loss", loss.item(), global_step)
                        writer.add_scalar("losses/q_values", chosen.mean().item(), global_step)
                        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                        writer.add_scalar("charts/epsilon", epsilon, global_step)
                        writer.add_scalar("charts/SPS", run.sps(global_step), global_step)

                # Target network: θ' ← τ θ + (1 - τ) θ'
                if iteration % args.target_network_frequency == 0:
                    with torch.no_grad():
                        for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                            target_param.lerp_(param, args.tau)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, updates_start=updates_start)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

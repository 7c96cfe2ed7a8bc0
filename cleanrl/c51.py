"""C51: categorical DQN for discrete actions on classic-control environments.

C51: Bellemare, Dabney, Munos (2017), "A Distributional Perspective on Reinforcement Learning",
arXiv:1707.06887 (Algorithm 1), on DQN (Mnih et al. 2015, Nature 518:529-533).
Option:
    --n-step N: n-step returns (Hessel et al. 2018, "Rainbow", arXiv:1710.02298, eq. 7).

What this file changes: a time-limit truncation is not a termination (the target bootstraps from
the real final observation). Details, checkpoints and results: docs/scripts/c51.md.

Run:
    python cleanrl/c51.py --env-id CartPole-v1
    python cleanrl/c51.py --checkpoint-interval 100000   # then, if stopped:
    python cleanrl/c51.py --resume runs/CartPole-v1__c51__1__<time>
"""

import signal
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
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
    """C51's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

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
    n_atoms: int = 101
    """atoms of the categorical return distribution"""
    v_min: float = -100.0
    """smallest return of the support"""
    v_max: float = 100.0
    """largest return of the support"""
    buffer_size: int = 10000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    target_network_frequency: int = 500
    """vector steps between target network copies"""
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
    """MLP 120-84 ReLU giving, for each action, logits of the return distribution on the support.

    ``atoms``: the support z_1..z_N evenly spaced on [v_min, v_max] (a buffer, saved with the model).
    """

    def __init__(self, envs: gym.vector.VectorEnv, n_atoms: int = 101, v_min: float = -100.0, v_max: float = 100.0):
        super().__init__()
        obs_dim, num_actions = int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)
        self.num_actions, self.n_atoms = num_actions, n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, n_atoms))
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_actions * n_atoms)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Observations ``[B, obs_dim]`` -> logits ``[B, num_actions, n_atoms]``."""
        return self.network(x).view(-1, self.num_actions, self.n_atoms)

    def q_values(self, logits: torch.Tensor) -> torch.Tensor:
        """Q(s, a) = sum_i z_i p_i(s, a): logits ``[B, A, n_atoms]`` -> ``[B, A]``."""
        return (torch.softmax(logits, dim=-1) * self.atoms).sum(dim=-1)


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (ε decay)."""
    return start + (end - start) * min(t / duration, 1.0)


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


def categorical_projection(
    next_probs: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    atoms: torch.Tensor,
) -> torch.Tensor:
    """Project the distribution of G + γ^m Z(s', a*) onto the support (Bellemare et al. 2017, Algorithm 1).

    Each atom moves to G + γ^m z_j, clipped to [v_min, v_max], its probability split between the two
    neighbouring atoms in proportion to closeness; after a termination (γ^m = 0) the target is G itself.
    ``next_probs`` ``[B, n_atoms]``, ``returns``, ``discounts`` ``[B]``, ``atoms`` ``[n_atoms]`` -> ``[B, n_atoms]``.
    """
    v_min, v_max, n_atoms = atoms[0], atoms[-1], atoms.numel()
    delta_z = (v_max - v_min) / (n_atoms - 1)
    tz = (returns.unsqueeze(1) + discounts.unsqueeze(1) * atoms).clamp(v_min, v_max)
    b = (tz - v_min) / delta_z  # position on the support, in [0, n_atoms - 1]
    lower, upper = b.floor().long(), b.ceil().long()
    # mass to the lower atom (all of it when b is an atom), the rest to the upper one
    to_lower = next_probs * (upper.float() - b + (lower == upper).float())
    to_upper = next_probs * (b - lower.float())
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, lower, to_lower)
    target.scatter_add_(1, upper, to_upper)
    return target


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size learning_rate target_network_frequency")
    require_positive(args, "train_frequency n_step")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40), n_step=(1, 2**16))
    require_range(args, gamma=(0, 1), start_e=(0, 1), end_e=(0, 1))
    require(args.n_atoms >= 2, "--n-atoms", f"must be at least 2, got {args.n_atoms}")
    require_range(args, n_atoms=(2, 2**16))
    # the support [--v-min, --v-max]: float32 atoms, so both bounds, its width and their gap must hold in float32
    require(args.v_min < args.v_max, "--v-max", f"{args.v_max} is not above --v-min {args.v_min}")
    largest = float(np.finfo(np.float32).max)
    require(args.v_min >= -largest, "--v-min", f"must be at least {-largest:.4g} (float32), got {args.v_min}")
    width = f"the support's width --v-max - --v-min = {args.v_max - args.v_min:g} is beyond float32's {largest:.4g}"
    require(args.v_max - args.v_min <= largest, "--v-max", width)
    with np.errstate(over="ignore"):
        require(np.float32(args.v_min) < np.float32(args.v_max), "--v-max", "is not above --v-min in float32")
    require(
        0 < args.exploration_fraction <= 1, "--exploration-fraction", f"must be in (0, 1], got {args.exploration_fraction}"
    )
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.start_e >= args.end_e, "--end-e", f"{args.end_e} is above --start-e {args.start_e}")
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    steps = args.buffer_size // args.num_envs
    per_env = f"{steps} steps per env with --num-envs {args.num_envs}"
    require(steps >= args.n_step + 2, "--buffer-size", f"{per_env}; --n-step {args.n_step} needs at least {args.n_step + 2}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.0, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script, ε-greedy (greedy at ε = 0).
    ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    a = evaluation.model["args"]
    q_network = evaluation.load(
        QNetwork(evaluation.envs, evaluation.saved_size("n_atoms", 2, 2**16), a["v_min"], a["v_max"]), "q_network"
    )
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        logits = q_network(torch.as_tensor(obs, dtype=torch.float32, device=evaluation.device))
        actions = q_network.q_values(logits).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(evaluation.envs.single_action_space.n, size=len(actions)), actions)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    observation_space, action_space = check_env(args, gym.spaces.Discrete, gym.spaces.Box, obs_ndim=1)
    N = args.num_envs
    try:  # Replay: n-step transitions in [buffer_size / N, N] rows
        rb = ReplayBuffer(args.buffer_size // N, N, observation_space, action_space, args.n_step, seed=args.seed)
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
        q_network = QNetwork(envs, args.n_atoms, args.v_min, args.v_max).to(device)
        optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size, fused=True)
        target_network = QNetwork(envs, args.n_atoms, args.v_min, args.v_max).to(device)
        target_network.load_state_dict(q_network.state_dict())
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
            if greedy.any():  # a = argmax_a E[Z(s, a)]
                with torch.inference_mode():
                    logits = q_network(torch.as_tensor(obs[greedy], dtype=torch.float32, device=device))
                    actions[greedy] = q_network.q_values(logits).argmax(dim=1).cpu().numpy()

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
                        next_logits = target_network(data.next_obs)
                        next_actions = target_network.q_values(next_logits).argmax(dim=1)  # a* = argmax_a E[Z(s', a)]
                        next_probs = torch.softmax(next_logits[torch.arange(len(next_actions)), next_actions], dim=-1)
                        target = categorical_projection(next_probs, returns, discounts, target_network.atoms)
                    logits = q_network(data.obs)
                    chosen = logits[torch.arange(len(data.actions)), data.actions]  # [B, n_atoms]
                    loss = -(target * torch.log_softmax(chosen, dim=-1)).sum(dim=-1).mean()  # cross-entropy

                    optimizer.zero_grad()
                    loss.backward()
                    check_finite(iteration // args.train_frequency, global_step, loss=loss)  # stops a diverging run here
                    optimizer.step()

                    if iteration % (100 * args.train_frequency) == 0:
                        with torch.no_grad():
                            q_taken = (torch.softmax(chosen, dim=-1) * q_network.atoms).sum(dim=-1)
                        writer.add_scalar("losses/loss", loss.item(), global_step)
                        writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)
                        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                        writer.add_scalar("charts/epsilon", epsilon, global_step)
                        writer.add_scalar("charts/SPS", run.sps(global_step), global_step)

                if iteration % args.target_network_frequency == 0:
                    target_network.load_state_dict(q_network.state_dict())
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, updates_start=updates_start)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

"""DQN on Atari, with double-Q, dueling, n-step and prioritized-replay options.

DQN with the Nature CNN and the standard Atari preprocessing: Mnih et al. (2015), "Human-level
control through deep reinforcement learning", Nature 518:529-533.
Options:
    --double-q: van Hasselt, Guez, Silver (2016), arXiv:1509.06461, eq. 4.
    --dueling: Wang et al. (2016), arXiv:1511.06581, eq. 9: Q = V + A - mean_a A.
    --n-step N: n-step returns (Hessel et al. 2018, arXiv:1710.02298, "Multi-step learning").
    --prioritized-replay: proportional prioritized replay (Schaul et al. 2016, arXiv:1511.05952).

What this file changes: a time-limit truncation is not a termination (the target bootstraps from
the real final frame stack); the replay stores each 84x84 frame once. Details, checkpoints and
results: docs/scripts/dqn_atari.md.

Run:
    python cleanrl/dqn_atari.py --env-id BreakoutNoFrameskip-v4
    python cleanrl/dqn_atari.py --checkpoint-interval 500000   # then, if stopped:
    python cleanrl/dqn_atari.py --resume runs/BreakoutNoFrameskip-v4__dqn_atari__1__<time>
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
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    ale_py = None

from cleanrl_utils.buffers import PrioritizedReplayBuffer, ReplayBuffer
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """DQN's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the replay buffer too (its size is printed) and --resume continues exactly"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id of an Atari game (a NoFrameskip-v4 id: frame skipping is done here)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 10000000
    """total environment steps, summed over envs"""
    learning_rate: float = 1e-4
    """Adam learning rate"""
    num_envs: int = 1
    """number of parallel environments"""
    buffer_size: int = 1000000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 1.0
    """target network update rate (1.0: hard copy)"""
    target_network_frequency: int = 1000
    """vector steps between target network updates"""
    batch_size: int = 32
    """transitions per gradient step"""
    start_e: float = 1.0
    """ε at the start of exploration"""
    end_e: float = 0.01
    """ε at the end of exploration"""
    exploration_fraction: float = 0.10
    """fraction of total_timesteps over which ε decays linearly from start_e to end_e"""
    learning_starts: int = 80000
    """environment steps of data collection before training starts (also the refill after resuming without a buffer)"""
    train_frequency: int = 4
    """vector steps between gradient steps"""
    double_q: bool = False
    """if toggled, use the double-Q target (van Hasselt et al. 2016)"""
    dueling: bool = False
    """if toggled, use the dueling architecture (Wang et al. 2016)"""
    n_step: int = 1
    """n of the n-step return (1: one-step TD target)"""
    prioritized_replay: bool = False
    """if toggled, sample transitions by priority (Schaul et al. 2016)"""
    prioritized_replay_alpha: float = 0.6
    """priority exponent α, in [0, 1] (0: uniform)"""
    prioritized_replay_beta: float = 0.4
    """importance-sampling exponent β at the start, annealed linearly to 1 at the end"""
    prioritized_replay_eps: float = 1e-6
    """ε added to |δ| in the priority"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with the standard Atari preprocessing, and (training) its replay log.

    Episode statistics are recorded per game (below episodic life and reward clipping), so
    ``charts/episodic_return`` is the game score. The frame stack is zero-padded at each
    (life) episode start, as the frame-stacked replay expects. Env 0 records videos if asked, of
    the games ``video_episodes(index)`` picks. ``training=False``: an evaluation env (the same
    preprocessing, whose game scores are counted), without replay log.
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the game's score and length, in its last step's info
        env = atari_wrappers.NoopResetEnv(env, noop_max=30)
        env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
        env = atari_wrappers.EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = atari_wrappers.FireResetEnv(env)
        env = atari_wrappers.ClipRewardEnv(env)
        env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
        env = gym.wrappers.ReshapeObservation(env, (84, 84))
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


class QNetwork(nn.Module):
    """The Nature CNN (Mnih et al. 2015) estimating Q(s, ·) from 4 stacked 84x84 frames; optionally dueling.

    ``head`` outputs Q(s, ·) or, when dueling, the advantages A(s, ·), and ``value`` V(s) (Wang et al.
    2016 split the 512-unit layer into two streams); argmax_a head(trunk(s)) is the greedy action.
    """

    def __init__(self, num_actions: int, dueling: bool = False):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, num_actions))
        self.value = nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 1)) if dueling else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Frames uint8 ``[B, 4, 84, 84]`` (0-255) -> Q-values ``[B, num_actions]``."""
        hidden = self.trunk(x.float() / 255.0)
        if self.value is None:
            return self.head(hidden)
        return dueling_q(self.value(hidden), self.head(hidden))


def dueling_q(value: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Q = V + A - mean_a A (Wang et al. 2016, eq. 9): value ``[B, 1]``, advantages ``[B, A]`` -> ``[B, A]``."""
    return value + advantages - advantages.mean(dim=-1, keepdim=True)


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (ε decay, β annealing)."""
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


def compute_td_target(
    returns: torch.Tensor,
    discounts: torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """n-step TD target y = G + γ^m Q_target(s', a'), with γ^m = 0 after a termination.

    a' = argmax_a Q_target(s', a) (DQN), or argmax_a Q_online(s', a) when ``next_q_online`` is given
    (double DQN, van Hasselt et al. 2016, eq. 4). ``returns``, ``discounts`` ``[B]``, Q-values ``[B, A]`` -> ``[B]``.
    """
    if next_q_online is None:
        next_value = next_q_target.max(dim=1).values
    else:
        next_value = next_q_target.gather(1, next_q_online.argmax(dim=1, keepdim=True)).squeeze(1)
    return returns + discounts * next_value


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input (an unknown id, a game that skips frames itself)."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size learning_rate target_network_frequency")
    require_positive(args, "train_frequency n_step prioritized_replay_eps")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40), n_step=(1, 2**16))
    require_range(args, gamma=(0, 1), start_e=(0, 1), end_e=(0, 1))
    require_range(args, prioritized_replay_alpha=(0, 1), prioritized_replay_beta=(0, 1))
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
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
    check_env(args, gym.spaces.Discrete, gym.spaces.Box, id_suffix="NoFrameskip-v4")
    with gym.make(args.env_id) as game:
        example = "NoFrameskip-v4 id such as BreakoutNoFrameskip-v4"
        require(hasattr(game.unwrapped, "ale"), "--env-id", f"{args.env_id} is not an Atari game; take an ALE {example}")
        skip = game.spec.kwargs.get("frameskip", 1)
        require(skip == 1, "--env-id", f"{args.env_id} skips frames itself ({args.script}.py skips them): take a {example}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.05, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a model saved by this script, ε-greedy (0.05, the usual Atari evaluation).
    ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    num_actions, dueling = int(evaluation.envs.single_action_space.n), evaluation.model["args"]["dueling"]
    q_network = evaluation.load(QNetwork(num_actions, dueling), "q_network")
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        actions = q_network(torch.as_tensor(obs, device=evaluation.device)).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(evaluation.envs.single_action_space.n, size=len(actions)), actions)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    probe = make_env(args.env_id, 0, False, "", training=False)()  # the preprocessed spaces size the replay
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    N = args.num_envs
    try:  # Replay: n-step transitions in [buffer_size / N, N] rows, each frame stored once; uniform, or by |δ|
        rows = (args.buffer_size // N, N, observation_space, action_space)
        replay_args = dict(n_step=args.n_step, frame_stack=4, seed=args.seed)
        if args.prioritized_replay:
            rb = PrioritizedReplayBuffer(
                *rows, alpha=args.prioritized_replay_alpha, eps=args.prioritized_replay_eps, **replay_args
            )
        else:
            rb = ReplayBuffer(*rows, **replay_args)
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
        num_actions = int(envs.single_action_space.n)
        # channels-last convolutions: faster updates on CPU (benchmark/README.md)
        q_network = QNetwork(num_actions, args.dueling).to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)
        target_network = QNetwork(num_actions, args.dueling).to(device, memory_format=torch.channels_last)
        target_network.load_state_dict(q_network.state_dict())
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
        fresh_buffer_mid_episode = False  # a resume without the buffer: its first stacks lack older frames
        if run.resumed:  # the checkpoint's networks, optimiser, generators, envs (replayed) and buffer, in place
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, updates_start, obs = saved["global_step"], saved["updates_start"], saved["obs"]
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start, fresh_buffer_mid_episode = global_step + args.learning_starts, True
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
            if greedy.any():  # argmax of the head is argmax Q, dueling or not
                with torch.inference_mode():
                    hidden = q_network.trunk(torch.as_tensor(obs[greedy], device=device).float() / 255.0)
                    actions[greedy] = q_network.head(hidden).argmax(dim=1).cpu().numpy()

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            run.log_episodes(global_step, infos)
            if fresh_buffer_mid_episode:  # the empty buffer starts its columns here, as at an episode start
                obs, fresh_buffer_mid_episode = np.concatenate([np.zeros_like(obs[:, :-1]), obs[:, -1:]], 1), False
            # s' is the real next observation: where an episode ended, its final observation.
            rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
            obs = next_obs

            if global_step > updates_start and len(rb) > 0:
                if iteration % args.train_frequency == 0:
                    if args.prioritized_replay:
                        beta = linear_schedule(args.prioritized_replay_beta, 1.0, args.total_timesteps, global_step)
                        data = rb.sample(args.batch_size, beta)
                    else:
                        data = rb.sample(args.batch_size)
                    returns, discounts = n_step_returns(data.rewards, data.terminations, data.next_obs_steps, args.gamma)
                    with torch.no_grad():
                        next_q_target = target_network(data.next_obs)
                        next_q_online = q_network(data.next_obs) if args.double_q else None
                        td_target = compute_td_target(returns, discounts, next_q_target, next_q_online)
                    old_val = q_network(data.obs).gather(1, data.actions.unsqueeze(1)).squeeze(1)
                    if args.prioritized_replay:  # importance-weighted squared TD error; priorities |δ|
                        td_error = td_target - old_val
                        loss = (data.weights * td_error.square()).mean()
                        rb.update_priorities(data.indices, td_error.detach().abs())
                    else:
                        loss = F.mse_loss(old_val, td_target)

                    optimizer.zero_grad()
                    loss.backward()
                    check_finite(iteration // args.train_frequency, global_step, loss=loss)  # stops a diverging run here
                    optimizer.step()

                    if iteration % (100 * args.train_frequency) == 0:
                        writer.add_scalar("losses/td_loss", loss.item(), global_step)
                        writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
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

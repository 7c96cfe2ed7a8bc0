"""DQN on Atari, with double-Q, dueling, n-step and prioritized-replay options.

Deep Q-Network with the Nature CNN, experience replay, a target network and linearly decayed
ε-greedy exploration, on the standard Atari preprocessing (no-op starts, frame skip 4 with
max-pooling, episodic life, FIRE on reset, rewards clipped to their sign, 84x84 grayscale,
4 stacked frames):
    Mnih et al. (2015), "Human-level control through deep reinforcement learning",
    Nature 518:529-533 (Methods and Extended Data Table 1).
Options (rlpyt's DQN family):
    --double-q: van Hasselt, Guez, Silver (2016), arXiv:1509.06461, eq. 4.
    --dueling: Wang et al. (2016), arXiv:1511.06581, eq. 9: Q = V + A - mean_a A.
    --n-step N: n-step returns (Hessel et al. 2018, arXiv:1710.02298, section "Multi-step learning").
    --prioritized-replay: proportional prioritized replay (Schaul et al. 2016,
        arXiv:1511.05952), importance weights with β annealed linearly to 1.

What this file changes against them: a time-limit truncation is not a termination (the
replay keeps the real final frame stack and the target bootstraps from it); the replay stores
each 84x84 frame once (a 1M-transition buffer takes about 7.1 GB); the loss is the squared TD
error and the optimiser Adam, as in CleanRL's dqn_atari.py.

Checkpoints (--checkpoint-interval, SIGTERM) hold the networks, the optimiser, the global step
(ε and β are functions of it), the random generators and the games' states (replayed from their
last reset); with --checkpoint-buffer also the replay buffer, and --resume then continues
exactly. Without it the resumed run starts with an empty buffer and refills it for
--learning-starts steps (acting ε-greedily with the trained network) before the updates resume;
the buffer then takes each game's current frame as the start of its column, so the stacks of
its first three transitions lack the frames from before the resume.

Run:
    python cleanrl/dqn_atari.py --env-id BreakoutNoFrameskip-v4
    python cleanrl/dqn_atari.py --checkpoint-interval 500000   # then, if stopped:
    python cleanrl/dqn_atari.py --resume runs/BreakoutNoFrameskip-v4__dqn_atari__1__<time>
"""

import os
import time
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tyro
from stable_baselines3.common.atari_wrappers import (
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
)

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    ale_py = None

from cleanrl_utils.buffers import PrioritizedReplayBuffer, ReplayBuffer
from cleanrl_utils.checkpoint import (
    Checkpointer,
    envs_state,
    generator_state,
    make_generator,
    restore_envs,
    resume_args,
    set_rng_state,
)
from cleanrl_utils.evals import run_episodes
from cleanrl_utils.run import (
    Progress,
    check_env,
    fail,
    flag_name,
    load_model,
    log_episodes,
    make_vector_env,
    real_next_obs,
    require,
    require_positive,
    save_model,
    seed_everything,
    start_run,
)


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name of this experiment, part of the run directory name"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, train on CUDA when it is available"""
    track: bool = False
    """if toggled, mirror the logs to Weights & Biases"""
    wandb_project_name: str = "cleanRL"
    """Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """Weights & Biases entity (team); None means your default"""
    capture_video: bool = False
    """if toggled, record videos of env 0's episodes into `{run_dir}/videos`"""
    save_model: bool = False
    """if toggled, save the model to `{run_dir}/{exp_name}.cleanrl_model` and evaluate it"""
    eval_episodes: int = 10
    """episodes the saved model is evaluated for (with --save-model)"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the vector step that reaches it (0: only when the run receives SIGTERM)"""
    checkpoint_buffer: bool = False
    """if toggled, each checkpoint also holds the whole replay buffer (--buffer-size transitions: about 7.1 GB for a million Atari ones, each frame stored once; the size is printed at the start), and --resume continues exactly; without it the resumed run starts with an empty buffer and refills it for --learning-starts steps before the updates resume"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch (1 is fastest for these small networks)"""

    # Algorithm specific arguments
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
    """environment steps of data collection before training starts (ε-greedy from --start-e; also the refill after a --resume whose checkpoint has no replay buffer)"""
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
    """priority exponent α (0: uniform)"""
    prioritized_replay_beta: float = 0.4
    """importance-sampling exponent β at the start, annealed linearly to 1 at the end"""
    prioritized_replay_eps: float = 1e-6
    """ε added to |δ| in the priority"""


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(
        args,
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "batch_size",
        "learning_rate",
        "target_network_frequency",
        "train_frequency",
        "torch_threads",
    )
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    for name in ("start_e", "end_e"):
        value = getattr(args, name)
        require(0 <= value <= 1, flag_name(name), f"must be in [0, 1], got {value}")
    require(
        args.start_e >= args.end_e,
        "--end-e",
        f"{args.end_e} is above --start-e {args.start_e}; ε decays from --start-e to --end-e",
    )
    require(
        args.buffer_size >= args.batch_size,
        "--buffer-size",
        f"{args.buffer_size} is smaller than --batch-size {args.batch_size}",
    )
    require(
        0 < args.exploration_fraction <= 1, "--exploration-fraction", f"must be in (0, 1], got {args.exploration_fraction}"
    )
    require_positive(args, "n_step", "prioritized_replay_eps")
    require(
        args.buffer_size // args.num_envs >= args.n_step + 2,
        "--buffer-size",
        f"{args.buffer_size} holds {args.buffer_size // args.num_envs} steps per env; "
        f"--n-step {args.n_step} needs at least {args.n_step + 2}",
    )
    require(
        args.prioritized_replay_alpha >= 0, "--prioritized-replay-alpha", f"must be >= 0, got {args.prioritized_replay_alpha}"
    )
    require(
        0 <= args.prioritized_replay_beta <= 1,
        "--prioritized-replay-beta",
        f"must be in [0, 1], got {args.prioritized_replay_beta}",
    )
    require(
        args.total_timesteps > args.learning_starts,
        "--learning-starts",
        f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}",
    )
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, video_episodes=None):
    """A thunk creating env ``idx`` with the standard Atari preprocessing; env 0 records videos if asked.

    Episode statistics are recorded per game (before episodic life and reward clipping), so
    ``charts/episodic_return`` is the game score. The frame stack is zero-padded at each
    (life) episode start, as the frame-stacked replay expects. ``video_episodes(i) -> bool``
    picks the episodes to record.
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        return env

    return thunk


class QNetwork(nn.Module):
    """The Nature CNN (Mnih et al. 2015) estimating Q(s, ·) from 4 stacked 84x84 frames; optionally dueling.

    ``head`` outputs Q(s, ·) or, when dueling, the advantages A(s, ·), and ``value`` V(s)
    (Wang et al. 2016 split the 512-unit layer into two streams).

    Args:
        num_actions: size of the Discrete action space.
        dueling: use separate value and advantage streams.
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


def compute_td_target(
    returns: torch.Tensor,
    discounts: torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """n-step TD target y = G + γ^m Q_target(s', a'), with γ^m = 0 after a termination.

    DQN (Mnih et al. 2015): a' = argmax_a Q_target(s', a); n = 1 gives r + γ max_a' Q_target(s', a').
    Double DQN (van Hasselt et al. 2016, eq. 4): a' = argmax_a Q_online(s', a).
    n-step return (Hessel et al. 2018, "Multi-step learning"): G = sum_{k<m} γ^k r_{t+k}, m = n unless the
    episode ended sooner. s' is the real next state, so a truncated transition bootstraps.

    Args:
        returns: G, ``[B]`` (the replay buffer's ``rewards``).
        discounts: γ^m, or 0 where the episode terminated, ``[B]``.
        next_q_target: Q_target(s', ·), ``[B, A]``.
        next_q_online: Q_online(s', ·), ``[B, A]``; given, the target is double-Q.

    Returns:
        TD targets ``[B]``.
    """
    if next_q_online is None:
        next_value = next_q_target.max(dim=1).values
    else:
        next_value = next_q_target.gather(1, next_q_online.argmax(dim=1, keepdim=True)).squeeze(1)
    return returns + discounts * next_value


def evaluate(
    model_path: str,
    eval_episodes: int,
    env_id: Optional[str] = None,
    capture_video: bool = False,
    video_dir: str = "videos",
    seed: Optional[int] = None,
    epsilon: float = 0.05,
    device: str = "cpu",
) -> np.ndarray:
    """Evaluate a model saved by this script for ``eval_episodes`` episodes, ε-greedy.

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole episodes.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation episodes into ``video_dir``.
        seed: seed of the evaluation env and of the ε draws; None means the training
            seed + 100000, as the evaluation at the end of training uses.
        epsilon: probability of a random action (0.05, the usual Atari evaluation; 0: greedy).
        device: torch device for the network.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by dqn_atari.py.
    """
    content = load_model(model_path, "dqn_atari")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env(
        [make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)], episode_statistics=False
    )
    rng = np.random.default_rng(seed)
    q_network = QNetwork(int(envs.single_action_space.n), dueling=content["args"]["dueling"]).to(device)
    q_network.load_state_dict(content["model"])

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        actions = q_network(torch.as_tensor(obs, device=device)).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(envs.single_action_space.n, size=len(actions)), actions)

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "dqn_atari")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    check_env(args.env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "dqn_atari.py", id_suffix="NoFrameskip-v4")
    with gym.make(args.env_id) as game:
        require(
            hasattr(game.unwrapped, "ale"),
            "--env-id",
            f"{args.env_id} is not an Atari game; dqn_atari.py takes ALE ids such as BreakoutNoFrameskip-v4",
        )
        require(
            game.spec.kwargs.get("frameskip", 1) == 1,
            "--env-id",
            f"{args.env_id} skips frames itself; take its NoFrameskip-v4 id (such as BreakoutNoFrameskip-v4): "
            "the frame skipping is done here",
        )
    probe = make_env(args.env_id, 0, False, "")()  # the preprocessed spaces size the replay
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    N = args.num_envs
    # Replay: n-step transitions in [buffer_size / N, N] rows, each frame stored once;
    # uniform, or prioritized by |δ|.
    replay_args = dict(n_step=args.n_step, gamma=args.gamma, device=device, seed=args.seed)
    try:
        if args.prioritized_replay:
            rb = PrioritizedReplayBuffer(
                args.buffer_size // N,
                N,
                observation_space,
                action_space,
                frame_stack=4,
                alpha=args.prioritized_replay_alpha,
                eps=args.prioritized_replay_eps,
                **replay_args,
            )
        else:
            rb = ReplayBuffer(args.buffer_size // N, N, observation_space, action_space, frame_stack=4, **replay_args)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)

    envs = make_vector_env(  # episode statistics come from each env: game scores
        [make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(args.num_envs)],
        args.env_mode,
        episode_statistics=False,
    )
    num_actions = int(envs.single_action_space.n)
    # channels-last convolutions: faster updates on CPU (benchmark/README.md)
    q_network = QNetwork(num_actions, args.dueling).to(device, memory_format=torch.channels_last)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)
    target_network = QNetwork(num_actions, args.dueling).to(device, memory_format=torch.channels_last)
    target_network.load_state_dict(q_network.state_dict())

    rng = np.random.default_rng(args.seed)
    num_iterations = args.total_timesteps // N
    exploration_steps = args.exploration_fraction * args.total_timesteps

    global_step, updates_start = 0, args.learning_starts  # updates once global_step > updates_start
    fresh_buffer_mid_episode = False  # a resume without the buffer: its first stacks lack older frames
    if resumed is None:
        obs, _ = envs.reset(seed=args.seed)
    else:  # continue: networks, optimiser, step (ε and β follow from it), envs (replayed), generators
        q_network.load_state_dict(resumed["model"])
        target_network.load_state_dict(resumed["target_model"])
        optimizer.load_state_dict(resumed["optimizer"])
        rng = make_generator(resumed["action_rng"])
        global_step = resumed["global_step"]
        if "buffer" in resumed:  # exactly
            rb.load_state_dict(resumed["buffer"])
            updates_start = resumed["updates_start"]
        else:  # an empty buffer: refill it for --learning-starts steps before updating again
            rb.rng.bit_generator.state = resumed["replay_rng"]
            updates_start = global_step + args.learning_starts
            fresh_buffer_mid_episode = True
            print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    if args.checkpoint_buffer:
        print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.1f} MiB) besides the networks and optimisers")
    checkpointer = Checkpointer(run.directory, "dqn_atari", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.buffer_size % N:
        print(f"replay capacity {rb.capacity * N} transitions: --buffer-size rounded down to a multiple of --num-envs {N}")
    if num_iterations * N != args.total_timesteps:
        print(f"training {num_iterations * N} steps: --total-timesteps rounded down to a multiple of --num-envs {N}")
    progress = Progress(num_iterations * N, start_step=global_step)
    for iteration in range(global_step // N, num_iterations):
        global_step += N
        # ε-greedy: the network is only run when some env acts greedily.
        epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step)
        uniform = rng.random((2, N))  # one draw for ε, one for the random action
        greedy = uniform[0] >= epsilon
        actions = (uniform[1] * num_actions).astype(np.int64)
        if greedy.any():  # argmax of the head is argmax Q, dueling or not
            with torch.no_grad():
                hidden = q_network.trunk(torch.from_numpy(obs[greedy]).to(device).float() / 255.0)
                actions[greedy] = q_network.head(hidden).argmax(dim=-1).cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "_episode" in infos:
            progress.episodes(log_episodes(writer, infos, global_step))
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
                with torch.no_grad():
                    next_q_target = target_network(data.next_obs)
                    next_q_online = q_network(data.next_obs) if args.double_q else None
                    td_target = compute_td_target(data.rewards, data.discounts, next_q_target, next_q_online)
                old_val = q_network(data.obs).gather(1, data.actions.unsqueeze(1)).squeeze(1)
                if args.prioritized_replay:  # importance-weighted squared TD error; priorities |δ|
                    td_error = td_target - old_val
                    loss = (data.weights * td_error.square()).mean()
                    rb.update_priorities(data.indices, td_error.detach().abs())
                else:
                    loss = F.mse_loss(old_val, td_target)

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

                if iteration % (100 * args.train_frequency) == 0:
                    writer.add_scalar("losses/td_loss", loss.item(), global_step)
                    writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                    writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    sps = int((global_step - start_step) / (time.time() - start_time))
                    writer.add_scalar("charts/SPS", sps, global_step)

            # Target network: θ' ← τ θ + (1 - τ) θ'
            if iteration % args.target_network_frequency == 0:
                with torch.no_grad():
                    for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                        target_param.lerp_(param, args.tau)
        progress.update(global_step)
        if checkpointer.due(global_step):  # also on SIGTERM, which then ends the run (status 143)
            replay = {"buffer": rb.state_dict()} if args.checkpoint_buffer else {"replay_rng": generator_state(rb.rng)}
            checkpointer.save(
                global_step,
                {
                    "model": q_network.state_dict(),
                    "target_model": target_network.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "action_rng": generator_state(rng),
                    "updates_start": updates_start,
                    "envs": envs_state(envs),
                    "wandb_id": run.wandb_id,
                    **replay,
                },
            )
    progress.close()

    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "dqn_atari", args, q_network.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

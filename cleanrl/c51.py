"""C51: categorical DQN for discrete actions on classic-control environments.

Distributional deep Q-learning with a categorical return distribution on a fixed support:
    Bellemare, Dabney, Munos (2017), "A Distributional Perspective on Reinforcement
    Learning", arXiv:1707.06887 (Algorithm 1: the projection of the distributional Bellman
    target onto the support; cross-entropy loss).
Built on DQN (Mnih et al. 2015, Nature 518): experience replay, a target network, linearly
decayed ε-greedy exploration.
Option:
    --n-step N: n-step returns (Hessel et al. 2018, "Rainbow", arXiv:1710.02298, eq. 7): the
        target distribution is G + γ^n z under Z_target(s_{t+n}, a*).

What this file changes against them: a time-limit truncation is not a termination. The
replay keeps the real final observation of a truncated episode and the target bootstraps from
it; only a termination collapses the target distribution onto the return G. The loss is
CleanRL's (cross-entropy of the projected target, mean over the batch).

Checkpoints (--checkpoint-interval, SIGTERM) hold the networks, the optimiser, the global step
(ε is a function of it), the random generators and the environments' states; with
--checkpoint-buffer also the replay buffer, and --resume then continues exactly. Without it the
resumed run starts with an empty buffer and refills it for --learning-starts steps (acting
ε-greedily with the trained network) before the updates resume.

Run:
    python cleanrl/c51.py --env-id CartPole-v1
    python cleanrl/c51.py --checkpoint-interval 100000   # then, if stopped:
    python cleanrl/c51.py --resume runs/CartPole-v1__c51__1__<time>
"""

import os
import time
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils.buffers import ReplayBuffer
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
from cleanrl_utils.numpy_net import NumpyMLP
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
    """if toggled, each checkpoint also holds the whole replay buffer (--buffer-size transitions: about 0.4 MB for 10000 CartPole-v1 ones; the size is printed at the start), and --resume continues exactly; without it the resumed run starts with an empty buffer and refills it for --learning-starts steps before the updates resume"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch (1 is fastest for these small networks)"""

    # Algorithm specific arguments
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
    """environment steps of data collection before training starts (ε-greedy from --start-e; also the refill after a --resume whose checkpoint has no replay buffer)"""
    train_frequency: int = 10
    """vector steps between gradient steps"""
    n_step: int = 1
    """n of the n-step return (1: one-step target)"""


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
        "n_step",
    )
    require(args.n_atoms >= 2, "--n-atoms", f"must be at least 2, got {args.n_atoms}")
    require(args.v_min < args.v_max, "--v-max", f"{args.v_max} is not above --v-min {args.v_min}")
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
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
    require(
        args.buffer_size // args.num_envs >= args.n_step + 2,
        "--buffer-size",
        f"{args.buffer_size} holds {args.buffer_size // args.num_envs} steps per env; "
        f"--n-step {args.n_step} needs at least {args.n_step + 2}",
    )
    require(
        args.total_timesteps > args.learning_starts,
        "--learning-starts",
        f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}",
    )
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, video_episodes=None):
    """A thunk creating env ``idx``; env 0 records videos into ``video_dir`` if asked.

    ``video_episodes(episode_index) -> bool`` picks the episodes to record; by default
    gymnasium's schedule (episodes 0, 1, 8, 27, ..., 1000, then every 1000th).
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        return env

    return thunk


class QNetwork(nn.Module):
    """MLP 120-84 ReLU giving, for each action, logits of the return distribution on the support.

    Args:
        obs_dim: size of the flat observation.
        num_actions: size of the Discrete action space.
        n_atoms: atoms of the support.
        v_min, v_max: ends of the support; atoms are evenly spaced between them.

    Attributes:
        atoms: the support z_1..z_N, ``[n_atoms]`` (a buffer, saved with the model).
    """

    def __init__(self, obs_dim: int, num_actions: int, n_atoms: int = 101, v_min: float = -100.0, v_max: float = 100.0):
        super().__init__()
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


def categorical_projection(
    next_probs: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    atoms: torch.Tensor,
) -> torch.Tensor:
    """Project the target distribution of G + γ^m Z(s', a*) onto the support (Bellemare et al. 2017, Algorithm 1).

    Each atom z_j of the next-state distribution moves to T z_j = G + γ^m z_j, clipped to
    [v_min, v_max]; its probability is split between the two neighbouring atoms of the support
    in proportion to closeness (all of it to one atom when T z_j falls exactly on it). Where the
    episode terminated (discount 0) every T z_j is G: the target is G itself, projected.

    Args:
        next_probs: p_j(s', a*), ``[B, n_atoms]``, rows summing to 1.
        returns: G, the (n-step) return, ``[B]``.
        discounts: γ^m, or 0 where the episode terminated, ``[B]``.
        atoms: the evenly spaced support z, ``[n_atoms]``.

    Returns:
        The projected target distribution m, ``[B, n_atoms]``, rows summing to 1.
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


def evaluate(
    model_path: str,
    eval_episodes: int,
    env_id: Optional[str] = None,
    capture_video: bool = False,
    video_dir: str = "videos",
    seed: Optional[int] = None,
    epsilon: float = 0.0,
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
        epsilon: probability of a random action (0: greedy).
        device: torch device for the network.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by c51.py.
    """
    content = load_model(model_path, "c51")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env([make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)])
    rng = np.random.default_rng(seed)
    a = content["args"]
    q_network = QNetwork(
        int(np.prod(envs.single_observation_space.shape)),
        int(envs.single_action_space.n),
        a["n_atoms"],
        a["v_min"],
        a["v_max"],
    ).to(device)
    q_network.load_state_dict(content["model"])

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        logits = q_network(torch.as_tensor(obs, dtype=torch.float32, device=device))
        actions = q_network.q_values(logits).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(envs.single_action_space.n, size=len(actions)), actions)

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "c51")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    observation_space, action_space = check_env(args.env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "c51.py", obs_ndim=1)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    N = args.num_envs
    try:  # n-step transitions in [buffer_size / N, N] rows
        rb = ReplayBuffer(
            args.buffer_size // N,
            N,
            observation_space,
            action_space,
            n_step=args.n_step,
            gamma=args.gamma,
            device=device,
            seed=args.seed,
        )
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)

    envs = make_vector_env(
        [make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(args.num_envs)],
        args.env_mode,
    )
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    num_actions = int(envs.single_action_space.n)
    q_network = QNetwork(obs_dim, num_actions, args.n_atoms, args.v_min, args.v_max).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size, fused=True)
    target_network = QNetwork(obs_dim, num_actions, args.n_atoms, args.v_min, args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())
    # Greedy actions come from a numpy copy of the network (with one env, torch's per-call
    # overhead would cost more than the environment step): Q = softmax(logits) · z per action.
    acting_network = NumpyMLP(q_network.network)
    atoms = q_network.atoms.cpu().numpy()

    def greedy_actions(obs: np.ndarray) -> np.ndarray:
        logits = acting_network(obs).reshape(len(obs), num_actions, args.n_atoms)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return ((probs @ atoms) / probs.sum(axis=-1)).argmax(axis=-1)

    rng = np.random.default_rng(args.seed)
    num_iterations = args.total_timesteps // N
    exploration_steps = args.exploration_fraction * args.total_timesteps

    global_step, updates_start = 0, args.learning_starts  # updates once global_step > updates_start
    if resumed is None:
        obs, _ = envs.reset(seed=args.seed)
    else:  # continue: networks, optimiser, step (ε follows from it), envs (replayed), generators
        q_network.load_state_dict(resumed["model"])
        target_network.load_state_dict(resumed["target_model"])
        optimizer.load_state_dict(resumed["optimizer"])
        acting_network.sync()
        rng = make_generator(resumed["action_rng"])
        global_step = resumed["global_step"]
        if "buffer" in resumed:  # exactly
            rb.load_state_dict(resumed["buffer"])
            updates_start = resumed["updates_start"]
        else:  # an empty buffer: refill it for --learning-starts steps before updating again
            rb.rng.bit_generator.state = resumed["replay_rng"]
            updates_start = global_step + args.learning_starts
            print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    if args.checkpoint_buffer:
        print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.1f} MiB) besides the networks and optimisers")
    checkpointer = Checkpointer(run.directory, "c51", args, args.checkpoint_interval, global_step, writer=writer)
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
        if greedy.any():
            actions[greedy] = greedy_actions(obs[greedy])

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "_episode" in infos:
            progress.episodes(log_episodes(writer, infos, global_step))
        # s' is the real next observation: where an episode ended, its final observation.
        rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
        obs = next_obs

        if global_step > updates_start and len(rb) > 0:
            if iteration % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    next_logits = target_network(data.next_obs)
                    next_actions = target_network.q_values(next_logits).argmax(dim=1)  # a* = argmax_a E[Z(s', a)]
                    next_probs = torch.softmax(next_logits[torch.arange(len(next_actions)), next_actions], dim=-1)
                    target = categorical_projection(next_probs, data.rewards, data.discounts, target_network.atoms)
                logits = q_network(data.obs)
                chosen = logits[torch.arange(len(data.actions)), data.actions]  # [B, n_atoms]
                loss = -(target * torch.log_softmax(chosen, dim=-1)).sum(dim=-1).mean()  # cross-entropy

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                acting_network.sync()

                if iteration % (100 * args.train_frequency) == 0:
                    with torch.no_grad():
                        q_taken = (torch.softmax(chosen, dim=-1) * q_network.atoms).sum(dim=-1)
                    writer.add_scalar("losses/loss", loss.item(), global_step)
                    writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)
                    writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    sps = int((global_step - start_step) / (time.time() - start_time))
                    writer.add_scalar("charts/SPS", sps, global_step)

            if iteration % args.target_network_frequency == 0:
                target_network.load_state_dict(q_network.state_dict())
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
        save_model(model_path, "c51", args, q_network.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

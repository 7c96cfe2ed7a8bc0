"""DDPG for continuous actions: a deterministic policy trained through a learnt Q-function.

Deep Deterministic Policy Gradient:
    Lillicrap et al. (2016), "Continuous control with deep reinforcement learning",
        arXiv:1509.02971, Algorithm 1: critic target y = r + γ Q'(s', μ'(s')), policy gradient
        ∇_θ E[Q(s, μ_θ(s))], soft target updates θ' ← τ θ + (1 - τ) θ';
    Silver et al. (2014), "Deterministic Policy Gradient Algorithms", ICML, for the gradient.

What this file changes against it, as CleanRL's ddpg_continuous.py does (mostly following
Fujimoto et al. 2018, arXiv:1802.09477, "Our DDPG"): Gaussian exploration noise N(0, 0.1²)
instead of the Ornstein-Uhlenbeck process, 256-256 networks with the action entering the
critic's first layer, no weight decay, no batch normalisation, uniformly random actions for
the first 25k steps; and, CleanRL's own choice (Our DDPG updates at every step), the policy and
targets updated every second critic update (`--policy-frequency 1` for the original). And,
against CleanRL:
the networks work in the policy's action range [-1, 1]^|A| (the replay stores u in [-1, 1];
the environment receives a = low + (u + 1)(high - low) / 2, `scale_action`), so the noise is
a fraction of each dimension's half-range, drawn independently per sample and per dimension,
and clipping to [-1, 1] is clipping to the environment's bounds; a time-limit truncation is
not a termination (the target bootstraps from the real final observation). The policy loss
reads the critic through detached weights, so its backward pass computes no critic weight
gradients it would throw away.

Checkpoints (`--checkpoint-interval`, and on SIGTERM) hold the actor, the critic and their
targets, both optimisers, the update count, the random generators and the environments'
states; `--resume` continues from one. With `--checkpoint-buffer` they hold the replay buffer
too and the resumed run is the uninterrupted one exactly. Without it the resumed run starts
with an empty buffer: it acts with its policy (and exploration noise) for `--learning-starts`
steps to refill it and only then updates again (the trained networks and optimisers carry on).

Run:
    python cleanrl/ddpg_continuous.py --env-id Hopper-v5          # needs the mujoco extra
    python cleanrl/ddpg_continuous.py --env-id Pendulum-v1 --total-timesteps 20000 --learning-starts 1000
"""

import math
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
    """if toggled, record videos of env 0's episodes into `{run_dir}/videos` (MuJoCo without a display: EGL)"""
    save_model: bool = False
    """if toggled, save the model to `{run_dir}/{exp_name}.cleanrl_model` and evaluate it"""
    eval_episodes: int = 10
    """episodes the saved model is evaluated for (with --save-model), with the deterministic policy"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the vector step that reaches it (0: only when the run receives SIGTERM)"""
    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the whole replay buffer (its size is printed at the start: about 72 MB per million Hopper transitions, as much memory again while one is written) and a resumed run continues exactly; without it a resumed run starts with an empty buffer and refills it for --learning-starts steps, acting with its policy, before updating again"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch"""
    compile: bool = False
    """if toggled, compile the updates with `torch.compile` (on a 2-core CPU measured no faster, after ~25 s of compiling)"""

    # Algorithm specific arguments
    env_id: str = "Hopper-v5"
    """gymnasium id of the environment (bounded Box actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 1000000
    """total environment steps, summed over envs"""
    num_envs: int = 1
    """number of parallel environments"""
    buffer_size: int = 1000000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 0.005
    """target smoothing coefficient: θ' ← τ θ + (1 - τ) θ' at every policy update"""
    batch_size: int = 256
    """transitions per gradient step"""
    learning_starts: int = 25000
    """environment steps of uniformly random actions before training starts"""
    gradient_steps: int = 1
    """critic updates per vector step (replay ratio = batch_size * gradient_steps / num_envs)"""
    learning_rate: float = 3e-4
    """Adam learning rate of the policy and the critics"""
    policy_frequency: int = 2
    """critic updates per policy (and target-network) update"""
    exploration_noise: float = 0.1
    """σ of the Gaussian exploration noise, as a fraction of each action dimension's half-range"""


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(
        args,
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "batch_size",
        "learning_rate",
        "gradient_steps",
        "policy_frequency",
        "torch_threads",
    )
    require(args.exploration_noise >= 0, "--exploration-noise", f"must be >= 0, got {args.exploration_noise}")
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    require(
        args.buffer_size >= args.batch_size,
        "--buffer-size",
        f"{args.buffer_size} is smaller than --batch-size {args.batch_size}",
    )
    require(
        args.buffer_size // args.num_envs >= 3,
        "--buffer-size",
        f"{args.buffer_size} holds {args.buffer_size // args.num_envs} steps per env; at least 3 are needed",
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


def scale_action(u: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The policy's action u in [-1, 1] to the environment's a = low + (u + 1) (high - low) / 2.

    Args:
        u: ``[B, |A|]`` (or ``[|A|]``) in [-1, 1].
        low, high: the environment's bounds, ``[|A|]``.

    Returns:
        Actions in [low, high], same shape as ``u``; -1 maps to low, 1 to high.
    """
    return low + (u + 1.0) * (0.5 * (high - low))


def unscale_action(a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The inverse of :func:`scale_action`: u = 2 (a - low) / (high - low) - 1, shapes as there."""
    return 2.0 * (a - low) / (high - low) - 1.0


class QEnsemble(nn.Module):
    """K independent critics Q_k(s, a), MLPs 256-256 ReLU, evaluated as one batched call (DDPG: K = 1).

    Layer l holds the weights of all K critics stacked, ``[K, in, out]``, and the biases
    ``[K, 1, out]``, each critic initialised as ``nn.Linear`` would be (U(±1/√in)). One
    ``baddbmm`` per layer replaces K separate matrix products.

    Args:
        obs_dim: size of the flat observation.
        action_dim: |A|.
        num_critics: K (2: the twin critics of TD3 and SAC).
        hidden: width of the two hidden layers.
    """

    def __init__(self, obs_dim: int, action_dim: int, num_critics: int = 2, hidden: int = 256):
        super().__init__()
        sizes = [obs_dim + action_dim, hidden, hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(num_critics, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_critics, 1, fan_out).uniform_(-bound, bound)))

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor, detach: bool = False, first: Optional[int] = None
    ) -> torch.Tensor:
        """Q-values ``[K, B]`` of observations ``[B, obs_dim]`` and actions ``[B, |A|]``.

        With ``detach``, the weights enter as constants: gradients reach ``actions`` (the
        policy loss) but no critic parameter. With ``first = k``, only critics 0..k-1 are
        evaluated and the result is ``[k, B]``.
        """
        k = len(self.weights[0]) if first is None else first
        x = torch.cat([obs, actions], dim=-1).expand(k, -1, -1)  # [k, B, in]
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            weight, bias = weight[:k], bias[:k]
            if detach:
                weight, bias = weight.detach(), bias.detach()
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = F.relu(x)
        return x.squeeze(-1)


class Actor(nn.Module):
    """Deterministic policy μ(s) in [-1, 1]^|A|: MLP 256-256 ReLU with a tanh output."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
            nn.Tanh(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations ``[B, obs_dim]`` -> actions ``[B, |A|]`` in [-1, 1]."""
        return self.net(obs)


def exploration_actions(actions: np.ndarray, noise: np.ndarray, sigma: float) -> np.ndarray:
    """u = clip(μ(s) + σ ε, -1, 1) with ε ~ N(0, I) drawn per sample and per dimension (Algorithm 1).

    Args:
        actions: μ(s) in [-1, 1], ``[B, |A|]``.
        noise: ε, standard normal, ``[B, |A|]`` (one independent draw per entry).
        sigma: σ as a fraction of the half-range (0.1 in the paper, whose bounds are ±1).

    Returns:
        ``[B, |A|]`` in [-1, 1], the environment's bounds after :func:`scale_action`.
    """
    return np.clip(actions + sigma * noise, -1.0, 1.0)


def ddpg_target(rewards: torch.Tensor, discounts: torch.Tensor, next_q: torch.Tensor) -> torch.Tensor:
    """y = r + γ' Q'(s', μ'(s')) (arXiv:1509.02971, Algorithm 1); ``next_q`` ``[1, B]``, the rest ``[B]``.

    ``discounts`` is γ, or 0 where the episode terminated (not where it was truncated).
    """
    return rewards + discounts * next_q[0]


def evaluate(
    model_path: str,
    eval_episodes: int,
    env_id: Optional[str] = None,
    capture_video: bool = False,
    video_dir: str = "videos",
    seed: Optional[int] = None,
    exploration_noise: float = 0.0,
    device: str = "cpu",
) -> np.ndarray:
    """Evaluate a policy saved by this script for ``eval_episodes`` episodes.

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole episodes.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation episodes into ``video_dir``.
        seed: seed of the evaluation env and noise; None means the training seed + 100000.
        exploration_noise: σ of Gaussian noise on the action, as a fraction of each dimension's
            half-range (0: the deterministic policy).
        device: torch device for the network.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by ddpg_continuous.py.
    """
    content = load_model(model_path, "ddpg_continuous")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env([make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)])
    low, high = envs.single_action_space.low, envs.single_action_space.high
    actor = Actor(int(np.prod(envs.single_observation_space.shape)), int(np.prod(envs.single_action_space.shape)))
    actor.load_state_dict(content["model"]["actor"])
    actor.to(device)
    rng = np.random.default_rng(seed)

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        actions = actor(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()
        return scale_action(exploration_actions(actions, rng.standard_normal(actions.shape), exploration_noise), low, high)

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "ddpg_continuous")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    observation_space, action_space = check_env(
        args.env_id, (gym.spaces.Box,), (gym.spaces.Box,), "ddpg_continuous.py", obs_ndim=1, bounded_actions=True
    )
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    N = args.num_envs
    # Replay of transitions in [buffer_size / N, N] rows: observations as float32 (MuJoCo's are
    # float64), actions in the policy's range [-1, 1].
    obs_box = gym.spaces.Box(
        observation_space.low.astype(np.float32),
        observation_space.high.astype(np.float32),
        observation_space.shape,
        np.float32,
    )
    unit_box = gym.spaces.Box(-1.0, 1.0, action_space.shape, np.float32)
    try:
        rb = ReplayBuffer(args.buffer_size // N, N, obs_box, unit_box, gamma=args.gamma, device=device, seed=args.seed)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)

    envs = make_vector_env([make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(N)], args.env_mode)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(envs.single_action_space.shape))
    low, high = envs.single_action_space.low.astype(np.float64), envs.single_action_space.high.astype(np.float64)

    actor = Actor(obs_dim, action_dim).to(device)
    actor_target = Actor(obs_dim, action_dim).to(device)
    actor_target.load_state_dict(actor.state_dict())
    qf = QEnsemble(obs_dim, action_dim, num_critics=1).to(device)
    qf_target = QEnsemble(obs_dim, action_dim, num_critics=1).to(device)
    qf_target.load_state_dict(qf.state_dict())
    fused = dict(fused=True) if device.type in ("cpu", "cuda") else {}
    q_optimizer = optim.Adam(qf.parameters(), lr=args.learning_rate, **fused)
    actor_optimizer = optim.Adam(actor.parameters(), lr=args.learning_rate, **fused)
    # Actions in the environment come from a numpy copy of the policy network: with one env,
    # torch's per-call overhead would cost more than the MLP itself.
    acting_network = NumpyMLP(actor.net)
    rng = np.random.default_rng(args.seed)

    def critic_update(data):
        """One gradient step of the critics on a batch; returns (Q-values [K, B], per-critic losses [K])."""
        with torch.no_grad():
            td_target = ddpg_target(data.rewards, data.discounts, qf_target(data.next_obs, actor_target(data.next_obs)))
        q = qf(data.obs, data.actions)
        qf_losses = (q - td_target).square().mean(dim=1)
        q_optimizer.zero_grad()
        qf_losses.sum().backward()
        q_optimizer.step()
        return q.detach(), qf_losses.detach()

    def actor_update(obs):
        """One policy step: ascend Q(s, μ(s)) (the critic's weights held constant); returns the loss."""
        actor_loss = -qf(obs, actor(obs), detach=True)[0].mean()
        actor_optimizer.zero_grad()
        actor_loss.backward()
        actor_optimizer.step()
        return actor_loss.detach()

    if args.compile:
        critic_update = torch.compile(critic_update)
        actor_update = torch.compile(actor_update)

    target_params = list(qf_target.parameters()) + list(actor_target.parameters())
    online_params = list(qf.parameters()) + list(actor.parameters())
    num_iterations = args.total_timesteps // N
    global_step, num_updates, first_iteration = 0, 0, 0
    updates_start = args.learning_starts  # the global step after which the networks are updated
    actor_loss = None  # the last policy loss, for the logs
    if args.checkpoint_buffer:
        print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.3g} MiB) besides the networks and optimisers")
    if resumed is None:
        obs, _ = envs.reset(seed=args.seed)
    else:  # continue: networks, optimisers, step, envs (replayed), random generators
        for module, key in (
            (actor, "actor"),
            (actor_target, "actor_target"),
            (qf, "qf"),
            (qf_target, "qf_target"),
            (q_optimizer, "q_optimizer"),
            (actor_optimizer, "actor_optimizer"),
        ):
            module.load_state_dict(resumed[key])
        acting_network.sync()
        actor_loss = resumed["actor_loss"]
        rng = make_generator(resumed["action_rng"])
        rb.rng = make_generator(resumed["replay_rng"])
        global_step, num_updates = resumed["global_step"], resumed["num_updates"]
        first_iteration = resumed["iteration"] + 1
        if "buffer" in resumed:
            rb.load_state_dict(resumed["buffer"])
        else:  # an empty buffer: refill it for --learning-starts steps before updating again
            updates_start = global_step + args.learning_starts
            print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    checkpointer = Checkpointer(run.directory, "ddpg_continuous", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.buffer_size % N:
        print(f"replay capacity {rb.capacity * N} transitions: --buffer-size rounded down to a multiple of --num-envs {N}")
    if num_iterations * N != args.total_timesteps:
        print(f"training {num_iterations * N} steps: --total-timesteps rounded down to a multiple of --num-envs {N}")
    progress = Progress(num_iterations * N, start_step=global_step)
    for iteration in range(first_iteration, num_iterations):
        global_step += N
        if global_step <= args.learning_starts:
            u = rng.uniform(-1.0, 1.0, (N, action_dim))
        else:
            u = exploration_actions(acting_network(obs), rng.standard_normal((N, action_dim)), args.exploration_noise)
        next_obs, rewards, terminations, truncations, infos = envs.step(scale_action(u, low, high))

        if "_episode" in infos:
            progress.episodes(log_episodes(writer, infos, global_step))
        # s' is the real next observation: where an episode ended, its final observation.
        rb.add(obs, u, rewards, terminations, truncations, real_next_obs(next_obs, infos))
        obs = next_obs

        if global_step > updates_start and len(rb) > 0:
            for _ in range(args.gradient_steps):
                data = rb.sample(args.batch_size)
                q, qf_losses = critic_update(data)
                num_updates += 1
                if num_updates % args.policy_frequency == 0:  # delayed policy and target updates
                    actor_loss = actor_update(data.obs)
                    acting_network.sync()
                    with torch.no_grad():  # θ' ← τ θ + (1 - τ) θ'
                        torch._foreach_lerp_(target_params, online_params, args.tau)

            if iteration % 100 == 0 and num_updates >= args.policy_frequency:
                writer.add_scalar("losses/qf1_values", q[0].mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf_losses[0].item(), global_step)
                writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("charts/learning_rate", q_optimizer.param_groups[0]["lr"], global_step)
                writer.add_scalar("charts/SPS", int((global_step - start_step) / (time.time() - start_time)), global_step)
        progress.update(global_step)
        if checkpointer.due(global_step):  # also on SIGTERM, which then ends the run (status 143)
            checkpointer.save(
                global_step,
                {
                    "iteration": iteration,
                    "num_updates": num_updates,
                    "actor": actor.state_dict(),
                    "actor_target": actor_target.state_dict(),
                    "qf": qf.state_dict(),
                    "qf_target": qf_target.state_dict(),
                    "q_optimizer": q_optimizer.state_dict(),
                    "actor_optimizer": actor_optimizer.state_dict(),
                    "actor_loss": actor_loss,
                    "action_rng": generator_state(rng),
                    "replay_rng": generator_state(rb.rng),
                    **({"buffer": rb.state_dict()} if args.checkpoint_buffer else {}),
                    "envs": envs_state(envs),
                    "wandb_id": run.wandb_id,
                },
            )
    progress.close()

    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "ddpg_continuous", args, {"actor": actor.state_dict(), "qf": qf.state_dict()})
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

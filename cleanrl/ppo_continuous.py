"""PPO for continuous (Box) actions, with observation and reward normalisation (MuJoCo).

Proximal Policy Optimization with the clipped surrogate objective:
    Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347 (eq. 7 clipped objective, eq. 9 total loss, eq. 11-12 GAE;
    the MuJoCo hyperparameters of Table 3: 2048 steps, 10 epochs, minibatch 64, lr 3e-4,
    γ 0.99, λ 0.95, ε 0.2),
with generalized advantage estimation:
    Schulman, Moritz, Levine, Jordan, Abbeel (2016), "High-Dimensional Continuous Control
    Using Generalized Advantage Estimation", arXiv:1506.02438,
and the implementation details of Huang et al. (2022), "The 37 Implementation Details of
Proximal Policy Optimization" (ICLR blog track), as CleanRL's ppo_continuous_action.py has
them: the 13 core details of ppo.py (orthogonal initialisation, Adam ε 1e-5, learning-rate
annealing, advantage normalisation per minibatch, clipped value loss, global gradient clip,
separate 64-64 tanh actor and critic) and the continuous-action details: a Gaussian policy
N(μ(s), σ²) with a state-independent log σ (a parameter, initialised to 0), actions clipped
to the bounds by the environment while the unclipped sample is what is stored and scored,
observations normalised by a running mean and variance and clipped to ±10, rewards divided
by the running standard deviation of a discounted return and clipped to ±10.

What this file changes against them:
  - a time-limit truncation is not a termination. At a truncation the advantage bootstraps
    from V(real final observation) (gymnasium's ``infos["final_obs"]``), normalised with the
    same statistics as the observations the agent sees at that step; only a termination
    stops bootstrapping;
  - the normalisation statistics live in the main process, on the vector environment (so
    ``--env-mode async`` keeps one set of statistics, not one per subprocess); they are
    saved with the model, and evaluation uses them frozen;
  - actions are sampled from a numpy copy of the mean network during the rollout, and the
    log-probabilities and values of the rollout are computed in one torch batch after it
    (the same numbers: the weights do not change within a rollout).

Run:
    python cleanrl/ppo_continuous.py --env-id Hopper-v5          # needs the mujoco extra
    python cleanrl/ppo_continuous.py --env-id InvertedPendulum-v5 --total-timesteps 150000
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
import torch.optim as optim
import tyro
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd

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
    """if toggled, save the model (with the observation statistics) to `{run_dir}/{exp_name}.cleanrl_model` and evaluate it"""
    eval_episodes: int = 10
    """episodes the saved model is evaluated for (with --save-model)"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the rollout that reaches it (0: only when the run receives SIGTERM)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch (1 is fastest for these small networks)"""

    # Algorithm specific arguments
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


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    require_positive(args, "learning_rate", "torch_threads", "obs_clip", "reward_clip")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 <= args.gae_lambda <= 1, "--gae-lambda", f"must be in [0, 1], got {args.gae_lambda}")
    require(args.clip_coef > 0, "--clip-coef", f"must be positive, got {args.clip_coef}")
    require(args.max_grad_norm > 0, "--max-grad-norm", f"must be positive, got {args.max_grad_norm}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    args.batch_size = args.num_envs * args.num_steps
    require(
        args.batch_size % args.num_minibatches == 0,
        "--num-minibatches",
        f"{args.num_minibatches} does not divide the batch of {args.batch_size} "
        f"(--num-envs {args.num_envs} x --num-steps {args.num_steps})",
    )
    args.minibatch_size = args.batch_size // args.num_minibatches
    require(
        not args.norm_adv or args.minibatch_size >= 2,
        "--num-minibatches",
        f"minibatches of {args.minibatch_size} sample are too small to normalise advantages; "
        "use fewer minibatches or --no-norm-adv",
    )
    require(
        args.total_timesteps >= args.batch_size,
        "--total-timesteps",
        f"{args.total_timesteps} is less than one rollout of {args.batch_size} steps",
    )
    args.num_iterations = args.total_timesteps // args.batch_size


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, video_episodes=None):
    """A thunk creating env ``idx``, which clips the actions it receives to its bounds.

    Env 0 records videos into ``video_dir`` if asked; ``video_episodes(episode_index) -> bool``
    picks the episodes to record (by default gymnasium's schedule: episodes 0, 1, 8, 27, ...,
    1000, then every 1000th). Normalisation is added on the vector env, in the main process
    (:class:`NormalizeObservation`, ``gymnasium.wrappers.vector.NormalizeReward``).
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.ClipAction(env)  # the Gaussian's sample, clipped to the bounds
        return env

    return thunk


class NormalizeObservation(gym.vector.VectorWrapper):
    """Normalise a vector env's observations by a running mean and variance, then clip them.

    o ↦ clip((o - mean) / sqrt(var + epsilon), -clip, clip), float32, with mean and var the
    running moments (``gymnasium.wrappers.utils.RunningMeanStd``, the parallel update of Chan
    et al. 1979) of every observation seen: at reset, at each step, and the final
    observations of the episodes that end (which the per-env wrappers of CleanRL also see).

    gymnasium's own ``gymnasium.wrappers.vector.NormalizeObservation`` refuses the same-step
    autoreset the scripts use (gymnasium 1.4 raises ``ValueError``), and would leave
    ``infos["final_obs"]`` raw. This one normalises ``infos["final_obs"]`` too, with the same
    statistics as the step's observations, so a truncated episode bootstraps from the value of
    its final observation as the agent sees it.

    Args:
        env: a vector env with flat Box observations and same-step autoreset.
        epsilon: added to the variance under the square root.
        clip: bound of the normalised observations.

    Attributes:
        obs_rms: the running statistics (``mean``, ``var`` float64 ``[obs_dim]``, ``count``).
        update_running_mean: False freezes the statistics (evaluation).
    """

    def __init__(self, env: gym.vector.VectorEnv, epsilon: float = 1e-8, clip: float = 10.0):
        super().__init__(env)
        shape = env.single_observation_space.shape
        self.single_observation_space = gym.spaces.Box(-clip, clip, shape=shape, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)
        self.obs_rms = RunningMeanStd(shape=shape)
        self.epsilon = epsilon
        self.clip = clip
        self.update_running_mean = True

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Raw observations ``[B, obs_dim]`` -> normalised and clipped, float32 (statistics unchanged)."""
        scaled = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        return self.normalize(obs), infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        ended = np.flatnonzero(infos["_final_obs"]) if "_final_obs" in infos else np.zeros(0, dtype=np.int64)
        if len(ended):
            finals = np.stack([np.asarray(infos["final_obs"][i]) for i in ended])
        if self.update_running_mean:
            if len(ended):
                self.obs_rms.update(finals)
            self.obs_rms.update(obs)
        if len(ended):
            final_obs = infos["final_obs"].copy()
            for i, final in zip(ended, self.normalize(finals)):
                final_obs[i] = final
            infos["final_obs"] = final_obs
        return self.normalize(obs), rewards, terminations, truncations, infos

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The statistics as tensors, keys ``obs_rms.{mean,var,count,epsilon,clip}`` (float64)."""
        return {
            "obs_rms.mean": torch.tensor(self.obs_rms.mean, dtype=torch.float64),
            "obs_rms.var": torch.tensor(self.obs_rms.var, dtype=torch.float64),
            "obs_rms.count": torch.tensor(float(self.obs_rms.count), dtype=torch.float64),
            "obs_rms.epsilon": torch.tensor(float(self.epsilon), dtype=torch.float64),
            "obs_rms.clip": torch.tensor(float(self.clip), dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Set the statistics from :meth:`state_dict`'s entries (other keys are ignored)."""
        self.obs_rms.mean = state["obs_rms.mean"].numpy().copy()
        self.obs_rms.var = state["obs_rms.var"].numpy().copy()
        self.obs_rms.count = float(state["obs_rms.count"])
        self.epsilon = float(state["obs_rms.epsilon"])
        self.clip = float(state["obs_rms.clip"])


def normalize_envs(envs: gym.vector.VectorEnv, gamma: float, obs_clip: float, reward_clip: float):
    """The training normalisation on a vector env (Huang et al. 2022, continuous-action details 6-9).

    Observations: :class:`NormalizeObservation`, clipped to ±``obs_clip``. Rewards: divided by
    the running standard deviation of the discounted return G ← γ G (1 - terminated) + r
    (``gymnasium.wrappers.vector.NormalizeReward``), then clipped to ±``reward_clip``. Episode
    statistics (``infos["episode"]``) stay those of the raw rewards, recorded inside.

    Returns:
        ``(wrapped envs, the NormalizeObservation layer)``.
    """
    obs_norm = NormalizeObservation(envs, clip=obs_clip)
    envs = gym.wrappers.vector.NormalizeReward(obs_norm, gamma=gamma)
    envs = gym.wrappers.vector.TransformReward(envs, lambda reward: np.clip(reward, -reward_clip, reward_clip))
    return envs, obs_norm


def normalization_state(envs: gym.vector.VectorEnv) -> dict[str, torch.Tensor]:
    """The running statistics of the normalisation layers of ``envs`` (from :func:`normalize_envs`), as tensors.

    Keys: :meth:`NormalizeObservation.state_dict`'s ``obs_rms.*``, and of
    ``gymnasium.wrappers.vector.NormalizeReward`` ``return_rms.{mean,var,count}`` (float64), the
    per-env discounted return it accumulates, ``accumulated_reward`` ``[num_envs]``, and its
    previous step's dones ``prev_dones`` ``[num_envs]``: all a checkpoint needs to continue the
    normalisation exactly.
    """
    obs_norm, reward_norm = _normalization_layers(envs)
    rms = reward_norm.return_rms
    return {
        **obs_norm.state_dict(),
        "return_rms.mean": torch.tensor(rms.mean, dtype=torch.float64),
        "return_rms.var": torch.tensor(rms.var, dtype=torch.float64),
        "return_rms.count": torch.tensor(float(rms.count), dtype=torch.float64),
        "accumulated_reward": torch.from_numpy(reward_norm.accumulated_reward.copy()),
        "prev_dones": torch.from_numpy(reward_norm._prev_dones.copy()),
    }


def load_normalization_state(envs: gym.vector.VectorEnv, state: dict[str, torch.Tensor]) -> None:
    """Set the normalisation layers of ``envs`` to :func:`normalization_state`'s ``state``."""
    obs_norm, reward_norm = _normalization_layers(envs)
    obs_norm.load_state_dict(state)
    reward_norm.return_rms.mean = state["return_rms.mean"].numpy().copy()
    reward_norm.return_rms.var = state["return_rms.var"].numpy().copy()
    reward_norm.return_rms.count = float(state["return_rms.count"])
    reward_norm.accumulated_reward[:] = state["accumulated_reward"].numpy()
    reward_norm._prev_dones[:] = state["prev_dones"].numpy()


def restore_normalized_envs(envs: gym.vector.VectorEnv, normalization: dict, envs_log: dict) -> np.ndarray:
    """Restore a freshly made ``envs`` (from :func:`normalize_envs`) to a checkpoint's state.

    The normalisation statistics come from ``normalization`` (:func:`normalization_state`), the
    sub-envs below the normalisation layers are replayed from ``envs_log``
    (:func:`cleanrl_utils.checkpoint.envs_state`), which leaves the statistics alone, and their raw
    observations (in the sub-envs' own dtype) are normalised with the restored statistics, as the
    observation layer did when it returned them before the checkpoint.

    Returns:
        The normalised observations ``[num_envs, obs_dim]`` float32 the run acts on next.
    """
    load_normalization_state(envs, normalization)
    obs_norm, _ = _normalization_layers(envs)
    return obs_norm.normalize(restore_envs(obs_norm.env, envs_log))


def _normalization_layers(envs: gym.vector.VectorEnv) -> tuple[NormalizeObservation, gym.wrappers.vector.NormalizeReward]:
    """The ``NormalizeObservation`` and ``NormalizeReward`` layers of ``envs``."""
    layers, layer = {}, envs
    while isinstance(layer, gym.vector.VectorWrapper):
        layers[type(layer)] = layer
        layer = layer.env
    return layers[NormalizeObservation], layers[gym.wrappers.vector.NormalizeReward]


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log N(actions; mean, diag(σ²)), summed over action dimensions.

    log π(a|s) = Σ_i [ -(a_i - μ_i)² / (2 σ_i²) - log σ_i - ½ log(2π) ]

    Args:
        mean: μ ``[B, A]``.
        log_std: log σ ``[B, A]`` or ``[1, A]`` (broadcast).
        actions: a ``[B, A]``, the unclipped samples.

    Returns:
        ``[B]`` log-densities in nats.
    """
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std).sum(-1) - 0.5 * math.log(2 * math.pi) * mean.shape[-1]


def gaussian_entropy(log_std: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Entropy of N(μ, diag(σ²)), Σ_i [½ + ½ log(2π) + log σ_i], for each of ``batch_size`` rows.

    Args:
        log_std: log σ ``[1, A]`` (state-independent) or ``[B, A]``.
        batch_size: B.

    Returns:
        ``[B]`` entropies in nats.
    """
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
    return entropy.expand(batch_size)


class Agent(nn.Module):
    """Separate actor (Gaussian mean) and critic MLPs, 64-64 tanh, and a state-independent log σ.

    Args:
        obs_dim: size of the flat observation.
        action_dim: size of the Box action space.
    """

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
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

    def get_log_prob_entropy_and_value(self, x: torch.Tensor, action: torch.Tensor):
        """Score ``action`` under π(·|x) = N(μ(x), σ²) and evaluate V.

        Args:
            x: observations ``[B, obs_dim]`` (normalised).
            action: unclipped actions ``[B, A]``.

        Returns:
            ``(log π(action|x) [B], entropy of π(·|x) [B], V(x) [B])``.
        """
        mean = self.actor_mean(x)
        log_prob = gaussian_log_prob(mean, self.actor_logstd, action)
        entropy = gaussian_entropy(self.actor_logstd, x.shape[0])
        return log_prob, entropy, self.critic(x).squeeze(-1)


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

    s'_t is the real next state of step t: s_{t+1} within an episode, the episode's final
    observation where it ended at t (not the reset one), and the observation after the
    rollout at t = T-1. So a time limit still bootstraps from V(final observation); only a
    termination stops bootstrapping, and done_t (termination or truncation) stops the
    recursion, since step t+1 belongs to the next episode.

    Args:
        rewards: r_t, float ``[T, N]`` (T steps of N envs; here the normalised rewards).
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
        critic's regression target (the λ-return).
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


def evaluate(
    model_path: str,
    eval_episodes: int,
    env_id: Optional[str] = None,
    capture_video: bool = False,
    video_dir: str = "videos",
    seed: Optional[int] = None,
    deterministic: bool = True,
    device: str = "cpu",
) -> np.ndarray:
    """Evaluate a model saved by this script for ``eval_episodes`` episodes.

    Observations are normalised with the statistics saved with the model, frozen (evaluation
    does not update them); rewards are not normalised (the returns are the environment's).

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole episodes.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation episodes into ``video_dir``.
        seed: seed of the evaluation env and of action sampling; None means the training
            seed + 100000, as the evaluation at the end of training uses.
        deterministic: act with the Gaussian's mean μ(s) (clipped to the bounds) instead of
            sampling from N(μ(s), σ²).
        device: torch device for the network.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by ppo_continuous.py.
    """
    content = load_model(model_path, "ppo_continuous")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    state = content["model"]
    envs = make_vector_env([make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)])
    envs = NormalizeObservation(envs)
    envs.load_state_dict(state)
    envs.update_running_mean = False  # frozen: the statistics of training
    generator = torch.Generator().manual_seed(seed)
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(np.prod(envs.single_action_space.shape)))
    agent.load_state_dict({key: value for key, value in state.items() if not key.startswith("obs_rms.")})
    agent.to(device).eval()

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        mean = agent.actor_mean(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu()
        if deterministic:
            return mean.numpy()
        return (mean + agent.actor_logstd.exp().cpu() * torch.randn(mean.shape, generator=generator)).numpy()

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "ppo_continuous")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    _, action_space = check_env(args.env_id, (gym.spaces.Box,), (gym.spaces.Box,), "ppo_continuous.py", obs_ndim=1)
    require(
        len(action_space.shape) == 1,
        "--env-id",
        f"{args.env_id} has actions of shape {action_space.shape}; ppo_continuous.py supports 1-dimensional actions only",
    )
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = make_vector_env(
        [make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(args.num_envs)],
        args.env_mode,
    )
    envs, obs_norm = normalize_envs(envs, args.gamma, args.obs_clip, args.reward_clip)
    obs_shape = envs.single_observation_space.shape
    action_shape = envs.single_action_space.shape
    agent = Agent(int(np.prod(obs_shape)), int(np.prod(action_shape))).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    # The rollout samples actions from a numpy copy of the mean network: with one env, torch's
    # per-call overhead would cost more than the simulator. Log-probabilities and values of the
    # whole rollout are then computed in torch in one batch (the weights do not change during
    # a rollout, so they are the same numbers).
    policy_mean = NumpyMLP(agent.actor_mean)
    action_std = agent.actor_logstd.detach().exp().cpu().numpy()  # σ [1, A]
    rng = np.random.default_rng(args.seed)

    # Rollout storage [num_steps, num_envs, ...], in numpy (a few numbers per step); the whole
    # batch goes to torch once per update.
    T, N = args.num_steps, args.num_envs
    obs = np.zeros((T, N) + obs_shape, dtype=np.float32)
    actions = np.zeros((T, N) + action_shape, dtype=np.float32)  # the unclipped samples
    rewards = np.zeros((T, N), dtype=np.float32)  # normalised and clipped
    terminations = np.zeros((T, N), dtype=np.float32)
    dones = np.zeros((T, N), dtype=np.float32)
    truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
    final_obs = np.zeros((T, N) + obs_shape, dtype=np.float32)  # its real final observation, normalised

    global_step, first_iteration = 0, 1
    if resumed is None:
        next_obs, _ = envs.reset(seed=args.seed)
    else:  # continue exactly: networks, optimiser, step, normalisation, envs (replayed), random generators
        agent.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        policy_mean.sync()
        action_std = agent.actor_logstd.detach().exp().cpu().numpy()
        rng = make_generator(resumed["action_rng"])
        global_step, first_iteration = resumed["global_step"], resumed["iteration"] + 1
        next_obs = restore_normalized_envs(envs, resumed["normalization"], resumed["envs"])
        set_rng_state(resumed["rng"])
    checkpointer = Checkpointer(run.directory, "ppo_continuous", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.num_iterations * args.batch_size != args.total_timesteps:
        print(
            f"training {args.num_iterations * args.batch_size} steps: --total-timesteps rounded down "
            f"to whole rollouts of {args.batch_size}"
        )
    progress = Progress(args.num_iterations * args.batch_size, start_step=global_step)

    for iteration in range(first_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        noise = rng.standard_normal((T, N) + action_shape, dtype=np.float32)
        for step in range(T):
            global_step += N
            obs[step] = next_obs
            # a ~ N(μ(s), σ²), sent unclipped: the env's ClipAction clips it to the bounds
            actions[step] = policy_mean(next_obs) + action_std * noise[step]

            next_obs, reward, termination, truncation, infos = envs.step(actions[step])
            rewards[step] = reward
            terminations[step] = termination
            dones[step] = termination | truncation
            # Truncated (not terminated) envs will bootstrap from their real final observation,
            # which NormalizeObservation has normalised with this step's statistics.
            truncated[step] = truncation & ~termination
            if truncated[step].any():
                final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
            if "_episode" in infos:
                progress.episodes(log_episodes(writer, infos, global_step))
        progress.update(global_step)

        # Flatten the batch, move it to the training device once, and evaluate it under the
        # policy that collected it: log π_old(a|s) and V(s), V(final obs), V(obs after rollout).
        b_obs = torch.from_numpy(obs.reshape((-1,) + obs_shape)).to(device)
        b_actions = torch.from_numpy(actions.reshape((-1,) + action_shape)).to(device)
        with torch.no_grad():
            b_logprobs, _, b_values = agent.get_log_prob_entropy_and_value(b_obs, b_actions)
            values = b_values.cpu().numpy().reshape(T, N)
            last_values = agent.get_value(torch.as_tensor(next_obs, dtype=torch.float32, device=device)).cpu().numpy()
            final_values = np.zeros((T, N), dtype=np.float32)
            if truncated.any():
                final_values[truncated] = agent.get_value(torch.from_numpy(final_obs[truncated]).to(device)).cpu().numpy()
        advantages, returns = compute_gae(
            rewards, values, last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
        )
        b_advantages = torch.from_numpy(advantages.reshape(-1)).to(device)
        b_returns = torch.from_numpy(returns.reshape(-1)).to(device)

        # Optimise the policy and value networks
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]

                newlogprob, entropy, newvalue = agent.get_log_prob_entropy_and_value(b_obs[mb_inds], b_actions[mb_inds])
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
                    v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl.item() > args.target_kl:
                break
        policy_mean.sync()
        action_std = agent.actor_logstd.detach().exp().cpu().numpy()

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/action_std", float(action_std.mean()), global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if checkpointer.due(global_step):  # also on SIGTERM, which then ends the run (status 143)
            checkpointer.save(
                global_step,
                {
                    "iteration": iteration,
                    "model": agent.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "action_rng": generator_state(rng),
                    "normalization": normalization_state(envs),
                    "envs": envs_state(envs),
                    "wandb_id": run.wandb_id,
                },
            )

    progress.close()
    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "ppo_continuous", args, {**agent.state_dict(), **obs_norm.state_dict()})
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

"""Synchronous data-parallel PPO: one process per rank, gradients averaged by DistributedDataParallel.

Proximal Policy Optimization with the clipped surrogate objective:
    Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347 (eq. 7 clipped objective, eq. 9 total loss, eq. 11-12 GAE),
with generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438), the Nature
CNN and Atari preprocessing of Mnih et al. (2015, Nature 518:529-533) as ppo_atari.py has
them, the 64-64 tanh MLP of ppo.py for vector observations, and the implementation details of
Huang et al. (2022), "The 37 Implementation Details of PPO" (ICLR blog track). Data-parallel
training as in PyTorch's DistributedDataParallel (Li et al. 2020, "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", arXiv:2006.15704) and synchronous
many-worker PPO (DD-PPO: Wijmans et al. 2020, arXiv:1911.00357, without its preemption).

What this file changes against ppo_atari.py / ppo.py: the run is split over ``world_size``
processes (ranks), launched by torchrun, on one machine or several. Each rank steps its own
``--num-envs`` envs for ``--num-steps`` steps (env seeds ``seed + 10000*rank + i``, from the
GLOBAL rank), so one update uses the global batch ``world_size x num_envs x num_steps``;
``--total-timesteps`` counts the steps of all ranks. Each rank splits its own batch into
``--num-minibatches`` minibatches; the ranks take one optimiser step together per minibatch,
with the gradients averaged over ranks, so a global minibatch is ``world_size x`` a local one.
Advantages are normalised over the global minibatch (all-reduced sums), so the update is the
one ppo.py makes on the global batch with minibatches of the global size, up to which samples
share a minibatch. Every decision that changes control flow (the ``--target-kl`` early stop,
SIGTERM/SIGINT, checkpoint timing) is all-reduced before it acts, so all ranks make the same
number of collective calls. Rank 0 alone writes the run directory (TensorBoard/W&B, videos,
checkpoints, the model); the episodes of every rank are gathered into its logs.

Observations: a 1-D Box (classic control, for tests) takes ppo.py's MLP; otherwise the env
must be an Atari NoFrameskip-v4 game (the default), with ppo_atari.py's wrappers and CNN. The
defaults are ppo_atari.py's; for CartPole pass ppo.py's (``--clip-coef 0.2 --num-envs 4``...).

Run:
    python cleanrl/ddp_ppo.py --env-id BreakoutNoFrameskip-v4                # 1 process
    torchrun --standalone --nproc-per-node 2 cleanrl/ddp_ppo.py --num-envs 4  # 2 ranks, 1 machine
    # CartPole at ppo.py's global batch (2 ranks x 2 envs x 128 steps) and hyperparameters:
    torchrun --standalone --nproc-per-node 2 cleanrl/ddp_ppo.py --env-id CartPole-v1 --num-envs 2 \
        --clip-coef 0.2 --total-timesteps 500000
    # 2 machines, 1 rank each (run on both; node ranks are assigned by the rendezvous):
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST0:29400 \\
        --rdzv-id myrun cleanrl/ddp_ppo.py
"""

import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import tyro
from stable_baselines3.common.atari_wrappers import (
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
)
from torch.nn.parallel import DistributedDataParallel

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    ale_py = None

from cleanrl_utils.checkpoint import (
    Checkpointer,
    envs_state,
    generator_state,
    make_generator,
    restore_envs,
    resume_args,
    rng_state,
    set_rng_state,
)
from cleanrl_utils.evals import run_episodes
from cleanrl_utils.numpy_net import NumpyMLP
from cleanrl_utils.run import (
    Progress,
    check_env,
    fail,
    load_model,
    make_vector_env,
    real_next_obs,
    require,
    require_positive,
    save_model,
    seed_everything,
    start_run,
)

MAX_EPISODE_FRAMES = 108_000
"""Atari frames per game before a time-limit truncation (27,000 agent steps at frame skip 4)."""
RANK_SEED_STRIDE = 10_000
"""Rank r seeds its envs with ``seed + RANK_SEED_STRIDE * r + i`` and its generators with ``seed + RANK_SEED_STRIDE * r``."""


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """name of this experiment, part of the run directory name"""
    seed: int = 1
    """seed of python, numpy, torch and the environments (rank r adds 10000*r)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, train on CUDA when it is available: rank on device cuda:LOCAL_RANK, NCCL backend (else gloo on CPU)"""
    track: bool = False
    """if toggled, mirror rank 0's logs to Weights & Biases"""
    wandb_project_name: str = "cleanRL"
    """Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """Weights & Biases entity (team); None means your default"""
    capture_video: bool = False
    """if toggled, record videos of rank 0's env 0 into `{run_dir}/videos`"""
    save_model: bool = False
    """if toggled, rank 0 saves the model to `{run_dir}/{exp_name}.cleanrl_model` and evaluates it"""
    eval_episodes: int = 10
    """episodes (Atari: whole games) the saved model is evaluated for (with --save-model)"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many global environment steps, at the end of the update that reaches it (0: only on SIGTERM/SIGINT)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory (readable by every rank), with the same world size"""
    torch_threads: int = 1
    """CPU threads for torch in each rank"""
    check_params_every: int = 0
    """every this many updates, check that all ranks hold identical parameters (logged as `charts/param_divergence`, max |p - p_rank0|); a difference stops the run with an error (0: never)"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id: an Atari NoFrameskip-v4 game, or an env with 1-D Box observations (classic control)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step each rank's envs in its process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 10000000
    """total environment (agent) steps, summed over the envs of all ranks"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """parallel environments PER RANK"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch into which EACH RANK splits its batch (a global minibatch is world_size local ones)"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages over each global minibatch (all ranks' samples)"""
    clip_coef: float = 0.1
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε]); also the value clip (ppo.py uses 0.2)"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the reference implementation"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip (of the rank-averaged gradient)"""
    target_kl: Optional[float] = None
    """stop the epochs of an update early when the approximate KL, averaged over ranks, exceeds this"""

    # filled in at run time
    world_size: tyro.conf.Suppress[int] = 1
    """number of ranks, from torchrun's WORLD_SIZE (computed; not a flag)"""
    local_batch_size: tyro.conf.Suppress[int] = 0
    """one rank's rollout, num_envs * num_steps samples (computed; not a flag)"""
    batch_size: tyro.conf.Suppress[int] = 0
    """global rollout, world_size * num_envs * num_steps samples (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """one rank's minibatch, local_batch_size // num_minibatches samples (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size updates (computed; not a flag)"""


def check_args(args: Args, world_size: int) -> None:
    """Fill in the computed fields for ``world_size`` ranks; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    require_positive(args, "learning_rate", "torch_threads")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(args.check_params_every >= 0, "--check-params-every", f"must be >= 0, got {args.check_params_every}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 <= args.gae_lambda <= 1, "--gae-lambda", f"must be in [0, 1], got {args.gae_lambda}")
    require(args.clip_coef > 0, "--clip-coef", f"must be positive, got {args.clip_coef}")
    require(args.max_grad_norm > 0, "--max-grad-norm", f"must be positive, got {args.max_grad_norm}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    args.world_size = world_size
    args.local_batch_size = args.num_envs * args.num_steps
    require(
        args.local_batch_size % args.num_minibatches == 0,
        "--num-minibatches",
        f"{args.num_minibatches} does not divide each rank's batch of {args.local_batch_size} "
        f"(--num-envs {args.num_envs} x --num-steps {args.num_steps})",
    )
    args.minibatch_size = args.local_batch_size // args.num_minibatches
    args.batch_size = world_size * args.local_batch_size
    require(
        not args.norm_adv or world_size * args.minibatch_size >= 2,
        "--num-minibatches",
        f"global minibatches of {world_size * args.minibatch_size} sample are too small to normalise advantages; "
        "use fewer minibatches or --no-norm-adv",
    )
    require(
        args.total_timesteps >= args.batch_size,
        "--total-timesteps",
        f"{args.total_timesteps} is less than one global rollout of {args.batch_size} steps "
        f"({world_size} rank(s) x --num-envs {args.num_envs} x --num-steps {args.num_steps})",
    )
    args.num_iterations = args.total_timesteps // args.batch_size


def check_environment(env_id: str) -> bool:
    """Stop with one line unless ``env_id`` has Discrete actions and either 1-D Box observations
    or is an ALE NoFrameskip game; returns True for an Atari game, False for vector observations."""
    observation_space, _ = check_env(env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "ddp_ppo.py")
    if len(observation_space.shape) == 1:
        return False
    with gym.make(env_id) as game:
        require(
            hasattr(game.unwrapped, "ale"),
            "--env-id",
            f"{env_id} has observations of shape {observation_space.shape}; ddp_ppo.py takes 1-D Box "
            "observations or ALE ids such as BreakoutNoFrameskip-v4",
        )
        require(
            game.spec.kwargs.get("frameskip", 1) == 1,
            "--env-id",
            f"{env_id} skips frames itself; take its NoFrameskip-v4 id (such as BreakoutNoFrameskip-v4)",
        )
    return True


def make_env(
    env_id: str, idx: int, atari: bool, capture_video: bool, video_dir: str, video_episodes=None, training: bool = True
):
    """A thunk creating env ``idx``; env 0 records videos into ``video_dir`` if asked.

    Classic control (``atari=False``): the plain env, observations float ``[obs_dim]``.
    Atari: ppo_atari.py's preprocessing (no-op starts, frame skip 4 with max-pooling, episodic
    life and sign-clipped rewards while ``training``, FIRE on reset, 84x84 grayscale, 4 frames
    zero-padded at episode start), observations uint8 ``[4, 84, 84]``, truncation after
    108,000 frames; episode statistics are game scores (recorded below episodic life).

    Args:
        video_episodes: ``video_episodes(episode_index) -> bool``; gymnasium's schedule when None.
        training: Atari only: episodic life and reward clipping (False: whole games, game scores).
    """

    def thunk():
        kwargs = dict(max_num_frames_per_episode=MAX_EPISODE_FRAMES) if atari else {}
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", **kwargs)
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id, **kwargs)
        if not atari:
            return env
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        if training:
            env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        if training:
            env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        return env

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def score_actions(logits: torch.Tensor, value: torch.Tensor, action: torch.Tensor):
    """Categorical policy terms: ``(log π(action|x) [B], entropy of π(·|x) [B], V(x) [B])`` from
    logits ``[B, A]``, values ``[B]`` and actions ``[B]`` (int64)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return log_prob, entropy, value


class MLPAgent(nn.Module):
    """ppo.py's separate actor and critic MLPs, 64-64 tanh, for observations ``[B, obs_dim]``.

    ``forward`` is what DistributedDataParallel wraps: the training pass.
    """

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
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

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Policy logits ``[B, num_actions]`` of observations ``[B, obs_dim]``."""
        return self.actor(x)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): observations ``[B, obs_dim]`` -> values ``[B]``."""
        return self.critic(x).squeeze(-1)

    def forward(self, x: torch.Tensor, action: torch.Tensor):
        """``(log π(action|x), entropy, V(x))``, each ``[B]``, for observations ``[B, obs_dim]``, actions ``[B]``."""
        return score_actions(self.actor(x), self.get_value(x), action)


class CNNAgent(nn.Module):
    """ppo_atari.py's Nature CNN trunk (Mnih et al. 2015) shared by a policy head and a value head.

    Inputs uint8 frames ``[B, 4, 84, 84]`` in 0-255 (divided by 255 here). ``forward`` is what
    DistributedDataParallel wraps: the training pass.
    """

    def __init__(self, num_actions: int):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features ``[B, 512]`` of frames ``[B, 4, 84, 84]`` (channels-last float inside)."""
        return self.trunk(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Policy logits ``[B, num_actions]`` of frames ``[B, 4, 84, 84]``."""
        return self.actor(self.hidden(x))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): frames ``[B, 4, 84, 84]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def forward(self, x: torch.Tensor, action: torch.Tensor):
        """``(log π(action|x), entropy, V(x))``, each ``[B]``, for frames ``[B, 4, 84, 84]``, actions ``[B]``."""
        hidden = self.hidden(x)
        return score_actions(self.actor(hidden), self.critic(hidden).squeeze(-1), action)


def make_agent(atari: bool, envs, device: torch.device) -> nn.Module:
    """The CNN (Atari, channels-last weights) or the MLP for ``envs``' spaces, on ``device``."""
    num_actions = int(envs.single_action_space.n)
    if atari:
        return CNNAgent(num_actions).to(device, memory_format=torch.channels_last)
    return MLPAgent(int(np.prod(envs.single_observation_space.shape)), num_actions).to(device)


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Actions ``[B]`` sampled from softmax(logits ``[B, A]``) by the Gumbel-max trick
    (argmax_a logits_a + g_a, g ~ Gumbel(0, 1); Maddison et al. 2014, arXiv:1411.0030, sec. 2)."""
    return np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1)


def compute_gae(rewards, values, last_values, final_values, terminations, dones, gamma: float, gae_lambda: float):
    """Generalized advantage estimation over one rank's rollout, correct at truncations (as ppo.py's).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}
    (Schulman et al. 2016, eq. 16), with s'_t the real next state: the final observation where
    an episode ended at t (read at truncations only), the observation after the rollout at T-1.

    Args:
        rewards, values, final_values, terminations, dones: float ``[T, N]``; terminations and
            dones are 1.0 where step t ended the episode by termination / by either.
        last_values: V of the observations after the rollout, ``[N]``.

    Returns:
        ``(advantages [T, N], returns [T, N])``, returns = advantages + values (the λ-return).
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


# ---- collective helpers: every rank calls each of them at the same point, the same number of times


def agree(*flags: bool, device: torch.device = torch.device("cpu")) -> list[bool]:
    """Each flag OR-ed over all ranks (an all-reduce MAX): the same decisions on every rank.

    A decision that changes control flow (stop, checkpoint, end the epochs) must be agreed
    before it acts; otherwise ranks run different numbers of collective calls and hang.
    """
    tensor = torch.tensor([int(flag) for flag in flags], dtype=torch.int32, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(value) for value in tensor.tolist()]


def global_normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` with the mean and the (unbiased, as ``torch.std``) standard
    deviation of the samples of ALL ranks: this rank's ``x`` ``[B]`` is its part of the global
    minibatch. One all-reduce of (sum, sum of squares, count), in float64.

    With one rank this is ppo.py's per-minibatch normalisation.
    """
    x64 = x.double()
    stats = torch.stack([x64.sum(), (x64 * x64).sum(), torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device)])
    dist.all_reduce(stats)
    total, squares, count = stats.tolist()
    mean = total / count
    var = max(squares - count * mean * mean, 0.0) / max(count - 1.0, 1.0)
    return (x - mean) / (var**0.5 + eps)


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar tensor over all ranks (an all-reduce SUM divided by the world size)."""
    value = value.detach().clone().reshape(1)
    dist.all_reduce(value)
    return value[0] / dist.get_world_size()


@torch.no_grad()
def param_divergence(module: nn.Module) -> float:
    """max over ranks and parameters of |p - p_rank0| (0.0: every rank holds rank 0's parameters).

    Rank 0's flattened parameters are broadcast; each rank compares; an all-reduce MAX gives
    every rank the same answer.
    """
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    divergence = (flat - reference).abs().max().reshape(1)
    dist.all_reduce(divergence, op=dist.ReduceOp.MAX)
    return float(divergence.item())


def gather_to_rank0(obj):
    """``[obj of rank 0, obj of rank 1, ...]`` on rank 0 (picklable objects), None on the others."""
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered


def evaluate(
    model_path: str,
    eval_episodes: int,
    env_id: Optional[str] = None,
    capture_video: bool = False,
    video_dir: str = "videos",
    seed: Optional[int] = None,
    deterministic: bool = False,
    device: str = "cpu",
) -> np.ndarray:
    """Evaluate a model saved by this script for ``eval_episodes`` episodes (Atari: whole games,
    game scores, no reward clipping) in one process, sampling from π unless ``deterministic``.

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        env_id: environment; the one the model was trained on when None.
        seed: env and sampling seed; None means the training seed + 100000.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by ddp_ppo.py.
    """
    content = load_model(model_path, "ddp_ppo")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    with gym.make(env_id) as probe:
        atari = len(probe.observation_space.shape) != 1
    envs = make_vector_env(
        [make_env(env_id, 0, atari, capture_video, video_dir, lambda episode: episode < eval_episodes, training=False)],
        episode_statistics=not atari,
    )
    rng = np.random.default_rng(seed)
    agent = make_agent(atari, envs, torch.device(device))
    agent.load_state_dict(content["model"])
    agent.eval()

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        logits = agent.logits(torch.as_tensor(obs, device=device)).cpu().numpy()
        return logits.argmax(-1) if deterministic else sample_categorical(logits, rng)

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    # torchrun sets RANK, WORLD_SIZE, LOCAL_RANK (and MASTER_ADDR/PORT); plain python is one rank
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # bad input stops every rank alike, before any work and before the ranks connect
    args, resumed = resume_args(args, "ddp_ppo")  # with --resume: the checkpoint's run and its arguments
    if resumed is not None and resumed["world_size"] != world_size:
        fail(
            "--resume",
            f"the checkpoint was written by {resumed['world_size']} ranks, this run has {world_size}; "
            "resume with the same world size (--nnodes x --nproc-per-node)",
        )
    check_args(args, world_size)
    atari = check_environment(args.env_id)

    use_cuda = args.cuda and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    backend = "nccl" if use_cuda else "gloo"
    if "MASTER_ADDR" in os.environ:  # launched by torchrun: its rendezvous gives the store
        dist.init_process_group(backend)
    else:  # plain `python ddp_ppo.py`: a group of one, no network
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)

    if rank == 0:
        run = start_run(args, resume=resumed)
        writer = run.writer
        print(
            f"{world_size} rank(s), backend {backend}; global batch {args.batch_size} = {world_size} x "
            f"{args.num_envs} envs x {args.num_steps} steps; global minibatch {world_size * args.minibatch_size}",
            flush=True,
        )
    seed_everything(args.seed + RANK_SEED_STRIDE * rank, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)

    video_dir = str(run.video_dir) if rank == 0 else ""
    envs = make_vector_env(  # Atari: each env records game scores below episodic life
        [make_env(args.env_id, i, atari, args.capture_video and rank == 0, video_dir) for i in range(args.num_envs)],
        args.env_mode,
        episode_statistics=not atari,
    )
    obs_shape = envs.single_observation_space.shape
    agent = make_agent(atari, envs, device)  # DDP below broadcasts rank 0's parameters to every rank
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    rng = np.random.default_rng(args.seed + RANK_SEED_STRIDE * rank)

    # Rollout storage [num_steps, num_envs, ...] in numpy; the batch goes to torch once per update.
    T, N = args.num_steps, args.num_envs
    obs = np.zeros((T, N) + obs_shape, dtype=np.uint8 if atari else np.float32)
    actions = np.zeros((T, N), dtype=np.int64)
    rewards = np.zeros((T, N), dtype=np.float32)
    terminations = np.zeros((T, N), dtype=np.float32)
    dones = np.zeros((T, N), dtype=np.float32)
    truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
    final_obs = np.zeros((T, N) + obs_shape, dtype=obs.dtype)  # its real final observation

    global_step, first_iteration = 0, 1
    if resumed is None:
        next_obs, _ = envs.reset(seed=args.seed + RANK_SEED_STRIDE * rank)  # env i: + i
    else:  # continue exactly: networks, optimiser, step, this rank's envs (replayed) and generators
        agent.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        mine = resumed["ranks"][rank]
        rng = make_generator(mine["action_rng"])
        global_step, first_iteration = resumed["global_step"], resumed["iteration"] + 1
        next_obs = restore_envs(envs, mine["envs"])
        set_rng_state(mine["rng"])
    ddp_agent = DistributedDataParallel(agent, device_ids=[local_rank] if use_cuda else None)

    if atari:  # act with the torch network

        @torch.no_grad()
        def policy(observation: np.ndarray) -> np.ndarray:
            return agent.logits(torch.from_numpy(observation).to(device)).cpu().numpy()
    else:  # a numpy copy of the actor: with a few envs, torch's per-call overhead would dominate
        policy = NumpyMLP(agent.actor)

    # SIGTERM (a scheduler, torchrun passing on Ctrl-C) or SIGINT on ANY rank: all ranks stop at the
    # end of the same update, after rank 0 has written a checkpoint; the processes exit with 143.
    stop_requested = False

    def request_stop(signum, frame):
        global stop_requested
        stop_requested = True

    interval = args.checkpoint_interval
    next_checkpoint = (global_step // interval + 1) * interval if interval > 0 else None
    if rank == 0:
        checkpointer = Checkpointer(run.directory, "ddp_ppo", args, interval, global_step, writer=writer)
        progress = Progress(args.num_iterations * args.batch_size, start_step=global_step)
    signal.signal(signal.SIGTERM, request_stop)  # after the Checkpointer, which installs its own
    signal.signal(signal.SIGINT, request_stop)
    start_step, start_time = global_step, time.time()
    if rank == 0 and args.num_iterations * args.batch_size != args.total_timesteps:
        print(
            f"training {args.num_iterations * args.batch_size} steps: --total-timesteps rounded down "
            f"to whole global rollouts of {args.batch_size}"
        )
    episode_counts = np.zeros(world_size, dtype=np.int64)  # rank 0: episodes logged per rank
    if resumed is not None:
        episode_counts = resumed["episode_counts"].numpy().copy()

    for iteration in range(first_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        episodes = []  # (global step, return, length) of this rank's episodes that ended in the rollout
        for step in range(T):
            global_step += N * world_size
            obs[step] = next_obs
            actions[step] = sample_categorical(policy(next_obs), rng)
            next_obs, reward, termination, truncation, infos = envs.step(actions[step])
            rewards[step] = reward
            terminations[step] = termination
            dones[step] = termination | truncation
            truncated[step] = truncation & ~termination
            if truncated[step].any():
                final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
            if "_episode" in infos:
                for i in infos["_episode"].nonzero()[0]:
                    episodes.append((global_step, float(infos["episode"]["r"][i]), int(infos["episode"]["l"][i])))

        # rank 0 logs the episodes of every rank
        all_episodes = gather_to_rank0(episodes)
        if rank == 0:
            for source, ranked in enumerate(all_episodes):
                episode_counts[source] += len(ranked)
            for episode_step, episodic_return, episodic_length in sorted(e for ranked in all_episodes for e in ranked):
                writer.add_scalar("charts/episodic_return", episodic_return, episode_step)
                writer.add_scalar("charts/episodic_length", episodic_length, episode_step)
                progress.episodes([episodic_return])
            for source, count in enumerate(episode_counts):
                writer.add_scalar(f"ranks/episodes_rank{source}", count, global_step)
            progress.update(global_step)

        # Evaluate this rank's batch under the policy that collected it: log π_old, V, V(final obs).
        b_obs = torch.from_numpy(obs.reshape((-1,) + obs_shape)).to(device)
        if atari:  # channels-last once per update: each minibatch's conversion to float is then elementwise
            b_obs = b_obs.contiguous(memory_format=torch.channels_last)
        b_actions = torch.from_numpy(actions.reshape(-1)).to(device)
        with torch.no_grad():
            b_logprobs, _, b_values = agent(b_obs, b_actions)
            values = b_values.cpu().numpy().reshape(T, N)
            last_values = agent.get_value(torch.as_tensor(next_obs, dtype=b_obs.dtype, device=device)).cpu().numpy()
            final_values = np.zeros((T, N), dtype=np.float32)
            if truncated.any():
                final_values[truncated] = agent.get_value(torch.from_numpy(final_obs[truncated]).to(device)).cpu().numpy()
        advantages, returns = compute_gae(
            rewards, values, last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
        )
        b_advantages = torch.from_numpy(advantages.reshape(-1)).to(device)
        b_returns = torch.from_numpy(returns.reshape(-1)).to(device)

        # Optimise: one optimiser step per minibatch on every rank, with gradients averaged by DDP
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.local_batch_size, device=device)
            for start in range(0, args.local_batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                newlogprob, entropy, newvalue = ddp_agent(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:  # over the global minibatch: the samples of all ranks
                    mb_advantages = global_normalize(mb_advantages)

                # Policy loss (clipped surrogate, eq. 7)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

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
                loss.backward()  # DDP all-reduces (averages) the gradients over the ranks here
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            # the early stop acts on the KL averaged over ranks, and on a decision all ranks share
            approx_kl = mean_over_ranks(approx_kl)
            if args.target_kl is not None and agree(approx_kl.item() > args.target_kl, device=device)[0]:
                break
        if not atari:
            policy.sync()

        if args.check_params_every and (iteration % args.check_params_every == 0 or iteration == args.num_iterations):
            divergence = param_divergence(agent)  # the same value on every rank
            if rank == 0:
                writer.add_scalar("charts/param_divergence", divergence, global_step)
            if divergence != 0.0:
                raise RuntimeError(
                    f"rank {rank}: parameters differ across ranks after update {iteration} "
                    f"(max |p - p_rank0| = {divergence:g})"
                )

        if rank == 0:
            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
            sps = int((global_step - start_step) / (time.time() - start_time))
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)  # mean over ranks
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("losses/epochs", epoch + 1, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)

        # checkpoint (interval reached, or a stop requested on any rank): agreed, then rank 0 writes
        # the shared state and every rank's generators and envs
        stop, due = agree(stop_requested, next_checkpoint is not None and global_step >= next_checkpoint, device=device)
        if stop or due:
            ranks_state = gather_to_rank0({"action_rng": generator_state(rng), "envs": envs_state(envs), "rng": rng_state()})
            if rank == 0:
                path = checkpointer.save(
                    global_step,
                    {
                        "iteration": iteration,
                        "model": agent.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "world_size": world_size,
                        "ranks": ranks_state,
                        "episode_counts": torch.from_numpy(episode_counts),
                        "wandb_id": run.wandb_id,
                    },
                )
            while next_checkpoint is not None and next_checkpoint <= global_step:
                next_checkpoint += interval
            if stop:
                dist.barrier()  # the checkpoint is on disk before any rank exits
                if rank == 0:
                    print(
                        f"stop requested: checkpoint written to {path}; resume with --resume "
                        f"{path.parent.parent} (the same world size)",
                        flush=True,
                    )
                    run.close()
                envs.close()
                del ddp_agent
                dist.destroy_process_group()
                sys.exit(128 + signal.SIGTERM)

    envs.close()
    # every rank leaves the group together, after dropping DDP's reducer (which holds the group and
    # its last gloo work): gloo objects left to interpreter shutdown can abort the process
    # ("terminate called without an active exception", seen under load in 1 of 4 runs)
    del ddp_agent
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        progress.close()
        if args.save_model:
            model_path = run.directory / f"{args.exp_name}.cleanrl_model"
            save_model(model_path, "ddp_ppo", args, agent.state_dict())
            print(f"model saved to {model_path}")
            episodic_returns = evaluate(
                str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
            )
            writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
            writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
            print(
                f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}"
            )
        run.close()

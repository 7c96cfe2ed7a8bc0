"""Synchronous data-parallel PPO: one process per rank, gradients averaged by DistributedDataParallel.

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347, with
GAE (arXiv:1506.02438), the Nature CNN (Mnih et al. 2015) and Huang et al.'s (2022) details as
ppo_atari.py / ppo.py have them; Li et al. (2020), "PyTorch Distributed", arXiv:2006.15704;
Wijmans et al. (2020), DD-PPO, arXiv:1911.00357 (without its preemption).

What this file changes against ppo_atari.py / ppo.py: torchrun's ranks each step ``--num-envs``
envs (CleanRL's ``--local-num-envs``); one update uses the global batch ``world_size x num_envs x
num_steps``, gradients averaged by DDP, advantages normalised over the global minibatch, every
control-flow decision all-reduced. Rank 0 alone writes the run directory. Atari NoFrameskip-v4
ids take ppo_atari.py's CNN, 1-D Box observations ppo.py's MLP. Details: docs/scripts/ddp_ppo.md.

Run:
    python cleanrl/ddp_ppo.py --env-id BreakoutNoFrameskip-v4                # 1 process
    torchrun --standalone --nproc-per-node 2 cleanrl/ddp_ppo.py --num-envs 4  # 2 ranks, 1 machine
    # CartPole at ppo.py's global batch (2 ranks x 2 envs x 128 steps) and hyperparameters:
    torchrun --standalone --nproc-per-node 2 cleanrl/ddp_ppo.py --env-id CartPole-v1 --num-envs 2 \\
        --clip-coef 0.2 --total-timesteps 500000
    # 2 machines, 1 rank each (run on both; node ranks are assigned by the rendezvous):
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST0:29400 \\
        --rdzv-id myrun cleanrl/ddp_ppo.py
"""

import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated, Iterator, Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import tyro
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing
from torch.nn.parallel import DistributedDataParallel

from cleanrl_utils.checkpoint import rng_state
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import Fault, check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.resume import restore_envs, set_rng_state
from cleanrl_utils.run import seed_everything, start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, envs_state, real_next_obs

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    pass

MAX_EPISODE_FRAMES = 108_000
"""Atari frames per game before a time-limit truncation (27,000 agent steps at frame skip 4)."""
RANK_SEED_STRIDE = 10_000
"""Rank r seeds its envs with ``seed + RANK_SEED_STRIDE * r + i`` and its generators with ``seed + RANK_SEED_STRIDE * r``."""


@dataclass
class Args(RunArgs):
    """Data-parallel PPO's hyperparameters; the flags every script takes (--seed, --track, --resume ...) come from RunArgs."""

    check_params_every: int = 0
    """every this many updates, check that all ranks hold identical parameters (0: never)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id: an Atari NoFrameskip-v4 game, or an env with 1-D Box observations (classic control)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step each rank's envs in its process (sync) or in one subprocess each (async)"""
    collective_timeout: float = 600.0
    """seconds a rank waits in a collective for the other ranks before it stops (another rank died or hung)"""
    backend: Literal["auto", "gloo", "nccl", "mpi"] = "auto"
    """torch.distributed backend; auto: nccl on CUDA, gloo on CPU"""
    device_ids: Annotated[list[int], tyro.conf.arg(help_behavior_hint="(default: local rank)")] = field(default_factory=list)
    """the GPU of each local rank, one id per rank on this machine"""
    total_timesteps: int = 10000000
    """total environment (agent) steps, summed over the envs of all ranks"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: Annotated[int, tyro.conf.arg(aliases=("--local-num-envs",))] = 8
    """parallel environments PER RANK (--local-num-envs: CleanRL's name)"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch into which EACH RANK splits its batch"""
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


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` is an ALE game (ppo_atari.py's preprocessing and CNN); else vector observations (ppo.py's MLP)."""
    spec = gym.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("ale_py")


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with episode statistics and (``training``) a replay log; Atari: ppo_atari.py's
    preprocessing (episodic life and sign-clipped rewards while ``training``); env 0 records videos if asked."""

    def thunk():
        atari = is_atari(env_id)
        kwargs = dict(max_num_frames_per_episode=MAX_EPISODE_FRAMES) if atari else {}
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", **kwargs)
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id, **kwargs)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        if atari:
            env = atari_wrappers.NoopResetEnv(env, noop_max=30)
            env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
            if training:
                env = atari_wrappers.EpisodicLifeEnv(env)
            if "FIRE" in env.unwrapped.get_action_meanings():
                env = atari_wrappers.FireResetEnv(env)
            if training:
                env = atari_wrappers.ClipRewardEnv(env)
            env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
            env = gym.wrappers.ReshapeObservation(env, (84, 84))
            env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def categorical(logits: torch.Tensor, action: Optional[torch.Tensor]):
    """``(action, log π(action|x), entropy)``, each ``[B]``, of logits ``[B, A]``; ``action`` sampled when None."""
    log_probs = torch.log_softmax(logits, dim=-1)
    if action is None:
        action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1), entropy


class MLPAgent(nn.Module):
    """ppo.py's separate actor and critic MLPs, 64-64 tanh, for observations ``[B, obs_dim]``."""

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

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action, log π(action|x), entropy, V(x))``, each ``[B]``; ``action`` sampled from π(·|x) when None."""
        return *categorical(self.actor(x), action), self.get_value(x)

    forward = get_action_and_value  # what DistributedDataParallel wraps: the training pass


class CNNAgent(nn.Module):
    """ppo_atari.py's Nature CNN trunk (Mnih et al. 2015) shared by a policy and a value head; frames uint8 0-255."""

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

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action, log π(action|x), entropy, V(x))``, each ``[B]``; ``action`` sampled from π(·|x) when None."""
        hidden = self.hidden(x)
        return *categorical(self.actor(hidden), action), self.critic(hidden).squeeze(-1)

    forward = get_action_and_value  # what DistributedDataParallel wraps: the training pass


def make_agent(envs: gym.vector.VectorEnv) -> nn.Module:
    """The CNN (Atari frames; channels-last weights) or the MLP (vector observations) for ``envs``' spaces."""
    num_actions = int(envs.single_action_space.n)
    if len(envs.single_observation_space.shape) == 3:
        return CNNAgent(num_actions).to(memory_format=torch.channels_last)
    return MLPAgent(int(np.prod(envs.single_observation_space.shape)), num_actions)


def compute_gae(rewards, values, last_values, final_values, terminations, dones, gamma: float, gae_lambda: float):
    """Generalized advantage estimation over one rank's rollout, correct at truncations: ppo.py's ``compute_gae``.

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}, s'_t the real next
    state. Arrays ``[T, N]`` (``last_values [N]``); returns ``(advantages, returns = advantages + values)``.
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


def agree(*values: int, device: torch.device = torch.device("cpu")) -> list[int]:
    """Each value's maximum over all ranks (all-reduce MAX): a control-flow decision every rank makes alike."""
    tensor = torch.tensor([int(value) for value in values], dtype=torch.int32, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def global_normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` over the samples of ALL ranks (``x`` ``[B]``: this rank's part of the global
    minibatch; unbiased std as ``torch.std``): one all-reduce of (sum, sum of squares, count) in float64."""
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
    """max over ranks and parameters of |p - p_rank0| (0.0: every rank holds rank 0's parameters), on every rank."""
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    divergence = (flat - reference).abs().max().reshape(1)
    dist.all_reduce(divergence, op=dist.ReduceOp.MAX)
    return float(divergence.item())


def gather(obj) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (picklable objects)."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def leave_group(envs: gym.vector.VectorEnv) -> None:
    """Close this rank's envs and leave the process group together with every rank (a barrier first)."""
    envs.close()
    dist.barrier()
    dist.destroy_process_group()


class RankState:
    """This rank's envs and global random generators in a checkpoint (the networks, the optimiser and the counts
    are the same on every rank): :meth:`state_dict` gathers every rank's into rank 0's file, and
    :meth:`load_state_dict` gives each rank its own back. An entry of the checkpoint state (``ranks=RankState(envs)``).

    Attributes:
        obs: after :meth:`load_state_dict`: the observation ``[num_envs, ...]`` the restored envs act on next.
    """

    def __init__(self, envs: gym.vector.VectorEnv):
        self.envs, self.obs = envs, None

    def state_dict(self) -> list[dict] | None:
        """``[{"state": {"envs": replay logs}, "rng": generators} of rank 0, of rank 1, ...]`` on rank 0, None on
        the others. A collective (``gather_object``): every rank calls it at the same point."""
        mine = {"state": {"envs": envs_state(self.envs)}, "rng": rng_state()}
        gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        return gathered

    def load_state_dict(self, saved: list[dict]) -> None:
        """Replay this rank's envs into their saved state and set its global generators.

        Raises:
            ValueError: ``saved`` was written by another number of ranks, or its envs do not fit.
        """
        if len(saved) != dist.get_world_size():
            raise ValueError(f"the checkpoint was written by {len(saved)} ranks, this run has {dist.get_world_size()}")
        mine = saved[dist.get_rank()]
        self.obs = restore_envs(self.envs, mine["state"]["envs"])
        set_rng_state(mine["rng"])


@contextmanager
def rank_faults(rank: int) -> Iterator[None]:
    """Within the block, a collective that fails because another rank died, or did not answer within
    ``--collective-timeout``, is a :class:`~cleanrl_utils.faults.Fault`, which ``run.stop_on_fault`` says in one line:
    a ``RuntimeError`` raised in ``torch.distributed`` (named by its function), or one of gloo or NCCL (DDP's
    gradient all-reduce in ``backward``). A rank other than 0 names itself in a fault's line (``ddp_ppo.py: rank 1:
    ...``). Other errors pass unchanged."""
    try:
        yield
    except RuntimeError as error:
        what = str(error) if isinstance(error, Fault) else failed_collective(error)
        if what is None:
            raise
        raise Fault(f"rank {rank}: {what}" if rank else what) from None


def failed_collective(error: RuntimeError) -> str | None:
    """``"all_reduce failed: another rank died or hung (<the error's first line>)"`` for an error of a collective,
    else None (see :func:`rank_faults`)."""
    name, in_backward, frame = None, False, error.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        name = code.co_name if code.co_filename.endswith("distributed_c10d.py") else name  # the innermost
        in_backward = in_backward or code.co_name == "backward"
        frame = frame.tb_next
    if name is None and any(word in str(error) for word in ("gloo", "NCCL", "ProcessGroup")):
        name = "the gradient all-reduce" if in_backward else "a collective"
    if name is None:
        return None
    message = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    return f"{name} failed: another rank died or hung ({message})"


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields for torchrun's world size; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm collective_timeout")
    timeout = args.collective_timeout
    require(timeout <= 1e7, "--collective-timeout", f"must be at most 1e7 seconds, got {timeout}")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(args.check_params_every >= 0, "--check-params-every", f"must be >= 0, got {args.check_params_every}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's; plain python is one rank
    # --backend and --device-ids (CleanRL's flags): nccl and GPU ids need CUDA; one GPU per rank on this machine
    cuda, ids, local_ranks = args.cuda and torch.cuda.is_available(), args.device_ids, os.environ.get("LOCAL_WORLD_SIZE", "1")
    require(args.backend != "nccl" or cuda, "--backend", "nccl needs CUDA (--cuda and a GPU); use gloo or auto")
    require(args.backend != "mpi" or dist.is_mpi_available(), "--backend", "mpi: this torch was built without MPI")
    one_each = f"{len(ids)} ids for {local_ranks} rank(s) on this machine; give one per rank (--nproc-per-node)"
    require(not ids or len(ids) == int(local_ranks), "--device-ids", one_each)
    require(not ids or cuda, "--device-ids", "needs CUDA (--cuda and a GPU)")
    gpus = torch.cuda.device_count() if cuda else 0
    require(all(0 <= i < gpus for i in ids), "--device-ids", f"{ids}: this machine has GPUs 0 to {gpus - 1}")
    two = f"{ids} puts two ranks on one GPU, which nccl refuses; use --backend gloo"
    require(args.backend == "gloo" or len(set(ids)) == len(ids), "--device-ids", two)
    wrong_size = f"the checkpoint was written by {args.world_size} ranks, this run has {world_size}"
    require(not args.resume or args.world_size == world_size, "--resume", f"{wrong_size}; resume with the same world size")
    args.world_size, args.local_batch_size = world_size, args.num_envs * args.num_steps
    args.minibatch_size, args.batch_size = args.local_batch_size // args.num_minibatches, world_size * args.local_batch_size
    args.num_iterations = args.total_timesteps // args.batch_size
    batch = f"{args.num_minibatches} does not divide each rank's batch of {args.local_batch_size} (--num-envs x --num-steps)"
    require(args.local_batch_size % args.num_minibatches == 0, "--num-minibatches", batch)
    small = "too small to normalise advantages"
    require(not args.norm_adv or world_size * args.minibatch_size >= 2, "--num-minibatches", f"global minibatches {small}")
    ranks = f"{world_size} ranks x --num-envs {args.num_envs} x --num-steps {args.num_steps}"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one global rollout of {args.batch_size} steps ({ranks})")
    observation_space, _ = check_env(args, gym.spaces.Discrete, gym.spaces.Box)
    if len(observation_space.shape) != 1:
        why = f"{args.env_id} has observations of shape {observation_space.shape}; ddp_ppo takes 1-D Box observations"
        require(is_atari(args.env_id), "--env-id", f"{why} or ALE ids such as BreakoutNoFrameskip-v4")
        frameskip = gym.spec(args.env_id).kwargs.get("frameskip", 1)
        require(frameskip == 1, "--env-id", f"{args.env_id} skips frames itself; take its NoFrameskip-v4 id")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a saved model, in one process: actions sampled from π, or (``deterministic``)
    the most probable. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    agent = evaluation.load(make_agent(evaluation.envs), "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits = agent.logits(torch.as_tensor(obs, device=evaluation.device))
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops every rank alike, before the ranks connect), the
    # process group, the run (rank 0 records it; the other ranks' Run writes nothing), seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    # torchrun sets RANK, LOCAL_RANK (and MASTER_ADDR/PORT); plain python is one rank
    rank, local_rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), args.world_size
    use_cuda = args.cuda and torch.cuda.is_available()
    gpu = args.device_ids[local_rank] if args.device_ids else local_rank
    if use_cuda:
        torch.cuda.set_device(gpu)
    backend = ("nccl" if use_cuda else "gloo") if args.backend == "auto" else args.backend
    # a collective that waits longer than --collective-timeout raises (one line): a dead or hung peer
    timeout = timedelta(seconds=args.collective_timeout)
    if "MASTER_ADDR" in os.environ:  # launched by torchrun: its rendezvous gives the store
        dist.init_process_group(backend, timeout=timeout)
    else:  # plain `python ddp_ppo.py`: a group of one, no network
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    run = start_run(args, resumed, record=rank == 0)
    writer, device = run.writer, torch.device(f"cuda:{gpu}" if use_cuda else "cpu")
    seed_everything(args.seed + RANK_SEED_STRIDE * rank, args.torch_deterministic)
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a scheduler (or torchrun passing it on), a closed terminal
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the ranks agree, checkpoint, exit 128 + signum
            signal.signal(signum, run.stop)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # Ctrl-C, twice (torchrun passes it on): as SIGTERM
        signal.signal(signal.SIGINT, lambda *_: run.stop(signal.SIGTERM))
    if rank == 0:  # the global batch and minibatch; the steps of whole global rollouts
        batches = f"global batch {args.batch_size} = {world_size} x {args.num_envs} envs x {args.num_steps} steps"
        print(f"{world_size} rank(s), backend {dist.get_backend()}; {batches}; minibatch {world_size * args.minibatch_size}")
        if args.num_iterations * args.batch_size != args.total_timesteps:
            print(f"training {args.num_iterations * args.batch_size} steps: --total-timesteps rounded down to whole rollouts")

    # Same-step autoreset: an ended episode's last observation is in infos["final_obs"]
    thunks = [make_env(args.env_id, i, args.capture_video and rank == 0, run.video_dir) for i in range(args.num_envs)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    # a fault (a failed collective too: a dead or hung rank) ends the run in one line; any error ends the env workers
    with run.stop_on_fault(envs), rank_faults(rank):
        atari = len(envs.single_observation_space.shape) == 3
        agent = make_agent(envs).to(device)  # DDP below broadcasts rank 0's parameters to every rank
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch, the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs_dtype = torch.uint8 if atari else torch.float32
        obs = torch.zeros((T, N) + envs.single_observation_space.shape, dtype=obs_dtype, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
        final_obs = np.zeros((T, N) + envs.single_observation_space.shape, dtype=np.uint8 if atari else np.float32)
        episode_counts = torch.zeros(world_size, dtype=torch.int64)  # episodes of each rank so far

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        # a checkpoint holds the networks, optimiser and counts, and each rank's envs and generators (in rank 0's file)
        state = dict(agent=agent, optimizer=optimizer, episode_counts=episode_counts, ranks=RankState(envs))
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser and counts; this rank's envs (replayed) and generators
            saved = run.restore(state)
            global_step, start_iteration, next_obs = saved["global_step"], saved["iteration"] + 1, state["ranks"].obs
        else:
            next_obs, _ = envs.reset(seed=args.seed + RANK_SEED_STRIDE * rank)  # env i: + i
        ddp_agent = DistributedDataParallel(agent, device_ids=[gpu] if use_cuda else None)

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            ended = []  # (global step, return, length) of this rank's episodes that ended in the rollout
            for step in range(T):
                global_step += N * world_size
                obs[step] = torch.as_tensor(next_obs)
                with torch.inference_mode():
                    action, logprob, _, value = agent.get_action_and_value(obs[step])
                actions[step], logprobs[step], values[step] = action, logprob, value

                next_obs, reward, termination, truncation, infos = envs.step(action.cpu().numpy())
                rewards[step], terminations[step], dones[step] = reward, termination, termination | truncation
                # Truncated (not terminated) envs will bootstrap from their real final observation.
                truncated[step] = truncation & ~termination
                if truncated[step].any():
                    final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
                final = infos.get("final_info", {})
                for i in np.flatnonzero(final.get("_episode", ())):
                    ended.append((global_step, float(final["episode"]["r"][i]), int(final["episode"]["l"][i])))

            # the episodes of every rank, in order, in rank 0's logs
            ranked = gather(ended)
            episode_counts += torch.tensor([len(episodes) for episodes in ranked])
            for episode_step, episodic_return, episodic_length in sorted(e for episodes in ranked for e in episodes):
                run.log_episode(episode_step, episodic_return, episodic_length)
            for source, count in enumerate(episode_counts.tolist()):
                writer.add_scalar(f"ranks/episodes_rank{source}", count, global_step)
            run.progress(global_step)

            # Bootstrap values: V(final obs) at truncations and V(obs after the rollout); then GAE
            with torch.no_grad():
                last_values = agent.get_value(torch.as_tensor(next_obs, dtype=obs_dtype, device=device)).cpu().numpy()
                final_values = np.zeros((T, N), dtype=np.float32)
                if truncated.any():
                    final_values[truncated] = agent.get_value(torch.from_numpy(final_obs[truncated]).to(device)).cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )

            # flatten this rank's batch (Atari: channels-last once per update, each minibatch's conversion is then elementwise)
            b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
            if atari:
                b_obs = b_obs.contiguous(memory_format=torch.channels_last)
            b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), dtype=torch.float32, device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), dtype=torch.float32, device=device)

            # Optimise: one optimiser step per minibatch on every rank, with gradients averaged by DDP
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.local_batch_size, device=device)
                for start in range(0, args.local_batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]
                    _, newlogprob, entropy, newvalue = ddp_agent(b_obs[mb_inds], b_actions[mb_inds])
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

                    # Value loss
                    if args.clip_vloss:
                        v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                        v_clipped = b_values[mb_inds] + torch.clamp(
                            newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                        )
                        v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                    entropy_loss = entropy.mean()
                    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                    optimizer.zero_grad()
                    loss.backward()  # DDP all-reduces (averages) the gradients over the ranks here
                    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()

                # the early stop acts on the KL averaged over ranks, and on a decision all ranks share
                approx_kl = mean_over_ranks(approx_kl)
                if args.target_kl is not None and agree(approx_kl.item() > args.target_kl, device=device)[0]:
                    break

            if args.check_params_every and (iteration % args.check_params_every == 0 or iteration == args.num_iterations):
                divergence = param_divergence(agent)  # the same value on every rank
                writer.add_scalar("charts/param_divergence", divergence, global_step)
                if divergence != 0.0:
                    raise RuntimeError(
                        f"rank {rank}: parameters differ across ranks after update {iteration} ({divergence:g})"
                    )

            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)  # mean over ranks
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("losses/epochs", epoch + 1, global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            # a stop on any rank stops every rank after this update (the interval is the same on every rank)
            run.stop_signal = agree(run.stop_signal or 0, device=device)[0] or None
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after a stop
                run.save_checkpoint(state, global_step, model, iteration=iteration)  # all ranks' state; rank 0 writes
            if run.stop_signal:  # after a stop, with the checkpoint written: every rank leaves the group together
                break

        # DDP's reducer holds the group: dropped first (gloo objects left to interpreter shutdown can abort the process)
        del ddp_agent
        leave_group(envs)  # closes the envs; every rank leaves together
    if args.save_model and not run.stop_signal:  # rank 0 (the other ranks' Run writes nothing)
        run.save_model(model, evaluate)
    if run.stop_signal:  # where the checkpoint is, and how to resume (rank 0)
        from cleanrl_utils.resume import say_how_to_resume

        say_how_to_resume(run)
    run.progress(force=True)
    run.close()
    # Everything is written: leave without the interpreter's teardown, which can abort a finished rank
    # ("terminate called without an active exception"; pytorch/pytorch PR 179291); 128 + the signal after a stop
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(128 + run.stop_signal if run.stop_signal else 0)

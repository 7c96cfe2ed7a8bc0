"""IMPALA: actor processes step their envs with a copy of the policy; a learner corrects for their lag with V-trace.

Importance Weighted Actor-Learner Architecture:
    Espeholt, Soyer, Munos, Simonyan, Mnih, Ward, Doron, Firoiu, Harley, Dunning, Legg, Kavukcuoglu (2018),
    "IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures",
    arXiv:1802.01561 (section 4 V-trace; Table G.1 the Atari hyperparameters; Figure 3 the deep CNN),
laid out as rlpyt's asynchronous runner (Stooke & Abbeel 2019, arXiv:1909.01500) and TorchBeast's MonoBeast
(Küttler et al. 2019, arXiv:1910.03552): actor processes write trajectories with the behaviour policy's
log-probabilities into shared-memory slots; the learner (this process) computes V-trace targets, makes one
RMSProp step and publishes its weights, which the actors read without waiting.

What this file changes against the paper: a feed-forward network (Nature CNN, the paper's deep CNN with
``--network impala``, an MLP on 1-D observations) without the LSTM; a time-limit truncation bootstraps from
the behaviour network's value of the final observation; the learning rate is annealed over the env steps.
Asynchronous, so not reproducible: ``--resume`` continues with fresh episodes in the actors' envs.
Details, flags, metrics and results: docs/scripts/impala_atari.md.

Run:
    python cleanrl/impala_atari.py --env-id BreakoutNoFrameskip-v4 --num-actors 2
    python cleanrl/impala_atari.py --env-id CartPole-v1 --num-actors 2 --num-envs 4 \\
        --unroll-length 16 --batch-size 16 --learning-rate 3e-3 --ent-coef 0.0003 --reward-scale 0.1 \\
        --total-timesteps 800000
"""

import multiprocessing as mp
import os
import queue
import signal
import time
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing

from cleanrl_utils.actors import (
    Shared,
    actor_envs,
    check_actors,
    check_atari_or_vector_env,
    check_parent,
    learner_turn,
    spawn_actors,
    start_actors,
    stop_actors,
)
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.files import read_file, script_name
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, TimedSteps

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    pass

MAX_EPISODE_FRAMES = 108_000
"""Frames after which a game is truncated (30 minutes at 60 Hz, the usual Atari limit)."""


@dataclass
class Args(RunArgs):
    """IMPALA's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...): RunArgs."""

    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id: an Atari NoFrameskip-v4 game, or an env with 1-D Box observations and Discrete actions"""
    env_mode: Literal["sync", "async"] = "sync"
    """each actor steps its envs in its own process (sync: the faster on 2 cores) or in one subprocess per env (async)"""
    total_timesteps: int = 10000000
    """total environment steps, summed over all envs of all actors (Atari: agent steps of 4 frames)"""
    num_actors: int = 2
    """actor processes"""
    num_envs: int = 8
    """environments per actor; one slot holds an actor's num_envs trajectories"""
    unroll_length: int = 20
    """steps per trajectory (the paper's n: V-trace looks up to this many steps ahead)"""
    batch_size: int = 32
    """trajectories per gradient step (a multiple of --num-envs: whole slots)"""
    num_slots: int = 0
    """trajectory slots in shared memory, each num_envs trajectories (0: 2 x num_actors + batch_size / num_envs)"""
    network: Literal["nature", "impala"] = "nature"
    """Atari trunk: the Nature CNN, or the paper's deep CNN (3 stacks of conv, max-pool and 2 residual blocks)"""
    learning_rate: float = 6e-4
    """RMSProp learning rate at the start (annealed linearly to 0 over --total-timesteps with --anneal-lr)"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over the env steps"""
    rmsprop_alpha: float = 0.99
    """RMSProp's decay of the squared-gradient average"""
    rmsprop_eps: float = 0.01
    """RMSProp ε (the paper's 0.01: the losses are sums, so gradients are large)"""
    gamma: float = 0.99
    """discount factor γ"""
    reward_scale: float = 1.0
    """the learner multiplies rewards by this before V-trace (logged returns stay unscaled; CartPole: 0.1, Atari: 1)"""
    rho_bar: float = 1.0
    """ρ̄: truncation of the importance weights in the V-trace temporal differences (and the policy gradient)"""
    c_bar: float = 1.0
    """c̄: truncation of the trace-cutting weights c_s of V-trace"""
    vtrace_lambda: float = 1.0
    """λ in c_s = λ min(c̄, π/μ) (the paper's section 4.1 remark; 1: plain V-trace, < 1: less variance, more bias)"""
    ent_coef: float = 0.01
    """entropy bonus coefficient (on the summed entropy)"""
    vf_coef: float = 0.5
    """value loss coefficient (on 0.5 x the summed squared error)"""
    max_grad_norm: float = 40.0
    """global gradient-norm clip"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx``: the gymnasium env with its episode statistics; env 0 records videos if asked.

    Atari: ppo_atari.py's preprocessing (no-op starts, frame skip 4 with max-pooling, FIRE on reset, 84x84
    grayscale, 4 stacked frames zero-padded at each episode start: uint8 ``[4, 84, 84]``; a game truncated
    after :data:`MAX_EPISODE_FRAMES` frames), with episodic life and rewards clipped to their sign in
    training; evaluation (``training=False``) plays whole games with game rewards. Statistics are the
    game's (recorded below episodic life and clipping). Other envs are made as they are. No replay log: the
    actors' envs are not checkpointed (a resumed run starts new episodes).
    """

    def thunk():
        atari = "NoFrameskip" in env_id
        kwargs = {"max_num_frames_per_episode": MAX_EPISODE_FRAMES} if atari else {}
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", **kwargs)
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id, **kwargs)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        if not hasattr(env.unwrapped, "ale"):
            return CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
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
        return CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), two 3x3 convolutions that keep the channels and the size."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W]`` -> ``[B, C, H, W]``."""
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala_cnn(in_channels: int) -> nn.Sequential:
    """The paper's deep network (Figure 3, without the LSTM): stacks of 16, 32, 32 channels, each a 3x3 convolution,
    a 3x3 max-pool of stride 2 and two :class:`ResidualBlock`; ReLU, linear to 256, ReLU. ``[B, C, 84, 84]`` ->
    ``[B, 256]`` (84 -> 42 -> 21 -> 11)."""
    layers, channels = [], in_channels
    for out_channels in (16, 32, 32):
        layers += [nn.Conv2d(channels, out_channels, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1)]
        layers += [ResidualBlock(out_channels), ResidualBlock(out_channels)]
        channels = out_channels
    return nn.Sequential(*layers, nn.Flatten(), nn.ReLU(), nn.Linear(32 * 11 * 11, 256), nn.ReLU())


class Agent(nn.Module):
    """A categorical policy head and a value head.

    Atari (observations uint8 ``[4, 84, 84]``, 0-255, divided by 255 here): one trunk shared by both heads, the
    Nature CNN (Mnih et al. 2015; conv 8x8/4 (32) - 4x4/2 (64) - 3x3/1 (64) - linear 512) or
    ``network="impala"``'s :func:`impala_cnn`; heads ``actor`` (logits, orthogonal gain 0.01) and ``critic``
    (gain 1). 1-D observations: separate actor and critic networks of two tanh layers of 64 (as ppo.py).

    Args:
        obs_shape: one observation's shape.
        num_actions: size of the Discrete action space.
        network: ``"nature"`` or ``"impala"`` (Atari only).
    """

    def __init__(self, obs_shape: tuple, num_actions: int, network: str = "nature"):
        super().__init__()
        self.atari = len(obs_shape) == 3
        if not self.atari:
            self.trunk = nn.Identity()
            self.actor, self.critic = (
                nn.Sequential(
                    layer_init(nn.Linear(int(np.prod(obs_shape)), 64)),
                    nn.Tanh(),
                    layer_init(nn.Linear(64, 64)),
                    nn.Tanh(),
                    layer_init(nn.Linear(64, outputs), std=std),
                )
                for outputs, std in ((num_actions, 0.01), (1, 1.0))
            )
            return
        if network == "impala":
            self.trunk, width = impala_cnn(obs_shape[0]), 256
        else:
            self.trunk = nn.Sequential(
                layer_init(nn.Conv2d(obs_shape[0], 32, 8, stride=4)),
                nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)),
                nn.ReLU(),
            )
            width = 512
        self.actor = layer_init(nn.Linear(width, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(width, 1), std=1)
        self.to(memory_format=torch.channels_last)  # the convolutions' fastest layout on CPU (1.5x here)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Observations ``[B, *obs_shape]`` -> logits ``[B, A]``, values ``[B]``. Frames are converted to float in
        channels-last layout, the weights' layout."""
        if self.atari:
            hidden = self.trunk(obs.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)
        else:
            hidden = self.trunk(obs.float())
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


# ---------------------------------------------------------------------------------------------
# V-trace (Espeholt et al. 2018, section 4)


def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-trace targets v_s and policy-gradient advantages of trajectories, time first.

    With ρ_t = min(ρ̄, π(a_t|x_t)/μ(a_t|x_t)), c_t = λ min(c̄, π/μ) and δ_t = ρ_t (r_t + γ V'_t − V(x_t)),
    v_s − V(x_s) = δ_s + γ c_s (v_{s+1} − V(x_{s+1})) (eq. 1, computed backwards; the paper's Remark 1), where
    V'_t is V(x_{t+1}) inside an episode and ``next_values[t]`` where step t ended one (0 for a termination,
    V(final observation) for a truncation), the trace being cut there. The advantage of the policy gradient
    (section 4.2) is ρ_t (r_t + γ v'_{t+1} − V(x_t)), with v'_{t+1} = v_{t+1} inside an episode and
    ``next_values[t]`` at its end; v_T = ``bootstrap_value`` at the end of the trajectory. On-policy
    (π = μ, ρ̄ and c̄ ≥ 1), v_s is the n-step return to the trajectory's end, bootstrapped with V (with λ < 1, the
    λ-return).

    Args:
        behaviour_logp, target_logp: log μ(a_t|x_t), log π(a_t|x_t), ``[T, B]``.
        rewards: ``[T, B]``.
        values: V(x_t) ``[T, B]``.
        next_values: the bootstrap where step t ended an episode ``[T, B]`` (read only there).
        bootstrap_value: V(x_T) ``[B]``, the observation after the trajectory.
        dones: ``[T, B]`` bool, step t ended an episode (terminated or truncated).
        gamma: discount γ.
        rho_bar, c_bar: truncation levels ρ̄ and c̄.
        lam: λ, the discount of the traces (section 4.1, remark on λ).

    Returns:
        ``(vs, advantages, rhos)``: targets v_s ``[T, B]``, advantages ``[T, B]``, the untruncated
        importance weights π/μ ``[T, B]``. No gradient flows through them.
    """
    with torch.no_grad():
        rhos = torch.exp(target_logp - behaviour_logp)
        clipped_rhos, cs = rhos.clamp(max=rho_bar), lam * rhos.clamp(max=c_bar)
        not_done = (~dones).float()
        values_after = torch.cat([values[1:], bootstrap_value[None]], 0)  # V(x_{t+1}) [T, B]
        values_after = torch.where(dones, next_values, values_after)
        deltas = clipped_rhos * (rewards + gamma * values_after - values)
        vs_minus_v = torch.zeros_like(values)
        acc = torch.zeros_like(bootstrap_value)
        for t in reversed(range(len(rewards))):
            acc = deltas[t] + gamma * cs[t] * not_done[t] * acc
            vs_minus_v[t] = acc
        vs = values + vs_minus_v
        vs_after = torch.cat([vs[1:], bootstrap_value[None]], 0)
        vs_after = torch.where(dones, next_values, vs_after)
        advantages = clipped_rhos * (rewards + gamma * vs_after - values)
    return vs, advantages, rhos


# ---------------------------------------------------------------------------------------------
# Trajectory slots in shared memory


class Slots:
    """``num_slots`` slots of one actor's rollout each, in shared memory, time first, and the queues of free and
    full slot indices. A slot holds ``num_envs`` trajectories of ``T`` steps:

    - ``obs`` ``[S, T + 1, E, *obs_shape]`` (the last is the observation after the trajectory, the next
      slot's first), ``actions`` int64, ``logprobs`` (log μ), ``rewards``, ``next_values`` float32,
      ``terminations``, ``truncations`` bool, each ``[S, T, E]``;
    - ``policy_version`` int64 ``[S]``: the gradient steps of the policy that acted (at the slot's start).
    """

    def __init__(self, num_slots: int, T: int, E: int, observation_space: gym.Space):
        context = mp.get_context("spawn")
        obs_dtype = torch.uint8 if observation_space.dtype == np.uint8 else torch.float32
        self.obs = torch.zeros((num_slots, T + 1, E, *observation_space.shape), dtype=obs_dtype).share_memory_()
        self.actions = torch.zeros((num_slots, T, E), dtype=torch.int64).share_memory_()
        self.logprobs, self.rewards, self.next_values = (torch.zeros((num_slots, T, E)).share_memory_() for _ in range(3))
        self.terminations = torch.zeros((num_slots, T, E), dtype=torch.bool).share_memory_()
        self.truncations = torch.zeros((num_slots, T, E), dtype=torch.bool).share_memory_()
        self.policy_version = torch.zeros(num_slots, dtype=torch.int64).share_memory_()
        self.free, self.full = context.Queue(), context.Queue()
        for i in range(num_slots):
            self.free.put(i)

    @property
    def nbytes(self) -> int:
        """Bytes of shared memory the slots take."""
        tensors = (self.obs, self.actions, self.logprobs, self.rewards, self.next_values, self.terminations, self.truncations)
        return sum(t.numel() * t.element_size() for t in tensors)


# ---------------------------------------------------------------------------------------------
# Actor process


def run_actor(actor_id: int, shared: Shared, args: Args, slots: Slots, parent_pid: int, video_dir: str) -> None:
    """Actor ``actor_id`` (a spawned process): step ``--num-envs`` envs with the latest published policy, sampling
    actions from it, and fill free slots with ``--unroll-length`` steps each until ``shared.stop``.

    The policy is refreshed from the learner at the start of each slot (never waiting); a truncated episode's
    final observation is valued by this policy (the bootstrap the learner uses).
    """
    torch.set_num_threads(1)
    torch.manual_seed(args.seed + 1000 * (actor_id + 1))
    first = actor_id * args.num_envs
    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    thunks = [make_env(args.env_id, first + i, args.capture_video and actor_id == 0, video_dir) for i in range(args.num_envs)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with actor_envs(envs, first=first, timeout=args.env_timeout):  # a dead or hung env worker: one line; closed after
        agent = Agent(envs.single_observation_space.shape, int(envs.single_action_space.n), args.network)
        agent.requires_grad_(False)
        version = shared.pull(agent, -1)
        obs = torch.as_tensor(envs.reset(seed=args.seed + first)[0])
        while not shared.stop[0]:
            while True:  # a free slot; the learner frees them as it reads
                check_parent(parent_pid)
                if shared.stop[0]:
                    return
                try:
                    slot = slots.free.get(timeout=0.1)
                    break
                except queue.Empty:
                    continue
            version = shared.pull(agent, version)
            slots.policy_version[slot] = max(version // 2 - 1, 0)  # one publication at the start, then one per update
            for t in range(args.unroll_length):
                slots.obs[slot, t] = obs
                with torch.no_grad():
                    logits, _ = agent(obs)
                    dist = torch.distributions.Categorical(logits=logits)
                    action = dist.sample()
                next_obs, reward, terminated, truncated, infos = envs.step(action.numpy())
                slots.actions[slot, t], slots.logprobs[slot, t] = action, dist.log_prob(action)
                slots.rewards[slot, t] = torch.as_tensor(reward)
                slots.terminations[slot, t], slots.truncations[slot, t] = (
                    torch.as_tensor(terminated),
                    torch.as_tensor(truncated),
                )
                next_values = torch.zeros(args.num_envs)
                cut = np.flatnonzero(truncated & ~terminated)
                if len(cut):  # bootstrap from the final observation: V under the acting policy
                    with torch.no_grad():
                        next_values[cut] = agent(torch.as_tensor(np.stack([infos["final_obs"][i] for i in cut])))[1]
                slots.next_values[slot, t] = next_values
                final = infos.get("final_info", {})
                for e in np.flatnonzero(final.get("_episode", ())):
                    shared.episodes.put((actor_id, first + e, float(final["episode"]["r"][e]), int(final["episode"]["l"][e])))
                obs = torch.as_tensor(next_obs)
                shared.actor_steps[actor_id] += args.num_envs
            slots.obs[slot, args.unroll_length] = obs
            slots.full.put(slot)
            while shared.hold[0] and not shared.stop[0]:  # --total-timesteps collected: step no more
                check_parent(parent_pid)
                time.sleep(0.01)


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_actors num_envs unroll_length batch_size learning_rate rmsprop_eps")
    require_positive(args, "rho_bar c_bar max_grad_norm reward_scale")
    require_range(args, num_actors=(1, 2**10), num_envs=(1, 2**16), unroll_length=(1, 2**16), batch_size=(1, 2**20))
    require_range(args, num_slots=(0, 2**16), gamma=(0, 1), rmsprop_alpha=(0, 1), vtrace_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    whole = f"must be a multiple of --num-envs {args.num_envs} (a slot holds one actor's {args.num_envs} trajectories)"
    require(args.batch_size % args.num_envs == 0, "--batch-size", f"{args.batch_size} {whole}")
    per_batch = args.batch_size // args.num_envs
    args.num_slots = args.num_slots or 2 * args.num_actors + per_batch
    enough = f"{args.num_slots} leaves the actors no free slot while the learner holds {per_batch}: at least {per_batch + 1}"
    require(args.num_slots > per_batch, "--num-slots", enough)
    batch = args.batch_size * args.unroll_length
    require(args.total_timesteps >= batch, "--total-timesteps", f"less than one batch of {batch} steps")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script: actions sampled from π, as it trained
    (``deterministic=True``: the most probable); on Atari whole games with game rewards. ``options``: see
    :class:`cleanrl_utils.evals.Evaluation`."""
    saved = read_file(model_path, "model", script_name(__file__))["args"]
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    envs = evaluation.envs
    agent = Agent(envs.single_observation_space.shape, int(envs.single_action_space.n), saved.get("network", "nature"))
    agent = evaluation.load(agent, "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits, _ = agent(torch.as_tensor(obs, device=evaluation.device))
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    observation_space, action_space, atari = check_atari_or_vector_env(args, make_env(args.env_id, 0, False, ""))
    trunk = f"is an Atari trunk; {args.env_id} gets the MLP (leave --network at its default)"
    require(atari or args.network == "nature", "--network", f"{args.network} {trunk}")
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the learner checkpoints, stops the actors, exits
            signal.signal(signum, run.stop)  # 128 + signum (the actors ignore them)

    agent = Agent(observation_space.shape, int(action_space.n), args.network).to(device)
    optimizer = optim.RMSprop(agent.parameters(), lr=args.learning_rate, alpha=args.rmsprop_alpha, eps=args.rmsprop_eps)
    model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
    state = dict(agent=agent, optimizer=optimizer)  # what a checkpoint holds
    step_offset, update_offset = 0, 0  # env steps and gradient steps of the run before this process
    if run.resumed:  # the checkpoint's network and optimiser, in place; the actors start new episodes
        saved = run.restore(state)
        step_offset, update_offset = saved["global_step"], saved["updates"]

    # an actor's failure (its env's fault, its exception, its death) and the learner's faults end the run in one line
    with run.stop_on_fault():
        shared = Shared(sum(p.numel() for p in agent.parameters()), args.num_actors)
        slots = Slots(args.num_slots, args.unroll_length, args.num_envs, observation_space)
        slot = f"{args.num_envs} x {args.unroll_length} steps"
        print(f"trajectory slots: {args.num_slots} of {slot} ({slots.nbytes / 2**20:.1f} MiB)")
        shared.publish(agent)
        actors = spawn_actors(run_actor, args.num_actors, shared, args, slots, os.getpid(), run.video_dir, name="impala-actor")
        per_batch, T = args.batch_size // args.num_envs, args.unroll_length
        global_step, updates, waited, lag, last_log, started = step_offset, 0, 0.0, 0.0, time.monotonic(), time.perf_counter()
        try:
            start_actors(actors)  # with stop signals blocked: a signal to the process group cannot kill one half-started
            while global_step < args.total_timesteps:
                # ---- a batch of full slots (copied out, the slots handed back at once); episodes, faults, checkpoints
                taken, start_wait = [], time.perf_counter()
                while len(taken) < per_batch and not run.stop_signal:
                    try:
                        taken.append(slots.full.get(timeout=0.05))
                    except queue.Empty:
                        check_actors(actors, shared, run.directory)
                waited += time.perf_counter() - start_wait
                counters = dict(updates=update_offset + updates)
                _, global_step = learner_turn(run, shared, actors, state, step_offset, global_step, model=model, **counters)
                if run.stop_signal:  # after SIGTERM, with the checkpoint written: the actors stop, then exit 143
                    break
                index = torch.tensor(taken)
                obs = slots.obs[index].transpose(0, 1).flatten(1, 2).to(device)  # [T + 1, B, *obs_shape], B = slots x envs
                actions, behaviour_logp, rewards, next_values = (
                    getattr(slots, name)[index].transpose(0, 1).flatten(1, 2).to(device)
                    for name in ("actions", "logprobs", "rewards", "next_values")
                )
                dones = (slots.terminations[index] | slots.truncations[index]).transpose(0, 1).flatten(1, 2).to(device)
                lag = updates - slots.policy_version[index].float().mean().item()  # gradient steps behind, this process
                for slot in taken:
                    slots.free.put(slot)

                # ---- the learner: V-trace targets, then the actor-critic losses (section 4.2), summed over the batch
                if args.anneal_lr:
                    optimizer.param_groups[0]["lr"] = args.learning_rate * max(1.0 - global_step / args.total_timesteps, 0.0)
                logits, values = agent(obs.flatten(0, 1))
                logits, values = logits.view(T + 1, -1, logits.shape[-1]), values.view(T + 1, -1)
                dist = torch.distributions.Categorical(logits=logits[:T])
                target_logp = dist.log_prob(actions)
                vs, advantages, rhos = vtrace(
                    behaviour_logp,
                    target_logp,
                    args.reward_scale * rewards,
                    values[:T].detach(),
                    next_values,
                    values[T].detach(),
                    dones,
                    args.gamma,
                    args.rho_bar,
                    args.c_bar,
                    args.vtrace_lambda,
                )
                pg_loss = -(target_logp * advantages).sum()
                v_loss = 0.5 * (vs - values[:T]).square().sum()
                entropy = dist.entropy().sum()
                loss = pg_loss + args.vf_coef * v_loss - args.ent_coef * entropy
                optimizer.zero_grad()
                loss.backward()
                check_finite(update_offset + updates + 1, global_step, loss=loss)  # stops a diverging run here
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                updates += 1
                shared.updates[0] = updates
                shared.publish(agent)

                now = time.monotonic()
                if now - last_log >= 1.0:
                    last_log = now
                    n = float(rewards.numel())
                    writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                    writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
                    writer.add_scalar("charts/policy_lag", lag, global_step)
                    writer.add_scalar("charts/learner_wait_fraction", waited / (time.perf_counter() - started), global_step)
                    writer.add_scalar("charts/updates", update_offset + updates, global_step)
                    writer.add_scalar("charts/importance_weight", rhos.mean().item(), global_step)
                    writer.add_scalar("charts/clipped_rho_fraction", (rhos > args.rho_bar).float().mean().item(), global_step)
                    writer.add_scalar("losses/policy_loss", pg_loss.item() / n, global_step)
                    writer.add_scalar("losses/value_loss", v_loss.item() / n, global_step)
                    writer.add_scalar("losses/entropy", entropy.item() / n, global_step)
            shared.hold[0] = 1
        finally:  # also after a fault, before it is said in one line
            stop_actors(actors, shared)
        if run.stop_signal:  # the checkpoint written, the actors stopped: exit 128 + the signal
            run.exit()
    run.progress(force=True)
    writer.add_scalar("charts/updates", update_offset + updates, global_step)
    print(f"{updates} gradient steps in this process; policy lag at the end {lag:.1f} gradient steps")

    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

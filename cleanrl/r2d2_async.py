"""R2D2 with asynchronous actor processes and a learner sharing a prioritized sequence replay.

Recurrent Replay Distributed DQN:
    Kapturowski, Ostrovski, Quan, Munos, Dabney (2019), "Recurrent Experience Replay in Distributed
    Reinforcement Learning", ICLR (priorities η max|δ| + (1-η) mean|δ|, stored state + burn-in, Table 2),
with the value rescaling h(x) = sign(x)(√(|x|+1) − 1) + εx of Pohlen et al. (2018), arXiv:1805.11593,
n-step double-Q targets (van Hasselt et al. 2016, arXiv:1509.06461), a dueling head (Wang et al. 2016,
arXiv:1511.06581) and the Ape-X ε ladder ε_i = ε^(1 + α i/(N−1)) (Horgan et al. 2018, arXiv:1803.00933),
laid out as rlpyt's asynchronous runner (Stooke & Abbeel 2019, arXiv:1909.01500): actor processes step two
alternating groups of envs, cut their steps into sequences with the LSTM state at their start and add them
to a shared replay; the learner (this process) burns in, learns, sets priorities and publishes its weights
without blocking the actors; a replay-ratio throttle keeps the two in step.

What this file changes against R2D2: truncation is not termination (a time-limit truncation bootstraps from
the real final observation); the LSTM does not receive the previous action and reward; the squared TD error
is averaged over a sequence's learned steps. Asynchronous, so not reproducible.
Details, flags, metrics, results and speeds: docs/scripts/r2d2_async.md.

Run (one machine: actors and learner share memory):
    python cleanrl/r2d2_async.py --env-id BreakoutNoFrameskip-v4 --num-actors 2
    python cleanrl/r2d2_async.py --env-id cleanrl_utils.envs:CartPoleNoVelocity-v1 --env-mode sync \\
        --num-actors 1 --num-envs 8 --lstm-size 64 --hidden-size 64 --burn-in 8 --learn-length 16 \\
        --n-step 3 --gamma 0.99 --learning-rate 1e-3 --adam-eps 1e-5 --target-network-frequency 50 \\
        --buffer-size 2000 --batch-size 32 --replay-ratio 32 --learning-starts 2000 \\
        --total-timesteps 80000 --eval-interval 8000 --save-model
"""

import concurrent.futures
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing

from cleanrl_utils.actors import (
    Shared,
    actor_envs,
    check_atari_or_vector_env,
    epsilon_ladder,
    learner_may_update,
    learner_turn,
    spawn_actors,
    start_actors,
    stop_actors,
    wait_for_learner,
)
from cleanrl_utils.buffers import SequenceBuilder, SequenceReplayBuffer, sequence_priority
from cleanrl_utils.evals import Evaluation, run_episodes
from cleanrl_utils.faults import EnvFault, check_finite
from cleanrl_utils.files import read_file, script_name
from cleanrl_utils.flags import RunArgs, fail, flag_name, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, real_next_obs

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    pass


@dataclass
class Args(RunArgs):
    """R2D2's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    eval_interval: int = 0
    """every this many env steps, evaluate the learner's current network for --eval-episodes episodes (0: never)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id: an Atari NoFrameskip-v4 game, or an env with 1-D Box observations and Discrete actions"""
    env_mode: Literal["sync", "async"] = "async"
    """each actor steps its envs in one subprocess per env (async) or in its own process (sync, for cheap envs)"""
    total_timesteps: int = 10000000
    """total environment steps, summed over all envs of all actors"""
    num_actors: int = 2
    """actor processes"""
    num_envs: int = 16
    """environments per actor, split into two alternating groups (at least 2)"""
    frame_stack: int = 4
    """Atari: frames stacked in each observation (stored in every sequence step)"""
    learning_rate: float = 1e-4
    """Adam learning rate"""
    adam_eps: float = 1e-3
    """Adam ε (R2D2: 1e-3)"""
    buffer_size: int = 2000
    """replay capacity in sequences (each burn_in + learn_length steps long); capped at what --total-timesteps can fill"""
    batch_size: int = 32
    """sequences per gradient step"""
    burn_in: int = 40
    """steps at the start of a sequence that only warm up the LSTM state (R2D2: 40)"""
    learn_length: int = 40
    """steps learned on per sequence; consecutive sequences overlap by --burn-in (R2D2: 40)"""
    n_step: int = 5
    """n of the n-step double-Q target"""
    gamma: float = 0.997
    """discount factor γ"""
    value_rescale_eps: float = 1e-3
    """ε of the value rescaling h(x) = sign(x)(sqrt(|x|+1)-1) + εx"""
    target_network_frequency: int = 2500
    """gradient steps between target network copies"""
    replay_ratio: float = 1.0
    """env steps learned on in gradient batches (batch_size x learn_length per step) per env step collected"""
    actor_lead: int = 0
    """env steps the actors may run ahead of the replay ratio before they wait (0: see actor_lead())"""
    learning_starts: int = 20000
    """env steps collected before the first gradient step (also the refill after --resume)"""
    epsilon: float = 0.4
    """ε of the Ape-X ladder ε_i = ε^(1 + α i / (N - 1)) over the N = num_actors x num_envs envs"""
    epsilon_alpha: float = 7.0
    """α of the Ape-X ε ladder"""
    priority_exponent: float = 0.9
    """prioritized replay α, in [0, 1] (R2D2: 0.9)"""
    importance_beta: float = 0.6
    """importance-sampling exponent β (R2D2: 0.6)"""
    priority_eta: float = 0.9
    """η of the sequence priority η max|δ| + (1-η) mean|δ|"""
    lstm_size: int = 512
    """LSTM hidden units"""
    hidden_size: int = 512
    """units of the encoder's last layer and of each dueling stream"""
    publish_interval: int = 1
    """gradient steps between parameter publications to the actors"""
    debug_learner_sleep: float = 0.0
    """testing only: seconds the learner sleeps after each gradient step (a slow learner), at most 3600"""


def actor_lead(args: Args) -> float:
    """Env steps the actors may collect beyond what the replay ratio lets the learner consume."""
    if args.actor_lead:
        return float(args.actor_lead)
    sequence = args.burn_in + args.learn_length
    return 4 * args.batch_size * args.learn_length / args.replay_ratio + args.num_actors * args.num_envs * sequence


def most_steps(args: Args, done: int) -> int:
    """The most env steps the actors can collect in this process, ``done`` steps into the run: the rest of
    --total-timesteps and what the throttle lets them run past it before the learner holds them (its lead, a gradient
    step's worth, and a step of every env under way twice). Each step is learned in one sequence only, so the replay
    is capped at this many sequences."""
    per_update = args.batch_size * args.learn_length / args.replay_ratio
    return args.total_timesteps - done + math.ceil(actor_lead(args) + per_update) + 2 * args.num_actors * args.num_envs


def make_env(
    env_id: str,
    idx: int,
    capture_video: bool,
    video_dir: str,
    training: bool = True,
    video_episodes=None,
    frame_stack: int = 4,
):
    """A thunk creating env ``idx``: the gymnasium env with its episode statistics; env 0 records videos if asked.

    Atari: the dqn_atari.py preprocessing (no-op starts, frame skip 4 with max-pooling,
    episodic life, FIRE on reset, rewards clipped to their sign, 84x84 grayscale), then
    ``frame_stack`` stacked frames, observations uint8 ``[frame_stack, 84, 84]``; episode
    statistics are the game score (recorded before episodic life and reward clipping).
    Other envs are made as they are. The evaluation env (``training=False``) is the same: R2D2
    is evaluated as it trains (a lost life resets the LSTM state). No replay log: the actors'
    envs are not checkpointed (a resumed run starts new episodes).
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        if not hasattr(env.unwrapped, "ale"):
            return CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        env = atari_wrappers.NoopResetEnv(env, noop_max=30)
        env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
        env = atari_wrappers.EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = atari_wrappers.FireResetEnv(env)
        env = atari_wrappers.ClipRewardEnv(env)
        env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
        env = gym.wrappers.ReshapeObservation(env, (84, 84))
        env = gym.wrappers.FrameStackObservation(env, frame_stack, padding_type="zero")
        return CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step

    return thunk


class RecurrentQNetwork(nn.Module):
    """Encoder -> LSTM -> dueling head Q = V + A − mean_a A (Wang et al. 2016, eq. 9).

    Atari: the Nature CNN (Mnih et al. 2015) on uint8 frames ``[frame_stack, 84, 84]`` (0-255)
    then a ``hidden_size`` ReLU layer; otherwise one ``hidden_size`` ReLU layer on a 1-D
    observation. The recurrent state is one tensor ``[B, 2, lstm_size]`` (h and c), the form
    the replay stores per sequence.

    Args:
        obs_shape: one observation's shape.
        num_actions: size of the Discrete action space.
        lstm_size: LSTM hidden units.
        hidden_size: units of the encoder's output and of each dueling stream.
        atari: use the CNN encoder.
    """

    def __init__(self, obs_shape: tuple, num_actions: int, lstm_size: int, hidden_size: int, atari: bool):
        super().__init__()
        self.atari, self.lstm_size = atari, lstm_size
        if atari:
            self.encoder = nn.Sequential(
                nn.Conv2d(obs_shape[0], 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(3136, hidden_size),
                nn.ReLU(),
            )
        else:
            self.encoder = nn.Sequential(nn.Linear(int(np.prod(obs_shape)), hidden_size), nn.ReLU())
        self.lstm = nn.LSTM(hidden_size, lstm_size, batch_first=True)
        self.value = nn.Sequential(nn.Linear(lstm_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1))
        self.advantage = nn.Sequential(nn.Linear(lstm_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, num_actions))

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Zeros ``[batch, 2, lstm_size]``: the state at an episode start."""
        return torch.zeros(batch, 2, self.lstm_size, device=device)

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Observations ``[B, L, *obs_shape]`` from state ``[B, 2, H]`` -> Q ``[B, L, A]``, state after ``[B, 2, H]``."""
        B, L = obs.shape[:2]
        x = obs.flatten(0, 1)
        x = x.float() / 255.0 if self.atari else x.float()
        features = self.encoder(x).view(B, L, -1)
        h0, c0 = state[:, 0].unsqueeze(0).contiguous(), state[:, 1].unsqueeze(0).contiguous()
        out, (h, c) = self.lstm(features, (h0, c0))
        advantages = self.advantage(out)
        q = self.value(out) + advantages - advantages.mean(dim=-1, keepdim=True)
        return q, torch.stack([h[0], c[0]], dim=1)


# ---------------------------------------------------------------------------------------------
# Pure functions of the algorithm


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h(x) = sign(x)(√(|x|+1) − 1) + εx (Pohlen et al. 2018, eq. 7), elementwise, any shape."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h⁻¹(x) = sign(x)(((√(1 + 4ε(|x| + 1 + ε)) − 1) / (2ε))² − 1) (Pohlen et al. 2018, Prop. A.2).

    Elementwise, any shape; for ε = 0, sign(x)((|x| + 1)² − 1). h⁻¹(h(x)) = x.
    """
    if eps == 0:
        return torch.sign(x) * ((x.abs() + 1.0) ** 2 - 1.0)
    return torch.sign(x) * (((torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)) ** 2 - 1.0)


def n_step_targets(
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    truncations: torch.Tensor,
    mask: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    n: int,
) -> torch.Tensor:
    """n-step returns along sequences, bootstrapped from ``next_values`` (in the unrescaled space).

    For step t: y_t = sum_{k<m} γ^k r_{t+k} + γ^m v_{t+m}, where m = n unless the window stops
    sooner: at a termination at step t+k (m = k+1 and no bootstrap), at a truncation at step
    t+k (m = k+1, bootstrap from the real final observation at index t+k+1: truncation is not
    termination), or at the end of the sequence (t + m = T, bootstrap from observation T).

    Args:
        rewards: r ``[B, T]``.
        terminations, truncations: bool ``[B, T]``, at the step that ended the episode.
        mask: bool ``[B, T]``, the real steps (padding after an episode end is False).
        next_values: v ``[B, T + 1]``: the value of the observation at each index (R2D2:
            h⁻¹(Q_target(s, argmax_a Q_online(s, a)))).
        gamma: discount γ.
        n: the n of the n-step return (>= 1).

    Returns:
        float ``[B, T]`` targets; 0 where ``mask`` is False.
    """
    B, T = rewards.shape
    pad = torch.zeros(B, n, dtype=torch.bool, device=rewards.device)
    r = torch.cat([rewards * mask, torch.zeros(B, n, dtype=rewards.dtype, device=rewards.device)], 1)
    term = torch.cat([terminations.bool() & mask, pad], 1)
    trunc = torch.cat([truncations.bool() & mask, pad], 1)
    t = torch.arange(T, device=rewards.device).expand(B, T)
    running = mask.bool().clone()
    returns = torch.zeros_like(rewards)
    boot_index = torch.zeros(B, T, dtype=torch.long, device=rewards.device)
    boot_discount = torch.zeros_like(rewards)
    for k in range(n):
        pos = t + k
        returns = returns + running * (gamma**k) * r[:, k : k + T]
        term_k, trunc_k = term[:, k : k + T], trunc[:, k : k + T]
        stop = running & (term_k | trunc_k | (pos + 1 == T) | torch.full_like(running, k == n - 1))
        boot_index = torch.where(stop, pos + 1, boot_index)
        boot_discount = torch.where(stop, torch.where(term_k, 0.0, gamma ** (k + 1)), boot_discount)
        running = running & ~stop
    return returns + boot_discount * next_values.gather(1, boot_index.clamp(max=T))


# ---------------------------------------------------------------------------------------------
# Actor process


def run_actor(
    actor_id: int, shared: Shared, args: Args, atari: bool, rb: SequenceReplayBuffer, parent_pid: int, video_dir: str
) -> None:
    """Actor ``actor_id`` (a spawned process, started by :func:`cleanrl_utils.actors.start_actors`): step two
    alternating env groups with the ε-greedy LSTM policy until ``shared.stop``.

    While one group's envs step, the policy runs for the other group: an async group (``--env-mode async``, a
    ``gym.vector.AsyncVectorEnv``) steps in its worker processes between ``step_async`` and ``step_wait``, which
    waits at most ``--env-timeout``; a sync group (a ``gym.vector.SyncVectorEnv``) steps in a thread of this actor,
    whose result is awaited as long (a hung sync env stops the run; its thread is left to the actor's end).
    """
    torch.set_num_threads(1)
    rng = np.random.default_rng([args.seed, actor_id])
    torch.manual_seed(args.seed + 1000 * (actor_id + 1))
    first = actor_id * args.num_envs
    epsilons = epsilon_ladder(args.num_actors * args.num_envs, args.epsilon, args.epsilon_alpha)
    half = args.num_envs // 2
    group_envs = [list(range(first, first + half)), list(range(first + half, first + args.num_envs))]
    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    groups = []
    for envs in group_envs:
        thunks = [make_env(args.env_id, i, args.capture_video, video_dir, frame_stack=args.frame_stack) for i in envs]
        if args.env_mode == "async":  # one worker process per env, started from a fresh interpreter (forkserver)
            groups.append(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"))
        else:
            groups.append(gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP))
    # a dead or hung env worker: one line; the groups closed after
    with actor_envs(*groups, first=[envs[0] for envs in group_envs], timeout=args.env_timeout):
        single = groups[0]
        network = RecurrentQNetwork(
            single.single_observation_space.shape, int(single.single_action_space.n), args.lstm_size, args.hidden_size, atari
        )
        network.requires_grad_(False)
        version = shared.pull(network, -1)
        num_actions = int(single.single_action_space.n)
        state_example = np.zeros((2, args.lstm_size), np.float32)
        builders = [
            SequenceBuilder(
                len(envs),
                args.burn_in,
                args.learn_length,
                single.single_observation_space,
                single.single_action_space,
                state_example,
            )
            for envs in group_envs
        ]
        obs = [g.reset(seed=args.seed + envs[0])[0] for g, envs in zip(groups, group_envs)]
        states = [network.initial_state(len(envs)) for envs in group_envs]
        before = [None, None]  # each group's state before acting on its current observations
        actions = [None, None]
        lead = actor_lead(args)
        per_update = args.batch_size * args.learn_length / args.replay_ratio

        def act(k: int) -> np.ndarray:
            with torch.no_grad():
                q, after = network(torch.as_tensor(obs[k]).unsqueeze(1), states[k])
            greedy = q[:, 0].argmax(-1).numpy()
            explore = rng.random(len(greedy)) < epsilons[group_envs[k]]
            before[k], states[k] = states[k], after
            return np.where(explore, rng.integers(num_actions, size=len(greedy)), greedy)

        pool, pending = concurrent.futures.ThreadPoolExecutor(2), [None, None]

        def send(k: int, group_actions: np.ndarray) -> None:  # group k's step starts
            if isinstance(groups[k], gym.vector.AsyncVectorEnv):
                groups[k].step_async(group_actions)
            else:
                pending[k] = pool.submit(groups[k].step, group_actions)

        def receive(j: int) -> tuple:  # group j's step, within --env-timeout
            if isinstance(groups[j], gym.vector.AsyncVectorEnv):
                return groups[j].step_wait(timeout=args.env_timeout)
            try:
                return pending[j].result(timeout=args.env_timeout)
            except concurrent.futures.TimeoutError:
                envs = f"envs {group_envs[j][0]}-{group_envs[j][-1]}" if len(group_envs[j]) > 1 else f"env {group_envs[j][0]}"
                raise EnvFault(f"{envs}: no answer to a step within --env-timeout {args.env_timeout:g} s") from None

        try:
            actions[0] = act(0)
            send(0, actions[0])
            k = 1
            while not shared.stop[0]:
                version = shared.pull(network, version)
                actions[k] = act(k)  # overlaps the other group's step
                send(k, actions[k])
                j = 1 - k
                next_obs, rewards, terminations, truncations, infos = receive(j)
                sequences = builders[j].add(
                    obs[j], actions[j], rewards, terminations, truncations, real_next_obs(next_obs, infos), before[j].numpy()
                )
                if sequences is not None:
                    rb.add(sequences)  # at the largest priority seen
                done = torch.as_tensor(terminations | truncations)
                states[j][done] = 0.0  # the next episode starts from zeros
                obs[j] = next_obs
                final = infos.get("final_info", {})
                for e in np.flatnonzero(final.get("_episode", ())):
                    episode = (actor_id, group_envs[j][e], float(final["episode"]["r"][e]), int(final["episode"]["l"][e]))
                    shared.episodes.put(episode)
                shared.actor_steps[actor_id] += len(group_envs[j])
                wait_for_learner(shared, per_update, args.learning_starts, lead, parent_pid)  # not too far ahead
                k = j
            receive(1 - k)  # the step still under way, before the groups close
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # a hung env's thread is not waited for


# ---------------------------------------------------------------------------------------------
# Evaluation policy


def recurrent_policy(network: RecurrentQNetwork, num_actions: int, seed: int, epsilon: float, device: torch.device | str):
    """``(policy, on_done)`` for :func:`cleanrl_utils.evals.run_episodes` in a one-env vector env: ``network``
    ε-greedy, its LSTM state carried from step to step and reset to zeros at each episode start."""
    rng = np.random.default_rng(seed)
    state = network.initial_state(1, device)

    def policy(obs: np.ndarray) -> np.ndarray:
        nonlocal state
        q, state = network(torch.as_tensor(obs, device=device).unsqueeze(1), state)
        action = q[:, 0].argmax(-1).cpu().numpy()
        return rng.integers(num_actions, size=1) if rng.random() < epsilon else action

    def on_done(done: np.ndarray) -> None:
        nonlocal state
        if done[0]:
            state = network.initial_state(1, device)

    return policy, on_done


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_actors buffer_size batch_size learning_rate adam_eps learn_length n_step")
    require_positive(args, "target_network_frequency replay_ratio frame_stack lstm_size hidden_size publish_interval")
    require(args.num_envs >= 2, "--num-envs", f"must be at least 2 (two alternating groups), got {args.num_envs}")
    for name in "burn_in learning_starts eval_interval actor_lead debug_learner_sleep epsilon_alpha priority_exponent".split():
        require(getattr(args, name) >= 0, flag_name(name), f"must be >= 0, got {getattr(args, name)}")
    require(args.value_rescale_eps >= 0, "--value-rescale-eps", f"must be >= 0, got {args.value_rescale_eps}")
    # each size by its own flag, before any product of them (the replay's memory, the ε ladder) is computed or checked
    require_range(args, num_actors=(1, 2**10), num_envs=(2, 2**16), buffer_size=(1, 2**40), batch_size=(1, 2**20))
    require_range(args, burn_in=(0, 2**16), learn_length=(1, 2**16), n_step=(1, 2**16), frame_stack=(1, 2**8))
    require_range(args, lstm_size=(1, 2**16), hidden_size=(1, 2**16), debug_learner_sleep=(0, 3600))
    require_range(args, gamma=(0, 1), epsilon=(0, 1), priority_eta=(0, 1), importance_beta=(0, 1), priority_exponent=(0, 1))
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"{args.buffer_size} sequences is fewer than --batch-size")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.total_timesteps > args.learning_starts, "--learning-starts", no_training)
    per_update = args.batch_size * args.learn_length / args.replay_ratio
    finite = f"{args.replay_ratio} is too small: batch_size x learn_length / replay_ratio = {per_update} env steps per update"
    require(per_update < float("inf"), "--replay-ratio", finite)
    wait = f"must exceed batch_size x learn_length / replay_ratio = {per_update:g} env steps (or actors and learner wait)"
    require(args.actor_lead == 0 or args.actor_lead > per_update, "--actor-lead", f"{args.actor_lead} {wait}")
    require(not args.eval_interval or args.eval_episodes > 0, "--eval-episodes", "must be positive with --eval-interval")


def evaluate(model_path: str, eval_episodes: int, epsilon: Optional[float] = None, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script, ε-greedy (ε None: 0 on classic control,
    0.01 on Atari, where a greedy policy that never presses FIRE could stall a game); the LSTM state is reset to
    zeros at each episode start. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    saved = read_file(model_path, "model", script_name(__file__))["args"]  # the frame stack and sizes it was trained with
    make_stacked_env = partial(make_env, frame_stack=saved["frame_stack"])
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_stacked_env, **options)
    shape, num_actions = evaluation.envs.single_observation_space.shape, int(evaluation.envs.single_action_space.n)
    network = RecurrentQNetwork(shape, num_actions, saved["lstm_size"], saved["hidden_size"], atari=len(shape) > 1)
    network = evaluation.load(network, "q_network")
    epsilon = (0.01 if len(shape) > 1 else 0.0) if epsilon is None else epsilon
    return evaluation.run(*recurrent_policy(network, num_actions, evaluation.seed, epsilon, evaluation.device))


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), shared replay, run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    probe = make_env(args.env_id, 0, False, "", frame_stack=args.frame_stack)  # Atari: the preprocessed spaces
    observation_space, action_space, atari = check_atari_or_vector_env(args, probe)
    T = args.burn_in + args.learn_length
    state_example = np.zeros((2, args.lstm_size), np.float32)
    builder = SequenceBuilder(1, args.burn_in, args.learn_length, observation_space, action_space, state_example)
    steps = most_steps(args, resumed["global_step"] if resumed else 0)  # at most one sequence each
    capacity = max(min(args.buffer_size, steps), args.batch_size)
    try:
        rb = SequenceReplayBuffer(capacity, builder, alpha=args.priority_exponent, seed=args.seed, shared=True)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the learner checkpoints, stops the actors, exits
            signal.signal(signum, run.stop)  # 128 + signum (the actors ignore them)
    capped = f"; --buffer-size {args.buffer_size} capped at what {steps} env steps can fill" * (capacity < args.buffer_size)
    print(f"replay: {capacity} sequences of {T} steps in shared memory ({rb.nbytes / 2**20:.1f} MiB){capped}")

    num_actions = int(action_space.n)
    q_network = RecurrentQNetwork(observation_space.shape, num_actions, args.lstm_size, args.hidden_size, atari).to(device)
    target_network = RecurrentQNetwork(observation_space.shape, num_actions, args.lstm_size, args.hidden_size, atari)
    target_network = target_network.to(device)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps)
    model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
    state = dict(q_network=q_network, target_network=target_network, optimizer=optimizer)  # what a checkpoint holds
    step_offset, update_offset = 0, 0  # env steps and gradient steps of the run before this process
    if run.resumed:  # the checkpoint's networks and optimiser, in place; the replay starts empty
        saved = run.restore(state)
        step_offset, update_offset = saved["global_step"], saved["updates"]
        print(f"the checkpoint has no replay: refilling it until step {step_offset + args.learning_starts} before updating")

    # an actor's failure (its env's fault, its exception, its death) and the learner's faults end the run in one line
    with run.stop_on_fault():
        shared = Shared(sum(p.numel() for p in q_network.parameters()), args.num_actors)
        shared.publish(q_network)
        epsilons = epsilon_ladder(args.num_actors * args.num_envs, args.epsilon, args.epsilon_alpha)
        for i in range(args.num_actors):
            ladder = epsilons[i * args.num_envs : (i + 1) * args.num_envs]
            writer.add_scalar(f"charts/epsilon/actor_{i}", ladder.mean(), step_offset)
        actors = spawn_actors(
            run_actor, args.num_actors, shared, args, atari, rb, os.getpid(), run.video_dir, name="r2d2-actor"
        )
        if args.eval_interval:  # the learner's network, every --eval-interval env steps (the actors wait meanwhile)
            thunk = make_env(args.env_id, 0, False, "", False, frame_stack=args.frame_stack)
            eval_envs = gym.vector.SyncVectorEnv([thunk], autoreset_mode=SAME_STEP)
            next_eval = (step_offset // args.eval_interval + 1) * args.eval_interval
        per_update = args.batch_size * args.learn_length / args.replay_ratio  # env steps each gradient step needs
        global_step, updates, last_log, td_loss, q_mean = step_offset, 0, time.monotonic(), float("nan"), float("nan")
        try:
            start_actors(actors)  # with stop signals blocked: a signal to the process group cannot kill one half-started
            while True:
                # episodes, failures, progress, checkpoints (every --checkpoint-interval steps, and after SIGTERM)
                counters = dict(updates=update_offset + updates)
                collected, global_step = learner_turn(
                    run, shared, actors, state, step_offset, global_step, model=model, **counters
                )
                if run.stop_signal:  # after SIGTERM, with the checkpoint written: the actors stop, then exit 143
                    break
                owed = learner_may_update(updates, collected, per_update, args.learning_starts) and len(rb) >= args.batch_size
                if global_step >= args.total_timesteps:  # enough env steps: the actors hold, the learner
                    shared.hold[0] = 1  # makes the gradient steps the ratio still owes
                    if not owed:
                        break
                if args.eval_interval and global_step >= next_eval:  # the current network, greedy
                    next_eval += args.eval_interval * ((global_step - next_eval) // args.eval_interval + 1)
                    policy, on_done = recurrent_policy(
                        q_network, num_actions, args.seed + 100_000, 0.01 if atari else 0.0, device
                    )
                    with torch.no_grad():
                        episodic_returns = run_episodes(eval_envs, policy, args.eval_episodes, args.seed + 100_000, on_done)
                    writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
                    print(
                        f"step {global_step}: evaluation over {args.eval_episodes} episodes: "
                        f"{episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}",
                        flush=True,
                    )
                now = time.monotonic()
                if now - last_log >= 1.0 and collected > args.learning_starts:
                    last_log = now
                    writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
                    writer.add_scalar(
                        "charts/replay_ratio",
                        updates * args.batch_size * args.learn_length / (collected - args.learning_starts),
                        global_step,
                    )
                    writer.add_scalar("charts/updates", update_offset + updates, global_step)
                    writer.add_scalar("charts/buffer_sequences", len(rb), global_step)
                    writer.add_scalar("losses/td_loss", td_loss, global_step)
                    writer.add_scalar("losses/q_values", q_mean, global_step)
                # the throttle: a gradient step only when the actors have collected enough for it
                if not owed:
                    time.sleep(0.001)
                    continue

                data = rb.sample(args.batch_size, args.importance_beta)
                versions = rb.versions[data.indices.numpy()].copy()
                data = data._replace(
                    **{
                        name: getattr(data, name).to(device)
                        for name in (
                            "obs",
                            "actions",
                            "rewards",
                            "terminations",
                            "truncations",
                            "mask",
                            "learn_mask",
                            "states",
                            "starts_episode",
                            "weights",
                        )
                    }
                )
                # online network from the stored state; the gradient stops at the end of the burn-in
                # except for sequences that start their episode (exact zero state, every step learned)
                if args.burn_in > 0:
                    q_burn, burn_state = q_network(data.obs[:, : args.burn_in], data.states)
                    keep = data.starts_episode.view(-1, 1, 1)
                    burn_state = torch.where(keep, burn_state, burn_state.detach())
                    q_rest, _ = q_network(data.obs[:, args.burn_in :], burn_state)
                    q_all = torch.cat([q_burn, q_rest], 1)  # [B, T + 1, A]
                else:
                    q_all, _ = q_network(data.obs, data.states)
                with torch.no_grad():
                    q_target_all, _ = target_network(data.obs, data.states)
                    best = q_all.argmax(-1, keepdim=True)  # double Q: the online network picks a'
                    next_values = inverse_value_rescale(q_target_all.gather(-1, best).squeeze(-1), args.value_rescale_eps)
                    targets = value_rescale(
                        n_step_targets(
                            data.rewards, data.terminations, data.truncations, data.mask, next_values, args.gamma, args.n_step
                        ),
                        args.value_rescale_eps,
                    )
                q_taken = q_all[:, :T].gather(-1, data.actions.long().unsqueeze(-1)).squeeze(-1)
                td_error = targets - q_taken
                learn = data.learn_mask.float()
                per_sequence = (td_error.square() * learn).sum(1) / learn.sum(1).clamp(min=1.0)
                loss = 0.5 * (data.weights * per_sequence).mean()
                optimizer.zero_grad()
                loss.backward()
                check_finite(update_offset + updates + 1, global_step, loss=loss)  # stops a diverging run here
                optimizer.step()
                rb.update_priorities(
                    data.indices, sequence_priority(td_error.detach().abs(), data.learn_mask, args.priority_eta), versions
                )
                updates += 1
                shared.updates[0] = updates
                if updates % args.publish_interval == 0:
                    shared.publish(q_network)
                if (update_offset + updates) % args.target_network_frequency == 0:
                    target_network.load_state_dict(q_network.state_dict())
                td_loss = loss.item()
                q_mean = (q_taken * learn).sum().item() / max(learn.sum().item(), 1.0)
                if args.debug_learner_sleep:
                    time.sleep(args.debug_learner_sleep)
        finally:  # also after a fault, before it is said in one line
            stop_actors(actors, shared)
        if run.stop_signal:  # the checkpoint written, the actors stopped: exit 128 + the signal
            run.exit(*([eval_envs] if args.eval_interval else []))
    run.progress(force=True)
    collected = int(shared.actor_steps.sum())
    if collected > args.learning_starts:
        ratio = updates * args.batch_size * args.learn_length / (collected - args.learning_starts)
        writer.add_scalar("charts/replay_ratio", ratio, global_step)
        print(
            f"replay ratio {ratio:.3f} (target {args.replay_ratio}); {updates} gradient steps, "
            f"{collected} env steps in this process"
        )
    if updates == 0:
        why = (
            f"the replay held {len(rb)} sequences, fewer than --batch-size {args.batch_size}"
            if len(rb) < args.batch_size
            else f"one needs {per_update:.0f} env steps after --learning-starts (--batch-size x --learn-length / "
            f"--replay-ratio), {max(collected - args.learning_starts, 0)} were collected"
        )
        print(f"warning: no gradient step was made: {why}", file=sys.stderr)

    if args.eval_interval:
        eval_envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

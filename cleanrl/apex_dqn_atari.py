"""Ape-X DQN: actor processes on an ε ladder feed a shared prioritized replay; one learner makes double-Q n-step updates.

Distributed Prioritized Experience Replay:
    Horgan, Quan, Budden, Barth-Maron, Hessel, van Hasselt, Silver (2018), arXiv:1803.00933 (Algorithms 1-2,
    section 4.1 the ε ladder ε_i = ε^(1 + α i/(N-1)), Appendix C the Atari hyperparameters),
on double Q-learning (van Hasselt et al. 2016, arXiv:1509.06461), the dueling network (Wang et al. 2016,
arXiv:1511.06581) and proportional prioritized replay (Schaul et al. 2016, arXiv:1511.05952), laid out as
rlpyt's asynchronous runner (Stooke & Abbeel 2019, arXiv:1909.01500): actor processes write their own columns
of one replay in shared memory, each new transition at the priority |δ| their copy of the network gives it;
the learner (this process) samples by priority, learns, and publishes its weights; a replay-ratio throttle
keeps the two in step.

What this file changes against the paper: a few actors on one machine, batches of 32 at dqn_atari.py's replay
ratio of 8; fused Adam instead of centered RMSProp; the learner on two torch threads, the actors niced below
it; a time-limit truncation bootstraps from its real final observation. Asynchronous, so not reproducible:
``--resume`` refills an empty replay for ``--learning-starts`` steps.
Details, flags, metrics and results: docs/scripts/apex_dqn_atari.md.

Run:
    python cleanrl/apex_dqn_atari.py --env-id BreakoutNoFrameskip-v4 --num-actors 2
    python cleanrl/apex_dqn_atari.py --env-id CartPole-v1 --num-actors 2 --num-envs 4 --hidden-size 128 \\
        --n-step 1 --learning-rate 5e-4 --adam-eps 1e-5 --batch-size 64 --replay-ratio 32 --publish-interval 1 \\
        --buffer-size 100000 --target-network-frequency 50 --learning-starts 1000 --total-timesteps 96000 --torch-threads 1
"""

import math
import os
import signal
import time
from dataclasses import dataclass
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
from cleanrl_utils.buffers import PrioritizedReplayBuffer, ReplaySamples, rows_to_hold
from cleanrl_utils.evals import Evaluation, run_episodes
from cleanrl_utils.faults import check_finite
from cleanrl_utils.files import read_file, script_name
from cleanrl_utils.flags import RunArgs, fail, flag_name, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, TimedSteps, real_next_obs

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    pass


@dataclass
class Args(RunArgs):
    """Ape-X's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...): RunArgs."""

    eval_interval: int = 0
    """every this many env steps, evaluate the learner's current network for --eval-episodes episodes (0: never)"""
    torch_threads: int = 2
    """the learner's CPU threads for torch (the actors take one each, below it in priority)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id: an Atari NoFrameskip-v4 game, or an env with 1-D Box observations and Discrete actions"""
    env_mode: Literal["sync", "async"] = "sync"
    """each actor steps its envs in its own process (sync) or in one subprocess per env (async)"""
    total_timesteps: int = 10000000
    """total environment steps, summed over all envs of all actors (Atari: agent steps of 4 frames)"""
    num_actors: int = 2
    """actor processes"""
    num_envs: int = 4
    """environments per actor (each one rung of the ε ladder)"""
    buffer_size: int = 1000000
    """replay capacity in transitions, over all envs (the real final observation of each episode takes one more); capped
    at what --total-timesteps can fill"""
    batch_size: int = 32
    """transitions per gradient step"""
    replay_ratio: float = 8.0
    """transitions learned on per env step collected (dqn_atari.py: a batch of 32 every 4 steps, 8)"""
    actor_lead: int = 0
    """env steps the actors may run ahead of the replay ratio before they wait (0: four batches' worth, plus one step of
    every env)"""
    learning_starts: int = 50000
    """env steps collected before the first gradient step (also the refill after --resume)"""
    learning_rate: float = 1e-4
    """Adam learning rate (dqn_atari.py's)"""
    adam_eps: float = 1.5e-4
    """Adam ε (Rainbow's 1.5e-4 on Atari)"""
    max_grad_norm: float = 40.0
    """global gradient-norm clip"""
    gamma: float = 0.99
    """discount factor γ"""
    n_step: int = 3
    """n of the n-step double-Q target"""
    target_network_frequency: int = 2500
    """gradient steps between target network copies"""
    epsilon: float = 0.4
    """ε of the ladder ε_i = ε^(1 + α i / (N - 1)) over the N = num_actors x num_envs envs"""
    epsilon_alpha: float = 7.0
    """α of the ε ladder"""
    priority_exponent: float = 0.6
    """prioritized replay α, in [0, 1]"""
    importance_beta: float = 0.4
    """importance-sampling exponent β, in [0, 1] (fixed, as the paper)"""
    priority_eps: float = 1e-6
    """ε added to |δ| in the priority"""
    hidden_size: int = 512
    """units of each dueling stream (and, on 1-D observations, of the MLP's two layers)"""
    publish_interval: int = 25
    """gradient steps between parameter publications to the actors (25: every 100 env steps at the default replay
    ratio, about the paper's 400 frames between an actor's copies)"""
    debug_learner_sleep: float = 0.0
    """testing only: seconds the learner sleeps after each gradient step (a slow learner), at most 3600"""


PRIORITY_BATCH = 32
"""An actor computes the initial priorities of this many new transitions at a time (one forward pass of them)."""


def actor_lead(args: Args) -> float:
    """Env steps the actors may collect beyond what the replay ratio lets the learner consume: four batches' worth
    and one step of every env."""
    return float(args.actor_lead) or 4 * args.batch_size / args.replay_ratio + args.num_actors * args.num_envs


def most_steps(args: Args, done: int) -> int:
    """The most env steps the actors can collect in this process, ``done`` steps into the run: the rest of
    --total-timesteps and what the throttle lets them run past it before the learner holds them (its lead, a gradient
    step's worth, and a step of every env under way twice). The replay is capped at what these can fill."""
    columns = args.num_actors * args.num_envs
    return args.total_timesteps - done + math.ceil(actor_lead(args) + args.batch_size / args.replay_ratio) + 2 * columns


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx``: the gymnasium env with its episode statistics; env 0 records videos if asked.

    Atari: dqn_atari.py's preprocessing (no-op starts, frame skip 4 with max-pooling, episodic life, FIRE on
    reset, rewards clipped to their sign, 84x84 grayscale, 4 frames zero-padded at each (life) episode start,
    as the frame-stacked replay expects: uint8 ``[4, 84, 84]``); statistics are the game's (recorded below
    episodic life and clipping); ``training=False`` is the same env (dqn_atari.py's evaluation). Other envs are
    made as they are. No replay log: the actors' envs are not checkpointed (a resumed run starts new episodes).
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
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        return CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step

    return thunk


class DuelingQNetwork(nn.Module):
    """Q = V + A − mean_a A (Wang et al. 2016, eq. 9) on a trunk: the Nature CNN (Mnih et al. 2015) on uint8 frames
    ``[4, 84, 84]`` (0-255), or two ``hidden_size`` ReLU layers on a 1-D observation.

    Args:
        obs_shape: one observation's shape.
        num_actions: size of the Discrete action space.
        hidden_size: units of each stream's hidden layer (and of the MLP's layers).
    """

    def __init__(self, obs_shape: tuple, num_actions: int, hidden_size: int = 512):
        super().__init__()
        self.atari = len(obs_shape) > 1
        if self.atari:
            self.trunk = nn.Sequential(
                nn.Conv2d(obs_shape[0], 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            features = 3136
            self.to(memory_format=torch.channels_last)  # the convolutions' fastest layout on CPU (dqn_atari.py's)
        else:
            self.trunk = nn.Sequential(nn.Linear(int(np.prod(obs_shape)), hidden_size), nn.ReLU())
            features = hidden_size
        self.value = nn.Sequential(nn.Linear(features, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1))
        self.advantage = nn.Sequential(nn.Linear(features, hidden_size), nn.ReLU(), nn.Linear(hidden_size, num_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations ``[B, *obs_shape]`` -> Q-values ``[B, num_actions]``."""
        if self.atari:
            hidden = self.trunk(obs.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)
        else:
            hidden = self.trunk(obs.float())
        advantages = self.advantage(hidden)
        return self.value(hidden) + advantages - advantages.mean(dim=-1, keepdim=True)


def td_errors(
    q_network: nn.Module, target_network: nn.Module, data: ReplaySamples, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Double-Q n-step TD errors δ = G + γ^m Q_target(s', argmax_a Q(s', a)) − Q(s, a) (van Hasselt et al. 2016,
    eq. 4; Horgan et al. 2018, section 3 and Appendix C), with G = sum_{k<m} γ^k r_{t+k} and m = n unless the
    episode ended sooner (γ^m → 0 after a termination; a truncated episode bootstraps from its real final
    observation s').

    The learner calls it with its online and target networks; an actor with its copy of the network as both,
    for the initial priorities.

    Args:
        data: :data:`cleanrl_utils.buffers.ReplaySamples`, B transitions with their n-step windows.
        gamma: discount γ.

    Returns:
        (δ, Q(s, a)), ``[B]`` each; the gradient flows through Q(s, a) only.
    """
    n = data.rewards.shape[1]
    powers = gamma ** torch.arange(n + 1, dtype=torch.float64, device=data.rewards.device)
    returns = (data.rewards.double() * powers[:-1]).sum(1).float()
    discounts = torch.where(data.terminations.any(1), 0.0, powers[data.next_obs_steps]).float()
    with torch.no_grad():
        next_q = q_network(data.next_obs)
        best = next_q.argmax(1, keepdim=True)  # double Q: the online network picks a'
        next_target = next_q if target_network is q_network else target_network(data.next_obs)
        targets = returns + discounts * next_target.gather(1, best).squeeze(1)
    q_taken = q_network(data.obs).gather(1, data.actions.long().unsqueeze(1)).squeeze(1)
    return targets - q_taken, q_taken


# ---------------------------------------------------------------------------------------------
# Actor process


def run_actor(actor_id: int, shared: Shared, args: Args, rb: PrioritizedReplayBuffer, parent_pid: int, video_dir: str):
    """Actor ``actor_id`` (a spawned process): step ``--num-envs`` envs ε-greedily with the latest published network
    (each env on its rung of the ε ladder), write them into the replay's columns of this actor with the priority
    |δ| of each transition whose n-step window completed, until ``shared.stop``."""
    torch.set_num_threads(1)
    os.nice(19)  # the lowest priority, below the learner: it gets the cores it asks for, the actors what is left
    rb.device = torch.device("cpu")  # the transitions this actor reads back for their priorities
    rng = np.random.default_rng([args.seed, actor_id])
    first, E = actor_id * args.num_envs, args.num_envs
    columns = np.arange(first, first + E)
    epsilons = epsilon_ladder(args.num_actors * E, args.epsilon, args.epsilon_alpha)[columns]
    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    thunks = [make_env(args.env_id, i, args.capture_video and i == 0, video_dir) for i in columns]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with actor_envs(envs, first=first, timeout=args.env_timeout):  # a dead or hung env worker: one line; closed after
        num_actions = int(envs.single_action_space.n)
        network = DuelingQNetwork(envs.single_observation_space.shape, num_actions, args.hidden_size)
        network.requires_grad_(False)
        version = shared.pull(network, -1)
        per_update, lead = args.batch_size / args.replay_ratio, actor_lead(args)
        obs, _ = envs.reset(seed=args.seed + first)
        waiting = []
        while not shared.stop[0]:
            version = shared.pull(network, version)
            with torch.no_grad():
                greedy = network(torch.as_tensor(obs)).argmax(1).numpy()
            explore = rng.random(E) < epsilons
            actions = np.where(explore, rng.integers(num_actions, size=E), greedy)
            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            # s' is the real next observation: where an episode ended, its final observation
            ready = rb.add(
                obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos), columns=columns,
                initial_priority=0.0,
            )  # fmt: skip
            waiting.extend(ready)  # transitions whose n-step windows completed, kept from sampling (priority 0)
            if len(waiting) >= PRIORITY_BATCH:  # until this network sets their priority |δ|, a batch at a time
                data, versions = rb.transitions(np.array(waiting))
                with torch.no_grad():
                    delta, _ = td_errors(network, network, data, args.gamma)
                rb.update_priorities(data.indices, delta.abs(), versions)
                waiting.clear()
            final = infos.get("final_info", {})
            for e in np.flatnonzero(final.get("_episode", ())):
                shared.episodes.put((actor_id, first + e, float(final["episode"]["r"][e]), int(final["episode"]["l"][e])))
            obs = next_obs
            shared.actor_steps[actor_id] += E
            # the throttle: not too far ahead of the learner (waking every 5 ms leaves the learner's threads their cores)
            wait_for_learner(shared, per_update, args.learning_starts, lead, parent_pid, poll=0.005)


# ---------------------------------------------------------------------------------------------
# Evaluation policy


def epsilon_greedy(network: nn.Module, num_actions: int, epsilon: float, seed: int, device: torch.device | str):
    """A policy for :func:`cleanrl_utils.evals.run_episodes`: observations ``[N, *obs_shape]`` -> actions ``[N]``,
    the network's greedy actions, each replaced by a uniformly random one with probability ``epsilon``."""
    rng = np.random.default_rng(seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            actions = network(torch.as_tensor(obs, device=device)).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(num_actions, size=len(actions)), actions)

    return policy


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_actors num_envs buffer_size batch_size replay_ratio learning_rate")
    require_positive(args, "adam_eps max_grad_norm n_step target_network_frequency hidden_size publish_interval")
    require_positive(args, "priority_eps")
    for name in "learning_starts actor_lead debug_learner_sleep epsilon_alpha eval_interval".split():
        require(getattr(args, name) >= 0, flag_name(name), f"must be >= 0, got {getattr(args, name)}")
    # each size by its own flag, before any product of them (the replay's columns, the ε ladder) is computed or checked
    require_range(args, num_actors=(1, 2**10), num_envs=(1, 2**16), buffer_size=(1, 2**40), batch_size=(1, 2**20))
    require_range(args, n_step=(1, 2**16), hidden_size=(1, 2**16), debug_learner_sleep=(0, 3600))
    require_range(args, gamma=(0, 1), epsilon=(0, 1), importance_beta=(0, 1))
    require_range(args, priority_exponent=(0, 1))
    per_env = args.buffer_size // (args.num_actors * args.num_envs)
    columns = f"{per_env} steps per env with {args.num_actors} actors x {args.num_envs} envs"
    require(per_env >= args.n_step + 5, "--buffer-size", f"{columns}; --n-step {args.n_step} needs {args.n_step + 5}")
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"{args.buffer_size} is fewer than --batch-size")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.total_timesteps > args.learning_starts, "--learning-starts", no_training)
    per_update = args.batch_size / args.replay_ratio
    require(per_update < float("inf"), "--replay-ratio", f"{args.replay_ratio} is too small")
    wait = f"must exceed --batch-size / --replay-ratio = {per_update:g} env steps (or actors and learner wait)"
    require(args.actor_lead == 0 or args.actor_lead > per_update, "--actor-lead", f"{args.actor_lead} {wait}")
    require(not args.eval_interval or args.eval_episodes > 0, "--eval-episodes", "must be positive with --eval-interval")


def evaluate(model_path: str, eval_episodes: int, epsilon: Optional[float] = None, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script, ε-greedy (ε None: 0 on 1-D observations,
    0.05 on Atari, the usual Atari evaluation). ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    saved = read_file(model_path, "model", script_name(__file__))["args"]
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    shape, num_actions = evaluation.envs.single_observation_space.shape, int(evaluation.envs.single_action_space.n)
    network = evaluation.load(DuelingQNetwork(shape, num_actions, saved["hidden_size"]), "q_network")
    epsilon = (0.05 if len(shape) > 1 else 0.0) if epsilon is None else epsilon
    return evaluation.run(epsilon_greedy(network, num_actions, epsilon, evaluation.seed, evaluation.device))


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), shared replay, run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    probe = make_env(args.env_id, 0, False, "")  # Atari: the spaces after the preprocessing
    observation_space, action_space, atari = check_atari_or_vector_env(args, probe)
    columns = args.num_actors * args.num_envs
    # rows per env: --buffer-size over the envs, or what the run can fill if fewer (one actor may collect all of it)
    steps = most_steps(args, resumed["global_step"] if resumed else 0)
    asked, fill = args.buffer_size // columns, rows_to_hold(-(-steps // args.num_envs), args.n_step, 4 if atari else 1)
    try:  # n-step transitions in [buffer_size / columns, columns] rows, one column per env, Atari frames stored once
        rows = (min(asked, fill), columns, observation_space, action_space)
        replay_args = dict(n_step=args.n_step, frame_stack=4 if atari else 1, alpha=args.priority_exponent)
        rb = PrioritizedReplayBuffer(*rows, **replay_args, eps=args.priority_eps, seed=args.seed, shared=True)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    rb.device = device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the learner checkpoints, stops the actors, exits
            signal.signal(signum, run.stop)  # 128 + signum (the actors ignore them)
    capped = f"; --buffer-size {args.buffer_size} capped at what {steps} env steps can fill" if fill < asked else ""
    print(f"replay: {rb.capacity * columns} transitions in shared memory ({rb.nbytes / 2**20:.1f} MiB){capped}")

    num_actions = int(action_space.n)
    q_network = DuelingQNetwork(observation_space.shape, num_actions, args.hidden_size).to(device)
    target_network = DuelingQNetwork(observation_space.shape, num_actions, args.hidden_size).to(device)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
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
        epsilons = epsilon_ladder(columns, args.epsilon, args.epsilon_alpha)
        for i in range(args.num_actors):
            writer.add_scalar(f"charts/epsilon/actor_{i}", epsilons[i * args.num_envs : (i + 1) * args.num_envs].mean(), 0)
        actors = spawn_actors(run_actor, args.num_actors, shared, args, rb, os.getpid(), run.video_dir, name="apex-actor")
        if args.eval_interval:  # the learner's network, every --eval-interval env steps (the actors wait meanwhile)
            eval_envs = gym.vector.SyncVectorEnv([make_env(args.env_id, 0, False, "", False)], autoreset_mode=SAME_STEP)
            next_eval = (step_offset // args.eval_interval + 1) * args.eval_interval
        per_update = args.batch_size / args.replay_ratio  # env steps each gradient step needs
        global_step, updates, last_log, td_loss, q_mean = step_offset, 0, time.monotonic(), float("nan"), float("nan")
        waited, started = 0.0, time.perf_counter()
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
                if args.eval_interval and global_step >= next_eval:  # the current network, as evaluate() plays
                    next_eval += args.eval_interval * ((global_step - next_eval) // args.eval_interval + 1)
                    policy = epsilon_greedy(q_network, num_actions, 0.05 if atari else 0.0, args.seed + 100_000, device)
                    episodic_returns = run_episodes(eval_envs, policy, args.eval_episodes, args.seed + 100_000)
                    writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
                    print(f"step {global_step}: evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f}")
                now = time.monotonic()
                if now - last_log >= 1.0 and collected > args.learning_starts:
                    last_log = now
                    ratio = updates * args.batch_size / (collected - args.learning_starts)
                    writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
                    writer.add_scalar("charts/replay_ratio", ratio, global_step)
                    writer.add_scalar("charts/updates", update_offset + updates, global_step)
                    writer.add_scalar("charts/learner_wait_fraction", waited / (time.perf_counter() - started), global_step)
                    writer.add_scalar("charts/buffer_transitions", len(rb), global_step)
                    writer.add_scalar("losses/td_loss", td_loss, global_step)
                    writer.add_scalar("losses/q_values", q_mean, global_step)
                if not owed:  # the throttle: a gradient step only when the actors have collected enough for it
                    start_wait = time.perf_counter()
                    time.sleep(0.001)
                    waited += time.perf_counter() - start_wait
                    continue

                # ---- the learner: prioritized batch, double-Q n-step TD errors, importance-weighted squared loss
                data = rb.sample(args.batch_size, args.importance_beta)
                versions = rb.versions.reshape(-1)[data.indices.cpu().numpy()].copy()
                td_error, q_taken = td_errors(q_network, target_network, data, args.gamma)
                loss = (data.weights * td_error.square()).mean()
                optimizer.zero_grad()
                loss.backward()
                check_finite(update_offset + updates + 1, global_step, loss=loss)  # stops a diverging run here
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()
                rb.update_priorities(data.indices, td_error.detach().abs(), versions)  # p = |δ| + ε
                updates += 1
                shared.updates[0] = updates
                if updates % args.publish_interval == 0:
                    shared.publish(q_network)
                if (update_offset + updates) % args.target_network_frequency == 0:
                    target_network.load_state_dict(q_network.state_dict())
                td_loss, q_mean = loss.item(), q_taken.mean().item()
                if args.debug_learner_sleep:
                    time.sleep(args.debug_learner_sleep)
        finally:  # also after a fault, before it is said in one line
            stop_actors(actors, shared)
        if run.stop_signal:  # the checkpoint written, the actors stopped: exit 128 + the signal
            run.exit(*([eval_envs] if args.eval_interval else []))
    run.progress(force=True)
    collected = int(shared.actor_steps.sum())
    if collected > args.learning_starts:
        ratio = updates * args.batch_size / (collected - args.learning_starts)
        writer.add_scalar("charts/replay_ratio", ratio, global_step)
        print(f"replay ratio {ratio:.3f} (target {args.replay_ratio}); {updates} gradient steps, {collected} env steps")

    if args.eval_interval:
        eval_envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

"""DDPG for continuous actions: a deterministic policy trained through a learnt Q-function.

Deep Deterministic Policy Gradient:
    Lillicrap et al. (2016), "Continuous control with deep reinforcement learning", arXiv:1509.02971
        (Algorithm 1); Silver et al. (2014), "Deterministic Policy Gradient Algorithms", ICML.

What this file changes, as CleanRL's ddpg_continuous_action.py does (mostly Fujimoto et al. 2018,
arXiv:1802.09477, "Our DDPG"): Gaussian exploration noise instead of Ornstein-Uhlenbeck, 256-256
networks, no weight decay or batch norm, 25k random steps first, and the policy and targets updated
every second critic update (`--policy-frequency 1` for the original). Against CleanRL: the networks
work in [-1, 1]^|A| (`scale_action` maps to the env's bounds); a truncation bootstraps from the real
final observation, as in CleanRL.
Details, flags, metrics and results: docs/scripts/ddpg_continuous.md.

Run:
    python cleanrl/ddpg_continuous.py --env-id Hopper-v5          # needs the mujoco extra
    python cleanrl/ddpg_continuous.py --env-id Pendulum-v1 --total-timesteps 20000 --learning-starts 1000
"""

import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """DDPG's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the replay buffer too (its size is printed) and --resume continues exactly"""
    compile: bool = False
    """if toggled, compile the updates with `torch.compile`"""
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


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with its episode statistics and (``training``) its replay log; env 0 records
    videos if asked, of the episodes ``video_episodes(index)`` picks (MuJoCo renders through EGL without a display)."""

    def thunk():
        if env_id.startswith("dm_control/"):  # registered in each process, a fresh worker's too
            from cleanrl_utils import dmc

            dmc.register(env_id)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)  # dm_control's Dict of vectors -> one vector (a Box is unchanged)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def scale_action(u: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The policy's u in [-1, 1] (``[B, |A|]`` or ``[|A|]``) to the env's a = low + (u + 1) (high - low) / 2 in [low, high]."""
    return low + (u + 1.0) * (0.5 * (high - low))


def unscale_action(a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The inverse of :func:`scale_action`: u = 2 (a - low) / (high - low) - 1, shapes as there."""
    return 2.0 * (a - low) / (high - low) - 1.0


class QEnsemble(nn.Module):
    """K independent critics Q_k(s, a), each an MLP 256-256 ReLU (CleanRL's QNetwork); DDPG has K = 1."""

    def __init__(self, obs_dim: int, action_dim: int, num_critics: int = 2, hidden: int = 256):
        super().__init__()
        self.critics = nn.ModuleList(
            nn.Sequential(
                nn.Linear(obs_dim + action_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
            )
            for _ in range(num_critics)
        )

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, first: Optional[int] = None) -> torch.Tensor:
        """Q-values ``[K, B]`` of observations ``[B, obs_dim]`` and actions ``[B, |A|]``; ``first = k``: critics
        0..k-1 only, ``[k, B]``."""
        x = torch.cat([obs, actions], dim=-1)
        return torch.stack([critic(x).squeeze(-1) for critic in self.critics[:first]])


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
    """u = clip(μ(s) + σ ε, -1, 1), ``[B, |A|]``, ε ~ N(0, I) per entry, σ a fraction of the half-range."""
    return np.clip(actions + sigma * noise, -1.0, 1.0)


def ddpg_target(rewards: torch.Tensor, terminations: torch.Tensor, next_q: torch.Tensor, gamma: float) -> torch.Tensor:
    """y = r + γ (1 - terminated) Q'(s', μ'(s')) (arXiv:1509.02971, Algorithm 1); ``next_q`` ``[1, B]``, the rest ``[B]``;
    a truncated episode bootstraps (s' is its real final observation)."""
    return rewards + gamma * (1 - terminations) * next_q[0]


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size learning_rate gradient_steps policy_frequency")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40))
    require_range(args, gamma=(0, 1))
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    noise = f"must be in [0, 1e6] (units of the action scale), got {args.exploration_noise}"
    require(0 <= args.exploration_noise <= 1e6, "--exploration-noise", noise)
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    per_env = f"holds fewer than 3 steps per env with --num-envs {args.num_envs}"
    require(args.buffer_size // args.num_envs >= 3, "--buffer-size", per_env)


def evaluate(model_path: str, eval_episodes: int, exploration_noise: float = 0.0, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a saved policy, with Gaussian noise of σ ``exploration_noise`` (0: none)
    on its actions; ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    space = evaluation.envs.single_action_space
    actor = Actor(int(np.prod(evaluation.envs.single_observation_space.shape)), int(np.prod(space.shape)))
    actor = evaluation.load(actor, "actor")
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        actions = actor(torch.as_tensor(obs, dtype=torch.float32, device=evaluation.device)).cpu().numpy()
        actions = exploration_actions(actions, rng.standard_normal(actions.shape), exploration_noise)
        return scale_action(actions, space.low, space.high)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    observation_space, action_space = check_env(
        args, gym.spaces.Box, gym.spaces.Box, obs_ndim=1, bounded_actions=True, flatten=True
    )
    N = args.num_envs
    try:  # Replay of [buffer_size / N, N] rows: observations as float32, actions in the policy's range [-1, 1]
        obs_box = gym.spaces.Box(-np.inf, np.inf, observation_space.shape, np.float32)
        unit_box = gym.spaces.Box(-1.0, 1.0, action_space.shape, np.float32)
        rb = ReplayBuffer(args.buffer_size // N, N, obs_box, unit_box, seed=args.seed)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    rb.device = device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an env whose episode ends is reset within that step(); its last observation is infos["final_obs"]
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(N)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        action_dim = int(np.prod(envs.single_action_space.shape))
        low, high = envs.single_action_space.low.astype(np.float64), envs.single_action_space.high.astype(np.float64)

        actor = Actor(obs_dim, action_dim).to(device)
        actor_target = Actor(obs_dim, action_dim).to(device)
        actor_target.load_state_dict(actor.state_dict())
        qf = QEnsemble(obs_dim, action_dim, num_critics=1).to(device)
        qf_target = QEnsemble(obs_dim, action_dim, num_critics=1).to(device)
        qf_target.load_state_dict(qf.state_dict())
        q_optimizer = optim.Adam(qf.parameters(), lr=args.learning_rate, fused=True)
        actor_optimizer = optim.Adam(actor.parameters(), lr=args.learning_rate, fused=True)
        rng = np.random.default_rng(args.seed)

        def critic_update(data):
            """One gradient step of the critics on a batch; returns (Q-values [K, B], per-critic losses [K])."""
            with torch.no_grad():
                next_q = qf_target(data.next_obs, actor_target(data.next_obs))
                td_target = ddpg_target(data.rewards[:, 0], data.terminations[:, 0], next_q, args.gamma)  # one-step window
            q = qf(data.obs, data.actions)
            qf_losses = (q - td_target).square().mean(dim=1)
            q_optimizer.zero_grad()
            qf_losses.sum().backward()
            q_optimizer.step()
            return q.detach(), qf_losses.detach()

        def actor_update(obs):
            """One policy step: ascend Q(s, μ(s)) (the critic's weights held constant); returns the loss."""
            actor_loss = -qf(obs, actor(obs))[0].mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            return actor_loss.detach()

        if args.compile:
            critic_update = torch.compile(critic_update)
            actor_update = torch.compile(actor_update)

        model = {"actor": actor, "qf": qf}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the global random generators
        state = dict(actor=actor, actor_target=actor_target, qf=qf, qf_target=qf_target, rng=rng, envs=envs, replay_rng=rb.rng)
        state.update(q_optimizer=q_optimizer, actor_optimizer=actor_optimizer)
        if args.checkpoint_buffer:
            state["replay_buffer"] = rb
            print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.3g} MiB)")
        global_step, num_updates, updates_start = 0, 0, args.learning_starts  # updates once global_step > updates_start
        actor_loss = torch.zeros(())  # the last policy loss, for the logs
        if run.resumed:  # the checkpoint's networks, optimisers, generators, envs (replayed) and buffer, in place
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, num_updates, obs = saved["global_step"], saved["num_updates"], saved["obs"]
            updates_start, actor_loss = saved["updates_start"], saved["actor_loss"]
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start = global_step + args.learning_starts
                print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        else:
            obs, _ = envs.reset(seed=args.seed)

        target_params = list(qf_target.parameters()) + list(actor_target.parameters())
        online_params = list(qf.parameters()) + list(actor.parameters())
        for iteration in range(global_step // N, args.total_timesteps // N):
            global_step += N
            if global_step <= args.learning_starts:
                u = rng.uniform(-1.0, 1.0, (N, action_dim))
            else:
                with torch.inference_mode():
                    mu = actor(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()
                u = exploration_actions(mu, rng.standard_normal((N, action_dim)), args.exploration_noise)
            next_obs, rewards, terminations, truncations, infos = envs.step(scale_action(u, low, high))
            run.log_episodes(global_step, infos)
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
                        with torch.no_grad():  # θ' ← τ θ + (1 - τ) θ'
                            for target_param, param in zip(target_params, online_params):
                                target_param.lerp_(param, args.tau)
                    # stops a diverging run here
                    check_finite(num_updates, global_step, qf_loss=qf_losses, actor_loss=actor_loss)

                if iteration % 100 == 0 and num_updates >= args.policy_frequency:
                    writer.add_scalar("losses/qf1_values", q[0].mean().item(), global_step)
                    writer.add_scalar("losses/qf1_loss", qf_losses[0].item(), global_step)
                    writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                    writer.add_scalar("charts/learning_rate", q_optimizer.param_groups[0]["lr"], global_step)
                    writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                counters = dict(num_updates=num_updates, updates_start=updates_start, actor_loss=actor_loss)
                run.save_checkpoint(state, global_step, model, **counters)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

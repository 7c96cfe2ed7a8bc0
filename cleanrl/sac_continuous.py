"""SAC for continuous actions: twin soft Q-functions, a tanh-squashed Gaussian policy, automatic temperature.

Soft actor-critic, the version with twin Q-functions, target critics and entropy tuning:
    Haarnoja, Zhou, Abbeel, Levine (2018), "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
        Reinforcement Learning with a Stochastic Actor", arXiv:1801.01290;
    Haarnoja et al. (2018), "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905
        (critic loss eq. 5, policy loss eq. 7, temperature loss eq. 18 with H̄ = -|A|, eq. 26);
    Fujimoto et al. (2018), arXiv:1802.09477, for the minimum of two critics.

What this file changes, as CleanRL's sac_continuous_action.py does: the policy takes
`--policy-frequency` steps every `--policy-frequency` critic updates; log σ is squashed into
[-5, 2]; α is learnt as log α. Against CleanRL: the networks work in [-1, 1]^|A| (`scale_action`
maps to the env's bounds, so the entropy target is that of u), α starts at `--alpha` (CleanRL's at 1),
and the temperature loss reuses the log π of the policy step (CleanRL samples again); a truncation
bootstraps from the real final observation, as in CleanRL. Details, flags, metrics and results:
docs/scripts/sac_continuous.md.

Run:
    python cleanrl/sac_continuous.py --env-id Hopper-v5          # needs the mujoco extra
    python cleanrl/sac_continuous.py --env-id Pendulum-v1 --total-timesteps 20000
"""

import math
import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclass
class Args(RunArgs):
    """SAC's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

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
    """target smoothing coefficient: θ' ← τ θ + (1 - τ) θ' every --target-network-frequency critic updates"""
    batch_size: int = 256
    """transitions per gradient step"""
    learning_starts: int = 5000
    """environment steps of uniformly random actions before training starts"""
    gradient_steps: int = 1
    """critic updates per vector step (replay ratio = batch_size * gradient_steps / num_envs)"""
    policy_lr: float = 3e-4
    """Adam learning rate of the policy"""
    q_lr: float = 1e-3
    """Adam learning rate of the critics and of log α"""
    policy_frequency: int = 2
    """critic updates between policy updates; the policy then takes this many steps (same total)"""
    target_network_frequency: int = 1
    """critic updates between target-network updates (Denis Yarats' implementation uses 2)"""
    alpha: float = 0.2
    """entropy temperature α (> 0), the initial value when --autotune; >= 0 with --no-autotune"""
    autotune: bool = True
    """if toggled, learn α by the temperature loss towards the target entropy"""
    target_entropy_scale: float = 1.0
    """target entropy H̄ = -scale * |A| (the paper's -|A| at 1); must be above -log 2"""


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
    """K independent critics Q_k(s, a), each an MLP 256-256 ReLU (CleanRL's QNetwork), called one after another."""

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
    """Tanh-squashed Gaussian policy π(u|s), MLP 256-256 ReLU; ``net`` outputs μ and an unbounded log σ, ``[B, 2 |A|]``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2 * action_dim)
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Observations ``[B, obs_dim]`` -> (μ, log σ), each ``[B, |A|]``, log σ bounded."""
        mean, raw_log_std = self.net(obs).chunk(2, dim=-1)
        return mean, bound_log_std(raw_log_std)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised u = tanh(μ + σ ε), ε ~ N(0, I), and log π(u|s); ``[B, |A|]`` and ``[B]``."""
        mean, log_std = self(obs)
        noise = torch.randn_like(mean)
        return squashed_gaussian(mean, log_std, noise)


def bound_log_std(raw: torch.Tensor) -> torch.Tensor:
    """log σ = LOG_STD_MIN + (LOG_STD_MAX - LOG_STD_MIN) (tanh(raw) + 1) / 2, elementwise (CleanRL's bound)."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)


def squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """u = tanh(μ + σ ε) ``[B, |A|]`` and log π(u|s) ``[B]`` (arXiv:1812.05905, eq. 26); inputs ``[B, |A|]``.

    log(1 - tanh² x) = 2 (log 2 - x - softplus(-2x)) stays finite where tanh(x) rounds to ±1 (no "+ 1e-6" bias).
    """
    x = mean + log_std.exp() * noise
    log_normal = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
    log_jacobian = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
    return torch.tanh(x), (log_normal - log_jacobian).sum(dim=-1)


def soft_td_target(
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    next_q: torch.Tensor,
    next_log_probs: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> torch.Tensor:
    """y = r + γ (1 - terminated) (min_k Q'_k(s', a') - α log π(a'|s')), a' ~ π(·|s') (arXiv:1812.05905, eqs. 3 and 5);
    ``next_q`` ``[K, B]``, the rest ``[B]``; a truncated episode bootstraps (s' is its real final observation)."""
    return rewards + gamma * (1 - terminations) * (next_q.min(dim=0).values - alpha * next_log_probs)


def policy_loss(q: torch.Tensor, log_probs: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """E[α log π(ã|s) - min_k Q_k(s, ã)] (arXiv:1812.05905, eq. 7); ``q`` ``[K, B]``, ``log_probs`` ``[B]`` -> scalar."""
    return (alpha * log_probs - q.min(dim=0).values).mean()


def temperature_loss(log_alpha: torch.Tensor, log_probs: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """J(α) = E[-α (log π(a|s) + H̄)] (arXiv:1812.05905, eq. 18) through log α; ``log_probs`` ``[B]`` held constant.
    Its gradient H(π) - H̄ raises α while the policy's entropy is below the target H̄ and lowers it above."""
    return (-log_alpha.exp() * (log_probs.detach() + target_entropy)).mean()


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size policy_lr q_lr gradient_steps policy_frequency")
    require_positive(args, "target_network_frequency")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40))
    require_range(args, gamma=(0, 1))
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.alpha > 0, "--alpha", f"must be > 0 (α is kept as log α), got {args.alpha}")
    entropy = f"above -log 2 = {-math.log(2):.4f}: the target -scale |A| must be below |A| log 2, uniform u's entropy"
    require(args.target_entropy_scale > -math.log(2), "--target-entropy-scale", f"must be {entropy}")
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    per_env = f"holds fewer than 3 steps per env with --num-envs {args.num_envs}"
    require(args.buffer_size // args.num_envs >= 3, "--buffer-size", per_env)


def evaluate(model_path: str, eval_episodes: int, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a policy saved by this script, acting with the mean action tanh(μ).
    ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    space = evaluation.envs.single_action_space
    actor = Actor(int(np.prod(evaluation.envs.single_observation_space.shape)), int(np.prod(space.shape)))
    actor = evaluation.load(actor, "actor")

    def policy(obs: np.ndarray) -> np.ndarray:
        mean, _ = actor(torch.as_tensor(obs, dtype=torch.float32, device=evaluation.device))
        return scale_action(torch.tanh(mean).cpu().numpy(), space.low, space.high)

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
        qf = QEnsemble(obs_dim, action_dim, num_critics=2).to(device)
        qf_target = QEnsemble(obs_dim, action_dim, num_critics=2).to(device)
        qf_target.load_state_dict(qf.state_dict())
        q_optimizer = optim.Adam(qf.parameters(), lr=args.q_lr, fused=True)  # fused: the same Adam, one kernel per step
        actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, fused=True)
        target_entropy = -args.target_entropy_scale * action_dim
        log_alpha = torch.tensor(math.log(args.alpha), device=device, requires_grad=args.autotune)
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, fused=True)  # used with --autotune
        rng = np.random.default_rng(args.seed)

        def critic_update(data):
            """One gradient step of both critics on a batch; returns (Q-values [2, B], per-critic losses [2])."""
            with torch.no_grad():
                next_actions, next_log_probs = actor.sample(data.next_obs)
                next_q = qf_target(data.next_obs, next_actions)
                td_target = soft_td_target(
                    data.rewards[:, 0], data.terminations[:, 0], next_q, next_log_probs, log_alpha.exp(), args.gamma
                )
            q = qf(data.obs, data.actions)
            qf_losses = (q - td_target).square().mean(dim=1)
            q_optimizer.zero_grad()
            qf_losses.sum().backward()
            q_optimizer.step()
            return q.detach(), qf_losses.detach()

        def actor_update(obs):
            """One policy step (and one temperature step); returns (policy loss, temperature loss)."""
            actions, log_probs = actor.sample(obs)
            actor_loss = policy_loss(qf(obs, actions), log_probs, log_alpha.exp().detach())
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            if not args.autotune:
                return actor_loss.detach(), torch.zeros(())
            alpha_loss = temperature_loss(log_alpha, log_probs, target_entropy)
            a_optimizer.zero_grad()
            alpha_loss.backward()
            a_optimizer.step()
            return actor_loss.detach(), alpha_loss.detach()

        if args.compile:
            critic_update = torch.compile(critic_update)
            actor_update = torch.compile(actor_update)

        model = {"actor": actor, "qf": qf, "log_alpha": log_alpha}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the global random generators
        state = dict(actor=actor, qf=qf, qf_target=qf_target, log_alpha=log_alpha, rng=rng, envs=envs, replay_rng=rb.rng)
        state.update(q_optimizer=q_optimizer, actor_optimizer=actor_optimizer, a_optimizer=a_optimizer)
        if args.checkpoint_buffer:
            state["replay_buffer"] = rb
            print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.3g} MiB)")
        global_step, num_updates, updates_start = 0, 0, args.learning_starts  # updates once global_step > updates_start
        actor_loss, alpha_loss = torch.zeros(()), torch.zeros(())  # the last policy and temperature losses, for the logs
        if run.resumed:  # the checkpoint's networks, optimisers, generators, envs (replayed) and buffer, in place
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, num_updates, obs = saved["global_step"], saved["num_updates"], saved["obs"]
            updates_start, (actor_loss, alpha_loss) = saved["updates_start"], saved["losses"]
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start = global_step + args.learning_starts
                print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        else:
            obs, _ = envs.reset(seed=args.seed)

        target_params, online_params = list(qf_target.parameters()), list(qf.parameters())
        for iteration in range(global_step // N, args.total_timesteps // N):
            global_step += N
            if global_step <= args.learning_starts:
                u = rng.uniform(-1.0, 1.0, (N, action_dim))
            else:
                with torch.inference_mode():
                    u = actor.sample(torch.as_tensor(obs, dtype=torch.float32, device=device))[0].cpu().numpy()
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
                    if num_updates % args.policy_frequency == 0:  # delayed, as many policy steps in total
                        for _ in range(args.policy_frequency):
                            actor_loss, alpha_loss = actor_update(data.obs)
                    check_finite(num_updates, global_step, qf_loss=qf_losses, actor_loss=actor_loss, alpha_loss=alpha_loss)
                    if num_updates % args.target_network_frequency == 0:  # θ' ← τ θ + (1 - τ) θ'
                        with torch.no_grad():
                            for target_param, param in zip(target_params, online_params):
                                target_param.lerp_(param, args.tau)

                if iteration % 100 == 0 and num_updates >= args.policy_frequency:
                    writer.add_scalar("losses/qf1_values", q[0].mean().item(), global_step)
                    writer.add_scalar("losses/qf2_values", q[1].mean().item(), global_step)
                    writer.add_scalar("losses/qf1_loss", qf_losses[0].item(), global_step)
                    writer.add_scalar("losses/qf2_loss", qf_losses[1].item(), global_step)
                    writer.add_scalar("losses/qf_loss", qf_losses.sum().item() / 2.0, global_step)
                    writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                    writer.add_scalar("losses/alpha", log_alpha.exp().item(), global_step)
                    if args.autotune:
                        writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)
                    writer.add_scalar("charts/learning_rate", q_optimizer.param_groups[0]["lr"], global_step)
                    writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                counters = dict(num_updates=num_updates, updates_start=updates_start, losses=(actor_loss, alpha_loss))
                run.save_checkpoint(state, global_step, model, **counters)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

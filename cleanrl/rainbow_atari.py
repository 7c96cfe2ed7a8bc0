"""Rainbow on Atari.

Rainbow: Hessel et al. (2018), "Rainbow: Combining Improvements in Deep Reinforcement Learning",
arXiv:1710.02298 (section "The integrated agent", Table 1), all six extensions of DQN:
- distributional Q-learning, 51 atoms on [-10, 10] (Bellemare et al. 2017, arXiv:1707.06887);
- noisy nets, factorised Gaussian noise, σ0 = 0.5 (Fortunato et al. 2018, arXiv:1706.10295);
- a dueling distributional head (Wang et al. 2016, arXiv:1511.06581, eq. 9, per atom);
- multi-step returns, n = 3; double-Q action selection (van Hasselt et al. 2016, arXiv:1509.06461);
- prioritized replay by the KL loss, α = 0.5, β 0.4 -> 1 (Schaul et al. 2016, arXiv:1511.05952).
Network and preprocessing: the Nature CNN (Mnih et al. 2015) and SB3's Atari wrappers.

What this file changes: a time-limit truncation is not a termination; the replay stores each
frame once; gradients are clipped at norm 10; the warm-up acts uniformly at random. Details,
noise schedule, checkpoints and results: docs/scripts/rainbow_atari.md.

Run:
    python cleanrl/rainbow_atari.py --env-id BreakoutNoFrameskip-v4
    python cleanrl/rainbow_atari.py --checkpoint-interval 500000   # then, if stopped:
    python cleanrl/rainbow_atari.py --resume runs/BreakoutNoFrameskip-v4__rainbow_atari__1__<time>
"""

import math
import signal
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    ale_py = None

from cleanrl_utils.buffers import PrioritizedReplayBuffer
from cleanrl_utils.cli import require_support
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """Rainbow's hyperparameters (defaults: Hessel et al. 2018, Table 1); the flags every script takes come from RunArgs."""

    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the replay buffer too (its size is printed) and --resume continues exactly"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id of an Atari game (a NoFrameskip-v4 id: frame skipping is done here)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 10000000
    """total environment steps, summed over envs"""
    learning_rate: float = 6.25e-5
    """Adam learning rate"""
    adam_eps: float = 1.5e-4
    """Adam ε"""
    num_envs: int = 1
    """number of parallel environments"""
    n_atoms: int = 51
    """atoms of the categorical return distribution"""
    v_min: float = -10.0
    """smallest return of the support"""
    v_max: float = 10.0
    """largest return of the support"""
    noisy_sigma0: float = 0.5
    """σ0 of the factorised noisy layers: σ is initialised to σ0 / sqrt(fan-in)"""
    buffer_size: int = 1000000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    n_step: int = 3
    """n of the n-step return"""
    target_network_frequency: int = 8000
    """vector steps between target network copies (32k frames with one env)"""
    batch_size: int = 32
    """transitions per gradient step"""
    learning_starts: int = 20000
    """uniformly random steps before training starts, 80k frames (also the refill after resuming without a buffer)"""
    train_frequency: int = 4
    """vector steps between gradient steps"""
    max_grad_norm: float = 10.0
    """gradients are clipped to this global norm"""
    prioritized_replay_alpha: float = 0.5
    """priority exponent α, in [0, 1] (0: uniform)"""
    prioritized_replay_beta: float = 0.4
    """importance-sampling exponent β at the start, annealed linearly to 1 at the end"""
    prioritized_replay_eps: float = 1e-6
    """ε added to the priority so that no transition has probability 0"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with the standard Atari preprocessing, and (training) its replay log.

    Episode statistics are recorded per game (below episodic life and reward clipping), so
    ``charts/episodic_return`` is the game score. The frame stack is zero-padded at each
    (life) episode start, as the frame-stacked replay expects. Env 0 records videos if asked, of
    the games ``video_episodes(index)`` picks. ``training=False``: an evaluation env (the same
    preprocessing, whose game scores are counted), without replay log.
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the game's score and length, in its last step's info
        env = atari_wrappers.NoopResetEnv(env, noop_max=30)
        env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
        env = atari_wrappers.EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = atari_wrappers.FireResetEnv(env)
        env = atari_wrappers.ClipRewardEnv(env)
        env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
        env = gym.wrappers.ReshapeObservation(env, (84, 84))
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise (Fortunato et al. 2018, section 3).

    y = (μ_w + σ_w ⊙ ε_w) x + μ_b + σ_b ⊙ ε_b, ε_w = f(ε_out) f(ε_in)ᵀ, ε_b = f(ε_out), f(x) = sgn(x) sqrt(|x|);
    μ ~ U[±1/sqrt(in)], σ = σ0 / sqrt(in) (section 3.2). The noise (buffers, not saved) stays fixed until
    :meth:`reset_noise`; in eval mode the layer uses the means alone. A few rows (acting) take the
    factorised product ε_b ⊙ σ_w (f(ε_in) ⊙ x): the same numbers without an ``[out, in]`` temporary.
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("epsilon_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("weight_epsilon", torch.zeros(out_features, in_features), persistent=False)
        self.register_buffer("bias_epsilon", torch.zeros(out_features), persistent=False)
        self.reset_noise()

    @staticmethod
    def _scaled_noise(size: int, device: torch.device) -> torch.Tensor:
        x = torch.randn(size, device=device)
        return x.sign() * x.abs().sqrt()

    def reset_noise(self) -> None:
        """Draw new ε_in, ε_out (from torch's global generator) and set ε_w, ε_b from them."""
        epsilon_in = self._scaled_noise(self.in_features, self.weight_mu.device)
        epsilon_out = self._scaled_noise(self.out_features, self.weight_mu.device)
        self.epsilon_in.copy_(epsilon_in)
        self.weight_epsilon.copy_(torch.outer(epsilon_out, epsilon_in))
        self.bias_epsilon.copy_(epsilon_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        bias = torch.addcmul(self.bias_mu, self.bias_sigma, self.bias_epsilon)
        if x.dim() == 2 and len(x) <= 4:  # acting: the factorised product, cheaper for a few rows
            return F.linear(x, self.weight_mu, bias) + self.bias_epsilon * F.linear(x * self.epsilon_in, self.weight_sigma)
        return F.linear(x, torch.addcmul(self.weight_mu, self.weight_sigma, self.weight_epsilon), bias)


class RainbowNetwork(nn.Module):
    """Nature CNN torso with a dueling distributional head of noisy layers (Hessel et al. 2018).

    logits(s, a) = v(s) + a(s, a) - mean_a' a(s, a'), per atom; each stream NoisyLinear(3136, 512) -> ReLU ->
    NoisyLinear(512, ·). ``atoms``: the support z_1..z_N, ``[n_atoms]`` (a buffer, saved with the model).
    """

    def __init__(self, num_actions: int, n_atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0, sigma0: float = 0.5):
        super().__init__()
        self.num_actions, self.n_atoms = num_actions, n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, n_atoms))
        self.torso = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.value = nn.Sequential(NoisyLinear(3136, 512, sigma0), nn.ReLU(), NoisyLinear(512, n_atoms, sigma0))
        self.advantage = nn.Sequential(
            NoisyLinear(3136, 512, sigma0), nn.ReLU(), NoisyLinear(512, num_actions * n_atoms, sigma0)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Frames uint8 ``[B, 4, 84, 84]`` (0-255) -> logits ``[B, num_actions, n_atoms]``."""
        features = self.torso(x.float() / 255.0)
        value = self.value(features).view(-1, 1, self.n_atoms)
        advantage = self.advantage(features).view(-1, self.num_actions, self.n_atoms)
        return value + advantage - advantage.mean(dim=1, keepdim=True)

    def q_values(self, logits: torch.Tensor) -> torch.Tensor:
        """Q(s, a) = sum_i z_i p_i(s, a): logits ``[B, A, n_atoms]`` -> ``[B, A]``."""
        return (torch.softmax(logits, dim=-1) * self.atoms).sum(dim=-1)

    def reset_noise(self) -> None:
        """Resample the noise of every noisy layer."""
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise()


def noise_buffers(network: nn.Module, name: str) -> dict[str, torch.Tensor]:
    """The noise tensors of ``network``'s noisy layers, ``{f"{name}_noise.{buffer}": tensor}``.

    Not in ``state_dict()``, but a checkpoint needs them: the agent acts with the same noise until the next
    update. :meth:`NoisyLinear.reset_noise` writes into these tensors (captured as copies, restored in place).
    """
    return {
        f"{name}_noise.{buffer_name}": buffer
        for buffer_name, buffer in network.named_buffers()
        if buffer_name.rsplit(".", 1)[-1] in ("epsilon_in", "weight_epsilon", "bias_epsilon")
    }


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (β annealing)."""
    return start + (end - start) * min(t / duration, 1.0)


def n_step_returns(
    rewards: torch.Tensor, terminations: torch.Tensor, next_obs_steps: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step returns G = sum_{j<m} γ^j r_{t+j} and their bootstrap discounts (Hessel et al. 2018, eq. 2).

    ``rewards``, ``terminations``: the replay's window ``[B, n]``; ``next_obs_steps``: m ``[B]`` (n, or fewer
    where the episode ended). Returns (G, γ^m, or 0 after a termination), float32 ``[B]`` each; a
    truncated episode still bootstraps, from its real final observation.
    """
    powers = gamma ** torch.arange(rewards.shape[1] + 1, dtype=torch.float64, device=rewards.device)
    returns = (rewards.double() * powers[:-1]).sum(dim=1)
    discounts = torch.where(terminations.any(dim=1), 0.0, powers[next_obs_steps])
    return returns.float(), discounts.float()


def categorical_projection(
    next_probs: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    atoms: torch.Tensor,
) -> torch.Tensor:
    """Project the distribution of G + γ^m Z(s', a*) onto the support (Bellemare et al. 2017, Algorithm 1).

    Each atom moves to G + γ^m z_j, clipped to [v_min, v_max], its probability split between the two
    neighbouring atoms in proportion to closeness; after a termination (γ^m = 0) the target is G itself.
    ``next_probs`` ``[B, n_atoms]``, ``returns``, ``discounts`` ``[B]``, ``atoms`` ``[n_atoms]`` -> ``[B, n_atoms]``.
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


def double_q_target_distribution(
    next_logits_online: torch.Tensor,
    next_logits_target: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    atoms: torch.Tensor,
) -> torch.Tensor:
    """The Rainbow target: projected distribution of G + γ^m Z_target(s', a*), a* from the online network.

    a* = argmax_a sum_i z_i p_i^online(s', a) (double Q, Hessel et al. 2018), its distribution from the target
    network, projected by :func:`categorical_projection`. Logits ``[B, A, n_atoms]`` -> ``[B, n_atoms]``.
    """
    next_actions = (torch.softmax(next_logits_online, dim=-1) * atoms).sum(-1).argmax(dim=1)
    next_probs = torch.softmax(next_logits_target[torch.arange(len(next_actions)), next_actions], dim=-1)
    return categorical_projection(next_probs, returns, discounts, atoms)


def weighted_cross_entropy(
    chosen_logits: torch.Tensor, target: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prioritized distributional loss and priorities (Hessel et al. 2018, "The integrated agent").

    Returns (mean_i w_i L_i with L_i = -sum_k m_k log p_k, the detached KL(m || p_i) = L_i - H(m_i) ``[B]``):
    same gradient, but only the KL is 0 when the prediction is exact. Logits and ``target`` ``[B, n_atoms]``,
    importance ``weights`` ``[B]``.
    """
    losses = -(target * torch.log_softmax(chosen_logits, dim=-1)).sum(dim=-1)
    with torch.no_grad():
        entropy = -torch.special.xlogy(target, target).sum(dim=-1)
        kl = (losses - entropy).clamp_min(0.0)
    return (weights * losses).mean(), kl


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input (an unknown id, a game that skips frames itself)."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size learning_rate adam_eps target_network_frequency")
    require_positive(args, "train_frequency n_step max_grad_norm prioritized_replay_eps")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40), n_step=(1, 2**16))
    require_range(args, gamma=(0, 1), prioritized_replay_beta=(0, 1), prioritized_replay_alpha=(0, 1))
    require(args.n_atoms >= 2, "--n-atoms", f"must be at least 2, got {args.n_atoms}")
    require_range(args, n_atoms=(2, 2**16))
    require_support(args)  # --v-min < --v-max, both float32 atoms apart
    require(args.noisy_sigma0 >= 0, "--noisy-sigma0", f"must be >= 0, got {args.noisy_sigma0}")
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    steps = args.buffer_size // args.num_envs
    per_env = f"{steps} steps per env with --num-envs {args.num_envs}"
    require(steps >= args.n_step + 2, "--buffer-size", f"{per_env}; --n-step {args.n_step} needs at least {args.n_step + 2}")
    check_env(args, gym.spaces.Discrete, gym.spaces.Box, id_suffix="NoFrameskip-v4")
    with gym.make(args.env_id) as game:
        example = "NoFrameskip-v4 id such as BreakoutNoFrameskip-v4"
        require(hasattr(game.unwrapped, "ale"), "--env-id", f"{args.env_id} is not an Atari game; take an ALE {example}")
        skip = game.spec.kwargs.get("frameskip", 1)
        require(skip == 1, "--env-id", f"{args.env_id} skips frames itself ({args.script}.py skips them): take a {example}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.001, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a model saved by this script, greedy in the mean return of the noisy
    layers' mean weights (no noise), with a small ε of random actions so that a deterministic policy cannot
    loop forever. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    a, num_actions = evaluation.model["args"], int(evaluation.envs.single_action_space.n)
    network = RainbowNetwork(
        num_actions, evaluation.saved_size("n_atoms", 2, 2**16), a["v_min"], a["v_max"], a["noisy_sigma0"]
    )
    q_network = evaluation.load(network, "q_network")  # in eval mode: the mean weights
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        actions = q_network.q_values(q_network(torch.as_tensor(obs, device=evaluation.device))).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(evaluation.envs.single_action_space.n, size=len(actions)), actions)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    probe = make_env(args.env_id, 0, False, "", training=False)()  # the preprocessed spaces size the replay
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    N = args.num_envs
    try:  # Replay: prioritized n-step transitions in [buffer_size / N, N] rows, each frame stored once
        rows = (args.buffer_size // N, N, observation_space, action_space)
        replay_args = dict(n_step=args.n_step, frame_stack=4, seed=args.seed)
        rb = PrioritizedReplayBuffer(
            *rows, alpha=args.prioritized_replay_alpha, eps=args.prioritized_replay_eps, **replay_args
        )
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    rb.device = device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(N)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        num_actions = int(envs.single_action_space.n)
        network_args = (num_actions, args.n_atoms, args.v_min, args.v_max, args.noisy_sigma0)
        # channels-last convolutions: faster updates on CPU (benchmark/README.md)
        q_network = RainbowNetwork(*network_args).to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
        target_network = RainbowNetwork(*network_args).to(device, memory_format=torch.channels_last)
        target_network.load_state_dict(q_network.state_dict())
        rng = np.random.default_rng(args.seed)

        model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the global random generators (the networks' noise too)
        state = dict(
            q_network=q_network, target_network=target_network, optimizer=optimizer, rng=rng, envs=envs, replay_rng=rb.rng
        )
        state |= noise_buffers(q_network, "q_network") | noise_buffers(target_network, "target_network")
        if args.checkpoint_buffer:
            state["replay_buffer"] = rb
            print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.1f} MiB)")
        global_step, updates_start = 0, args.learning_starts  # random actions, no updates, up to updates_start
        fresh_buffer_mid_episode = False  # a resume without the buffer: its first stacks lack older frames
        if run.resumed:  # the checkpoint's networks and noise, optimiser, generators, envs (replayed) and buffer, in place
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, updates_start, obs = saved["global_step"], saved["updates_start"], saved["obs"]
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start, fresh_buffer_mid_episode = global_step + args.learning_starts, True
                print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        else:
            obs, _ = envs.reset(seed=args.seed)

        for iteration in range(global_step // N, args.total_timesteps // N):
            global_step += N
            if global_step <= updates_start:  # warm-up (and refill after a resume without the buffer): random actions
                actions = rng.integers(num_actions, size=N)
            else:  # exploration comes from the noisy layers: greedy in the noisy network's mean return
                with torch.inference_mode():
                    logits = q_network(torch.as_tensor(obs, device=device))
                    actions = q_network.q_values(logits).argmax(dim=1).cpu().numpy()

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            run.log_episodes(global_step, infos)
            if fresh_buffer_mid_episode:  # the empty buffer starts its columns here, as at an episode start
                obs, fresh_buffer_mid_episode = np.concatenate([np.zeros_like(obs[:, :-1]), obs[:, -1:]], 1), False
            # s' is the real next observation: where an episode ended, its final observation.
            rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
            obs = next_obs

            if global_step > updates_start and len(rb) > 0:
                if iteration % args.train_frequency == 0:
                    beta = linear_schedule(args.prioritized_replay_beta, 1.0, args.total_timesteps, global_step)
                    data = rb.sample(args.batch_size, beta)
                    returns, discounts = n_step_returns(data.rewards, data.terminations, data.next_obs_steps, args.gamma)
                    # The online network keeps its noise for s and s'; the target network has its own.
                    with torch.no_grad():
                        target_network.reset_noise()
                        target = double_q_target_distribution(
                            q_network(data.next_obs),
                            target_network(data.next_obs),
                            returns,
                            discounts,
                            target_network.atoms,
                        )
                    logits = q_network(data.obs)
                    chosen = logits[torch.arange(len(data.actions)), data.actions]  # [B, n_atoms]
                    loss, priorities = weighted_cross_entropy(chosen, target, data.weights)
                    rb.update_priorities(data.indices, priorities)

                    optimizer.zero_grad()
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                    check_finite(iteration // args.train_frequency, global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()
                    q_network.reset_noise()  # new noise for acting and for the next update

                    if iteration % (100 * args.train_frequency) == 0:
                        with torch.no_grad():
                            q_taken = (torch.softmax(chosen, dim=-1) * q_network.atoms).sum(dim=-1)
                        writer.add_scalar("losses/loss", loss.item(), global_step)
                        writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)
                        writer.add_scalar("losses/grad_norm", grad_norm.item(), global_step)
                        writer.add_scalar("charts/beta", beta, global_step)
                        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                        writer.add_scalar("charts/SPS", run.sps(global_step), global_step)

                if iteration % args.target_network_frequency == 0:
                    target_network.load_state_dict(q_network.state_dict())
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, updates_start=updates_start)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

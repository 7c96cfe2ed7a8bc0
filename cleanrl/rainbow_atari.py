"""Rainbow on Atari.

Rainbow combines six extensions of DQN; this file has all of them:
    Hessel et al. (2018), "Rainbow: Combining Improvements in Deep Reinforcement Learning",
    AAAI, arXiv:1710.02298 (target, loss and priority: section "The integrated agent";
    hyperparameters: Table 1).
- distributional Q-learning: 51 atoms on [-10, 10], the categorical projection, the
  cross-entropy loss (Bellemare, Dabney, Munos 2017, arXiv:1707.06887, Algorithm 1);
- noisy nets for exploration, factorised Gaussian noise, σ0 = 0.5, no ε-greedy (Fortunato et
  al. 2018, arXiv:1706.10295, section 3);
- dueling distributional head: p(s, a) = softmax(v(s) + a(s, a) - mean_a' a(s, a')) over atoms
  (Wang et al. 2016, arXiv:1511.06581, eq. 9, applied per atom as in Hessel et al.);
- multi-step returns, n = 3 (Sutton 1988; Hessel et al., "Multi-step learning");
- double-Q action selection: a* = argmax_a of the online network's mean at s', evaluated by
  the target network (van Hasselt et al. 2016, arXiv:1509.06461);
- prioritized replay with the per-transition KL divergence of the loss as priority, α = 0.5,
  importance weights with β annealed from 0.4 to 1 (Schaul et al. 2016, arXiv:1511.05952).
Network and preprocessing: the Nature CNN (Mnih et al. 2015, Nature 518:529-533) and the
standard Atari wrappers of stable-baselines3.

What this file changes against the paper: a time-limit truncation is not a termination (the
replay keeps the real final frame stack and the n-step target bootstraps from it); the replay
stores each 84x84 frame once; gradients are clipped at norm 10 (as in the dueling paper and
common Rainbow implementations); before learning starts the agent acts uniformly at random
(as Dopamine's Rainbow does during its warm-up), so the first replay data is not the few
actions of one fixed noisy network. Noise: the online network's noise is resampled after
each gradient step, so the agent acts with one noise sample for the --train-frequency steps
between updates; within an update the online network uses one noise sample for s and s',
the target network an independent one, resampled every update.

Checkpoints (--checkpoint-interval, SIGTERM) hold the networks and their current noise, the
optimiser, the global step (β is a function of it), the random generators (the noise is drawn
from torch's) and the games' states (replayed from their last reset); with --checkpoint-buffer
also the prioritized replay buffer (its sum tree included), and --resume then continues exactly.
Without it the resumed run starts with an empty buffer and refills it for --learning-starts
steps, acting uniformly at random as during the warm-up, before the updates resume; the buffer
then takes each game's current frame as the start of its column, so the stacks of its first
three transitions lack the frames from before the resume.

Run:
    python cleanrl/rainbow_atari.py --env-id BreakoutNoFrameskip-v4
    python cleanrl/rainbow_atari.py --checkpoint-interval 500000   # then, if stopped:
    python cleanrl/rainbow_atari.py --resume runs/BreakoutNoFrameskip-v4__rainbow_atari__1__<time>
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
from stable_baselines3.common.atari_wrappers import (
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
)

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    ale_py = None

from cleanrl_utils.buffers import PrioritizedReplayBuffer
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
    """if toggled, record videos of env 0's episodes into `{run_dir}/videos`"""
    save_model: bool = False
    """if toggled, save the model to `{run_dir}/{exp_name}.cleanrl_model` and evaluate it"""
    eval_episodes: int = 10
    """episodes the saved model is evaluated for (with --save-model)"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the vector step that reaches it (0: only when the run receives SIGTERM)"""
    checkpoint_buffer: bool = False
    """if toggled, each checkpoint also holds the whole replay buffer (--buffer-size transitions: about 7.1 GB for a million Atari ones, each frame stored once; the size is printed at the start), and --resume continues exactly; without it the resumed run starts with an empty buffer and refills it for --learning-starts steps before the updates resume"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch (1 is fastest for these small networks)"""

    # Algorithm specific arguments (defaults: Hessel et al. 2018, Table 1)
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
    """environment steps of uniformly random actions before training starts (80k frames; also the refill after a --resume whose checkpoint has no replay buffer)"""
    train_frequency: int = 4
    """vector steps between gradient steps"""
    max_grad_norm: float = 10.0
    """gradients are clipped to this global norm"""
    prioritized_replay_alpha: float = 0.5
    """priority exponent α (0: uniform)"""
    prioritized_replay_beta: float = 0.4
    """importance-sampling exponent β at the start, annealed linearly to 1 at the end"""
    prioritized_replay_eps: float = 1e-6
    """ε added to the priority so that no transition has probability 0"""


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(
        args,
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "batch_size",
        "learning_rate",
        "adam_eps",
        "target_network_frequency",
        "train_frequency",
        "torch_threads",
        "n_step",
        "max_grad_norm",
        "prioritized_replay_eps",
    )
    require(args.n_atoms >= 2, "--n-atoms", f"must be at least 2, got {args.n_atoms}")
    require(args.v_min < args.v_max, "--v-max", f"{args.v_max} is not above --v-min {args.v_min}")
    require(args.noisy_sigma0 >= 0, "--noisy-sigma0", f"must be >= 0, got {args.noisy_sigma0}")
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(
        args.prioritized_replay_alpha >= 0, "--prioritized-replay-alpha", f"must be >= 0, got {args.prioritized_replay_alpha}"
    )
    require(
        0 <= args.prioritized_replay_beta <= 1,
        "--prioritized-replay-beta",
        f"must be in [0, 1], got {args.prioritized_replay_beta}",
    )
    require(
        args.buffer_size >= args.batch_size,
        "--buffer-size",
        f"{args.buffer_size} is smaller than --batch-size {args.batch_size}",
    )
    require(
        args.buffer_size // args.num_envs >= args.n_step + 2,
        "--buffer-size",
        f"{args.buffer_size} holds {args.buffer_size // args.num_envs} steps per env; "
        f"--n-step {args.n_step} needs at least {args.n_step + 2}",
    )
    require(
        args.total_timesteps > args.learning_starts,
        "--learning-starts",
        f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}",
    )
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, video_episodes=None):
    """A thunk creating env ``idx`` with the standard Atari preprocessing; env 0 records videos if asked.

    Episode statistics are recorded per game (before episodic life and reward clipping), so
    ``charts/episodic_return`` is the game score. The frame stack is zero-padded at each
    (life) episode start, as the frame-stacked replay expects. ``video_episodes(i) -> bool``
    picks the episodes to record.
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        return env

    return thunk


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise (Fortunato et al. 2018, section 3).

    y = (μ_w + σ_w ⊙ ε_w) x + μ_b + σ_b ⊙ ε_b with ε_w = f(ε_out) f(ε_in)ᵀ, ε_b = f(ε_out),
    f(x) = sgn(x) sqrt(|x|), ε_in ~ N(0, I_in), ε_out ~ N(0, I_out). Initialisation (section
    3.2): μ ~ U[-1/sqrt(in), 1/sqrt(in)], σ = σ0 / sqrt(in). The noise stays fixed until
    :meth:`reset_noise`; in eval mode (``module.eval()``) the layer uses the means alone.

    Args:
        in_features, out_features: sizes of x ``[..., in]`` and y ``[..., out]``.
        sigma0: σ0 (0.5 in the paper for factorised noise).

    Attributes:
        epsilon_in: f(ε_in), ``[in]``; weight_epsilon: ε_w, ``[out, in]``; bias_epsilon: ε_b = f(ε_out),
            ``[out]`` (buffers, not saved). Small batches (acting) use the factorised product
            directly: (σ_w ⊙ ε_w) x = ε_b ⊙ σ_w (f(ε_in) ⊙ x), the same numbers without an
            ``[out, in]`` temporary.
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

    logits(s, a) = v(s) + a(s, a) - mean_a' a(s, a'), per atom; p(s, a) = softmax over atoms.
    Each stream is NoisyLinear(3136, 512) -> ReLU -> NoisyLinear(512, ·).

    Args:
        num_actions: size of the Discrete action space.
        n_atoms: atoms of the support; v_min, v_max: its ends (evenly spaced).
        sigma0: σ0 of the noisy layers.

    Attributes:
        atoms: the support z_1..z_N, ``[n_atoms]`` (a buffer, saved with the model).
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


def noise(network: nn.Module) -> dict:
    """The current noise of ``network``'s noisy layers, ``{buffer name: tensor}`` (copies).

    The noise buffers are not part of ``state_dict()`` (a saved model has no use for them), but
    a checkpoint needs them: the agent keeps acting with the same noise sample until the next
    update, and the next noise is then drawn from torch's generator (saved with the checkpoint).
    """
    return {
        name: buffer.clone()
        for name, buffer in network.named_buffers()
        if name.rsplit(".", 1)[-1] in ("epsilon_in", "weight_epsilon", "bias_epsilon")
    }


def load_noise(network: nn.Module, state: dict) -> None:
    """Set the noise of ``network``'s noisy layers to ``state``, from :func:`noise`.

    Raises:
        KeyError: ``state`` names a buffer ``network`` does not have.
    """
    buffers = dict(network.named_buffers())
    for name, value in state.items():
        buffers[name].copy_(value)


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (β annealing)."""
    return start + (end - start) * min(t / duration, 1.0)


def categorical_projection(
    next_probs: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    atoms: torch.Tensor,
) -> torch.Tensor:
    """Project the target distribution of G + γ^m Z(s', a*) onto the support (Bellemare et al. 2017, Algorithm 1).

    Each atom z_j of the next-state distribution moves to T z_j = G + γ^m z_j, clipped to
    [v_min, v_max]; its probability is split between the two neighbouring atoms of the support
    in proportion to closeness (all of it to one atom when T z_j falls exactly on it). Where the
    episode terminated (discount 0) every T z_j is G: the target is G itself, projected.

    Args:
        next_probs: p_j(s', a*), ``[B, n_atoms]``, rows summing to 1.
        returns: G, the n-step return, ``[B]``.
        discounts: γ^m, or 0 where the episode terminated, ``[B]``.
        atoms: the evenly spaced support z, ``[n_atoms]``.

    Returns:
        The projected target distribution m, ``[B, n_atoms]``, rows summing to 1.
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

    a* = argmax_a sum_i z_i p_i^online(s', a) (double Q, Hessel et al. 2018, "The integrated agent"), its
    distribution taken from the target network and projected with :func:`categorical_projection`.

    Args:
        next_logits_online, next_logits_target: logits at s', ``[B, A, n_atoms]``.
        returns: n-step returns G, ``[B]``; discounts: γ^m, or 0 after a termination, ``[B]``.
        atoms: the support, ``[n_atoms]``.

    Returns:
        Target distributions m, ``[B, n_atoms]``.
    """
    next_actions = (torch.softmax(next_logits_online, dim=-1) * atoms).sum(-1).argmax(dim=1)
    next_probs = torch.softmax(next_logits_target[torch.arange(len(next_actions)), next_actions], dim=-1)
    return categorical_projection(next_probs, returns, discounts, atoms)


def weighted_cross_entropy(
    chosen_logits: torch.Tensor, target: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prioritized distributional loss and priorities (Hessel et al. 2018, "The integrated agent").

    Args:
        chosen_logits: logits of the taken actions, ``[B, n_atoms]``.
        target: projected target distributions m, ``[B, n_atoms]``.
        weights: importance weights w_i = (N P(i))^-β / max_j w_j, ``[B]``.

    Returns:
        ``(loss, priorities)``: the scalar mean_i w_i L_i with the cross-entropy
        L_i = -sum_k m_k log p_k, and the detached per-transition KL divergence
        KL(m || p_i) = L_i - H(m_i) ``[B]``, the new priorities. The two differ by the entropy
        of the target, which does not depend on the network: same gradient, but only the KL is
        0 when the prediction is exact (a target between two atoms has entropy up to ln 2).
    """
    losses = -(target * torch.log_softmax(chosen_logits, dim=-1)).sum(dim=-1)
    with torch.no_grad():
        entropy = -torch.special.xlogy(target, target).sum(dim=-1)
        kl = (losses - entropy).clamp_min(0.0)
    return (weights * losses).mean(), kl


def evaluate(
    model_path: str,
    eval_episodes: int,
    env_id: Optional[str] = None,
    capture_video: bool = False,
    video_dir: str = "videos",
    seed: Optional[int] = None,
    epsilon: float = 0.001,
    device: str = "cpu",
) -> np.ndarray:
    """Evaluate a model saved by this script for ``eval_episodes`` episodes.

    The noisy layers use their mean weights (no noise); actions are greedy in the mean return,
    with a small ε of random actions so that a deterministic policy cannot loop forever.

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole episodes.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation episodes into ``video_dir``.
        seed: seed of the evaluation env and of the ε draws; None means the training
            seed + 100000, as the evaluation at the end of training uses.
        epsilon: probability of a random action (0: greedy).
        device: torch device for the network.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by rainbow_atari.py.
    """
    content = load_model(model_path, "rainbow_atari")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env(
        [make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)], episode_statistics=False
    )
    rng = np.random.default_rng(seed)
    a = content["args"]
    network = RainbowNetwork(int(envs.single_action_space.n), a["n_atoms"], a["v_min"], a["v_max"], a["noisy_sigma0"]).to(
        device
    )
    network.load_state_dict(content["model"])
    network.eval()  # mean weights

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        actions = network.q_values(network(torch.as_tensor(obs, device=device))).argmax(-1).cpu().numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(envs.single_action_space.n, size=len(actions)), actions)

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "rainbow_atari")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    check_env(args.env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "rainbow_atari.py", id_suffix="NoFrameskip-v4")
    with gym.make(args.env_id) as game:
        require(
            hasattr(game.unwrapped, "ale"),
            "--env-id",
            f"{args.env_id} is not an Atari game; rainbow_atari.py takes ALE ids such as BreakoutNoFrameskip-v4",
        )
        require(
            game.spec.kwargs.get("frameskip", 1) == 1,
            "--env-id",
            f"{args.env_id} skips frames itself; take its NoFrameskip-v4 id (such as BreakoutNoFrameskip-v4): "
            "the frame skipping is done here",
        )
    probe = make_env(args.env_id, 0, False, "")()  # the preprocessed spaces size the replay
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    N = args.num_envs
    try:  # prioritized n-step transitions in [buffer_size / N, N] rows, each frame stored once
        rb = PrioritizedReplayBuffer(
            args.buffer_size // N,
            N,
            observation_space,
            action_space,
            n_step=args.n_step,
            gamma=args.gamma,
            frame_stack=4,
            alpha=args.prioritized_replay_alpha,
            eps=args.prioritized_replay_eps,
            device=device,
            seed=args.seed,
        )
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)

    envs = make_vector_env(  # episode statistics come from each env: game scores
        [make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(args.num_envs)],
        args.env_mode,
        episode_statistics=False,
    )
    num_actions = int(envs.single_action_space.n)
    network_args = (num_actions, args.n_atoms, args.v_min, args.v_max, args.noisy_sigma0)
    # channels-last convolutions: faster updates on CPU (benchmark/README.md)
    q_network = RainbowNetwork(*network_args).to(device, memory_format=torch.channels_last)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
    target_network = RainbowNetwork(*network_args).to(device, memory_format=torch.channels_last)
    target_network.load_state_dict(q_network.state_dict())
    rng = np.random.default_rng(args.seed)
    num_iterations = args.total_timesteps // N

    global_step, updates_start = 0, args.learning_starts  # random actions, no updates, up to updates_start
    fresh_buffer_mid_episode = False  # a resume without the buffer: its first stacks lack older frames
    if resumed is None:
        obs, _ = envs.reset(seed=args.seed)
    else:  # continue: networks and their noise, optimiser, step (β follows from it), envs (replayed), generators
        q_network.load_state_dict(resumed["model"])
        target_network.load_state_dict(resumed["target_model"])
        load_noise(q_network, resumed["noise"])
        load_noise(target_network, resumed["target_noise"])
        optimizer.load_state_dict(resumed["optimizer"])
        rng = make_generator(resumed["action_rng"])
        global_step = resumed["global_step"]
        if "buffer" in resumed:  # exactly
            rb.load_state_dict(resumed["buffer"])
            updates_start = resumed["updates_start"]
        else:  # an empty buffer: refill it for --learning-starts steps before updating again
            rb.rng.bit_generator.state = resumed["replay_rng"]
            updates_start = global_step + args.learning_starts
            fresh_buffer_mid_episode = True
            print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    if args.checkpoint_buffer:
        print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.1f} MiB) besides the networks and optimisers")
    checkpointer = Checkpointer(run.directory, "rainbow_atari", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.buffer_size % N:
        print(f"replay capacity {rb.capacity * N} transitions: --buffer-size rounded down to a multiple of --num-envs {N}")
    if num_iterations * N != args.total_timesteps:
        print(f"training {num_iterations * N} steps: --total-timesteps rounded down to a multiple of --num-envs {N}")
    progress = Progress(num_iterations * N, start_step=global_step)
    for iteration in range(global_step // N, num_iterations):
        global_step += N
        if global_step <= updates_start:  # warm-up (and refill after a resume without the buffer): random actions
            actions = rng.integers(num_actions, size=N)
        else:  # exploration comes from the noisy layers: greedy in the noisy network's mean return
            with torch.no_grad():
                logits = q_network(torch.from_numpy(obs).to(device))
                actions = q_network.q_values(logits).argmax(dim=-1).cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "_episode" in infos:
            progress.episodes(log_episodes(writer, infos, global_step))
        if fresh_buffer_mid_episode:  # the empty buffer starts its columns here, as at an episode start
            obs, fresh_buffer_mid_episode = np.concatenate([np.zeros_like(obs[:, :-1]), obs[:, -1:]], 1), False
        # s' is the real next observation: where an episode ended, its final observation.
        rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
        obs = next_obs

        if global_step > updates_start and len(rb) > 0:
            if iteration % args.train_frequency == 0:
                beta = linear_schedule(args.prioritized_replay_beta, 1.0, args.total_timesteps, global_step)
                data = rb.sample(args.batch_size, beta)
                # The online network keeps its noise for s and s'; the target network has its own.
                with torch.no_grad():
                    target_network.reset_noise()
                    target = double_q_target_distribution(
                        q_network(data.next_obs),
                        target_network(data.next_obs),
                        data.rewards,
                        data.discounts,
                        target_network.atoms,
                    )
                logits = q_network(data.obs)
                chosen = logits[torch.arange(len(data.actions)), data.actions]  # [B, n_atoms]
                loss, priorities = weighted_cross_entropy(chosen, target, data.weights)
                rb.update_priorities(data.indices, priorities)

                optimizer.zero_grad()
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
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
                    sps = int((global_step - start_step) / (time.time() - start_time))
                    writer.add_scalar("charts/SPS", sps, global_step)

            if iteration % args.target_network_frequency == 0:
                target_network.load_state_dict(q_network.state_dict())
        progress.update(global_step)
        if checkpointer.due(global_step):  # also on SIGTERM, which then ends the run (status 143)
            replay = {"buffer": rb.state_dict()} if args.checkpoint_buffer else {"replay_rng": generator_state(rb.rng)}
            checkpointer.save(
                global_step,
                {
                    "model": q_network.state_dict(),
                    "target_model": target_network.state_dict(),
                    "noise": noise(q_network),
                    "target_noise": noise(target_network),
                    "optimizer": optimizer.state_dict(),
                    "action_rng": generator_state(rng),
                    "updates_start": updates_start,
                    "envs": envs_state(envs),
                    "wandb_id": run.wandb_id,
                    **replay,
                },
            )
    progress.close()

    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "rainbow_atari", args, q_network.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

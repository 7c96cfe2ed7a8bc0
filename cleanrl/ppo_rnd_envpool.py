"""PPO with Random Network Distillation (RND) on Atari with EnvPool: a bonus for what a predictor cannot yet predict.

Burda, Edwards, Storkey, Klimov (2018), "Exploration by Random Network Distillation", arXiv:1810.12894: the
intrinsic reward ||f̂(s') - f(s')||² of a predictor f̂ trained to match a fixed random network f, divided by a
running std of its discounted return; non-episodic intrinsic returns and two value heads (γ_E 0.999, γ_I 0.99).
On PPO (Schulman et al. 2017, arXiv:1707.06347) with GAE, CleanRL's ppo_rnd_envpool.py networks and settings, and
EnvPool (Weng et al. 2022, arXiv:2206.10558) with sticky actions (Machado et al. 2018, arXiv:1709.06009).

What this file changes against CleanRL's:
- the discounted intrinsic return whose std scales the rewards runs over each env's steps (Burda
  et al.'s code; CleanRL's runs across the envs of each step);
- the predictor learns on the frames that gave the rewards (s_{t+1}; CleanRL's on s_t);
- EnvPool's reset steps are masked out of PPO's losses and a truncation bootstraps V_E from the
  real final observation (as ppo_atari_envpool.py);
- training starts from new games after the random play; --resume makes new envs.
Details and results: docs/scripts/ppo_rnd_envpool.md.

Run:
    python cleanrl/ppo_rnd_envpool.py --env-id MontezumaRevenge-v5
"""

import os
import signal
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from gymnasium.wrappers.utils import RunningMeanStd

from cleanrl_utils.envpool_atari import GameStatistics, check_envpool_atari, check_rollout
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run

try:  # EnvPool comes with the envpool extra; without it, --env-id says so
    import envpool
except ImportError:
    envpool = None

FRAME_SKIP = 4
"""Frames per agent step (the action is repeated, the last two frames max-pooled)."""
MAX_EPISODE_STEPS = 27_000
"""Agent steps per game before a time-limit truncation (108,000 frames; EnvPool's default, as CleanRL's)."""
STICKY_ACTIONS = 0.25
"""Probability that the emulator repeats the previous action at a frame instead of the agent's (Machado et al. 2018)."""
OBS_CLIP = 5.0
"""The RND input, normalised, is clipped to [-5, 5] (Burda et al. 2018, sec. 2.4)."""


@dataclass
class Args(RunArgs):
    """PPO's and RND's hyperparameters; the flags every script takes (--seed, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "MontezumaRevenge-v5"
    """EnvPool id of an Atari game (such as MontezumaRevenge-v5, Venture-v5)"""
    env_mode: Literal["sync", "async"] = "sync"
    """sync only: EnvPool steps the envs in its own C++ threads (--num-threads); async is refused"""
    num_threads: Optional[int] = None
    """EnvPool's C++ threads stepping the envs; None: the number of CPU cores available"""
    total_timesteps: int = 2000000000
    """total agent steps of training, summed over envs (4 frames each; reset steps included, random play not)"""
    learning_rate: float = 1e-4
    """Adam learning rate of the agent and the predictor at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 128
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.999
    """extrinsic discount factor γ_E"""
    gae_lambda: float = 0.95
    """GAE λ of both advantages"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise the combined advantages within each minibatch"""
    clip_coef: float = 0.1
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε]); also the extrinsic value clip"""
    clip_vloss: bool = True
    """if toggled, clip the extrinsic value loss as in the reference implementation"""
    ent_coef: float = 0.001
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """coefficient of the value loss (extrinsic + intrinsic)"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip of the agent and the predictor together"""
    target_kl: Optional[float] = None
    """stop the epochs of an update early when the approximate KL exceeds this"""
    update_proportion: float = 0.25
    """probability that a sample of a minibatch trains the predictor"""
    int_coef: float = 1.0
    """weight of the intrinsic advantage in the combined advantage"""
    ext_coef: float = 2.0
    """weight of the extrinsic advantage in the combined advantage"""
    int_gamma: float = 0.99
    """intrinsic discount factor γ_I (of the intrinsic returns and of the return whose std scales the rewards)"""
    num_iterations_obs_norm_init: int = 50
    """rollouts (num_envs x num_steps steps each) of uniformly random play whose frames start the RND input statistics"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def make_envs(
    env_id: str,
    seed: int,
    capture_video: bool,
    video_dir: str,
    training: bool = True,
    video_episodes=None,
    num_envs: int = 1,
    num_threads: int = 1,
):
    """EnvPool's Atari envs with CleanRL's RND settings (uint8 ``[num_envs, 4, 84, 84]``, sticky actions), gymnasium API.

    ``info["reward"]``: the unclipped game reward; ``info["ram"]``: the console's RAM; game scores and videos come
    from :class:`GameStatistics`. ``training``: episodic life and clipped rewards (False: whole games, game rewards).
    """
    envs = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        num_threads=num_threads,
        episodic_life=training,
        reward_clip=training,
        noop_max=30,
        frame_skip=FRAME_SKIP,
        img_height=84,
        img_width=84,
        gray_scale=True,
        stack_num=4,
        use_fire_reset=True,
        repeat_action_probability=STICKY_ACTIONS,
        full_action_space=False,
        max_episode_steps=MAX_EPISODE_STEPS,
        **({"render_mode": "rgb_array"} if capture_video else {}),
    )
    return GameStatistics(envs, FRAME_SKIP, video_dir if capture_video else None, video_episodes)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The policy and the two value heads (``critic_ext`` V_E, ``critic_int`` V_I) of Burda et al. (2018), as CleanRL's."""

    def __init__(self, envs):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 256)),
            nn.ReLU(),
            layer_init(nn.Linear(256, 448)),
            nn.ReLU(),
        )
        self.extra_layer = nn.Sequential(layer_init(nn.Linear(448, 448), std=0.1), nn.ReLU())
        self.actor = nn.Sequential(
            layer_init(nn.Linear(448, 448), std=0.01),
            nn.ReLU(),
            layer_init(nn.Linear(448, int(envs.single_action_space.n)), std=0.01),
        )
        self.critic_ext = layer_init(nn.Linear(448, 1), std=0.01)
        self.critic_int = layer_init(nn.Linear(448, 1), std=0.01)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features: frames uint8 ``[B, 4, 84, 84]`` -> ``[B, 448]`` (float, channels-last convolutions)."""
        return self.trunk(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)

    def values(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(V_E, V_I) ``[B]`` each from trunk features ``[B, 448]``."""
        features = self.extra_layer(hidden) + hidden
        return self.critic_ext(features).squeeze(-1), self.critic_int(features).squeeze(-1)

    def get_value(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(V_E(x), V_I(x)): frames ``[B, 4, 84, 84]`` -> ``[B]`` each."""
        return self.values(self.hidden(x))

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action, log π(action|x), entropy, V_E(x), V_I(x))`` for frames ``[B, 4, 84, 84]``; samples when None."""
        hidden = self.hidden(x)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return (action, log_prob, entropy, *self.values(hidden))


class RNDModel(nn.Module):
    """The fixed random target f and the trained predictor f̂ (Burda et al. 2018, sec. 2.2), as CleanRL has them."""

    def __init__(self):
        super().__init__()

        def convolutions():
            return [
                layer_init(nn.Conv2d(1, 32, 8, stride=4)),
                nn.LeakyReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.LeakyReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.LeakyReLU(),
                nn.Flatten(),
            ]

        self.predictor = nn.Sequential(
            *convolutions(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
            layer_init(nn.Linear(512, 512)),
            nn.ReLU(),
            layer_init(nn.Linear(512, 512)),
        )
        self.target = nn.Sequential(*convolutions(), layer_init(nn.Linear(64 * 7 * 7, 512)))
        self.target.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f̂(x), f(x)): normalised frames ``[B, 1, 84, 84]`` -> features ``[B, 512]`` each."""
        return self.predictor(x), self.target(x)


def rnd_input(frames: torch.Tensor, obs_mean: torch.Tensor, obs_var: torch.Tensor) -> torch.Tensor:
    """The RND input (Burda et al. 2018, sec. 2.4): clip((frame - μ) / σ, -5, 5) per pixel, frames ``[B, 84, 84]`` ->
    float32 ``[B, 1, 84, 84]`` (channels-last)."""
    x = (frames.float() - obs_mean.float()) / obs_var.float().sqrt()
    return x.clamp(-OBS_CLIP, OBS_CLIP).unsqueeze(1).contiguous(memory_format=torch.channels_last)


def intrinsic_rewards(rnd: RNDModel, x: torch.Tensor) -> torch.Tensor:
    """Raw intrinsic rewards ``[B]``: ||f̂(x) - f(x)||² summed over the 512 features (CleanRL halves it)."""
    predicted, target = rnd(x)
    return (predicted - target).pow(2).sum(-1)


def predictor_update_mask(batch_size: int, update_proportion: float, device: torch.device) -> torch.Tensor:
    """0/1 ``[batch_size]``: each sample trains the predictor with probability ``update_proportion`` (appendix A.4)."""
    return (torch.rand(batch_size, device=device) < update_proportion).float()


def rnd_loss(predicted: torch.Tensor, target: torch.Tensor, update_mask: torch.Tensor) -> torch.Tensor:
    """The predictor's loss: mean squared error per feature over the samples ``update_mask`` picks (0 if none)."""
    errors = (predicted - target.detach()).pow(2).mean(-1)
    return (errors * update_mask).sum() / update_mask.sum().clamp(min=1.0)


class RNDStatistics:
    """RND's running statistics (sec. 2.4): per-pixel ``obs_rms`` of its input frames, and ``return_rms`` of the
    discounted intrinsic return R_t = γ_I R_{t-1} + r_t that each env carries across rollouts (``discounted_return``)."""

    def __init__(self, num_envs: int, int_gamma: float, frame_shape: tuple[int, int] = (84, 84)):
        self.obs_rms = RunningMeanStd(shape=frame_shape)
        self.return_rms = RunningMeanStd(shape=())
        self.discounted_return = np.zeros(num_envs, dtype=np.float64)
        self.int_gamma = int_gamma

    def update_obs(self, frames: np.ndarray, chunk: int = 1024) -> None:
        """Add frames uint8 ``[B, 84, 84]`` to the per-pixel statistics, ``chunk`` frames at a time (in float64: 58 MB)."""
        for start in range(0, len(frames), chunk):
            self.obs_rms.update(frames[start : start + chunk].astype(np.float64))

    def normalize_rewards(self, rewards: np.ndarray) -> np.ndarray:
        """Intrinsic rewards ``[T, N]`` divided by the std of their discounted return (run per env); updates it."""
        returns = np.empty(rewards.shape, dtype=np.float64)
        for t in range(rewards.shape[0]):
            self.discounted_return = self.int_gamma * self.discounted_return + rewards[t]
            returns[t] = self.discounted_return
        self.return_rms.update_from_moments(returns.mean(), returns.var(), returns.size)
        return (rewards / np.sqrt(self.return_rms.var)).astype(np.float32)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``obs_rms.{mean,var,count}``, ``return_rms.{mean,var,count}`` (float64) and ``discounted_return`` ``[num_envs]``."""
        state = {}
        for name, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            state[f"{name}.mean"] = torch.tensor(rms.mean, dtype=torch.float64)
            state[f"{name}.var"] = torch.tensor(rms.var, dtype=torch.float64)
            state[f"{name}.count"] = torch.tensor(float(rms.count), dtype=torch.float64)
        state["discounted_return"] = torch.from_numpy(self.discounted_return.copy())
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Set the statistics from :meth:`state_dict`'s ``state``; ValueError on a missing, misshaped or invalid entry."""
        expected = {
            "obs_rms.mean": self.obs_rms.mean.shape,
            "obs_rms.var": self.obs_rms.var.shape,
            "return_rms.mean": (),
            "return_rms.var": (),
            "obs_rms.count": (),
            "return_rms.count": (),
            "discounted_return": self.discounted_return.shape,
        }
        values = {}
        for name, shape in expected.items():
            value = state.get(name)
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
                found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"RND statistics: {name} must be a tensor of shape {shape}, got {found}")
            values[name] = value.detach().to(torch.float64).numpy().copy()
            if not np.isfinite(values[name]).all():
                raise ValueError(f"RND statistics: {name} is not finite")
        for name in ("obs_rms", "return_rms"):
            if (values[f"{name}.var"] < 0).any() or values[f"{name}.count"] <= 0:
                raise ValueError(f"RND statistics: {name} has a negative variance or a count that is not positive")
        for name, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            rms.mean, rms.var, rms.count = values[f"{name}.mean"], values[f"{name}.var"], float(values[f"{name}.count"])
        self.discounted_return = values["discounted_return"]


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_values: np.ndarray,
    terminations: np.ndarray,
    dones: np.ndarray,
    resets: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over an EnvPool rollout (next-step autoreset), as ppo_atari_envpool.py's (Schulman et al. 2016, eq. 16).

    δ_t = r_t + γ (1 - terminated_t) V(s_{t+1}) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}. A step that ended an
    episode returns its real final observation, so a truncation bootstraps from ``values[t+1]``; reset steps get
    advantage 0. With no terminations, dones or resets: the non-episodic intrinsic return. Returns ``(A, A + values)``.
    """
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    deltas = rewards + gamma * (1.0 - terminations) * next_values - values
    carry = gamma * gae_lambda * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    advantages = np.where(resets, 0.0, advantages).astype(values.dtype)
    return advantages, advantages + values


def two_head_gae(
    ext_rewards: np.ndarray,
    int_rewards: np.ndarray,
    ext_values: np.ndarray,
    int_values: np.ndarray,
    last_ext_values: np.ndarray,
    last_int_values: np.ndarray,
    terminations: np.ndarray,
    dones: np.ndarray,
    resets: np.ndarray,
    gamma: float,
    int_gamma: float,
    gae_lambda: float,
    ext_coef: float,
    int_coef: float,
) -> dict[str, np.ndarray]:
    """Extrinsic (episodic, γ_E) and intrinsic (non-episodic, γ_I) advantages and returns, and the policy's
    advantage ``ext_coef`` A_E + ``int_coef`` A_I (Burda et al. 2018, sec. 2.3)."""
    ext_advantages, ext_returns = compute_gae(
        ext_rewards, ext_values, last_ext_values, terminations, dones, resets, gamma, gae_lambda
    )
    never = np.zeros_like(int_rewards)
    int_advantages, int_returns = compute_gae(
        int_rewards, int_values, last_int_values, never, never, never > 0, int_gamma, gae_lambda
    )
    advantages = ext_coef * ext_advantages + int_coef * np.where(resets, 0.0, int_advantages)
    return {
        "ext_advantages": ext_advantages,
        "ext_returns": ext_returns,
        "int_advantages": int_advantages,
        "int_returns": int_returns,
        "advantages": advantages.astype(np.float32),
    }


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (``[B]`` each); 0 when none is."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_losses(
    newlogprob: torch.Tensor,
    entropy: torch.Tensor,
    new_ext_value: torch.Tensor,
    new_int_value: torch.Tensor,
    oldlogprob: torch.Tensor,
    old_ext_value: torch.Tensor,
    advantages: torch.Tensor,
    ext_returns: torch.Tensor,
    int_returns: torch.Tensor,
    mask: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
) -> dict[str, torch.Tensor]:
    """PPO's loss terms with two value heads over the samples where ``mask`` is 1 (reset steps are 0): policy loss,
    extrinsic value loss (clipped with ``clip_vloss``), intrinsic value loss (never clipped), entropy, KLs, clipfrac."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = masked_mean(-logratio, mask)
        approx_kl = masked_mean((ratio - 1) - logratio, mask)
        clipfrac = masked_mean(((ratio - 1.0).abs() > clip_coef).float(), mask)
    if norm_adv:
        count = mask.sum()
        mean = masked_mean(advantages, mask)
        std = ((mask * (advantages - mean) ** 2).sum() / (count - 1).clamp(min=1.0)).sqrt()
        advantages = (advantages - mean) / (std + 1e-8)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask)
    if clip_vloss:
        ext_unclipped = (new_ext_value - ext_returns) ** 2
        ext_clipped = (old_ext_value + torch.clamp(new_ext_value - old_ext_value, -clip_coef, clip_coef) - ext_returns) ** 2
        ext_v_loss = 0.5 * masked_mean(torch.max(ext_unclipped, ext_clipped), mask)
    else:
        ext_v_loss = 0.5 * masked_mean((new_ext_value - ext_returns) ** 2, mask)
    int_v_loss = 0.5 * masked_mean((new_int_value - int_returns) ** 2, mask)
    return {
        "policy_loss": pg_loss,
        "value_loss": ext_v_loss + int_v_loss,
        "ext_value_loss": ext_v_loss,
        "int_value_loss": int_v_loss,
        "entropy": masked_mean(entropy, mask),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require(args.env_mode == "sync", "--env-mode", "EnvPool already steps the envs in parallel C++ threads: set --num-threads")
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4), num_iterations_obs_norm_init=(1, 10**6))  # a stop signal waits
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1), int_gamma=(0, 1), update_proportion=(0, 1))
    for name in ("ent_coef", "vf_coef", "int_coef", "ext_coef"):
        value = getattr(args, name)
        require(value >= 0, f"--{name.replace('_', '-')}", f"must be >= 0, got {value}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    require(args.num_threads is None or args.num_threads > 0, "--num-threads", f"must be positive, got {args.num_threads}")
    if args.num_threads is not None:
        require_range(args, num_threads=(1, 2**10))
    else:
        args.num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    batch = f"the batch of {args.batch_size} (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide {batch}")
    require(not args.norm_adv or args.minibatch_size >= 2, "--num-minibatches", "too small to normalise advantages")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_envpool_atari(args, envpool)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a saved model: whole games, unclipped rewards, sticky actions; the policy
    alone (the RND networks are not in the model file). ``deterministic``: the most probable action."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, **options)
    agent = evaluation.load(Agent(evaluation.envs).to(memory_format=torch.channels_last), "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits = agent.actor(agent.hidden(torch.as_tensor(obs, device=evaluation.device)))
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the rollout ends, checkpoints, exits 128 + signum
            signal.signal(signum, run.stop)

    # The envs are not checkpointed: a resumed run makes new ones, seeded from --seed and its step (other games)
    seed = args.seed
    if resumed:
        seed = int(np.random.SeedSequence([args.seed, resumed["global_step"]]).generate_state(1)[0] % 2**31)
    # Next-step autoreset: the step that ends an episode returns its real final observation; the next step
    # resets the env (a reset step: its action is ignored, its reward 0).
    envs = make_envs(
        args.env_id, seed, args.capture_video, run.video_dir, num_envs=args.num_envs, num_threads=args.num_threads
    )
    with run.stop_on_fault(envs):  # a fault ends the run in one line
        obs_shape = envs.single_observation_space.shape  # (4, 84, 84)
        frame_shape = obs_shape[1:]  # the RND networks read the newest frame of each observation
        agent = Agent(envs).to(device, memory_format=torch.channels_last)
        rnd = RNDModel().to(device, memory_format=torch.channels_last)
        # one optimiser, one gradient clip for the agent and the predictor (the target is fixed)
        trained = list(agent.parameters()) + list(rnd.predictor.parameters())
        optimizer = optim.Adam(trained, lr=args.learning_rate, eps=1e-5, fused=True)
        statistics = RNDStatistics(args.num_envs, args.int_gamma, frame_shape)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch (frames uint8), the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        next_frames = torch.zeros((T, N) + frame_shape, dtype=torch.uint8, device=device)  # newest frame of s_{t+1}
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        ext_values = torch.zeros((T, N), device=device)
        int_values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        resets = np.zeros((T, N), dtype=bool)  # EnvPool's reset steps: not transitions of the game

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators: not the envs
        state = {"agent": agent, "rnd": rnd, "optimizer": optimizer, "rnd_statistics": statistics}
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, statistics and generators, in place; the envs are new
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
        if start_iteration == 1:
            # The RND input's statistics start from the frames of uniformly random play (Burda et al. 2018, sec. 2.4),
            # stepped below the game statistics (no game of it is logged); training then starts from new games.
            play = np.random.default_rng(args.seed)
            random_frames = np.zeros((T, N) + frame_shape, dtype=np.uint8)
            envs.env.reset()
            for _ in range(args.num_iterations_obs_norm_init):
                for step in range(T):
                    frames, *_ = envs.env.step(play.integers(envs.single_action_space.n, size=N))
                    random_frames[step] = frames[:, -1]
                statistics.update_obs(random_frames.reshape((-1,) + frame_shape))
        next_obs, _ = envs.reset()
        next_done = np.zeros(N, dtype=bool)  # the last step's dones: the next step is a reset step

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                global_step += N
                obs[step] = torch.as_tensor(next_obs)
                # After a done, EnvPool's next step resets the env: it ignores the action and
                # returns reward 0 and the new episode's first observation (masked out of the losses).
                resets[step] = next_done
                with torch.inference_mode():
                    action, logprob, _, ext_value, int_value = agent.get_action_and_value(obs[step])
                actions[step], logprobs[step], ext_values[step], int_values[step] = action, logprob, ext_value, int_value

                next_obs, reward, termination, truncation, info = envs.step(action.cpu().numpy())
                next_done = termination | truncation
                rewards[step], terminations[step], dones[step] = reward, termination, next_done
                next_frames[step] = torch.as_tensor(next_obs[:, -1])
                run.log_episodes(global_step, info)  # game scores: unclipped rewards over all lives (GameStatistics)

            check_rollout(global_step, reward=rewards)  # the first NaN or infinite reward stops the run (frames: uint8)

            # Intrinsic rewards: the predictor's error on each s_{t+1}, with this rollout's input statistics
            obs_mean = torch.as_tensor(statistics.obs_rms.mean, device=device)
            obs_var = torch.as_tensor(statistics.obs_rms.var, device=device)
            b_rnd_input = rnd_input(next_frames.reshape((-1,) + frame_shape), obs_mean, obs_var)
            with torch.no_grad():
                raw_int_rewards = torch.cat([intrinsic_rewards(rnd, x) for x in b_rnd_input.split(4096)])  # bounded memory
                raw_int_rewards = raw_int_rewards.reshape(T, N).cpu().numpy()
                last_ext_values, last_int_values = (
                    v.cpu().numpy() for v in agent.get_value(torch.as_tensor(next_obs, device=device))
                )
            int_rewards = statistics.normalize_rewards(raw_int_rewards)
            targets = two_head_gae(
                rewards,
                int_rewards,
                ext_values.cpu().numpy(),
                int_values.cpu().numpy(),
                last_ext_values,
                last_int_values,
                terminations,
                dones,
                resets,
                args.gamma,
                args.int_gamma,
                args.gae_lambda,
                args.ext_coef,
                args.int_coef,
            )
            # The predictor learns on the frames that gave the rewards, normalised with the statistics updated by them
            statistics.update_obs(next_frames.reshape((-1,) + frame_shape).cpu().numpy())
            obs_mean = torch.as_tensor(statistics.obs_rms.mean, device=device)
            obs_var = torch.as_tensor(statistics.obs_rms.var, device=device)
            b_rnd_input = rnd_input(next_frames.reshape((-1,) + frame_shape), obs_mean, obs_var)

            # Flatten the batch; the frames in channels-last layout once per update (as ppo_atari_envpool.py)
            b_obs = obs.reshape((-1,) + obs_shape).contiguous(memory_format=torch.channels_last)
            b_logprobs, b_actions, b_ext_values = logprobs.reshape(-1), actions.reshape(-1), ext_values.reshape(-1)
            b = {name: torch.as_tensor(value.reshape(-1), device=device) for name, value in targets.items()}
            b_mask = torch.as_tensor((~resets).reshape(-1), dtype=torch.float32, device=device)

            # Optimise the policy, the value heads and the predictor (reset steps masked out of PPO's losses)
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]
                    predicted, target = rnd(b_rnd_input[mb_inds])
                    forward_loss = rnd_loss(
                        predicted, target, predictor_update_mask(len(mb_inds), args.update_proportion, device)
                    )
                    _, newlogprob, entropy, new_ext_value, new_int_value = agent.get_action_and_value(
                        b_obs[mb_inds], b_actions[mb_inds]
                    )
                    losses = ppo_losses(
                        newlogprob,
                        entropy,
                        new_ext_value,
                        new_int_value,
                        b_logprobs[mb_inds],
                        b_ext_values[mb_inds],
                        b["advantages"][mb_inds],
                        b["ext_returns"][mb_inds],
                        b["int_returns"][mb_inds],
                        b_mask[mb_inds],
                        args.clip_coef,
                        args.clip_vloss,
                        args.norm_adv,
                    )
                    clipfracs.append(losses["clipfrac"])
                    loss = (
                        losses["policy_loss"]
                        - args.ent_coef * losses["entropy"]
                        + losses["value_loss"] * args.vf_coef
                        + forward_loss
                    )

                    optimizer.zero_grad()
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(trained, args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()

                if args.target_kl is not None and losses["approx_kl"].item() > args.target_kl:
                    break

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/intrinsic_reward", raw_int_rewards.mean(), global_step)  # before normalisation
            writer.add_scalar("charts/intrinsic_reward_normalized", int_rewards.mean(), global_step)
            writer.add_scalar("charts/intrinsic_return_std", np.sqrt(statistics.return_rms.var), global_step)
            for name in (
                "value_loss",
                "ext_value_loss",
                "int_value_loss",
                "policy_loss",
                "entropy",
                "old_approx_kl",
                "approx_kl",
            ):
                writer.add_scalar(f"losses/{name}", losses[name].item(), global_step)
            writer.add_scalar("losses/rnd_loss", forward_loss.item(), global_step)
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

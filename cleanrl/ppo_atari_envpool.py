"""PPO on Atari with EnvPool: the algorithm of ppo_atari.py, the environments stepped in C++ threads.

Proximal Policy Optimization with the clipped surrogate objective:
    Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347 (eq. 7 clipped objective, eq. 9 total loss, eq. 11-12 GAE),
with generalized advantage estimation:
    Schulman, Moritz, Levine, Jordan, Abbeel (2016), "High-Dimensional Continuous Control
    Using Generalized Advantage Estimation", arXiv:1506.02438,
the Nature CNN and the Atari preprocessing of Mnih et al. (2015), Nature 518:529-533, and the
implementation details of Huang et al. (2022), "The 37 Implementation Details of Proximal
Policy Optimization" (ICLR blog track), as in ppo_atari.py (same network, same
hyperparameters). The environments are EnvPool's:
    Weng et al. (2022), "EnvPool: A Highly Parallel Reinforcement Learning Environment
    Execution Engine", arXiv:2206.10558,
with the same preprocessing: up to 30 no-ops at the start, frame skip 4 with max-pooling,
episodic life, FIRE on reset, rewards clipped to their sign, 84x84 grayscale, 4 stacked frames,
no sticky actions, the minimal action set, 27,000 agent steps (108,000 frames) per game.

What this file changes against them (and against CleanRL's ppo_atari_envpool.py):
- EnvPool resets an env on the step AFTER it returned done: that step ignores the action,
  returns reward 0 and the first observation of the next episode. It is not a transition of
  the game, so it is masked out of the advantages and of every loss term (see
  :func:`compute_gae` and :func:`ppo_losses`); CleanRL trains on it.
- Because of that next-step reset, the observation returned with done is the real final
  observation: a time-limit truncation bootstraps from V(that observation); a termination
  (here also a lost life) does not bootstrap. CleanRL treats truncations as terminations.
- ``charts/episodic_return`` is the game score: EnvPool's unclipped ``info["reward"]`` summed
  over all lives, logged when the game really ends (no lives left, or the time limit).
- The frame stack starts with the first frame repeated (EnvPool's), where ppo_atari.py's is
  zero-padded: a model of one script does not fit the other's observations exactly.

Checkpoints (``--checkpoint-interval``, SIGTERM) hold the network, the optimiser, the
iteration (the learning-rate schedule's position), the global step and the random generators,
but not the environments: EnvPool's envs live in C++ and cannot be saved or replayed (the
gymnasium scripts replay theirs, see cleanrl_utils/checkpoint.py). So ``--resume`` is not
exact: it makes the envs anew and resets them with a seed derived from ``--seed`` and the
checkpoint's global step (:func:`resume_seed`); the games in progress at the checkpoint are
abandoned (their partial scores are never logged) and the run goes on with other games than an
uninterrupted run would play. Training continues from the saved weights and optimiser state.

Run:
    python cleanrl/ppo_atari_envpool.py --env-id Breakout-v5
"""

import difflib
import os
import time
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

try:  # EnvPool comes with the envpool extra; without it, --env-id says so
    import envpool
except ImportError:
    envpool = None

from cleanrl_utils.checkpoint import (
    Checkpointer,
    generator_state,
    make_generator,
    resume_args,
    set_rng_state,
)
from cleanrl_utils.run import (
    Progress,
    fail,
    load_model,
    require,
    require_positive,
    save_model,
    seed_everything,
    start_run,
)

FRAME_SKIP = 4
"""Frames per agent step (the action is repeated, the last two frames max-pooled)."""
MAX_EPISODE_STEPS = 27_000
"""Agent steps per game before a time-limit truncation (108,000 frames, 30 minutes at 60 Hz)."""


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
    """if toggled, record videos of env 0's games into `{run_dir}/videos` (one frame per agent step)"""
    save_model: bool = False
    """if toggled, save the model to `{run_dir}/{exp_name}.cleanrl_model` and evaluate it"""
    eval_episodes: int = 10
    """games the saved model is evaluated for (with --save-model)"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the rollout that reaches it (0: only when the run receives SIGTERM)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint. Not exact: EnvPool's envs cannot be restored, so they are made anew and reset with a seed derived from --seed and the checkpoint's step (the games in progress restart)"""
    torch_threads: int = 1
    """CPU threads for torch (1: on a 2-core machine shared with other jobs, 2 threads ran 3-5x slower)"""

    # Algorithm specific arguments
    env_id: str = "Breakout-v5"
    """EnvPool id of an Atari game (such as Breakout-v5, Pong-v5)"""
    env_mode: Literal["sync", "async"] = "sync"
    """sync only: EnvPool steps all envs in its own C++ threads (see --num-threads); async (one
    subprocess per env) is the gymnasium scripts' mode and is refused here"""
    num_threads: Optional[int] = None
    """EnvPool's C++ threads stepping the envs; None: the number of CPU cores available"""
    total_timesteps: int = 10000000
    """total agent steps, summed over envs (4 frames each; EnvPool's reset steps included)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.1
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε]); also the value clip"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the reference implementation"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: Optional[float] = None
    """stop the epochs of an update early when the approximate KL exceeds this"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require(
        args.env_mode == "sync",
        "--env-mode",
        "async runs one subprocess per env (gymnasium scripts); EnvPool already steps the envs in "
        "parallel C++ threads: use sync and set --num-threads",
    )
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    require_positive(args, "learning_rate", "torch_threads")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(args.num_threads is None or args.num_threads > 0, "--num-threads", f"must be positive, got {args.num_threads}")
    if args.num_threads is None:
        args.num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 <= args.gae_lambda <= 1, "--gae-lambda", f"must be in [0, 1], got {args.gae_lambda}")
    require(args.clip_coef > 0, "--clip-coef", f"must be positive, got {args.clip_coef}")
    require(args.max_grad_norm > 0, "--max-grad-norm", f"must be positive, got {args.max_grad_norm}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    args.batch_size = args.num_envs * args.num_steps
    require(
        args.batch_size % args.num_minibatches == 0,
        "--num-minibatches",
        f"{args.num_minibatches} does not divide the batch of {args.batch_size} "
        f"(--num-envs {args.num_envs} x --num-steps {args.num_steps})",
    )
    args.minibatch_size = args.batch_size // args.num_minibatches
    require(
        not args.norm_adv or args.minibatch_size >= 2,
        "--num-minibatches",
        f"minibatches of {args.minibatch_size} sample are too small to normalise advantages; "
        "use fewer minibatches or --no-norm-adv",
    )
    require(
        args.total_timesteps >= args.batch_size,
        "--total-timesteps",
        f"{args.total_timesteps} is less than one rollout of {args.batch_size} steps",
    )
    args.num_iterations = args.total_timesteps // args.batch_size


def check_atari(env_id: str) -> None:
    """Stop with one line naming ``--env-id`` unless it is one of EnvPool's Atari games."""
    require(envpool is not None, "--env-id", "EnvPool is not installed: pip install -e '.[envpool]'")
    known = envpool.list_all_envs()
    if env_id not in known:
        game = env_id.removeprefix("ALE/").split("NoFrameskip")[0].split("-v")[0]
        close = [f"{game}-v5"] if f"{game}-v5" in known else difflib.get_close_matches(env_id, known, n=3)
        suggestion = f"; did you mean {', '.join(close)}?" if close else ""
        fail("--env-id", f"unknown EnvPool environment {env_id!r}{suggestion}")
    require(
        type(envpool.make_spec(env_id)).__name__ == "AtariEnvSpec",
        "--env-id",
        f"{env_id} is not an Atari game; ppo_atari_envpool.py takes EnvPool's Atari ids such as Breakout-v5",
    )


def resume_seed(seed: int, global_step: int) -> int:
    """The seed of the envs of a run resumed at ``global_step``: ``seed`` at step 0, otherwise a
    number in [0, 2^31) drawn from numpy's ``SeedSequence([seed, global_step])`` (so resuming at
    another step, or with another seed, starts other games)."""
    if global_step == 0:
        return seed
    return int(np.random.SeedSequence([seed, global_step]).generate_state(1)[0] % 2**31)


def make_envs(env_id: str, num_envs: int, seed: int, num_threads: int, training: bool = True, render: bool = False):
    """EnvPool's Atari envs with the preprocessing of ppo_atari.py, gymnasium API (next-step autoreset).

    Observations: uint8 ``[num_envs, 4, 84, 84]``. ``info["reward"]`` holds the unclipped game
    reward, ``info["terminated"]`` is 1 when the game is over (all lives lost), ``info["lives"]``
    the lives left, ``info["elapsed_step"]`` the agent steps of the game so far.

    Args:
        training: episodic life (a lost life is returned as a termination) and rewards clipped
            to their sign; False for evaluation: whole games, game rewards.
        render: make ``envs.render()`` return env 0's RGB frame (for videos).
    """
    return envpool.make(
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
        repeat_action_probability=0.0,  # as the NoFrameskip-v4 ids: no sticky actions
        full_action_space=False,
        max_episode_steps=MAX_EPISODE_STEPS,
        **({"render_mode": "rgb_array"} if render else {}),
    )


class VideoRecorder:
    """Records env 0's games as mp4 files ``rl-video-episode-{i}.mp4``, one frame per agent step.

    Games are picked by ``video_episodes(game_index) -> bool`` (gymnasium's schedule when None:
    games 0, 1, 8, 27, ..., 1000, then every 1000th), as ``gymnasium.wrappers.RecordVideo``.
    Call :meth:`frame` after every step (and after the first reset), :meth:`game_over` when
    env 0's game ended at that step.
    """

    def __init__(self, envs, video_dir: str, video_episodes=None):
        from gymnasium.utils.save_video import capped_cubic_video_schedule

        self.envs, self.video_dir = envs, video_dir
        self.trigger = video_episodes or capped_cubic_video_schedule
        self.game = 0
        self.frames: list[np.ndarray] = []
        self.recording = self.trigger(0)

    def frame(self) -> None:
        """Keep env 0's current frame if its game is recorded."""
        if self.recording:
            self.frames.append(self.envs.render()[0])

    def game_over(self) -> None:
        """Write the recorded game, if any; the next frame starts the next game."""
        self.close()
        self.game += 1
        self.recording = self.trigger(self.game)

    def close(self) -> None:
        """Write the game recorded so far, if any (also the one in progress at the end of a run)."""
        from gymnasium.utils.save_video import save_video

        if self.recording and self.frames:
            save_video(
                self.frames, self.video_dir, episode_trigger=lambda _: True, episode_index=self.game, fps=60 // FRAME_SKIP
            )
        self.frames = []


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN trunk (Mnih et al. 2015) shared by a categorical policy head and a value head.

    Conv 8x8/4 (32) - conv 4x4/2 (64) - conv 3x3/1 (64) - linear 512, ReLU after each; then
    ``actor`` (512 -> num_actions logits) and ``critic`` (512 -> 1). Inputs are uint8 frames
    ``[B, 4, 84, 84]`` in 0-255, divided by 255 here.

    Args:
        num_actions: size of the Discrete action space.
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
        """Trunk features: frames uint8 ``[B, 4, 84, 84]`` -> ``[B, 512]`` (float, channels-last convolutions)."""
        return self.trunk(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy logits ``[B, num_actions]`` and V(x) ``[B]`` of frames ``[B, 4, 84, 84]``, in one pass."""
        hidden = self.hidden(x)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): frames ``[B, 4, 84, 84]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """Sample (or score) actions under the categorical policy and evaluate V.

        Args:
            x: frames uint8 ``[B, 4, 84, 84]``.
            action: actions ``[B]`` (int64) to score; sampled from π(·|x) when None.

        Returns:
            ``(action [B], log π(action|x) [B], entropy of π(·|x) [B], V(x) [B])``.
        """
        logits, value = self(x)
        log_probs = torch.log_softmax(logits, dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, value


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample one action per row of ``logits`` ``[B, A]`` from softmax(logits) by the Gumbel-max trick
    (Maddison, Tarlow, Minka 2014, arXiv:1411.0030, sec. 2); returns int64 ``[B]``."""
    return np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis of ``logits`` ``[B, A]`` (numpy, numerically stable)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


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
    """Generalized advantage estimation over an EnvPool rollout (next-step autoreset).

    δ_t = r_t + γ (1 - terminated_t) V(s_{t+1}) - V(s_t)
    A_t = δ_t + γ λ (1 - done_t) A_{t+1}
    (Schulman et al. 2016, arXiv:1506.02438, eq. 16, with the recursion cut at episode ends.)

    With EnvPool's next-step reset, the observation s_{t+1} returned by a step t that ended an
    episode is that episode's real final observation (the reset comes at step t+1), so a
    truncation bootstraps from V(final observation) = ``values[t+1]`` (``last_values`` at
    t = T-1); a termination does not bootstrap. Reset steps (``resets``) are not transitions of
    the game: their advantage is 0 and their return their value, and the loss masks them out;
    no advantage reaches across them, since the step before a reset step is done.

    Args:
        rewards: r_t (clipped), float ``[T, N]``.
        values: V(s_t), float ``[T, N]``.
        last_values: V of the observations after the rollout, ``[N]``.
        terminations: 1.0 where step t ended the episode by termination (or a lost life), ``[T, N]``.
        dones: 1.0 where step t ended the episode (termination or truncation), ``[T, N]``.
        resets: True where step t is a reset step, ``[T, N]``: the step after a step that
            returned done (the previous rollout's last step, for t = 0).
        gamma: discount γ in [0, 1].
        gae_lambda: λ in [0, 1].

    Returns:
        ``(advantages [T, N], returns [T, N])`` with returns = advantages + values.
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


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (``[B]`` each); 0 when none is."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_losses(
    newlogprob: torch.Tensor,
    entropy: torch.Tensor,
    newvalue: torch.Tensor,
    oldlogprob: torch.Tensor,
    oldvalue: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
) -> dict[str, torch.Tensor]:
    """PPO's loss terms over the samples where ``mask`` is 1 (EnvPool's reset steps have 0).

    Policy loss (Schulman et al. 2017, eq. 7): mean of max(-A ρ, -A clip(ρ, 1-ε, 1+ε)), ρ the
    probability ratio π(a|s)/π_old(a|s); value loss: 0.5 mean (V - R)², or with ``clip_vloss``
    0.5 mean max((V - R)², (V_old + clip(V - V_old, -ε, ε) - R)²) (CleanRL's); entropy: mean
    H(π(·|s)). With ``norm_adv`` the advantages are normalised by the mean and (unbiased)
    standard deviation of the masked-in samples. Masked-out samples change no value and no
    gradient; with an all-ones mask these are ppo_atari.py's losses.

    Args:
        newlogprob, entropy, newvalue: log π(a|s), H(π(·|s)), V(s) under the current weights, ``[B]``.
        oldlogprob, oldvalue: log π_old(a|s), V_old(s) from the rollout, ``[B]``.
        advantages, returns: A and R = A + V_old, ``[B]``.
        mask: float ``[B]``, 1 for the transitions to train on.
        clip_coef: ε.

    Returns:
        ``{"policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"}``,
        scalars; the first three carry gradients.
    """
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
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)
    else:
        v_loss = 0.5 * masked_mean((newvalue - returns) ** 2, mask)
    return {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": masked_mean(entropy, mask),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }


def accumulate_games(game_returns: np.ndarray, game_rewards: np.ndarray, game_over: np.ndarray) -> np.ndarray:
    """Add a step's unclipped rewards to each env's running game score; return and restart finished games.

    Args:
        game_returns: running score of each env's current game, float64 ``[N]``, updated in place.
        game_rewards: this step's unclipped rewards (EnvPool's ``info["reward"]``), ``[N]``.
        game_over: True where the game ended at this step (no lives left, or the time limit), ``[N]``.

    Returns:
        The scores of the games that ended, in env order, float64 ``[k]``.
    """
    game_returns += game_rewards
    scores = game_returns[game_over].copy()
    game_returns[game_over] = 0.0
    return scores


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
    """Evaluate a model saved by this script for ``eval_episodes`` whole games, in EnvPool.

    Games are played without episodic life and without reward clipping (the returns are game
    scores), FIRE pressed at the start of each game, the training preprocessing otherwise.
    Actions are sampled from π by default, as CleanRL evaluates; a greedy policy
    (``deterministic=True``) can stand still after a lost life in games that need FIRE to go
    on (Breakout), until the 27,000-step limit.

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole games.
        env_id: EnvPool id; the one the model was trained on when None.
        capture_video: record the evaluation games into ``video_dir``.
        seed: seed of the evaluation env and of action sampling; None means the training
            seed + 100000, as the evaluation at the end of training uses.
        deterministic: take the most probable action instead of sampling.
        device: torch device for the network.

    Returns:
        Game scores, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by ppo_atari_envpool.py, or ``eval_episodes`` is not positive.
    """
    if eval_episodes <= 0:
        raise ValueError(f"eval_episodes must be positive, got {eval_episodes}")
    content = load_model(model_path, "ppo_atari_envpool")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_envs(env_id, 1, seed, 1, training=False, render=capture_video)
    recorder = VideoRecorder(envs, video_dir, lambda game: game < eval_episodes) if capture_video else None
    rng = np.random.default_rng(seed)
    agent = Agent(int(envs.single_action_space.n)).to(device, memory_format=torch.channels_last)
    agent.load_state_dict(content["model"])
    agent.eval()

    scores: list[float] = []
    game_returns = np.zeros(1)
    obs, _ = envs.reset()
    if recorder:
        recorder.frame()
    while len(scores) < eval_episodes:
        with torch.no_grad():
            logits = agent.actor(agent.hidden(torch.from_numpy(obs).to(device))).cpu().numpy()
        action = logits.argmax(-1) if deterministic else sample_categorical(logits, rng)
        obs, _, termination, truncation, info = envs.step(action)
        game_over = termination | truncation  # no episodic life here: done is the game's end
        ended = accumulate_games(game_returns, info["reward"], game_over)
        scores.extend(ended.tolist())
        if recorder:
            recorder.frame()
            if game_over[0]:
                recorder.game_over()
    envs.close()
    return np.asarray(scores[:eval_episodes], dtype=np.float64)


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "ppo_atari_envpool")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    check_atari(args.env_id)
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    resume_step = resumed["global_step"] if resumed is not None else 0
    envs = make_envs(
        args.env_id, args.num_envs, resume_seed(args.seed, resume_step), args.num_threads, render=args.capture_video
    )
    recorder = VideoRecorder(envs, str(run.video_dir)) if args.capture_video else None
    obs_shape = envs.single_observation_space.shape  # (4, 84, 84)
    # channels-last weights and inputs: faster convolutions on CPU (benchmark/README.md)
    agent = Agent(int(envs.single_action_space.n)).to(device, memory_format=torch.channels_last)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    rng = np.random.default_rng(args.seed)

    # Rollout storage [num_steps, num_envs, ...] in numpy, frames uint8.
    T, N = args.num_steps, args.num_envs
    obs = np.zeros((T, N) + obs_shape, dtype=np.uint8)
    actions = np.zeros((T, N), dtype=np.int64)
    logprobs = np.zeros((T, N), dtype=np.float32)
    values = np.zeros((T, N), dtype=np.float32)
    rewards = np.zeros((T, N), dtype=np.float32)
    terminations = np.zeros((T, N), dtype=np.float32)
    dones = np.zeros((T, N), dtype=np.float32)
    resets = np.zeros((T, N), dtype=bool)  # EnvPool's reset steps: not transitions of the game
    game_returns = np.zeros(N)  # unclipped score of each env's current game

    global_step, first_iteration = 0, 1
    if resumed is not None:  # networks, optimiser, step, random generators; the envs are new (see the docstring)
        agent.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        rng = make_generator(resumed["action_rng"])
        global_step, first_iteration = resumed["global_step"], resumed["iteration"] + 1
        set_rng_state(resumed["rng"])
    checkpointer = Checkpointer(run.directory, "ppo_atari_envpool", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.num_iterations * args.batch_size != args.total_timesteps:
        print(
            f"training {args.num_iterations * args.batch_size} steps: --total-timesteps rounded down "
            f"to whole rollouts of {args.batch_size}"
        )
    progress = Progress(args.num_iterations * args.batch_size, start_step=global_step)
    next_obs, _ = envs.reset()
    next_done = np.zeros(N, dtype=bool)  # the last step's dones: the next step is a reset step
    if recorder:
        recorder.frame()

    for iteration in range(first_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(T):
            global_step += N
            obs[step] = next_obs
            # After a done, EnvPool's next step resets the env: it ignores the action and
            # returns reward 0 and the new episode's first observation (masked out of training).
            resets[step] = next_done
            # One forward pass: the action (as the policy that collects the data) and V(s_t).
            # Where s_t is a final observation (the step before was done), the action is
            # ignored by EnvPool, but V(s_t) is the bootstrap value of a truncation.
            with torch.no_grad():
                logits, value = agent(torch.from_numpy(next_obs).to(device))
            logits = logits.cpu().numpy()
            actions[step] = sample_categorical(logits, rng)
            logprobs[step] = np.take_along_axis(log_softmax(logits), actions[step][:, None], axis=1)[:, 0]
            values[step] = value.cpu().numpy()

            next_obs, reward, termination, truncation, info = envs.step(actions[step])
            rewards[step] = reward
            terminations[step] = termination
            next_done = termination | truncation
            dones[step] = next_done

            # Game scores: unclipped rewards over all lives, logged when the game is over.
            game_over = info["terminated"].astype(bool) | truncation
            scores = accumulate_games(game_returns, info["reward"], game_over)
            for score, length in zip(scores, info["elapsed_step"][game_over]):
                writer.add_scalar("charts/episodic_return", score, global_step)
                writer.add_scalar("charts/episodic_length", int(length) * FRAME_SKIP, global_step)  # frames
            progress.episodes(scores.tolist())
            if recorder:
                recorder.frame()
                if game_over[0]:
                    recorder.game_over()
        progress.update(global_step)

        with torch.no_grad():
            last_values = agent.get_value(torch.from_numpy(next_obs).to(device)).cpu().numpy()
        advantages, returns = compute_gae(
            rewards, values, last_values, terminations, dones, resets, args.gamma, args.gae_lambda
        )

        # uint8 frames put in channels-last layout once per update: each minibatch's conversion to
        # float is then elementwise (about half the time of converting layout and type together)
        b_obs = torch.from_numpy(obs.reshape((-1,) + obs_shape)).to(device)
        b_obs = b_obs.contiguous(memory_format=torch.channels_last)
        b_actions = torch.from_numpy(actions.reshape(-1)).to(device)
        b_logprobs = torch.from_numpy(logprobs.reshape(-1)).to(device)
        b_values = torch.from_numpy(values.reshape(-1)).to(device)
        b_advantages = torch.from_numpy(advantages.reshape(-1)).to(device)
        b_returns = torch.from_numpy(returns.reshape(-1)).to(device)
        b_mask = torch.from_numpy((~resets).reshape(-1).astype(np.float32)).to(device)

        # Optimise the policy and value networks on the game's transitions (reset steps masked out)
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                losses = ppo_losses(
                    newlogprob,
                    entropy,
                    newvalue,
                    b_logprobs[mb_inds],
                    b_values[mb_inds],
                    b_advantages[mb_inds],
                    b_returns[mb_inds],
                    b_mask[mb_inds],
                    args.clip_coef,
                    args.clip_vloss,
                    args.norm_adv,
                )
                clipfracs.append(losses["clipfrac"])
                loss = losses["policy_loss"] - args.ent_coef * losses["entropy"] + losses["value_loss"] * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and losses["approx_kl"].item() > args.target_kl:
                break

        valid = ~resets.reshape(-1)
        y_pred, y_true = values.reshape(-1)[valid], returns.reshape(-1)[valid]
        var_y = np.var(y_true) if valid.any() else 0.0
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):
            writer.add_scalar(f"losses/{name}", losses[name].item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if checkpointer.due(global_step):  # also on SIGTERM, which then ends the run (status 143)
            checkpointer.save(
                global_step,
                {
                    "iteration": iteration,
                    "model": agent.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "action_rng": generator_state(rng),
                    "wandb_id": run.wandb_id,
                },
            )

    progress.close()
    if recorder:
        recorder.close()
    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "ppo_atari_envpool", args, agent.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

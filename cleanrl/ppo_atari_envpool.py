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

Checkpoints (``--checkpoint-interval``, SIGTERM, Ctrl-C) hold the network, the optimiser, the
iteration (the learning-rate schedule's position), the global step and the random generators,
but not the environments: EnvPool's envs live in C++ and cannot be saved or replayed (the
gymnasium scripts replay theirs, see cleanrl_utils/vector.py). So ``--resume`` is not exact: it
makes the envs anew, seeded from ``--seed`` and the checkpoint's global step (numpy's
``SeedSequence``); the games in progress at the checkpoint are abandoned (their partial scores
are never logged) and the run goes on with other games than an uninterrupted run would play.
Training continues from the saved weights and optimiser state.

Run:
    python cleanrl/ppo_atari_envpool.py --env-id Breakout-v5
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

from cleanrl_utils.envpool_atari import GameStatistics, check_envpool_atari
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_env_step, check_finite
from cleanrl_utils.run import RunArgs, parse_args, require, require_positive, require_range, start_run

try:  # EnvPool comes with the envpool extra; without it, --env-id says so
    import envpool
except ImportError:
    envpool = None

FRAME_SKIP = 4
"""Frames per agent step (the action is repeated, the last two frames max-pooled)."""
MAX_EPISODE_STEPS = 27_000
"""Agent steps per game before a time-limit truncation (108,000 frames, 30 minutes at 60 Hz)."""


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "Breakout-v5"
    """EnvPool id of an Atari game (such as Breakout-v5, Pong-v5)"""
    env_mode: Literal["sync", "async"] = "sync"
    """sync only: EnvPool steps the envs in its own C++ threads (--num-threads); async is refused"""
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
    """EnvPool's Atari envs with the preprocessing of ppo_atari.py, gymnasium API (next-step autoreset), game statistics.

    Observations: uint8 ``[num_envs, 4, 84, 84]``. ``info["reward"]`` holds the unclipped game
    reward, ``info["terminated"]`` is 1 when the game is over (all lives lost), ``info["lives"]``
    the lives left, ``info["elapsed_step"]`` the agent steps of the game so far; the game scores
    are added by :class:`GameStatistics`, which also records env 0's games into ``video_dir`` if asked,
    those ``video_episodes(game_index)`` picks (gymnasium's schedule by default).

    Args:
        training: episodic life (a lost life is returned as a termination) and rewards clipped
            to their sign; False for evaluation: whole games, game rewards.
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
        repeat_action_probability=0.0,  # as the NoFrameskip-v4 ids: no sticky actions
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
    """The Nature CNN trunk (Mnih et al. 2015) shared by a categorical policy head and a value head.

    Conv 8x8/4 (32) - conv 4x4/2 (64) - conv 3x3/1 (64) - linear 512, ReLU after each; then
    ``actor`` (512 -> num_actions logits) and ``critic`` (512 -> 1), sized for ``envs``'
    Discrete actions. Inputs are uint8 frames ``[B, 4, 84, 84]`` in 0-255, divided by 255 here.
    """

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
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, int(envs.single_action_space.n)), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features: frames uint8 ``[B, 4, 84, 84]`` -> ``[B, 512]`` (float, channels-last convolutions)."""
        return self.trunk(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): frames ``[B, 4, 84, 84]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """Sample (or score) actions under the categorical policy and evaluate V, in one pass of the trunk.

        Args:
            x: frames uint8 ``[B, 4, 84, 84]``.
            action: actions ``[B]`` (int64) to score; sampled from π(·|x) when None.

        Returns:
            ``(action [B], log π(action|x) [B], entropy of π(·|x) [B], V(x) [B])``.
        """
        hidden = self.hidden(x)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1)


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


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require(args.env_mode == "sync", "--env-mode", "EnvPool already steps the envs in parallel C++ threads: set --num-threads")
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
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
    """Game scores ``[eval_episodes]`` of a model saved by this script, in EnvPool: whole games, unclipped rewards.

    Actions are sampled from π by default, as CleanRL evaluates; a greedy policy (``deterministic=True``)
    can stand still after a lost life in games that need FIRE to go on (Breakout), until the time limit.
    ``options``: see :class:`cleanrl_utils.evals.Evaluation`.
    """
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
    signal.signal(signal.SIGTERM, run.stop)  # a scheduler's time limit: checkpoint at the next rollout's end, exit 143
    signal.signal(signal.SIGINT, run.stop)  # Ctrl-C: the same, exit 130

    # The envs are not checkpointed: a resumed run makes new ones, seeded from --seed and its step (other games)
    seed = args.seed
    if resumed:
        seed = int(np.random.SeedSequence([args.seed, resumed["global_step"]]).generate_state(1)[0] % 2**31)
    # Next-step autoreset: the step that ends an episode returns its real final observation; the next step
    # resets the env (a reset step: its action is ignored, its reward 0).
    envs = make_envs(
        args.env_id, seed, args.capture_video, run.video_dir, num_envs=args.num_envs, num_threads=args.num_threads
    )
    obs_shape = envs.single_observation_space.shape  # (4, 84, 84)
    # channels-last weights and inputs: faster convolutions on CPU (benchmark/README.md)
    agent = Agent(envs).to(device, memory_format=torch.channels_last)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

    # Rollout storage [num_steps, num_envs]: what the networks read in torch (frames uint8), the rest in numpy for GAE
    T, N = args.num_steps, args.num_envs
    obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
    actions = torch.zeros((T, N), dtype=torch.long, device=device)
    logprobs = torch.zeros((T, N), device=device)
    values = torch.zeros((T, N), device=device)
    rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
    resets = np.zeros((T, N), dtype=bool)  # EnvPool's reset steps: not transitions of the game

    state = {"agent": agent, "optimizer": optimizer}  # what a checkpoint holds, besides the generators: not the envs
    global_step, start_iteration = 0, 1
    if run.resumed:  # the checkpoint's networks, optimiser and generators, in place; the envs are new
        saved = run.restore(state, steps_per_iteration=args.batch_size)
        global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
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
            # returns reward 0 and the new episode's first observation (masked out of training).
            resets[step] = next_done
            # Where s_t is a final observation (the step before was done), the action is ignored
            # by EnvPool, but V(s_t) is the bootstrap value of a truncation.
            with torch.inference_mode():
                action, logprob, _, value = agent.get_action_and_value(obs[step])
            actions[step], logprobs[step], values[step] = action, logprob, value

            next_obs, reward, termination, truncation, info = envs.step(action.cpu().numpy())
            check_env_step(reward, next_obs, info, global_step // args.num_envs)  # NaN or infinite rewards stop here
            next_done = termination | truncation
            rewards[step], terminations[step], dones[step] = reward, termination, next_done
            run.log_episodes(global_step, info)  # game scores: unclipped rewards over all lives (GameStatistics)

        with torch.no_grad():
            last_values = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
        advantages, returns = compute_gae(
            rewards, values.cpu().numpy(), last_values, terminations, dones, resets, args.gamma, args.gae_lambda
        )

        # Flatten the batch. The frames are put in channels-last layout once per update: each
        # minibatch's conversion to float is then elementwise (about half the time of converting both)
        b_obs = obs.reshape((-1,) + obs_shape).contiguous(memory_format=torch.channels_last)
        b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
        b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
        b_returns = torch.as_tensor(returns.reshape(-1), device=device)
        b_mask = torch.as_tensor((~resets).reshape(-1), dtype=torch.float32, device=device)

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
                grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                optimizer.step()

            if args.target_kl is not None and losses["approx_kl"].item() > args.target_kl:
                break

        valid = ~resets.reshape(-1)
        y_pred, y_true = b_values.cpu().numpy()[valid], returns.reshape(-1)[valid]
        var_y = np.var(y_true) if valid.any() else 0.0
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):
            writer.add_scalar(f"losses/{name}", losses[name].item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
        if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
            run.save_checkpoint(state, global_step, iteration=iteration)
        if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
            run.exit(envs)

    if args.save_model:
        run.save_model({"agent": agent}, evaluate)
    envs.close()
    run.close()

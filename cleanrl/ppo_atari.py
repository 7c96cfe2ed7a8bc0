"""PPO on Atari: the Nature CNN shared by actor and critic, standard DQN-style preprocessing.

Proximal Policy Optimization with the clipped surrogate objective:
    Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347 (eq. 7 clipped objective, eq. 9 total loss, eq. 11-12 GAE),
with generalized advantage estimation:
    Schulman, Moritz, Levine, Jordan, Abbeel (2016), "High-Dimensional Continuous Control
    Using Generalized Advantage Estimation", arXiv:1506.02438,
the Nature CNN and the Atari preprocessing (no-op starts, frame skip 4 with max-pooling,
episodic life, FIRE on reset, rewards clipped to their sign, 84x84 grayscale, 4 stacked frames):
    Mnih et al. (2015), "Human-level control through deep reinforcement learning",
    Nature 518:529-533 (Methods),
and the implementation details of Huang et al. (2022), "The 37 Implementation Details of
Proximal Policy Optimization" (ICLR blog track) as CleanRL's ppo_atari.py has them: one CNN
trunk shared by the policy and value heads, orthogonal initialisation (gain sqrt(2) for the
trunk, 0.01 for the policy head, 1 for the value head), Adam epsilon 1e-5, linear
learning-rate annealing, advantage normalisation per minibatch, clipped value loss, global
gradient clipping; 8 envs x 128 steps, 4 epochs of 4 minibatches, clip 0.1, value coefficient
0.5 (the paper's Table 5: 3 epochs of minibatches of 256, value coefficient 1, and the clip
range annealed with the learning rate).

What this file changes against them: a time-limit truncation (108,000 frames = 27,000 agent
steps per game, ale-py's limit for the v4/v5 ids, set here explicitly) is not a termination:
the advantage bootstraps from V(real final observation) (gymnasium's ``infos["final_obs"]``),
never from the observation after the reset; a lost life is a termination for training (the
standard episodic-life trick). ``charts/episodic_return`` is the game score (all lives,
unclipped rewards). The frame stack is zero-padded at each (life) episode start, as in
dqn_atari.py (CleanRL repeats the first frame). Evaluation plays full games without episodic
life and without reward clipping, sampling from π by default (see :func:`evaluate`).

Run:
    python cleanrl/ppo_atari.py --env-id BreakoutNoFrameskip-v4
"""

import os
import time
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
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

MAX_EPISODE_FRAMES = 108_000
"""Frames per game before a time-limit truncation (30 minutes at 60 Hz; 27,000 agent steps at frame skip 4)."""


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
    """if toggled, record videos of env 0's games into `{run_dir}/videos`"""
    save_model: bool = False
    """if toggled, save the model to `{run_dir}/{exp_name}.cleanrl_model` and evaluate it"""
    eval_episodes: int = 10
    """games the saved model is evaluated for (with --save-model)"""
    checkpoint_interval: int = 0
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the rollout that reaches it (0: only when the run receives SIGTERM)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch (1: on a 2-core machine shared with other jobs, 2 threads ran 3-5x slower)"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id of an Atari game (a NoFrameskip-v4 id: frame skipping is done here)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 10000000
    """total agent steps, summed over envs (4 frames each)"""
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
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    require_positive(args, "learning_rate", "torch_threads")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
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
    """Stop with one line unless ``env_id`` is an ALE game that does not skip frames itself."""
    check_env(env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "ppo_atari.py", id_suffix="NoFrameskip-v4")
    with gym.make(env_id) as game:
        require(
            hasattr(game.unwrapped, "ale"),
            "--env-id",
            f"{env_id} is not an Atari game; ppo_atari.py takes ALE ids such as BreakoutNoFrameskip-v4",
        )
        require(
            game.spec.kwargs.get("frameskip", 1) == 1,
            "--env-id",
            f"{env_id} skips frames itself; take its NoFrameskip-v4 id (such as BreakoutNoFrameskip-v4): "
            "the frame skipping is done here",
        )


def make_env(
    env_id: str,
    idx: int,
    capture_video: bool,
    video_dir: str,
    video_episodes=None,
    training: bool = True,
    max_episode_frames: int = MAX_EPISODE_FRAMES,
):
    """A thunk creating env ``idx`` with the standard Atari preprocessing; env 0 records videos if asked.

    Observations: uint8 ``[4, 84, 84]`` (4 stacked grayscale frames, zero-padded at each (life)
    episode start). Episode statistics are recorded per game, below episodic life and reward
    clipping, so ``charts/episodic_return`` is the game score and ``episodic_length`` counts
    frames. A game is truncated after ``max_episode_frames`` frames (ale-py's
    ``max_num_frames_per_episode``, reported as ``truncated``).

    Args:
        training: with episodic life (a lost life ends the episode) and rewards clipped to
            their sign; False for evaluation: whole games, game rewards.
        video_episodes: ``video_episodes(game_index) -> bool`` picks the games to record;
            gymnasium's schedule when None.
    """

    def thunk():
        kwargs = dict(max_num_frames_per_episode=max_episode_frames)
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", **kwargs)
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id, **kwargs)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        if training:
            env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        if training:
            env = ClipRewardEnv(env)
        env = gym.wrappers.ResizeObservation(env, (84, 84))
        env = gym.wrappers.GrayscaleObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        return env

    return thunk


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
        """Trunk features: frames uint8 ``[B, 4, 84, 84]`` -> ``[B, 512]``.

        The frames are converted to float in channels-last layout, which the convolutions run
        fastest in on CPU (with the weights channels-last too: ``agent.to(memory_format=...)``).
        """
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
    """Sample one action per row of ``logits`` from softmax(logits), by the Gumbel-max trick.

    argmax_a (logits_a + g_a), with g_a ~ Gumbel(0, 1) i.i.d., is distributed as
    softmax(logits) (Gumbel 1954; Maddison, Tarlow, Minka 2014, arXiv:1411.0030, sec. 2).

    Args:
        logits: unnormalised log-probabilities ``[B, A]``.
        rng: numpy generator supplying the noise.

    Returns:
        Actions ``[B]`` int64.
    """
    return np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis of ``logits`` ``[B, A]`` (numpy, numerically stable)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_values: np.ndarray,
    final_values: np.ndarray,
    terminations: np.ndarray,
    dones: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation over a rollout, correct at truncations (as ppo.py's).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)
    A_t = δ_t + γ λ (1 - done_t) A_{t+1}
    (Schulman et al. 2016, arXiv:1506.02438, eq. 16, with the recursion cut at episode ends.)

    s'_t is the real next state of step t: s_{t+1} within an episode, the episode's final
    observation where it ended at t (not the reset one), and the observation after the
    rollout at t = T-1. So a time limit still bootstraps from V(final observation); only a
    termination (here also a lost life) stops bootstrapping, and done_t stops the recursion.

    Args:
        rewards: r_t (clipped), float ``[T, N]`` (T steps of N envs).
        values: V(s_t), float ``[T, N]``.
        last_values: V of the observations after the rollout, ``[N]``.
        final_values: V(final observation) where step t ended an episode, ``[T, N]``;
            read only at truncations (a termination does not bootstrap).
        terminations: 1.0 where step t ended the episode by termination, ``[T, N]``.
        dones: 1.0 where step t ended the episode (termination or truncation), ``[T, N]``.
        gamma: discount γ in [0, 1].
        gae_lambda: λ in [0, 1].

    Returns:
        ``(advantages [T, N], returns [T, N])`` with returns = advantages + values, the
        critic's regression target (the λ-return).
    """
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    next_values = np.where(dones > 0, final_values, next_values)
    deltas = rewards + gamma * (1.0 - terminations) * next_values - values
    carry = gamma * gae_lambda * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


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
    """Evaluate a model saved by this script for ``eval_episodes`` whole games.

    Games are played without episodic life and without reward clipping (the returns are game
    scores), with the training preprocessing otherwise, FIRE pressed at the start of each game.

    Actions are sampled from π by default, as CleanRL evaluates. A greedy policy
    (``deterministic=True``) can stand still after losing a life in games that need FIRE to
    continue (Breakout): training pressed FIRE for it after every lost life, so it may never
    have learned to; such a game then lasts until the 108,000-frame limit (27,000 steps).

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole games.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation games into ``video_dir``.
        seed: seed of the evaluation env and of action sampling; None means the training
            seed + 100000, as the evaluation at the end of training uses.
        deterministic: take the most probable action instead of sampling.
        device: torch device for the network.

    Returns:
        Game scores, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by ppo_atari.py.
    """
    content = load_model(model_path, "ppo_atari")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env(
        [make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes, training=False)],
        episode_statistics=False,
    )
    rng = np.random.default_rng(seed)
    agent = Agent(int(envs.single_action_space.n)).to(device, memory_format=torch.channels_last)
    agent.load_state_dict(content["model"])
    agent.eval()

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        logits = agent.actor(agent.hidden(torch.as_tensor(obs, device=device))).cpu().numpy()
        return logits.argmax(-1) if deterministic else sample_categorical(logits, rng)

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "ppo_atari")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    check_atari(args.env_id)
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = make_vector_env(  # episode statistics come from each env: game scores
        [make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(args.num_envs)],
        args.env_mode,
        episode_statistics=False,
    )
    obs_shape = envs.single_observation_space.shape  # (4, 84, 84)
    # channels-last weights and inputs: faster convolutions on CPU (benchmark/README.md)
    agent = Agent(int(envs.single_action_space.n)).to(device, memory_format=torch.channels_last)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    rng = np.random.default_rng(args.seed)

    # Rollout storage [num_steps, num_envs, ...] in numpy (a few numbers per step cost less in
    # numpy than in torch); frames stay uint8, 4x smaller than float. The whole batch goes to
    # torch once per update.
    T, N = args.num_steps, args.num_envs
    obs = np.zeros((T, N) + obs_shape, dtype=np.uint8)
    actions = np.zeros((T, N), dtype=np.int64)
    logprobs = np.zeros((T, N), dtype=np.float32)
    values = np.zeros((T, N), dtype=np.float32)
    rewards = np.zeros((T, N), dtype=np.float32)
    terminations = np.zeros((T, N), dtype=np.float32)
    dones = np.zeros((T, N), dtype=np.float32)
    truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
    final_obs = np.zeros((T, N) + obs_shape, dtype=np.uint8)  # its real final observation

    global_step, first_iteration = 0, 1
    if resumed is None:
        next_obs, _ = envs.reset(seed=args.seed)
    else:  # continue exactly: networks, optimiser, step, envs (replayed), random generators
        agent.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        rng = make_generator(resumed["action_rng"])
        global_step, first_iteration = resumed["global_step"], resumed["iteration"] + 1
        next_obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    checkpointer = Checkpointer(run.directory, "ppo_atari", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.num_iterations * args.batch_size != args.total_timesteps:
        print(
            f"training {args.num_iterations * args.batch_size} steps: --total-timesteps rounded down "
            f"to whole rollouts of {args.batch_size}"
        )
    progress = Progress(args.num_iterations * args.batch_size, start_step=global_step)

    for iteration in range(first_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(T):
            global_step += N
            obs[step] = next_obs
            # One forward pass gives the policy (to act) and V(s_t) (for GAE), as the policy
            # that collects the data, so log π_old and V_old need no second pass.
            with torch.no_grad():
                logits, value = agent(torch.from_numpy(next_obs).to(device))
            logits = logits.cpu().numpy()
            actions[step] = sample_categorical(logits, rng)
            logprobs[step] = np.take_along_axis(log_softmax(logits), actions[step][:, None], axis=1)[:, 0]
            values[step] = value.cpu().numpy()

            next_obs, reward, termination, truncation, infos = envs.step(actions[step])
            rewards[step] = reward
            terminations[step] = termination
            dones[step] = termination | truncation
            # Truncated (not terminated) envs will bootstrap from their real final observation.
            truncated[step] = truncation & ~termination
            if truncated[step].any():
                final_obs[step, truncated[step]] = real_next_obs(next_obs, infos)[truncated[step]]
            if "_episode" in infos:
                progress.episodes(log_episodes(writer, infos, global_step))
        progress.update(global_step)

        with torch.no_grad():
            last_values = agent.get_value(torch.from_numpy(next_obs).to(device)).cpu().numpy()
            final_values = np.zeros((T, N), dtype=np.float32)
            if truncated.any():
                real_final = torch.from_numpy(final_obs[truncated]).to(device)
                final_values[truncated] = agent.get_value(real_final).cpu().numpy()
        advantages, returns = compute_gae(
            rewards, values, last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
        )

        # Flatten the batch and move it to the training device once.
        # uint8 frames put in channels-last layout once per update: each minibatch's conversion to
        # float is then elementwise (about half the time of converting layout and type together)
        b_obs = torch.from_numpy(obs.reshape((-1,) + obs_shape)).to(device)
        b_obs = b_obs.contiguous(memory_format=torch.channels_last)
        b_actions = torch.from_numpy(actions.reshape(-1)).to(device)
        b_logprobs = torch.from_numpy(logprobs.reshape(-1)).to(device)
        b_values = torch.from_numpy(values.reshape(-1)).to(device)
        b_advantages = torch.from_numpy(advantages.reshape(-1)).to(device)
        b_returns = torch.from_numpy(returns.reshape(-1)).to(device)

        # Optimise the policy and value networks
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss (clipped surrogate, eq. 7)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl.item() > args.target_kl:
                break

        y_pred, y_true = values.reshape(-1), returns.reshape(-1)
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
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
                    "envs": envs_state(envs),
                    "wandb_id": run.wandb_id,
                },
            )

    progress.close()
    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "ppo_atari", args, agent.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

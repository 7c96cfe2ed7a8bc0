"""Recurrent PPO (an LSTM policy) for discrete actions on vector observations.

Proximal Policy Optimization with the clipped surrogate objective:
    Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347 (eq. 7 clipped objective, eq. 9 total loss, eq. 11-12 GAE),
with generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438) and a recurrent
(LSTM, Hochreiter & Schmidhuber 1997) policy and value core trained on whole rollout sequences
from their stored initial state, as in the LSTM agents of the PPO paper's reference code
(OpenAI baselines ``ppo2`` with ``lstm``) and CleanRL's ``ppo_atari_lstm.py`` (Huang et al.
2022, "The 37 Implementation Details of Proximal Policy Optimization", ICLR blog track,
details on LSTM). The network: encoder (64 tanh) -> LSTM -> actor and critic heads (64 tanh each).

- The LSTM state is reset to zero at each episode start, in the rollout and in the update
  (the state is multiplied by 1 - start before the step that reads the episode's first
  observation).
- A minibatch is a set of whole environment sequences: the envs are split into
  ``--num-minibatches`` groups, each minibatch is all ``--num-steps`` steps of its envs, and
  the network is re-run through them from the LSTM state stored at the rollout's first step,
  with the same resets. Before the first gradient step this reproduces the rollout's
  log-probabilities and values.

What this file changes against them: a time-limit truncation is not a termination. At a
truncation the advantage bootstraps from V(real final observation) (gymnasium's
``infos["final_obs"]``), never from the observation after the reset; and that value is
computed with the LSTM state the final observation belongs to, the state after the step that
produced it (the final observation continues the same episode, so the agent's memory of it
is what a continuing episode would use), not a reset state and not the next episode's.
Only a termination stops bootstrapping. The default hyperparameters follow
rl-baselines3-zoo's RecurrentPPO settings for the velocity-masked CartPole (8 envs, 32 steps,
one minibatch, 20 epochs, γ 0.98, λ 0.8, learning rate 1e-3 annealed linearly, no entropy
bonus), with the clip range fixed at 0.2 (the zoo anneals it) and the value loss not clipped
(as in stable-baselines3; the clipped value loss of ppo.py lets V move by at most 0.2 per
update, slow when returns reach 50).

Run (CartPole with the velocities hidden, see cleanrl_utils/envs.py):
    python cleanrl/ppo_lstm.py --env-id cleanrl_utils.envs:CartPoleNoVelocity-v1
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

from cleanrl_utils.checkpoint import (
    Checkpointer,
    envs_state,
    generator_state,
    make_generator,
    restore_envs,
    resume_args,
    set_rng_state,
)
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
    """write a checkpoint to `{run_dir}/checkpoints/` every this many environment steps, at the end of the rollout that reaches it (0: only when the run receives SIGTERM)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory; its other flags come from the checkpoint"""
    torch_threads: int = 1
    """CPU threads for torch (1 is fastest for these small networks)"""

    # Algorithm specific arguments
    env_id: str = "cleanrl_utils.envs:CartPoleNoVelocity-v1"
    """gymnasium id of the environment (Discrete actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 200000
    """total environment steps, summed over envs"""
    learning_rate: float = 1e-3
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 32
    """steps per environment in each rollout (the length of the sequences the LSTM is trained on)"""
    lstm_size: int = 128
    """units of the LSTM's hidden and cell states"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.98
    """discount factor γ"""
    gae_lambda: float = 0.8
    """GAE λ"""
    num_minibatches: int = 1
    """minibatches per epoch; each is all --num-steps steps of --num-envs / --num-minibatches envs"""
    update_epochs: int = 20
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε])"""
    clip_vloss: bool = False
    """if toggled, clip the value loss as in the reference implementation (off: it would limit V's change to
    ±clip_coef per update, slow when returns reach 50)"""
    ent_coef: float = 0.0
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
    """steps per minibatch, batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    require_positive(args, "learning_rate", "torch_threads", "lstm_size")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 <= args.gae_lambda <= 1, "--gae-lambda", f"must be in [0, 1], got {args.gae_lambda}")
    require(args.clip_coef > 0, "--clip-coef", f"must be positive, got {args.clip_coef}")
    require(args.max_grad_norm > 0, "--max-grad-norm", f"must be positive, got {args.max_grad_norm}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    require(
        args.num_envs % args.num_minibatches == 0,
        "--num-minibatches",
        f"{args.num_minibatches} does not divide --num-envs {args.num_envs}: a minibatch is made of whole "
        f"environment sequences, so the number of minibatches must divide the number of envs (not the batch)",
    )
    args.batch_size = args.num_envs * args.num_steps
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


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, video_episodes=None):
    """A thunk creating env ``idx``; env 0 records videos into ``video_dir`` if asked.

    ``video_episodes(episode_index) -> bool`` picks the episodes to record; by default
    gymnasium's schedule (episodes 0, 1, 8, 27, ..., 1000, then every 1000th).
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        return env

    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Encoder (64 tanh) -> LSTM -> actor and critic heads (64 tanh each).

    The LSTM has orthogonal weights (gain 1) and zero biases, as in CleanRL's
    ppo_atari_lstm.py; the other layers are initialised as ppo.py's (gain √2, and 0.01 and 1
    for the actor's and the critic's output layers). The hidden layer of each head lets the
    policy and the value read the LSTM's memory nonlinearly (as the 64-64 tanh networks after
    the LSTM of sb3-contrib's RecurrentPPO do).

    Args:
        obs_dim: size of the flat observation.
        num_actions: size of the Discrete action space.
        lstm_size: units of the LSTM's hidden and cell states.
    """

    def __init__(self, obs_dim: int, num_actions: int, lstm_size: int = 128):
        super().__init__()
        self.encoder = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh())
        self.lstm = nn.LSTM(64, lstm_size)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.actor = nn.Sequential(
            layer_init(nn.Linear(lstm_size, 64)), nn.Tanh(), layer_init(nn.Linear(64, num_actions), std=0.01)
        )
        self.critic = nn.Sequential(layer_init(nn.Linear(lstm_size, 64)), nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))

    def initial_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero LSTM state ``(h [batch, lstm_size], c [batch, lstm_size])``."""
        zeros = torch.zeros(batch, self.lstm.hidden_size, device=device)
        return zeros, zeros.clone()

    def unroll(
        self, obs: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Run the LSTM through T steps of B sequences, resetting it at episode starts.

        Before step t the state of sequence b is multiplied by ``1 - starts[t, b]``: zero where
        ``obs[t, b]`` is the first observation of an episode, so no memory crosses an episode
        boundary. The rollout calls this with T = 1 each step; the update calls it with a
        whole rollout of its envs and the state stored at the rollout's first step, which
        reproduces the rollout's outputs.

        Args:
            obs: observations ``[T, B, obs_dim]``.
            starts: 1.0 where ``obs[t, b]`` begins an episode, ``[T, B]``.
            state: LSTM state before step 0, ``(h, c)`` each ``[B, lstm_size]``.

        Returns:
            ``(hidden [T, B, lstm_size], state after step T-1)``: the LSTM outputs h_t, on which
            the heads act, and the state to continue from.
        """
        x = self.encoder(obs)
        h, c = state[0].unsqueeze(0), state[1].unsqueeze(0)  # nn.LSTM's [num_layers=1, B, lstm_size]
        # nn.LSTM runs a whole segment in one call (much faster than a Python loop of cells), so
        # the sequence is cut where an episode starts in any of the B sequences; within a
        # segment no state is reset, and at its first step the state is multiplied by 1 - start.
        T = obs.shape[0]
        cuts = [0] + [t for t in starts.any(dim=1).nonzero().flatten().tolist() if t > 0] + [T]
        outputs = []
        for begin, end in zip(cuts[:-1], cuts[1:]):
            keep = (1.0 - starts[begin]).view(1, -1, 1)
            output, (h, c) = self.lstm(x[begin:end], (h * keep, c * keep))
            outputs.append(output)
        return torch.cat(outputs), (h[0], c[0])

    def get_value(self, obs: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """V of observations ``[T, B, obs_dim]`` after ``state`` (see :meth:`unroll`) -> ``[T, B]``."""
        hidden, _ = self.unroll(obs, starts, state)
        return self.critic(hidden).squeeze(-1)

    def get_action_and_value(
        self,
        obs: torch.Tensor,
        starts: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        action: torch.Tensor,
    ):
        """Score ``action`` under the categorical policy and evaluate V, along sequences.

        Args:
            obs: observations ``[T, B, obs_dim]``.
            starts: episode-start flags ``[T, B]`` (see :meth:`unroll`).
            state: LSTM state before step 0, ``(h, c)`` each ``[B, lstm_size]``.
            action: actions ``[T, B]`` (int64).

        Returns:
            ``(log π(action|history) [T, B], entropy of π(·|history) [T, B], V [T, B], state
            after step T-1)``.
        """
        hidden, state = self.unroll(obs, starts, state)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return log_prob, entropy, self.critic(hidden).squeeze(-1), state


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
    termination stops bootstrapping, and done_t (termination or truncation) stops the
    recursion, since step t+1 belongs to the next episode. With an LSTM, V(s_t) is the value
    given the history of the episode up to s_t (the recurrent state), which is what the
    rollout stores.

    Args:
        rewards: r_t, float ``[T, N]`` (T steps of N envs).
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
    deterministic: bool = True,
    device: str = "cpu",
) -> np.ndarray:
    """Evaluate a model saved by this script for ``eval_episodes`` episodes.

    The LSTM state is carried from step to step and reset at each episode start, as in
    training.

    Args:
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole episodes.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation episodes into ``video_dir``.
        seed: seed of the evaluation env and of action sampling; None means the training
            seed + 100000, as the evaluation at the end of training uses.
        deterministic: take the most probable action instead of sampling.
        device: torch device for the network.

    Returns:
        Episodic returns, float64 ``[eval_episodes]``.

    Raises:
        ValueError: the file was not saved by ppo_lstm.py, or ``eval_episodes`` is not positive.
    """
    content = load_model(model_path, "ppo_lstm")
    if eval_episodes <= 0:
        raise ValueError(f"eval_episodes must be positive, got {eval_episodes}")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env([make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)])
    rng = np.random.default_rng(seed)
    agent = Agent(
        int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n), content["args"]["lstm_size"]
    ).to(device)
    agent.load_state_dict(content["model"])
    agent.eval()

    returns: list[float] = []
    obs, _ = envs.reset(seed=seed)
    state = agent.initial_state(1, device)
    starts = np.ones(1, dtype=np.float32)
    while len(returns) < eval_episodes:
        with torch.no_grad():
            hidden, state = agent.unroll(
                torch.as_tensor(obs[None], dtype=torch.float32, device=device),
                torch.as_tensor(starts[None], device=device),
                state,
            )
            logits = agent.actor(hidden[0]).cpu().numpy()
        actions = logits.argmax(-1) if deterministic else sample_categorical(logits, rng)
        obs, _, terminations, truncations, infos = envs.step(actions)
        starts = (terminations | truncations).astype(np.float32)
        if "_episode" in infos:
            returns.extend(infos["episode"]["r"][infos["_episode"]].tolist())
    envs.close()
    return np.asarray(returns[:eval_episodes], dtype=np.float64)


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "ppo_lstm")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    check_env(args.env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "ppo_lstm.py", obs_ndim=1)
    run = start_run(args, resume=resumed)
    writer = run.writer

    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = make_vector_env(
        [make_env(args.env_id, i, args.capture_video, str(run.video_dir)) for i in range(args.num_envs)],
        args.env_mode,
    )
    obs_shape = envs.single_observation_space.shape
    agent = Agent(int(np.prod(obs_shape)), int(envs.single_action_space.n), args.lstm_size).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    rng = np.random.default_rng(args.seed)

    # Rollout storage [num_steps, num_envs, ...]. It is numpy: writing a few numbers per step
    # costs far less in numpy than in torch; the whole batch goes to torch once per update.
    T, N = args.num_steps, args.num_envs
    obs = np.zeros((T, N) + obs_shape, dtype=np.float32)
    starts = np.zeros((T, N), dtype=np.float32)  # 1.0 where obs[t] is the first of an episode
    actions = np.zeros((T, N), dtype=np.int64)
    logprobs = np.zeros((T, N), dtype=np.float32)
    values = np.zeros((T, N), dtype=np.float32)
    rewards = np.zeros((T, N), dtype=np.float32)
    terminations = np.zeros((T, N), dtype=np.float32)
    dones = np.zeros((T, N), dtype=np.float32)
    final_values = np.zeros((T, N), dtype=np.float32)  # V(real final observation) at truncations

    global_step, first_iteration = 0, 1
    if resumed is None:
        next_obs, _ = envs.reset(seed=args.seed)
        next_start = np.ones(N, dtype=np.float32)
        lstm_state = agent.initial_state(N, device)
    else:  # continue exactly: networks, optimiser, step, LSTM state, envs (replayed), random generators
        agent.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        rng = make_generator(resumed["action_rng"])
        global_step, first_iteration = resumed["global_step"], resumed["iteration"] + 1
        next_start = resumed["next_start"].numpy()
        lstm_state = (resumed["lstm_state"][0].to(device), resumed["lstm_state"][1].to(device))
        next_obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    checkpointer = Checkpointer(run.directory, "ppo_lstm", args, args.checkpoint_interval, global_step, writer=writer)
    start_step, start_time = global_step, time.time()
    if args.num_iterations * args.batch_size != args.total_timesteps:
        print(
            f"training {args.num_iterations * args.batch_size} steps: --total-timesteps rounded down "
            f"to whole rollouts of {args.batch_size}"
        )
    progress = Progress(args.num_iterations * args.batch_size, start_step=global_step)

    for iteration in range(first_iteration, args.num_iterations + 1):
        # The state before the rollout's first step: the update replays each env's sequence from it.
        initial_state = (lstm_state[0].clone(), lstm_state[1].clone())
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        final_values.fill(0.0)
        for step in range(T):
            global_step += N
            obs[step] = next_obs
            starts[step] = next_start
            # One forward per step: the LSTM (reset where an episode starts), the policy and V.
            with torch.no_grad():
                hidden, lstm_state = agent.unroll(
                    torch.from_numpy(obs[step : step + 1]).to(device),
                    torch.from_numpy(starts[step : step + 1]).to(device),
                    lstm_state,
                )
                log_probs = torch.log_softmax(agent.actor(hidden[0]), dim=-1).cpu().numpy()
                values[step] = agent.critic(hidden[0]).squeeze(-1).cpu().numpy()
            actions[step] = sample_categorical(log_probs, rng)
            logprobs[step] = np.take_along_axis(log_probs, actions[step][:, None], axis=-1)[:, 0]

            next_obs, reward, termination, truncation, infos = envs.step(actions[step])
            rewards[step] = reward
            terminations[step] = termination
            dones[step] = next_start = (termination | truncation).astype(np.float32)
            truncated = truncation & ~termination
            if truncated.any():
                # V(real final observation), with the LSTM state after this step: the final
                # observation continues the episode that obs[step] belongs to, so the memory
                # it is read with is lstm_state (not a reset state). The next step resets
                # lstm_state for these envs, since next_start is 1 there.
                final = torch.from_numpy(real_next_obs(next_obs, infos)[truncated][None]).to(device)
                with torch.no_grad():
                    final_values[step, truncated] = (
                        agent.get_value(
                            final,
                            torch.zeros(final.shape[:2], device=device),
                            (lstm_state[0][truncated], lstm_state[1][truncated]),
                        )[0]
                        .cpu()
                        .numpy()
                    )
            if "_episode" in infos:
                progress.episodes(log_episodes(writer, infos, global_step))
        progress.update(global_step)

        # V of the observations after the rollout, from the state the next rollout starts with.
        with torch.no_grad():
            last_values = (
                agent.get_value(
                    torch.from_numpy(next_obs[None]).float().to(device),
                    torch.from_numpy(next_start[None]).to(device),
                    lstm_state,
                )[0]
                .cpu()
                .numpy()
            )
        advantages, returns = compute_gae(
            rewards, values, last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
        )

        # The batch as sequences [T, N, ...], moved to the training device once.
        b_obs = torch.from_numpy(obs).to(device)
        b_starts = torch.from_numpy(starts).to(device)
        b_actions = torch.from_numpy(actions).to(device)
        b_logprobs = torch.from_numpy(logprobs).to(device)
        b_values = torch.from_numpy(values).to(device)
        b_advantages = torch.from_numpy(advantages).to(device)
        b_returns = torch.from_numpy(returns).to(device)

        # Optimise the policy and value networks on minibatches of whole env sequences
        envs_per_minibatch = N // args.num_minibatches
        clipfracs = []
        for epoch in range(args.update_epochs):
            env_inds = torch.randperm(N, device=device)
            for start in range(0, N, envs_per_minibatch):
                mb = env_inds[start : start + envs_per_minibatch]
                newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
                    b_obs[:, mb], b_starts[:, mb], (initial_state[0][mb], initial_state[1][mb]), b_actions[:, mb]
                )
                logratio = newlogprob - b_logprobs[:, mb]
                ratio = logratio.exp()

                with torch.no_grad():
                    # http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

                mb_advantages = b_advantages[:, mb]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss (clipped surrogate, eq. 7)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
                mb_returns, mb_values = b_returns[:, mb], b_values[:, mb]
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - mb_returns) ** 2
                    v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
                    v_loss_clipped = (v_clipped - mb_returns) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - mb_returns) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                optimizer.step()

            if args.target_kl is not None and approx_kl.item() > args.target_kl:
                break

        var_y = np.var(returns)
        explained_var = np.nan if var_y == 0 else 1 - np.var(returns - values) / var_y

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
                    "lstm_state": [lstm_state[0].cpu(), lstm_state[1].cpu()],
                    "next_start": torch.from_numpy(next_start.copy()),
                    "envs": envs_state(envs),
                    "wandb_id": run.wandb_id,
                },
            )

    progress.close()
    if args.save_model:
        model_path = run.directory / f"{args.exp_name}.cleanrl_model"
        save_model(model_path, "ppo_lstm", args, agent.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

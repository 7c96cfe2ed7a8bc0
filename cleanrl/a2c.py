"""A2C (synchronous advantage actor-critic) for discrete actions on classic-control environments.

Advantage actor-critic with n-step returns, an entropy bonus and RMSprop:
    Mnih, Badia, Mirza, Graves, Lillicrap, Harley, Silver, Kavukcuoglu (2016), "Asynchronous
    Methods for Deep Reinforcement Learning", arXiv:1602.01783 (Algorithm S3: n-step returns
    R = r_t + γ R bootstrapped from V(s_{t_max}), policy gradient ∇ log π(a|s) (R - V(s)),
    value regression on (R - V(s))², entropy regularisation; RMSprop),
in its synchronous form, as OpenAI Baselines' and stable-baselines3's A2C run it: the
environments step in lock-step, and one gradient step is taken on each rollout of
``--num-steps`` steps of all ``--num-envs`` environments (no worker threads, no epochs, no
clipped objective). The defaults are stable-baselines3's A2C defaults (5 steps, RMSprop
lr 7e-4, α 0.99, ε 1e-5, γ 0.99, λ 1, entropy 0.0, value 0.5, gradient-norm clip 0.5) with
the 8 environments the rl-baselines3-zoo uses on CartPole-v1.

What this file changes against them:
  - a time-limit truncation is not a termination: at a truncation the return bootstraps from
    V(real final observation) (gymnasium's ``infos["final_obs"]``), never from the observation
    after the reset; only a termination stops bootstrapping (stable-baselines3 does the same
    by adding γ V(final observation) to the last reward);
  - the returns come from generalized advantage estimation (Schulman et al. 2016,
    arXiv:1506.02438) with ``--gae-lambda``; its default 1.0 gives exactly the n-step
    returns of the paper (each step bootstraps from the value after the rollout, or stops at
    an episode end);
  - separate 64-64 tanh actor and critic networks with orthogonal initialisation (as
    stable-baselines3's MlpPolicy and ppo.py), and one optimiser over both.

Run:
    python cleanrl/a2c.py --env-id CartPole-v1
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
from cleanrl_utils.evals import run_episodes
from cleanrl_utils.numpy_net import NumpyMLP
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
    env_id: str = "CartPole-v1"
    """gymnasium id of the environment (Discrete actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 500000
    """total environment steps, summed over envs"""
    learning_rate: float = 7e-4
    """RMSprop learning rate (constant unless --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments (the rl-baselines3-zoo's 8 for CartPole-v1)"""
    num_steps: int = 5
    """steps per environment in each rollout: n of the n-step returns"""
    anneal_lr: bool = False
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 1.0
    """GAE λ; 1.0 gives the plain n-step returns of the paper"""
    norm_adv: bool = False
    """if toggled, normalise the advantages of each rollout (not in the paper)"""
    ent_coef: float = 0.0
    """entropy bonus coefficient β"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    rms_prop_alpha: float = 0.99
    """RMSprop smoothing constant α (decay of the squared-gradient average)"""
    rms_prop_eps: float = 1e-5
    """RMSprop ε, added to the root of the squared-gradient average"""
    log_interval: int = 100
    """updates between two writes of the losses to TensorBoard"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size, the number of updates (computed; not a flag)"""


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "learning_rate", "torch_threads", "log_interval")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(0 <= args.gamma <= 1, "--gamma", f"must be in [0, 1], got {args.gamma}")
    require(0 <= args.gae_lambda <= 1, "--gae-lambda", f"must be in [0, 1], got {args.gae_lambda}")
    require(args.max_grad_norm > 0, "--max-grad-norm", f"must be positive, got {args.max_grad_norm}")
    require(0 <= args.rms_prop_alpha < 1, "--rms-prop-alpha", f"must be in [0, 1), got {args.rms_prop_alpha}")
    require(args.rms_prop_eps > 0, "--rms-prop-eps", f"must be positive, got {args.rms_prop_eps}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    args.batch_size = args.num_envs * args.num_steps
    require(
        not args.norm_adv or args.batch_size >= 2,
        "--norm-adv",
        f"a rollout of {args.batch_size} sample is too small to normalise advantages; "
        "use more --num-envs or --num-steps, or --no-norm-adv",
    )
    require(
        args.total_timesteps >= args.batch_size,
        "--total-timesteps",
        f"{args.total_timesteps} is less than one rollout of {args.batch_size} steps "
        f"(--num-envs {args.num_envs} x --num-steps {args.num_steps})",
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
    """Orthogonal weights with gain ``std`` and constant bias (as stable-baselines3's ``ortho_init``)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate actor and critic MLPs, 64-64 tanh (stable-baselines3's A2C MlpPolicy).

    Args:
        obs_dim: size of the flat observation.
        num_actions: size of the Discrete action space.
    """

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01),
        )

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): observations ``[B, obs_dim]`` -> values ``[B]``."""
        return self.critic(x).squeeze(-1)

    def get_log_prob_and_entropy(self, x: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Score ``action`` under the categorical policy π(·|x).

        Args:
            x: observations ``[B, obs_dim]``.
            action: actions ``[B]`` (int64).

        Returns:
            ``(log π(action|x) [B], entropy of π(·|x) [B])``, in nats.
        """
        log_probs = torch.log_softmax(self.actor(x), dim=-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return log_prob, entropy


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
    """Generalized advantage estimation over a rollout, correct at truncations (as ppo.py).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)
    A_t = δ_t + γ λ (1 - done_t) A_{t+1}
    (Schulman et al. 2016, arXiv:1506.02438, eq. 16, with the recursion cut at episode ends.)

    With λ = 1 the returns A_t + V(s_t) are the n-step returns of Mnih et al. 2016
    (Algorithm S3): R_t = r_t + γ R_{t+1}, started from V(s_T) after the rollout, from
    V(final observation) at a truncation and from 0 at a termination.

    s'_t is the real next state of step t: s_{t+1} within an episode, the episode's final
    observation where it ended at t (not the reset one), and the observation after the
    rollout at t = T-1. So a time limit still bootstraps from V(final observation); only a
    termination stops bootstrapping, and done_t (termination or truncation) stops the
    recursion, since step t+1 belongs to the next episode.

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
        critic's regression target.
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


def a2c_loss(
    log_probs: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    ent_coef: float,
    vf_coef: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The A2C loss of one rollout (Mnih et al. 2016, Algorithm S3; stable-baselines3's A2C.train).

    policy_loss = -mean(A_t log π(a_t|s_t))      (A_t a constant: no gradient into the critic)
    value_loss  = mean((R_t - V(s_t))²)
    loss        = policy_loss - β mean(H[π(·|s_t)]) + c_v value_loss

    Args:
        log_probs: log π(a_t|s_t) ``[B]``, with gradient.
        entropy: H[π(·|s_t)] ``[B]`` in nats, with gradient.
        values: V(s_t) ``[B]``, with gradient.
        advantages: A_t ``[B]``, constants.
        returns: R_t ``[B]``, the critic's targets, constants.
        ent_coef: β.
        vf_coef: c_v.

    Returns:
        ``(loss, policy_loss, value_loss, entropy_loss)``, scalars; entropy_loss is the mean
        entropy (the bonus, logged as ``losses/entropy``).
    """
    policy_loss = -(advantages.detach() * log_probs).mean()
    value_loss = ((returns.detach() - values) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = policy_loss - ent_coef * entropy_loss + vf_coef * value_loss
    return loss, policy_loss, value_loss, entropy_loss


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
        ValueError: the file was not saved by a2c.py.
    """
    content = load_model(model_path, "a2c")
    env_id = env_id or content["env_id"]
    seed = content["args"]["seed"] + 100_000 if seed is None else seed
    envs = make_vector_env([make_env(env_id, 0, capture_video, video_dir, lambda episode: episode < eval_episodes)])
    generator = torch.Generator().manual_seed(seed)
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n)).to(device)
    agent.load_state_dict(content["model"])
    agent.eval()

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        logits = agent.actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
        if deterministic:
            return logits.argmax(-1).cpu().numpy()
        return torch.multinomial(torch.softmax(logits, -1).cpu(), 1, generator=generator).squeeze(-1).numpy()

    returns = run_episodes(envs, policy, eval_episodes, seed=seed)
    envs.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    args, resumed = resume_args(args, "a2c")  # with --resume: the checkpoint's run and its arguments
    check_args(args)
    check_env(args.env_id, (gym.spaces.Discrete,), (gym.spaces.Box,), "a2c.py", obs_ndim=1)
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
    agent = Agent(int(np.prod(obs_shape)), int(envs.single_action_space.n)).to(device)
    optimizer = optim.RMSprop(
        agent.parameters(), lr=args.learning_rate, alpha=args.rms_prop_alpha, eps=args.rms_prop_eps, foreach=True
    )
    # The rollout samples actions from a numpy copy of the actor: a rollout is 5 vector steps,
    # and torch's per-call overhead would cost more than the environments. The log-probabilities
    # and values of the rollout are computed in torch in one batch for the gradient step (the
    # weights do not change during a rollout, so they are the same numbers).
    policy = NumpyMLP(agent.actor)
    rng = np.random.default_rng(args.seed)

    # Rollout storage [num_steps, num_envs, ...], in numpy (a few numbers per step).
    T, N = args.num_steps, args.num_envs
    obs = np.zeros((T, N) + obs_shape, dtype=np.float32)
    actions = np.zeros((T, N), dtype=np.int64)
    rewards = np.zeros((T, N), dtype=np.float32)
    terminations = np.zeros((T, N), dtype=np.float32)
    dones = np.zeros((T, N), dtype=np.float32)
    truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
    final_obs = np.zeros((T, N) + obs_shape, dtype=np.float32)  # its real final observation

    global_step, first_iteration = 0, 1
    if resumed is None:
        next_obs, _ = envs.reset(seed=args.seed)
    else:  # continue exactly: networks, optimiser, step, envs (replayed), random generators
        agent.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        policy.sync()
        rng = make_generator(resumed["action_rng"])
        global_step, first_iteration = resumed["global_step"], resumed["iteration"] + 1
        next_obs = restore_envs(envs, resumed["envs"])
        set_rng_state(resumed["rng"])
    checkpointer = Checkpointer(run.directory, "a2c", args, args.checkpoint_interval, global_step, writer=writer)
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
            actions[step] = sample_categorical(policy(next_obs), rng)

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

        # One critic pass over the rollout's observations, the observations after it and the
        # final observations of truncated episodes; only V(s_t) keeps its gradient, the
        # bootstrap values enter the returns as constants.
        b_obs = torch.from_numpy(obs.reshape((-1,) + obs_shape)).to(device)
        b_actions = torch.from_numpy(actions.reshape(-1)).to(device)
        critic_input = torch.cat(
            [
                b_obs,
                torch.as_tensor(next_obs, dtype=torch.float32, device=device),
                torch.from_numpy(final_obs[truncated]).to(device),
            ]
        )
        all_values = agent.get_value(critic_input)
        b_values = all_values[: T * N]
        bootstrap = all_values[T * N :].detach().cpu().numpy()
        last_values = bootstrap[:N]
        final_values = np.zeros((T, N), dtype=np.float32)
        final_values[truncated] = bootstrap[N:]
        values = b_values.detach().cpu().numpy().reshape(T, N)
        advantages, returns = compute_gae(
            rewards, values, last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
        )
        b_advantages = torch.from_numpy(advantages.reshape(-1)).to(device)
        b_returns = torch.from_numpy(returns.reshape(-1)).to(device)
        if args.norm_adv:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)

        # One gradient step on the whole rollout
        b_logprobs, b_entropy = agent.get_log_prob_and_entropy(b_obs, b_actions)
        loss, pg_loss, v_loss, entropy_loss = a2c_loss(
            b_logprobs, b_entropy, b_values, b_advantages, b_returns, args.ent_coef, args.vf_coef
        )
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
        optimizer.step()
        policy.sync()

        if iteration % args.log_interval == 0 or iteration == args.num_iterations:
            var_y = np.var(returns)
            explained_var = np.nan if var_y == 0 else 1 - np.var(returns - values) / var_y
            sps = int((global_step - start_step) / (time.time() - start_time))
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
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
        save_model(model_path, "a2c", args, agent.state_dict())
        print(f"model saved to {model_path}")
        episodic_returns = evaluate(
            str(model_path), args.eval_episodes, args.env_id, args.capture_video, str(run.directory / "videos-eval")
        )
        writer.add_scalar("eval/episodic_return", episodic_returns.mean(), global_step)
        writer.add_scalar("eval/episodic_return_std", episodic_returns.std(), global_step)
        print(f"evaluation over {args.eval_episodes} episodes: {episodic_returns.mean():.1f} ± {episodic_returns.std():.1f}")

    envs.close()
    run.close()

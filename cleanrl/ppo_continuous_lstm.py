"""Recurrent PPO (an LSTM policy) for continuous (Box) actions, with observation and reward normalisation.

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347; GAE (Schulman et al.
2016, arXiv:1506.02438); the continuous-action details of Huang et al. (2022), "The 37 Implementation Details of
PPO", as ppo_continuous.py has them (a Gaussian with a state-independent log σ, the unclipped sample stored while
the env clips it, observations and rewards normalised and clipped to ±10); an LSTM core (Hochreiter & Schmidhuber
1997) trained on whole rollout sequences from their stored initial state, as ppo_lstm.py has it. The network:
encoder (64 tanh) -> LSTM -> Gaussian-mean and critic heads (64 tanh each), and log σ.

What this file changes against them: at a time-limit truncation the advantage bootstraps from V(real final
observation), normalised with that step's statistics and read with the LSTM state of its own episode; only a
termination stops bootstrapping. The normalisation statistics are saved with the model and frozen in evaluation.
Defaults: ppo_continuous.py's rollout size, epochs and optimiser, as 8 envs x 256 steps with one env's whole
sequence a minibatch, 200k steps. Details and results: docs/scripts/ppo_continuous_lstm.md.

Run (InvertedPendulum with the velocities hidden, see cleanrl_utils/envs/no_velocity.py; needs the mujoco extra):
    python cleanrl/ppo_continuous_lstm.py --env-id cleanrl_utils.envs:InvertedPendulumNoVelocity-v5
"""

import math
import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.normalization import Normalization, NormalizeObservation
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """Recurrent PPO's hyperparameters; the flags every script takes (--seed, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "cleanrl_utils.envs:InvertedPendulumNoVelocity-v5"
    """gymnasium id of the environment (Box actions, vector observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 200000
    """total environment steps, summed over envs"""
    learning_rate: float = 3e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 256
    """steps per environment in each rollout (the length of the sequences the LSTM is trained on)"""
    lstm_size: int = 128
    """units of the LSTM's hidden and cell states"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ (also of the discounted return whose std scales the rewards)"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 8
    """minibatches per epoch; each is all --num-steps steps of --num-envs / --num-minibatches envs"""
    update_epochs: int = 10
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε])"""
    clip_vloss: bool = True
    """if toggled, clip the value loss as in the reference implementation"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    target_kl: Optional[float] = None
    """stop the epochs of an update early when the approximate KL exceeds this"""
    obs_clip: float = 10.0
    """normalised observations are clipped to [-obs_clip, obs_clip]"""
    reward_clip: float = 10.0
    """normalised rewards are clipped to [-reward_clip, reward_clip]"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """steps per minibatch, batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx``: the gymnasium env, clipping the actions it receives to its bounds, its
    episode statistics, and (training) its replay log.

    Env 0 records videos into ``video_dir`` if asked, of the episodes ``video_episodes(index)``
    picks (gymnasium's schedule by default). ``training=False``: an evaluation env, without replay
    log. Normalisation is added on the vector env, in the main process (:class:`Normalization`).
    """

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
        env = gym.wrappers.ClipAction(env)  # the Gaussian's sample, clipped to the bounds
        env = gym.wrappers.RecordEpisodeStatistics(env)  # raw return and length in the info of the episode's last step
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log N(actions; mean, diag(σ²)) summed over action dimensions: Σ_i [-(a_i - μ_i)² / (2 σ_i²) - log σ_i - ½ log(2π)]."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std).sum(-1) - 0.5 * math.log(2 * math.pi) * mean.shape[-1]


def gaussian_entropy(log_std: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Entropy of N(μ, diag(σ²)), Σ_i [½ + ½ log(2π) + log σ_i], for every entry of ``shape``."""
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
    return entropy.expand(shape)


class Agent(nn.Module):
    """Encoder (64 tanh) -> LSTM -> Gaussian-mean and critic heads (64 tanh each), and a state-independent log σ (0 at
    the start); the LSTM as ppo_lstm.py's, the other layers as ppo_continuous.py's."""

    def __init__(self, envs: gym.vector.VectorEnv, lstm_size: int = 128):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        action_dim = int(np.prod(envs.single_action_space.shape))
        self.encoder = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh())
        self.lstm = nn.LSTM(64, lstm_size)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(lstm_size, 64)), nn.Tanh(), layer_init(nn.Linear(64, action_dim), std=0.01)
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))
        self.critic = nn.Sequential(layer_init(nn.Linear(lstm_size, 64)), nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))

    def initial_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero LSTM state ``(h [batch, lstm_size], c [batch, lstm_size])``."""
        zeros = torch.zeros(batch, self.lstm.hidden_size, device=device)
        return zeros, zeros.clone()

    def unroll(
        self, obs: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Run the LSTM through T steps of B sequences ``[T, B, obs_dim]`` from ``state``, zeroing the state before each
        step where ``starts[t, b]`` (an episode's first observation). Returns ``(hidden [T, B, lstm_size], state after step
        T-1)``; with a rollout's stored first state it reproduces the rollout's outputs."""
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
        action: Optional[torch.Tensor] = None,
    ):
        """``(action, log π(action|history), entropy, V, state)`` under N(μ(history), σ²) along sequences (:meth:`unroll`)."""
        hidden, state = self.unroll(obs, starts, state)
        mean = self.actor_mean(hidden)
        if action is None:
            action = mean + self.actor_logstd.exp() * torch.randn_like(mean)
        log_prob = gaussian_log_prob(mean, self.actor_logstd, action)
        entropy = gaussian_entropy(self.actor_logstd, mean.shape[:-1])
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1), state


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
    """GAE over a rollout, correct at truncations (as ppo.py's; Schulman et al. 2016, eq. 16, cut at episode ends).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}; s'_t is s_{t+1}, the final
    observation where step t ended an episode (``final_values``), or the one after the rollout. Returns ``(A, A + V)``.
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


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm lstm_size obs_clip reward_clip")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, lstm_size=(1, 2**16))
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    sequences = f"{args.num_minibatches} does not divide --num-envs {args.num_envs}: a minibatch is made of whole"
    require(args.num_envs % args.num_minibatches == 0, "--num-minibatches", f"{sequences} environment sequences")
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    require(not args.norm_adv or args.minibatch_size >= 2, "--num-minibatches", "too small to normalise advantages")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    _, action_space = check_env(args, gym.spaces.Box, gym.spaces.Box, obs_ndim=1, flatten=True)
    require(len(action_space.shape) == 1, "--env-id", f"{args.env_id} has actions of shape {action_space.shape}; 1-D only")
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = True, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script: the Gaussian's mean (clipped to the bounds
    by the env), or (``deterministic=False``) a sample of N(μ, σ²); the LSTM state is carried from step to step and
    reset at each episode start, as in training. Observations are normalised with the statistics saved with the model,
    frozen; rewards are the env's. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    evaluation.envs = NormalizeObservation(evaluation.envs)
    evaluation.load_state(evaluation.envs, "obs_norm")  # checked: finite statistics of this env's shape
    evaluation.envs.update_running_mean = False  # frozen: the statistics of training
    lstm_size = evaluation.saved_size("lstm_size", 1, 2**16)  # checked before the network is built
    agent = evaluation.load(Agent(evaluation.envs, lstm_size), "agent")
    device = evaluation.device
    generator = torch.Generator(device).manual_seed(evaluation.seed)
    memory = {"state": agent.initial_state(1, device), "starts": torch.ones((1, 1), device=device)}

    def policy(obs: np.ndarray) -> torch.Tensor:
        obs = torch.as_tensor(obs[None], device=device)
        hidden, memory["state"] = agent.unroll(obs, memory["starts"], memory["state"])
        mean = agent.actor_mean(hidden[0])
        if deterministic:
            return mean.cpu()
        return (mean + agent.actor_logstd.exp() * torch.randn(mean.shape, generator=generator, device=device)).cpu()

    def on_done(done: np.ndarray) -> None:  # where an episode ended, the next observation starts one
        memory["starts"] = torch.as_tensor(done[None], dtype=torch.float32, device=device)

    return evaluation.run(policy, on_done)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an ended episode's last observation is in infos["final_obs"]
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(args.num_envs)]
    if args.env_mode == "async":  # one worker process per env, started from a fresh interpreter (forkserver)
        raw_envs = gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver")
    else:
        raw_envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(raw_envs):  # a fault ends the run in one line; any error ends the env workers too
        # Observations and rewards normalised on the vector env, in this process: one set of statistics in both env modes
        normalization = Normalization(TimedSteps(raw_envs, args.env_timeout), args.gamma, args.obs_clip, args.reward_clip)
        envs = normalization.envs
        agent = Agent(envs, args.lstm_size).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch, the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + envs.single_observation_space.shape, device=device)
        starts = torch.zeros((T, N), device=device)  # 1.0 where obs[t] is the first of an episode
        actions = torch.zeros((T, N) + envs.single_action_space.shape, device=device)  # the unclipped samples
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))  # rewards normalised, clipped
        final_values = np.zeros((T, N), dtype=np.float32)  # V(real final observation) at truncations

        # What the next rollout carries over (the LSTM state, where episodes start), as buffers of a module that a
        # checkpoint holds: a forged one (another shape or dtype, non-finite values) is refused in one line
        carried = nn.Module()
        carried.register_buffer("lstm_state", torch.zeros(2, N, args.lstm_size))
        carried.register_buffer("next_start", torch.zeros(N, dtype=torch.bool))

        model = {"agent": agent, "obs_norm": normalization.obs}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators: the envs below the normalisation, replayed without touching it
        state = {"agent": agent, "optimizer": optimizer, "normalization": normalization, "envs": raw_envs, "carried": carried}
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators, statistics, envs (replayed) and LSTM state
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
            next_obs = normalization.obs.normalize(saved["obs"])  # the raw observation, as the observation layer returned it
            next_start = carried.next_start.numpy().astype(np.float32)
            lstm_state = tuple(carried.lstm_state.to(device, copy=True))
        else:
            next_obs, _ = envs.reset(seed=args.seed)
            next_start, lstm_state = np.ones(N, dtype=np.float32), agent.initial_state(N, device)

        for iteration in range(start_iteration, args.num_iterations + 1):
            # The state before the rollout's first step: the update replays each env's sequence from it.
            initial_state = (lstm_state[0].clone(), lstm_state[1].clone())
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            final_values.fill(0.0)
            for step in range(T):
                global_step += N
                obs[step] = torch.as_tensor(next_obs)
                starts[step] = torch.as_tensor(next_start)
                # One forward per step: the LSTM (reset where an episode starts), the policy and V.
                with torch.inference_mode():
                    action, logprob, _, value, lstm_state = agent.get_action_and_value(
                        obs[step : step + 1], starts[step : step + 1], lstm_state
                    )
                actions[step], logprobs[step], values[step] = action[0], logprob[0], value[0]

                # a ~ N(μ, σ²), sent unclipped: the env's ClipAction clips it to the bounds
                next_obs, reward, termination, truncation, infos = envs.step(action[0].cpu().numpy())
                rewards[step], terminations[step] = reward, termination
                dones[step] = next_start = (termination | truncation).astype(np.float32)
                truncated = truncation & ~termination
                if truncated.any():
                    # V(real final observation), normalised by NormalizeObservation with this step's statistics,
                    # and read with the LSTM state after this step: the final observation continues the episode
                    # that obs[step] belongs to, so its memory is lstm_state (not a reset state). The next step
                    # resets lstm_state for these envs, since next_start is 1 there.
                    final = torch.as_tensor(real_next_obs(next_obs, infos)[truncated][None], device=device)
                    with torch.inference_mode():
                        memory = (lstm_state[0][truncated], lstm_state[1][truncated])
                        final_value = agent.get_value(final, torch.zeros(final.shape[:2], device=device), memory)
                    final_values[step, truncated] = final_value[0].cpu().numpy()
                run.log_episodes(global_step, infos)

            # V of the observations after the rollout, from the state the next rollout starts with.
            with torch.no_grad():
                next_value = agent.get_value(
                    torch.as_tensor(next_obs[None], device=device),
                    torch.as_tensor(next_start[None], device=device),
                    lstm_state,
                )
            last_values = next_value[0].cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )
            b_advantages = torch.as_tensor(advantages, device=device)
            b_returns = torch.as_tensor(returns, device=device)

            # Optimise the policy and value networks on minibatches of whole env sequences [T, envs of the minibatch]
            envs_per_minibatch = N // args.num_minibatches
            clipfracs = []
            for epoch in range(args.update_epochs):
                env_inds = torch.randperm(N, device=device)
                for start in range(0, N, envs_per_minibatch):
                    mb = env_inds[start : start + envs_per_minibatch]
                    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
                        obs[:, mb], starts[:, mb], (initial_state[0][mb], initial_state[1][mb]), actions[:, mb]
                    )
                    logratio = newlogprob - logprobs[:, mb]
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
                    mb_returns, mb_values = b_returns[:, mb], values[:, mb]
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
                    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()

                if args.target_kl is not None and approx_kl.item() > args.target_kl:
                    break

            y_pred, y_true = values.cpu().numpy(), returns
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/action_std", agent.actor_logstd.detach().exp().mean().item(), global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                carried.lstm_state.copy_(torch.stack(lstm_state))
                carried.next_start.copy_(torch.from_numpy(next_start > 0))
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

"""Recurrent PPO (Nature CNN -> LSTM) on Atari.

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347; GAE (Schulman et al.
2016, arXiv:1506.02438); the Nature CNN and Atari preprocessing of Mnih et al. (2015), Nature 518:529-533; an LSTM
core (Hochreiter & Schmidhuber 1997) as in CleanRL's ppo_atari_lstm.py (Huang et al. 2022, "The 37 Implementation
Details of PPO", the LSTM details): one 84x84 frame per observation, the LSTM state reset at each episode start,
minibatches of whole env sequences replayed from the state stored at the rollout's start. CleanRL's hyperparameters.

What this file changes against them: a time-limit truncation is not a termination. At a truncation the advantage
bootstraps from V(real final observation), computed with the LSTM state after the step that produced it (its own
episode's memory). Only a termination stops bootstrapping. Details and results: docs/scripts/ppo_atari_lstm.md.

Run:
    python cleanrl/ppo_atari_lstm.py --env-id BreakoutNoFrameskip-v4
"""

import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing

from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    pass


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id of an Atari game (a NoFrameskip-v4 id: frame skipping is done here)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 10000000
    """total environment (agent) steps, summed over envs"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout (the length of the sequences the LSTM is trained on)"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch; each is all --num-steps steps of --num-envs / --num-minibatches envs"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.1
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε])"""
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
    """steps per minibatch, batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx``: dqn_atari.py's wrappers with one frame per observation (``[1, 84, 84]`` uint8,
    the LSTM carries the history), game statistics (scores over all lives) and (training) its replay log."""

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the game's score and length, in the info of its last step
        env = atari_wrappers.NoopResetEnv(env, noop_max=30)
        env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
        env = atari_wrappers.EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = atari_wrappers.FireResetEnv(env)
        env = atari_wrappers.ClipRewardEnv(env)
        env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
        env = gym.wrappers.ReshapeObservation(env, (84, 84))
        env = gym.wrappers.FrameStackObservation(env, 1)
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Nature CNN (Mnih et al. 2015) -> 512 ReLU -> LSTM(128) -> linear actor and critic heads, as CleanRL's."""

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(128, int(envs.single_action_space.n)), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1.0)

    def initial_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero LSTM state ``(h [batch, 128], c [batch, 128])``."""
        zeros = torch.zeros(batch, self.lstm.hidden_size, device=device)
        return zeros, zeros.clone()

    def unroll(
        self, obs: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Run the CNN on all frames ``[T, B, 1, 84, 84]`` and the LSTM through T steps of B sequences from ``state``,
        zeroing the state before each step where ``starts[t, b]`` (an episode's first frame). Returns ``(hidden [T, B, 128],
        state after step T-1)``; with a rollout's stored first state it reproduces the rollout's outputs."""
        T, B = obs.shape[:2]
        x = self.network(obs.reshape((T * B,) + obs.shape[2:]).float() / 255.0).reshape(T, B, -1)
        h, c = state[0].unsqueeze(0), state[1].unsqueeze(0)  # nn.LSTM's [num_layers=1, B, 128]
        # nn.LSTM runs a whole segment in one call, so the sequence is cut where an episode
        # starts in any of the B sequences; at a segment's first step the state is multiplied
        # by 1 - start, and within it no state is reset.
        cuts = [0] + [t for t in starts.any(dim=1).nonzero().flatten().tolist() if t > 0] + [T]
        outputs = []
        for begin, end in zip(cuts[:-1], cuts[1:]):
            keep = (1.0 - starts[begin]).view(1, -1, 1)
            output, (h, c) = self.lstm(x[begin:end], (h * keep, c * keep))
            outputs.append(output)
        return torch.cat(outputs), (h[0], c[0])

    def get_value(self, obs: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """V of frames ``[T, B, 1, 84, 84]`` after ``state`` (see :meth:`unroll`) -> ``[T, B]``."""
        hidden, _ = self.unroll(obs, starts, state)
        return self.critic(hidden).squeeze(-1)

    def get_action_and_value(
        self,
        obs: torch.Tensor,
        starts: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        action: Optional[torch.Tensor] = None,
    ):
        """``(action, log π(action|history), entropy, V, state)`` along sequences (:meth:`unroll`)."""
        hidden, state = self.unroll(obs, starts, state)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.flatten(0, 1).exp(), 1).view(log_probs.shape[:2])
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
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
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    sequences = f"does not divide --num-envs {args.num_envs}: a minibatch is made of whole environment sequences"
    require(args.num_envs % args.num_minibatches == 0, "--num-minibatches", sequences)
    require(not args.norm_adv or args.minibatch_size >= 2, "--num-minibatches", "too small to normalise advantages")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_env(args, gym.spaces.Discrete, gym.spaces.Box, id_suffix="NoFrameskip-v4")
    with gym.make(args.env_id) as game:  # an ALE game that leaves the frame skipping to make_env
        ids = f"{args.script}.py takes ALE ids such as BreakoutNoFrameskip-v4"
        require(hasattr(game.unwrapped, "ale"), "--env-id", f"{args.env_id} is not an Atari game; {ids}")
        require(game.spec.kwargs.get("frameskip", 1) == 1, "--env-id", f"{args.env_id} skips frames itself; {ids}")
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a saved model, the LSTM state carried and reset at each episode start;
    actions sampled from π by default, as CleanRL evaluates. ``options``: :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    agent, device = evaluation.load(Agent(evaluation.envs), "agent"), evaluation.device
    generator = torch.Generator(device).manual_seed(evaluation.seed)
    lstm_state, start = agent.initial_state(1, device), torch.ones(1, 1, device=device)

    def policy(obs: np.ndarray) -> torch.Tensor:
        nonlocal lstm_state
        hidden, lstm_state = agent.unroll(torch.as_tensor(obs[None], device=device), start, lstm_state)
        logits = agent.actor(hidden[0])
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    def on_done(done: np.ndarray) -> None:  # the next observation starts an episode (a lost life too)
        nonlocal start
        start = torch.as_tensor(done[None], dtype=torch.float32, device=device)

    return evaluation.run(policy, on_done)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an env whose episode ends is reset within that step(); the observation
    # that ended the episode is in infos["final_obs"].
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(args.num_envs)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        obs_shape = envs.single_observation_space.shape  # (1, 84, 84)
        agent = Agent(envs).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch (frames uint8), the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        starts = torch.zeros((T, N), device=device)  # 1.0 where obs[t] is the first of an episode
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        final_values = np.zeros((T, N), dtype=np.float32)  # V(real final observation) at truncations
        # The LSTM state before a rollout's first step (the update replays each env's sequence from it) and
        # where episodes start there: carried from rollout to rollout
        initial_state, next_start = agent.initial_state(N, device), torch.ones(N, device=device)

        # what a checkpoint holds, besides the generators
        lstm_h, lstm_c = initial_state
        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        state = dict(agent=agent, optimizer=optimizer, envs=envs, lstm_h=lstm_h, lstm_c=lstm_c, next_start=next_start)
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, LSTM state, generators and envs (replayed), in place
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration, next_obs = saved["global_step"], saved["iteration"] + 1, saved["obs"]
        else:
            next_obs, _ = envs.reset(seed=args.seed)

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            lstm_state = initial_state
            final_values.fill(0.0)
            for step in range(T):
                global_step += N
                obs[step], starts[step] = torch.as_tensor(next_obs), next_start
                # One forward per step: CNN, LSTM (reset where an episode starts), policy and V.
                with torch.inference_mode():
                    action, logprob, _, value, lstm_state = agent.get_action_and_value(
                        obs[step : step + 1], starts[step : step + 1], lstm_state
                    )
                actions[step], logprobs[step], values[step] = action[0], logprob[0], value[0]

                next_obs, reward, termination, truncation, infos = envs.step(action[0].cpu().numpy())
                rewards[step], terminations[step], dones[step] = reward, termination, termination | truncation
                next_start.copy_(torch.as_tensor(dones[step]))
                truncated = truncation & ~termination
                if truncated.any():
                    # V(real final observation) with the LSTM state after this step (the memory of
                    # the episode the final frame belongs to), not a reset one; the next step
                    # resets these envs' state, since next_start is 1 there.
                    final = torch.as_tensor(real_next_obs(next_obs, infos)[truncated][None], device=device)
                    with torch.inference_mode():
                        memory = (lstm_state[0][truncated], lstm_state[1][truncated])
                        final_value = agent.get_value(final, torch.zeros(final.shape[:2], device=device), memory)
                    final_values[step, truncated] = final_value[0].cpu().numpy()
                run.log_episodes(global_step, infos)

            # V of the observations after the rollout, from the state the next rollout starts with; then GAE
            with torch.no_grad():
                next_value = agent.get_value(torch.as_tensor(next_obs[None], device=device), next_start[None], lstm_state)
                last_values = next_value[0].cpu().numpy()
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )
            b_advantages = torch.as_tensor(advantages, device=device)
            b_returns = torch.as_tensor(returns, device=device)

            # Optimise the policy and value networks on minibatches of whole env sequences [T, envs]
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
            for kept, after_rollout in zip(initial_state, lstm_state):  # the next rollout starts where this one ended
                kept.copy_(after_rollout)

            y_pred, y_true = values.cpu().numpy(), returns
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

"""Recurrent PQN (Nature CNN with LayerNorm -> LSTM) on Atari with EnvPool: Q(λ) from parallel envs, no replay, no target.

PQN: Gallici et al. (2024), "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811
(section 4, Algorithm 1), as pqn_atari_envpool.py, with an LSTM core (Hochreiter & Schmidhuber
1997) as CleanRL's pqn_atari_envpool_lstm.py: one frame per observation, minibatches of whole env
sequences replayed from the LSTM state at the rollout's start. Defaults: CleanRL's.

What this file changes against CleanRL's: EnvPool's reset step after a done is masked out of the
loss; a truncation bootstraps from the real final observation; the LSTM state is reset at an
episode's first observation, not one step early. Details: docs/scripts/pqn_atari_envpool_lstm.md.

Run:
    python cleanrl/pqn_atari_envpool_lstm.py --env-id Breakout-v5
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
"""Agent steps per game before a time-limit truncation (108,000 frames, 30 minutes at 60 Hz)."""


@dataclass
class Args(RunArgs):
    """PQN's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "Breakout-v5"
    """EnvPool id of an Atari game (such as Breakout-v5, Pong-v5)"""
    env_mode: Literal["sync", "async"] = "sync"
    """sync only: EnvPool steps the envs in its own C++ threads (--num-threads); async is refused"""
    num_threads: Optional[int] = None
    """EnvPool's C++ threads stepping the envs; None: the number of CPU cores available"""
    total_timesteps: int = 10000000
    """total agent steps, summed over envs (4 frames each; EnvPool's reset steps included)"""
    learning_rate: float = 2.5e-4
    """RAdam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout (the horizon of Q(λ), the length of the sequences the LSTM learns on)"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    q_lambda: float = 0.65
    """λ of the Q(λ) returns (0: one-step Q-learning targets; 1: discounted rewards to the episode's or the rollout's end)"""
    num_minibatches: int = 4
    """minibatches per epoch; each is all --num-steps steps of --num-envs / --num-minibatches envs"""
    update_epochs: int = 4
    """epochs over each rollout"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    start_e: float = 1.0
    """ε at the start of exploration"""
    end_e: float = 0.01
    """ε at the end of exploration"""
    exploration_fraction: float = 0.10
    """fraction of total_timesteps over which ε decays linearly from start_e to end_e"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """steps per minibatch, batch_size // num_minibatches (computed; not a flag)"""
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
    """EnvPool's Atari envs as pqn_atari_envpool.py's but one frame per observation, game statistics.

    Observations uint8 ``[num_envs, 1, 84, 84]``, next-step autoreset. Episodic life in training and
    evaluation alike (the LSTM state is reset at a lost life); :class:`GameStatistics` adds the game
    scores and records env 0's games if asked. ``training``: rewards clipped; False: game rewards.
    """
    envs = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        num_threads=num_threads,
        episodic_life=True,
        reward_clip=training,
        noop_max=30,
        frame_skip=FRAME_SKIP,
        img_height=84,
        img_width=84,
        gray_scale=True,
        stack_num=1,
        use_fire_reset=True,
        repeat_action_probability=0.0,  # no sticky actions, as the NoFrameskip-v4 ids
        full_action_space=False,
        max_episode_steps=MAX_EPISODE_STEPS,
        **({"render_mode": "rgb_array"} if capture_video else {}),
    )
    return GameStatistics(envs, FRAME_SKIP, video_dir if capture_video else None, video_episodes)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, "The 37 Implementation Details of PPO")."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """Nature CNN with LayerNorm before every ReLU -> 512 -> LSTM(128) -> linear Q head (CleanRL's pqn_atari_envpool_lstm.py).

    Conv 8x8/4 (32) - conv 4x4/2 (64) - conv 3x3/1 (64) - linear 512, each followed by LayerNorm
    over all its features and ReLU; the LSTM has orthogonal weights (gain 1) and zero biases; the
    head maps 128 -> num_actions Q-values.
    """

    def __init__(self, num_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.LayerNorm([32, 20, 20]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, 9, 9]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, 7, 7]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.q_head = layer_init(nn.Linear(128, num_actions))

    def initial_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero LSTM state ``(h [batch, 128], c [batch, 128])``."""
        zeros = torch.zeros(batch, self.lstm.hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(
        self, obs: torch.Tensor, starts: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Q-values along B sequences of T frames, the LSTM state reset where an episode starts.

        ``obs`` uint8 ``[T, B, 1, 84, 84]``, ``starts`` ``[T, B]`` (1.0 at an episode's first observation:
        the state is multiplied by ``1 - starts[t]`` before step t), ``state`` ``(h, c)`` each ``[B, 128]``.
        Returns ``(Q-values [T, B, num_actions], state after step T-1)``.
        """
        T, B = obs.shape[:2]
        frames = obs.reshape((T * B,) + obs.shape[2:]).to(dtype=torch.float32, memory_format=torch.channels_last)
        x = self.network(frames / 255.0).reshape(T, B, -1)
        h, c = state[0][None], state[1][None]  # nn.LSTM's [num_layers = 1, B, 128]
        # One nn.LSTM call per segment between the steps where an episode starts in any sequence
        cuts = [0] + [t for t in starts.any(dim=1).nonzero().flatten().tolist() if t > 0] + [T]
        hidden = []
        for begin, end in zip(cuts[:-1], cuts[1:]):
            keep = (1.0 - starts[begin]).view(1, B, 1)
            output, (h, c) = self.lstm(x[begin:end], (h * keep, c * keep))
            hidden.append(output)
        return self.q_head(torch.cat(hidden)), (h[0], c[0])


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (the ε of ε-greedy exploration)."""
    return start + (end - start) * min(t / duration, 1.0)


def q_lambda_returns(
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    truncations: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Q(λ) returns of a rollout, computed backwards
    (Gallici et al. 2024, arXiv:2407.04811, section 4 / Algorithm 1; Peng & Williams 1996).
    All inputs [T, E] float32 (T = --num-steps, E = envs):
      rewards r_t; terminations, truncations: 1.0 where the episode ended at step t;
      next_values[t] = max_a Q(s'_{t+1}, a) of the REAL next observation (the final observation where the episode ended at t,
      else the observation the policy saw at t + 1; for t = T-1 the observation after the rollout).
    G_t = r_t + γ (1 - term_t) next_values[t]                                   if the episode ended at t or t = T-1
    G_t = r_t + γ [(1 - λ) next_values[t] + λ G_{t+1}]                          otherwise
    Returns [T, E] float32.

    With EnvPool's next-step autoreset the observation a step returns is always the real next one
    (the final observation where the episode ended), so next_values[t] is max_a Q(obs[t + 1], a)
    of the rollout for t < T-1: no extra forward pass. The step after an episode end (EnvPool's
    reset step) is no transition of the game: its return is meaningless and the loss masks it out.
    """
    ended = torch.maximum(terminations, truncations) > 0
    one_step = rewards + gamma * (1.0 - terminations) * next_values
    returns = torch.empty_like(rewards)
    returns[-1] = one_step[-1]
    for t in reversed(range(rewards.shape[0] - 1)):
        mixed = rewards[t] + gamma * ((1.0 - lam) * next_values[t] + lam * returns[t + 1])
        returns[t] = torch.where(ended[t], one_step[t], mixed)
    return returns


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (``[B]`` each); 0 when none is."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require(args.env_mode == "sync", "--env-mode", "EnvPool already steps the envs in parallel C++ threads: set --num-threads")
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate max_grad_norm")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, gamma=(0, 1), q_lambda=(0, 1), start_e=(0, 1), end_e=(0, 1))
    require(args.start_e >= args.end_e, "--end-e", f"{args.end_e} is above --start-e {args.start_e}")
    fraction = args.exploration_fraction
    require(0 < fraction <= 1, "--exploration-fraction", f"must be in (0, 1], got {fraction}")
    if args.num_threads is not None:
        require_range(args, num_threads=(1, 2**10))
    else:
        args.num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    sequences = f"does not divide --num-envs {args.num_envs}: a minibatch is made of whole environment sequences"
    require(args.num_envs % args.num_minibatches == 0, "--num-minibatches", sequences)
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_envpool_atari(args, envpool)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.05, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a model saved by this script, ε-greedy (0.05, the usual Atari evaluation).

    In EnvPool with episodic life, as in training: the LSTM state is carried from step to step and
    reset at the first observation after each lost life; a game's score sums its lives' unclipped
    rewards. ``options``: see :class:`cleanrl_utils.evals.Evaluation`.
    """
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, **options)
    num_actions, device = int(evaluation.envs.single_action_space.n), evaluation.device
    q_network = evaluation.load(QNetwork(num_actions).to(memory_format=torch.channels_last), "q_network")
    generator = torch.Generator(device).manual_seed(evaluation.seed)
    lstm_state, start, after_done = q_network.initial_state(1, device), torch.ones(1, 1, device=device), torch.zeros(1, 1)

    def policy(obs: np.ndarray) -> torch.Tensor:
        nonlocal lstm_state
        q_values, lstm_state = q_network(torch.as_tensor(obs[None], device=device), start, lstm_state)
        greedy = q_values[0].argmax(-1)
        explore = torch.rand(len(greedy), generator=generator, device=device) < epsilon
        random_actions = torch.randint(num_actions, greedy.shape, generator=generator, device=device)
        return torch.where(explore, random_actions, greedy).cpu()

    def on_done(done: np.ndarray) -> None:  # the observation after a reset step starts an episode
        nonlocal start, after_done
        start, after_done = after_done.to(device), torch.as_tensor(done[None], dtype=torch.float32)

    return evaluation.run(policy, on_done)


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
    # resets the env (a reset step: its action is ignored, its reward 0) and returns the next episode's first.
    envs = make_envs(
        args.env_id, seed, args.capture_video, run.video_dir, num_envs=args.num_envs, num_threads=args.num_threads
    )
    with run.stop_on_fault(envs):  # a fault ends the run in one line
        obs_shape, num_actions = envs.single_observation_space.shape, int(envs.single_action_space.n)  # (1, 84, 84)
        q_network = QNetwork(num_actions).to(device, memory_format=torch.channels_last)  # NHWC: faster convolutions on CPU
        optimizer = optim.RAdam(q_network.parameters(), lr=args.learning_rate)

        # Rollout storage [num_steps, num_envs]
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        starts = torch.zeros((T, N), device=device)  # 1.0 where obs[t] is the first of an episode: the LSTM state is reset
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        values = torch.zeros((T, N), device=device)  # max_a Q(history up to obs[t], a) under the rollout's weights
        rewards, terminations, truncations = (torch.zeros((T, N), device=device) for _ in range(3))
        resets = torch.zeros((T, N), dtype=torch.bool, device=device)  # EnvPool's reset steps: not transitions of the game

        model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
        state = {
            "q_network": q_network,
            "optimizer": optimizer,
        }  # what a checkpoint holds, besides the generators: not the envs
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's network, optimiser and generators, in place; the envs and LSTM state are new
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
        next_obs, _ = envs.reset()
        next_done = torch.zeros(N, dtype=torch.bool, device=device)  # the last step's dones: the next step is a reset step
        next_start = torch.ones(N, device=device)  # the next observation starts an episode
        lstm_state = q_network.initial_state(N, device)

        for iteration in range(start_iteration, args.num_iterations + 1):
            initial_state = (lstm_state[0].clone(), lstm_state[1].clone())  # the update replays each env's sequence from it
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                global_step += N
                obs[step], starts[step], resets[step] = torch.as_tensor(next_obs), next_start, next_done
                epsilon = linear_schedule(
                    args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step
                )
                with torch.inference_mode():
                    q_values, lstm_state = q_network(obs[step : step + 1], starts[step : step + 1], lstm_state)
                values[step], greedy = q_values[0].max(dim=1)
                explore = torch.rand(N, device=device) < epsilon
                actions[step] = torch.where(explore, torch.randint(num_actions, (N,), device=device), greedy)

                next_obs, reward, termination, truncation, info = envs.step(actions[step].cpu().numpy())
                rewards[step] = torch.as_tensor(reward, device=device)
                terminations[step] = torch.as_tensor(termination, device=device)
                truncations[step] = torch.as_tensor(truncation, device=device)
                next_done = torch.as_tensor(termination | truncation, device=device)
                next_start = resets[step].float()  # after a reset step comes the first observation of the next episode
                run.log_episodes(global_step, info)  # game scores: unclipped rewards over all lives (GameStatistics)

            check_rollout(global_step, reward=rewards)  # the first NaN or infinite reward stops the run (frames: uint8)

            # Q(λ) targets. EnvPool's obs[t + 1] is the real next observation of step t (the final one after a done),
            # read by the LSTM with its own episode's memory
            with torch.no_grad():
                last_q, _ = q_network(torch.as_tensor(next_obs[None], device=device), next_start[None], lstm_state)
                next_values = torch.cat([values[1:], last_q.max(dim=2).values])
                returns = q_lambda_returns(rewards, terminations, truncations, next_values, args.gamma, args.q_lambda)
            mask = (~resets).float()

            # Regress Q(history, a_t) on the Q(λ) returns, in minibatches of whole env sequences [T, envs]
            # (reset steps masked out)
            envs_per_minibatch = N // args.num_minibatches
            for epoch in range(args.update_epochs):
                env_inds = torch.randperm(N, device=device)
                for start in range(0, N, envs_per_minibatch):
                    mb = env_inds[start : start + envs_per_minibatch]
                    q_values, _ = q_network(obs[:, mb], starts[:, mb], (initial_state[0][mb], initial_state[1][mb]))
                    q_taken = q_values.gather(2, actions[:, mb, None]).squeeze(2)
                    td_loss = masked_mean((q_taken - returns[:, mb]) ** 2, mask[:, mb])

                    optimizer.zero_grad()
                    td_loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(
                        f"iteration {iteration}, epoch {epoch + 1}", global_step, td_loss=td_loss, grad_norm=grad_norm
                    )
                    optimizer.step()

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/epsilon", epsilon, global_step)
            writer.add_scalar("losses/td_loss", td_loss.item(), global_step)
            writer.add_scalar("losses/q_values", masked_mean(q_taken.detach(), mask[:, mb]).item(), global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

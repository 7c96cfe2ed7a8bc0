"""PQN on Atari with EnvPool: Q(λ) learning from parallel envs, without replay buffer or target network.

PQN: Gallici et al. (2024), "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811
(section 4, Algorithm 1): LayerNorm (Ba et al. 2016, arXiv:1607.06450), RAdam (Liu et al. 2019,
arXiv:1908.03265); the Nature CNN (Mnih et al. 2015) in EnvPool (Weng et al. 2022,
arXiv:2206.10558). Defaults: CleanRL's pqn_atari_envpool.py.

What this file changes against CleanRL's: EnvPool's reset step after a done is masked out of the
loss; a truncation bootstraps from the real final observation; ``charts/episodic_return`` is the
game score. Checkpoints do not hold EnvPool's envs. Details: docs/scripts/pqn_atari_envpool.md.

Run:
    python cleanrl/pqn_atari_envpool.py --env-id Breakout-v5
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
    """steps per environment in each rollout (the horizon of the Q(λ) returns)"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    q_lambda: float = 0.65
    """λ of the Q(λ) returns (0: one-step Q-learning targets; 1: discounted rewards to the episode's or the rollout's end)"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    max_grad_norm: float = 10.0
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
    """EnvPool's Atari envs, preprocessed as ppo_atari_envpool.py's, gymnasium API (next-step autoreset), game statistics.

    Observations uint8 ``[num_envs, 4, 84, 84]``; :class:`GameStatistics` adds the game scores (from
    ``info["reward"]``, ``info["terminated"]``) and records env 0's games if asked. ``training``: episodic
    life and rewards clipped to their sign; False for evaluation: whole games, game rewards.
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
    """The Nature CNN (Mnih et al. 2015) with LayerNorm before every ReLU (PQN, section 4), and a linear Q head.

    Conv 8x8/4 (32) - conv 4x4/2 (64) - conv 3x3/1 (64) - linear 512, each followed by LayerNorm
    over all its features and ReLU; then 512 -> num_actions Q-values, as CleanRL's
    pqn_atari_envpool.py. Inputs are uint8 frames ``[B, 4, 84, 84]`` in 0-255, divided by 255 here.
    """

    def __init__(self, num_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
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
            layer_init(nn.Linear(512, num_actions)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Q(x, ·): frames uint8 ``[B, 4, 84, 84]`` -> ``[B, num_actions]``."""
        return self.network(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)


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
    """Q(λ) returns of a rollout, computed backwards (Gallici et al. 2024, Algorithm 1; Peng & Williams 1996).

    Inputs ``[T, E]``; ``next_values[t]`` = max_a Q of the REAL next observation (the final one where the
    episode ended at t). G_t = r_t + γ (1 - term_t) next_values[t] where the episode ended at t or t = T-1,
    else r_t + γ [(1 - λ) next_values[t] + λ G_{t+1}]: a truncation bootstraps, λ never crosses an episode end.
    With EnvPool's next-step autoreset, next_values[t] is max_a Q(obs[t + 1], a) for t < T-1; the
    reset step after an episode end is no transition of the game, and the loss masks it out.
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
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide the rollout of {rollout}")
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_envpool_atari(args, envpool)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.05, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a model saved by this script, ε-greedy (0.05, the usual Atari evaluation),
    in EnvPool: whole games, unclipped rewards. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, **options)
    num_actions = int(evaluation.envs.single_action_space.n)
    q_network = evaluation.load(QNetwork(num_actions).to(memory_format=torch.channels_last), "q_network")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        greedy = q_network(torch.as_tensor(obs, device=evaluation.device)).argmax(-1)
        explore = torch.rand(len(greedy), generator=generator, device=evaluation.device) < epsilon
        random_actions = torch.randint(num_actions, greedy.shape, generator=generator, device=evaluation.device)
        return torch.where(explore, random_actions, greedy).cpu()

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
        obs_shape, num_actions = envs.single_observation_space.shape, int(envs.single_action_space.n)  # (4, 84, 84)
        q_network = QNetwork(num_actions).to(device, memory_format=torch.channels_last)  # NHWC: faster convolutions on CPU
        optimizer = optim.RAdam(q_network.parameters(), lr=args.learning_rate)

        # Rollout storage [num_steps, num_envs]
        T, N = args.num_steps, args.num_envs
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        values = torch.zeros((T, N), device=device)  # max_a Q(obs[t], a) under the rollout's weights
        rewards, terminations, truncations = (torch.zeros((T, N), device=device) for _ in range(3))
        resets = torch.zeros((T, N), dtype=torch.bool, device=device)  # EnvPool's reset steps: not transitions of the game

        model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
        state = {
            "q_network": q_network,
            "optimizer": optimizer,
        }  # what a checkpoint holds, besides the generators: not the envs
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's network, optimiser and generators, in place; the envs are new
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
        next_obs, _ = envs.reset()
        next_done = torch.zeros(N, dtype=torch.bool, device=device)  # the last step's dones: the next step is a reset step

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                global_step += N
                obs[step], resets[step] = torch.as_tensor(next_obs), next_done
                epsilon = linear_schedule(
                    args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step
                )
                with torch.inference_mode():
                    q_values = q_network(obs[step])
                values[step], greedy = q_values.max(dim=1)
                explore = torch.rand(N, device=device) < epsilon
                actions[step] = torch.where(explore, torch.randint(num_actions, (N,), device=device), greedy)

                next_obs, reward, termination, truncation, info = envs.step(actions[step].cpu().numpy())
                rewards[step] = torch.as_tensor(reward, device=device)
                terminations[step] = torch.as_tensor(termination, device=device)
                truncations[step] = torch.as_tensor(truncation, device=device)
                next_done = torch.as_tensor(termination | truncation, device=device)
                run.log_episodes(global_step, info)  # game scores: unclipped rewards over all lives (GameStatistics)

            check_rollout(global_step, reward=rewards)  # the first NaN or infinite reward stops the run (frames: uint8)

            # Q(λ) targets. EnvPool's obs[t + 1] is the real next observation of step t (the final one after a done)
            with torch.no_grad():
                last_values = q_network(torch.as_tensor(next_obs, device=device)).max(dim=1).values
                next_values = torch.cat([values[1:], last_values[None]])
                returns = q_lambda_returns(rewards, terminations, truncations, next_values, args.gamma, args.q_lambda)

            b_obs, b_actions, b_returns = obs.reshape((-1,) + obs_shape), actions.reshape(-1), returns.reshape(-1)
            b_mask = (~resets).reshape(-1).float()

            # Regress Q(s_t, a_t) on the Q(λ) returns, in minibatches of the game's transitions (reset steps masked out)
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]
                    q_taken = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds, None]).squeeze(1)
                    td_loss = masked_mean((q_taken - b_returns[mb_inds]) ** 2, b_mask[mb_inds])

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
            writer.add_scalar("losses/q_values", masked_mean(q_taken.detach(), b_mask[mb_inds]).item(), global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

"""DQN for structured spaces: Dict and Tuple observations and action masks, Discrete actions.

DQN (Mnih et al. 2015, Nature 518:529-533) with the option --double-q (van Hasselt, Guez, Silver
2016, arXiv:1509.06461, eq. 4), as dqn.py, and for structured spaces:
    - observations: each leaf of a Dict or Tuple observation has an encoder of its own (those of
      ppo_structured.py, copied here), their features concatenated; the replay stores the
      observation as a namedarraytuple of its leaves (rlpyt, Stooke & Abbeel 2019, arXiv:1909.01500).
    - action masks (--action-mask): greedy actions, ε-greedy exploration and the TD target's max
      (and double-Q's argmax) at s' run over the allowed actions only: the masking of Huang &
      Ontañón 2022 (arXiv:2006.14171) carried over to Q-learning.

What this file changes: a time-limit truncation is not a termination (as dqn.py). A MiniGrid
``mission`` that never changes is left out of the observation; other text leaves are refused.
Details: docs/scripts/dqn_structured.md.

Run:
    python cleanrl/dqn_structured.py --env-id cleanrl_utils.envs:CombinationLock-v0
    python cleanrl/dqn_structured.py --env-id cleanrl_utils.envs:CombinationLockInfoMask-v0 --action-mask info
    python cleanrl/dqn_structured.py --env-id cleanrl_utils.envs:CombinationLock-v0 --action-mask off   # without masks
"""

import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.namedarraytuple import buffer_from_space, conform, to_device
from cleanrl_utils.run import start_run
from cleanrl_utils.spaces import (
    ACTION_MASK,
    ActionMaskFromInfo,
    OneHot,
    check_action_masks,
    check_structured_env,
    fixed_mission,
    image_layout,
    leaf,
    observation_leaves,
    uses_masks,
)
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs

try:  # the MiniGrid ids come with the minigrid extra; without it, --env-id says so
    import minigrid

    gym.register_envs(minigrid)
except ImportError:
    pass


@dataclass
class Args(RunArgs):
    """DQN's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the replay buffer too (its size is printed) and --resume continues exactly"""
    env_id: str = "cleanrl_utils.envs:CombinationLock-v0"
    """gymnasium id of the environment (Discrete actions; Dict, Tuple or leaf observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    action_mask: Literal["auto", "info", "off"] = "auto"
    """where the action mask comes from: the observation key action_mask if there is one (auto), info["action_mask"]
    (info), or nowhere: the agent acts and learns without a mask (off)"""
    total_timesteps: int = 50000
    """total environment steps, summed over envs"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    num_envs: int = 1
    """number of parallel environments"""
    buffer_size: int = 10000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 1.0
    """target network update rate (1.0: hard copy)"""
    target_network_frequency: int = 500
    """vector steps between target network updates"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_e: float = 1.0
    """ε at the start of exploration"""
    end_e: float = 0.05
    """ε at the end of exploration"""
    exploration_fraction: float = 0.5
    """fraction of total_timesteps over which ε decays linearly from start_e to end_e"""
    learning_starts: int = 1000
    """environment steps of data collection before training starts (also the refill after resuming without a buffer)"""
    train_frequency: int = 4
    """vector steps between gradient steps"""
    double_q: bool = False
    """if toggled, use the double-Q target (van Hasselt et al. 2016)"""


def make_env(
    env_id: str,
    idx: int,
    capture_video: bool,
    video_dir: str,
    training: bool = True,
    video_episodes=None,
    action_mask: str = "auto",
):
    """A thunk creating env ``idx``: the gymnasium env, its mask from the info (``action_mask="info"``), its
    episode statistics, its output checks, and (training) its replay log.

    Env 0 records videos into ``video_dir`` if asked, of the episodes ``video_episodes(index)``
    picks (gymnasium's schedule by default). ``training=False``: an evaluation env, without replay log.
    """

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        if fixed_mission(env.observation_space) is not None:  # a MiniGrid mission that never changes (DoorKey's): no news
            env = gym.wrappers.FilterObservation(env, [key for key in env.observation_space.spaces if key != "mission"])
        if action_mask == "info":  # info["action_mask"] becomes the observation key "action_mask"
            env = ActionMaskFromInfo(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Encoder(nn.Module):
    """One encoder per leaf of the observation, features concatenated: ``obs`` -> ``[B, out_features]``.

    - images (3-D Box, :func:`cleanrl_utils.spaces.image_layout`) of 7 to 35 pixels a side: the
      CNN of rl-starter-files for MiniGrid's symbolic grids (conv 2x2 16, max-pool 2, conv 2x2
      32, conv 2x2 64, ReLU; values as they are); of 36 or more: the Nature CNN (Mnih et al.
      2015; uint8 pixels scaled by 1/255); flattened;
    - other Box leaves (smaller images included): flattened, linear to 64, tanh;
    - Discrete and MultiDiscrete: one-hot (:class:`cleanrl_utils.spaces.OneHot`); MultiBinary: 0/1 floats.

    The top-level ``action_mask`` key is not an input. Leaves are read by path from the
    namedarraytuple, in :func:`cleanrl_utils.spaces.observation_leaves`' order.
    """

    def __init__(self, observation_space: gym.Space):
        super().__init__()
        self.paths, self.encoders, self.layouts, self.scales, self.out_features = [], nn.ModuleList(), [], [], 0
        for path, space in observation_leaves(observation_space):
            layout, scale = image_layout(space), 1.0
            if layout is not None and 7 <= min(layout[1:3]) < 36:
                encoder = nn.Sequential(
                    nn.Conv2d(layout[0], 16, 2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 2), nn.ReLU(),
                    nn.Conv2d(32, 64, 2), nn.ReLU(), nn.Flatten(),
                )  # fmt: skip
            elif layout is not None and min(layout[1:3]) >= 36:
                scale = 1 / 255 if space.dtype == np.uint8 else 1.0
                encoder = nn.Sequential(
                    layer_init(nn.Conv2d(layout[0], 32, 8, stride=4)), nn.ReLU(), layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                    nn.ReLU(), layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
                )  # fmt: skip
            elif isinstance(space, gym.spaces.Box):
                layout, encoder = None, nn.Sequential(layer_init(nn.Linear(int(np.prod(space.shape)), 64)), nn.Tanh())
            elif isinstance(space, gym.spaces.MultiBinary):
                encoder = nn.Identity()
            else:  # Discrete, MultiDiscrete
                encoder = OneHot(space)
            self.paths.append(path)
            self.encoders.append(encoder)
            self.layouts.append(layout)
            self.scales.append(scale)
            with torch.no_grad():  # the size of this leaf's features
                example = torch.as_tensor(np.zeros((1, *space.shape), np.int64) + getattr(space, "start", 0))
                self.out_features += self.encode(encoder, layout, scale, example).shape[1]

    @staticmethod
    def encode(encoder: nn.Module, layout, scale: float, x: torch.Tensor) -> torch.Tensor:
        """One leaf ``[B, *shape]`` -> its features ``[B, size]``: images ``[B, C, H, W]`` to a CNN, the rest flattened."""
        if isinstance(encoder, OneHot):
            return encoder(x)
        x = x.float() * scale
        if layout is None:
            return encoder(x.reshape(x.shape[0], -1))
        return encoder(x.permute(0, 3, 1, 2) if layout[3] else x)

    def forward(self, obs) -> torch.Tensor:
        """``obs``: a namedarraytuple of tensors ``[B, ...]`` (or one tensor for a leaf space) -> ``[B, out_features]``."""
        leaves = zip(self.paths, self.encoders, self.layouts, self.scales)
        return torch.cat([self.encode(encoder, layout, scale, leaf(obs, path)) for path, encoder, layout, scale in leaves], -1)


class QNetwork(nn.Module):
    """An :class:`Encoder`, then an MLP 120-84 ReLU estimating Q(s, ·) for Discrete actions."""

    def __init__(self, observation_space: gym.Space, num_actions: int):
        super().__init__()
        self.encoder = Encoder(observation_space)
        self.q = nn.Sequential(
            nn.Linear(self.encoder.out_features, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_actions)
        )

    def forward(self, obs) -> torch.Tensor:
        """Observations ``[B, ...]`` (a namedarraytuple of tensors) -> Q-values ``[B, num_actions]``."""
        return self.q(self.encoder(obs))


def linear_schedule(start: float, end: float, duration: float, t: int) -> float:
    """Linear from ``start`` at t = 0 to ``end`` at t = ``duration``, then constant (ε decay)."""
    return start + (end - start) * min(t / duration, 1.0)


def masked_argmax(q_values: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """argmax over the allowed actions: q_values ``[B, A]``, mask bool ``[B, A]`` or None -> int64 ``[B]``."""
    return (q_values if mask is None else q_values.masked_fill(~mask, -torch.inf)).argmax(dim=1)


def masked_epsilon_greedy(
    greedy: np.ndarray, mask: Optional[np.ndarray], epsilon: float, num_actions: int, rng: np.random.Generator
) -> np.ndarray:
    """ε-greedy among the allowed actions: with probability ε a uniform allowed action, else ``greedy``.

    Args:
        greedy: int64 ``[N]``, the greedy (masked argmax) actions.
        mask: bool ``[N, A]``, true where allowed, each row with one at least; None: all allowed.
        epsilon: ε in [0, 1].
        num_actions: A.
        rng: numpy generator of the draws.

    Returns:
        int64 ``[N]``. The uniform draw is the argmax of uniform noise over the allowed entries.
    """
    noise = rng.random((len(greedy), num_actions))
    random_actions = (noise if mask is None else np.where(mask, noise, -1.0)).argmax(axis=1)
    return np.where(rng.random(len(greedy)) < epsilon, random_actions, greedy)


def compute_td_target(
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    next_q_target: torch.Tensor,
    gamma: float,
    next_mask: Optional[torch.Tensor] = None,
    next_q_online: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """TD target y = r + γ Q_target(s', a') over the actions allowed at s', with γ = 0 after a termination.

    DQN (Mnih et al. 2015): a' = argmax over allowed a of Q_target(s', a); double DQN (van
    Hasselt et al. 2016, eq. 4): a' = argmax over allowed a of Q_online(s', a). s' is the real
    next state, so a truncated transition bootstraps. Where s' allows no action (possible at an
    episode's end) or the discount is 0, the bootstrap term is 0.

    Args:
        rewards: r, ``[B]``.
        terminations: 1.0 where the episode terminated, ``[B]``.
        next_q_target: Q_target(s', ·), ``[B, A]``.
        gamma: discount γ.
        next_mask: bool ``[B, A]``, the actions allowed at s'; None: all.
        next_q_online: Q_online(s', ·), ``[B, A]``; given, the target is double-Q.

    Returns:
        TD targets ``[B]``.
    """
    next_action = masked_argmax(next_q_target if next_q_online is None else next_q_online, next_mask)
    next_value = next_q_target.gather(1, next_action.unsqueeze(1)).squeeze(1)
    if next_mask is not None:
        next_value = torch.where(next_mask.any(dim=1), next_value, 0.0)
    discounts = gamma * (1 - terminations)
    return rewards + torch.where(discounts > 0, discounts * next_value, 0.0)


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input (the env's spaces, masks and encoders are checked next, in the
    run's set-up, before the replay buffer is made)."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size learning_rate target_network_frequency")
    require_positive(args, "train_frequency")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40))
    require_range(args, gamma=(0, 1), start_e=(0, 1), end_e=(0, 1))
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    require(
        0 < args.exploration_fraction <= 1, "--exploration-fraction", f"must be in (0, 1], got {args.exploration_fraction}"
    )
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.start_e >= args.end_e, "--end-e", f"{args.end_e} is above --start-e {args.start_e}")
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    per_env = f"{args.buffer_size // args.num_envs} steps per env with --num-envs {args.num_envs}; at least 3 needed"
    require(args.buffer_size // args.num_envs >= 3, "--buffer-size", per_env)
    check_env(args, gym.spaces.Discrete, gym.spaces.Space)  # observations: check_structured_env, in the set-up


def evaluate(model_path: str, eval_episodes: int, epsilon: float = 0.0, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script, ε-greedy among the allowed actions
    (greedy at ε = 0). ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, env_args=("action_mask",), **options)
    envs, device = evaluation.envs, evaluation.device
    q_network = evaluation.load(QNetwork(envs.single_observation_space, int(envs.single_action_space.n)), "q_network")
    masked = uses_masks(evaluation.model["args"]["action_mask"], envs.single_observation_space)
    batch = to_device(buffer_from_space(envs.single_observation_space, envs.num_envs), device)
    rng = np.random.default_rng(evaluation.seed)

    def policy(obs) -> np.ndarray:
        batch[:] = conform(obs, batch)
        mask = batch.get(ACTION_MASK).bool() if masked else None
        greedy = masked_argmax(q_network(batch), mask).cpu().numpy()
        num_actions = int(envs.single_action_space.n)
        return masked_epsilon_greedy(greedy, None if mask is None else mask.cpu().numpy(), epsilon, num_actions, rng)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    observation_space, action_space = check_structured_env(args, make_env, args.seed)  # one line on what it cannot read
    try:  # the encoders read each leaf once when they are built
        QNetwork(observation_space, int(action_space.n))
    except (ValueError, RuntimeError) as error:
        fail("--env-id", f"{args.env_id}: the encoders cannot read its observation ({str(error).splitlines()[0]})")
    N = args.num_envs
    try:  # Replay: transitions in [buffer_size / N, N] rows, each observation a namedarraytuple of its leaves
        rb = ReplayBuffer(args.buffer_size // N, N, observation_space, action_space, seed=args.seed)
    except MemoryError as error:
        fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    rb.device = device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an ended episode's last observation is in infos["final_obs"]
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir, action_mask=args.action_mask) for i in range(N)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        num_actions = int(action_space.n)
        q_network = QNetwork(observation_space, num_actions).to(device)
        optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True)
        target_network = QNetwork(observation_space, num_actions).to(device)
        target_network.load_state_dict(q_network.state_dict())
        masked = uses_masks(args.action_mask, observation_space)
        batch = to_device(buffer_from_space(observation_space, N), device)  # the observation the envs act on
        rng = np.random.default_rng(args.seed)
        exploration_steps = args.exploration_fraction * args.total_timesteps

        model = {"q_network": q_network}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the global random generators
        state = dict(
            q_network=q_network, target_network=target_network, optimizer=optimizer, rng=rng, envs=envs, replay_rng=rb.rng
        )
        if args.checkpoint_buffer:
            state["replay_buffer"] = rb
            print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.1f} MiB)")
        global_step, updates_start = 0, args.learning_starts  # updates once global_step > updates_start
        if run.resumed:  # the checkpoint's networks, optimiser, generators, envs (replayed) and buffer, in place
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, updates_start, obs = saved["global_step"], saved["updates_start"], saved["obs"]
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start = global_step + args.learning_starts
                print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        else:
            obs, _ = envs.reset(seed=args.seed)

        for iteration in range(global_step // N, args.total_timesteps // N):
            # ε-greedy among the allowed actions: the network is only run when some env acts greedily.
            mask = np.asarray(obs[ACTION_MASK], dtype=bool) if masked else None
            if masked:  # every env must allow an action: one line naming the env otherwise
                check_action_masks(mask, [num_actions], global_step // N)
            global_step += N
            epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, global_step)
            greedy = np.zeros(N, dtype=np.int64)
            if epsilon < 1.0:
                with torch.inference_mode():
                    batch[:] = conform(obs, batch)
                    q_values = q_network(batch)
                    greedy = masked_argmax(q_values, batch.get(ACTION_MASK).bool() if masked else None).cpu().numpy()
            actions = masked_epsilon_greedy(greedy, mask, epsilon, num_actions, rng)

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            run.log_episodes(global_step, infos)
            # s' is the real next observation (its action mask included): where an episode ended, its final observation.
            rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
            obs = next_obs

            if global_step > updates_start and len(rb) > 0:
                if iteration % args.train_frequency == 0:
                    data = rb.sample(args.batch_size)
                    next_mask = data.next_obs.get(ACTION_MASK).bool() if masked else None
                    with torch.no_grad():
                        next_q_target = target_network(data.next_obs)
                        next_q_online = q_network(data.next_obs) if args.double_q else None
                        rewards, terminations = data.rewards[:, 0], data.terminations[:, 0]  # the one-step window
                        td_target = compute_td_target(
                            rewards, terminations, next_q_target, args.gamma, next_mask, next_q_online
                        )
                    old_val = q_network(data.obs).gather(1, data.actions.unsqueeze(1)).squeeze(1)
                    loss = F.mse_loss(old_val, td_target)

                    optimizer.zero_grad()
                    loss.backward()
                    check_finite(iteration // args.train_frequency, global_step, td_loss=loss)  # stops a diverging run here
                    optimizer.step()

                    if iteration % (100 * args.train_frequency) == 0:
                        writer.add_scalar("losses/td_loss", loss.item(), global_step)
                        writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                        writer.add_scalar("charts/epsilon", epsilon, global_step)
                        writer.add_scalar("charts/SPS", run.sps(global_step), global_step)

                # Target network: θ' ← τ θ + (1 - τ) θ'
                if iteration % args.target_network_frequency == 0:
                    with torch.no_grad():
                        for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                            target_param.lerp_(param, args.tau)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model, updates_start=updates_start)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

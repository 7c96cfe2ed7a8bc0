"""PPO for structured spaces: Dict and Tuple observations, action masks, MultiDiscrete actions.

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347, with
GAE (arXiv:1506.02438) and ppo.py's details (Huang et al. 2022); multi-input networks as
Stable-Baselines3's ``CombinedExtractor``, rollouts as rlpyt's namedarraytuples (Stooke & Abbeel
2019, arXiv:1909.01500); MultiDiscrete actions as independent categoricals (Vinyals et al. 2017,
arXiv:1708.04782); invalid action masking (Huang & Ontañón 2022, arXiv:2006.14171).

What this file changes: one encoder per leaf of a Dict/Tuple observation (CNN, linear, one-hot),
features concatenated; masked logits set to the lowest float (mask from the ``action_mask`` key or
``info["action_mask"]``); truncations bootstrap from V(real final observation) as ppo.py. A fixed
MiniGrid ``mission`` is left out; text leaves are refused. Details: docs/scripts/ppo_structured.md.


Run:
    pip install -e '.[minigrid]'
    python cleanrl/ppo_structured.py --env-id MiniGrid-DoorKey-5x5-v0
    python cleanrl/ppo_structured.py --env-id cleanrl_utils.envs:CombinationLock-v0 --total-timesteps 100000
    python cleanrl/ppo_structured.py --env-id cleanrl_utils.envs:MultiDiscreteIdentity-v0 --num-envs 8 --total-timesteps 100000
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

from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.namedarraytuple import buffer_from_space, conform, map_leaves, to_device
from cleanrl_utils.run import start_run
from cleanrl_utils.spaces import (
    ACTION_MASK,
    ActionMaskFromInfo,
    OneHot,
    action_dims,
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
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "MiniGrid-DoorKey-5x5-v0"
    """gymnasium id of the environment (Discrete or MultiDiscrete actions; Dict, Tuple or leaf observations)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    action_mask: Literal["auto", "info", "off"] = "auto"
    """where the action mask comes from: the observation key action_mask if there is one (auto), info["action_mask"]
    (info), or nowhere: the agent acts without a mask (off)"""
    total_timesteps: int = 300000
    """total environment steps, summed over envs"""
    learning_rate: float = 1e-3
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 16
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 8
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """if toggled, normalise advantages within each minibatch"""
    clip_coef: float = 0.2
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
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


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


class Agent(nn.Module):
    """A shared :class:`Encoder`, then actor and critic heads (64 tanh), for Discrete or MultiDiscrete actions."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        super().__init__()
        self.encoder = Encoder(observation_space)
        self.action_dims = action_dims(action_space)
        features = self.encoder.out_features
        self.actor = nn.Sequential(
            layer_init(nn.Linear(features, 64)), nn.Tanh(), layer_init(nn.Linear(64, sum(self.action_dims)), std=0.01)
        )
        self.critic = nn.Sequential(layer_init(nn.Linear(features, 64)), nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))

    def get_value(self, obs) -> torch.Tensor:
        """V(obs): observations ``[B, ...]`` -> values ``[B]``."""
        return self.critic(self.encoder(obs)).squeeze(-1)

    def get_action(self, obs, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Sample actions int64 ``[B, len(action_dims)]`` from π(·|obs) among the allowed ones (the actor only)."""
        return masked_categorical(self.actor(self.encoder(obs)), self.action_dims, mask)[0]

    def get_action_and_value(self, obs, mask: Optional[torch.Tensor] = None, action: Optional[torch.Tensor] = None):
        """Sample actions (when ``action`` is None) or score ``action``, and evaluate V.

        Args:
            obs: observations ``[B, ...]`` (a namedarraytuple of tensors).
            mask: bool ``[B, sum(action_dims)]``, true where allowed; None: no mask.
            action: int64 ``[B, len(action_dims)]`` to score.

        Returns:
            ``(action [B, D], log π(action|obs) [B], entropy [B], V(obs) [B])``, see :func:`masked_categorical`.
        """
        hidden = self.encoder(obs)
        action, log_prob, entropy = masked_categorical(self.actor(hidden), self.action_dims, mask, action)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1)


def masked_categorical(
    logits: torch.Tensor,
    dims: list[int],
    mask: Optional[torch.Tensor] = None,
    action: Optional[torch.Tensor] = None,
    greedy: bool = False,
    generator: Optional[torch.Generator] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A factored categorical policy with invalid action masking: sample (or score) actions, log-probabilities, entropies.

    Dimension j has the logits ``logits[:, o_j : o_j + dims[j]]`` (o_j = sum of the sizes before
    it). A masked logit is replaced by the lowest float, so its probability is exactly 0 (Huang &
    Ontañón 2022, arXiv:2006.14171) and it gets no gradient. For a MultiDiscrete action the
    dimensions are independent: log π(a) = sum_j log π_j(a_j), H = sum_j H_j (Vinyals et al. 2017,
    arXiv:1708.04782).

    Args:
        logits: ``[B, sum(dims)]``.
        dims: the size of each categorical dimension (:func:`cleanrl_utils.spaces.action_dims`).
        mask: bool ``[B, sum(dims)]``, true where the action is allowed (each dimension must
            allow one; :func:`cleanrl_utils.spaces.check_action_masks`); None: all allowed.
        action: int64 ``[B, len(dims)]`` to score; None: sample one (Gumbel-max: argmax of the
            logits plus Gumbel noise, taken over the allowed actions only), or with ``greedy``
            take the most probable allowed action.
        greedy: pick the most probable allowed action instead of sampling.
        generator: torch generator of the sampling noise (None: the global one).

    Returns:
        ``(action [B, D] int64, log π(action) [B], entropy [B])``.
    """
    if mask is not None:
        logits = torch.where(mask, logits, torch.finfo(logits.dtype).min)
    segments = logits.split(dims, dim=-1)
    masks = mask.split(dims, dim=-1) if mask is not None else (None,) * len(segments)
    chosen, log_prob, entropy = [], 0.0, 0.0
    for j, (segment, segment_mask) in enumerate(zip(segments, masks)):
        log_probs = torch.log_softmax(segment, dim=-1)
        if action is not None:
            a = action[:, j]
        else:  # Gumbel-max: the draw of Categorical(logits=segment).sample(), the plain form, at less CPU time
            scores = segment if greedy else segment - torch.empty_like(segment).exponential_(generator=generator).log()
            if segment_mask is not None:  # noise of +inf (an exponential draw of exactly 0) must not pick a masked action
                scores = scores.masked_fill(~segment_mask, -torch.inf)
            a = scores.argmax(-1)
        chosen.append(a)
        log_prob = log_prob + log_probs.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        entropy = entropy - (log_probs.exp() * log_probs).sum(-1)
    return torch.stack(chosen, dim=-1), log_prob, entropy


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
    """Generalized advantage estimation over a rollout, correct at truncations (Schulman et al. 2016,
    arXiv:1506.02438, eq. 16; as ppo.py's ``compute_gae``).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t), A_t = δ_t + γ λ (1 - done_t) A_{t+1}, with s'_t
    the real next state: the episode's final observation where it ended at t.

    Args:
        rewards, values, terminations, dones: ``[T, N]``; final_values: V(final observation) ``[T, N]``
            (read at truncations); last_values: V of the observations after the rollout, ``[N]``.
        gamma, gae_lambda: γ and λ in [0, 1].

    Returns:
        ``(advantages [T, N], returns [T, N])``, returns = advantages + values.
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
    batch = f"the batch of {args.batch_size} (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide {batch}")
    require(not args.norm_adv or args.minibatch_size >= 2, "--num-minibatches", "too small to normalise advantages")
    rollout = f"{args.batch_size} steps (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    check_env(args, (gym.spaces.Discrete, gym.spaces.MultiDiscrete), gym.spaces.Space)  # observations: below
    observation_space, action_space = check_structured_env(args, make_env, args.seed)
    try:  # the encoders read each leaf once when they are built
        Agent(observation_space, action_space)
    except (ValueError, RuntimeError) as error:
        fail("--env-id", f"{args.env_id}: the encoders cannot read its observation ({str(error).splitlines()[0]})")
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = True, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a model saved by this script: the most probable allowed action, or
    (``deterministic=False``) a sampled one. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, env_args=("action_mask",), **options)
    envs, device = evaluation.envs, evaluation.device
    agent = evaluation.load(Agent(envs.single_observation_space, envs.single_action_space), "agent")
    masked = uses_masks(evaluation.model["args"]["action_mask"], envs.single_observation_space)
    batch = to_device(buffer_from_space(envs.single_observation_space, envs.num_envs), device)
    generator = torch.Generator(device).manual_seed(evaluation.seed)

    def policy(obs) -> np.ndarray:
        batch[:] = conform(obs, batch)
        mask = batch.get(ACTION_MASK).bool() if masked else None
        logits = agent.actor(agent.encoder(batch))
        action, _, _ = masked_categorical(logits, agent.action_dims, mask, greedy=deterministic, generator=generator)
        return action.cpu().numpy().reshape((envs.num_envs, *envs.single_action_space.shape))

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an ended episode's last observation is in infos["final_obs"]
    thunks = [
        make_env(args.env_id, i, args.capture_video, run.video_dir, action_mask=args.action_mask) for i in range(args.num_envs)
    ]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        observation_space, action_space = envs.single_observation_space, envs.single_action_space
        agent = Agent(observation_space, action_space).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
        dims = agent.action_dims
        masked = uses_masks(args.action_mask, observation_space)

        # Rollout storage [num_steps, num_envs]: observations as a namedarraytuple of tensors, one per leaf
        # (obs.image [T, N, 7, 7, 3], obs.direction [T, N], ...), written from the vector env's dicts as
        # they are; rewards and episode ends in numpy for GAE
        T, N = args.num_steps, args.num_envs
        obs = to_device(buffer_from_space(observation_space, (T, N)), device)
        final_obs = to_device(buffer_from_space(observation_space, (T, N)), device)  # real final observations
        next_batch = to_device(buffer_from_space(observation_space, N), device)  # the observation after the rollout
        actions = torch.zeros((T, N, len(dims)), dtype=torch.long, device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        state = {"agent": agent, "optimizer": optimizer, "envs": envs}  # what a checkpoint holds, besides the generators
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators and envs (replayed), in place
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration, next_obs = saved["global_step"], saved["iteration"] + 1, saved["obs"]
        else:
            next_obs, _ = envs.reset(seed=args.seed)

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                if masked:  # every env must allow an action in each dimension: one line naming the env otherwise
                    check_action_masks(np.asarray(next_obs[ACTION_MASK], dtype=bool), dims, global_step // N)
                global_step += N
                obs[step] = conform(next_obs, obs)  # the vector env's dict / tuple of arrays, leaf by leaf
                with torch.inference_mode():
                    mask = obs[step].get(ACTION_MASK).bool() if masked else None
                    action = agent.get_action(obs[step], mask)
                actions[step] = action

                env_action = action.cpu().numpy().reshape((N, *action_space.shape))  # [N] Discrete, [N, *nvec.shape] Multi
                next_obs, reward, termination, truncation, infos = envs.step(env_action)
                rewards[step], terminations[step], dones[step] = reward, termination, termination | truncation
                # Truncated (not terminated) envs will bootstrap from their real final observation.
                truncated[step] = truncation & ~termination
                if truncated[step].any():
                    final_obs[step] = conform(real_next_obs(next_obs, infos), final_obs)
                run.log_episodes(global_step, infos)

            # The rollout's log π(a|s) and V(s), in one batch with the weights that acted; then bootstrap
            # values: V(final obs) at truncations and V(obs after the rollout); then GAE
            b_obs = map_leaves(lambda x: x.flatten(0, 1), obs)  # [T * N, ...] per leaf
            b_masks = b_obs.get(ACTION_MASK).bool() if masked else None
            b_actions = actions.flatten(0, 1)
            with torch.no_grad():
                _, b_logprobs, _, b_values = agent.get_action_and_value(b_obs, b_masks, b_actions)
                next_batch[:] = conform(next_obs, next_batch)
                last_values = agent.get_value(next_batch).cpu().numpy()
                final_values = np.zeros((T, N), dtype=np.float32)
                if truncated.any():
                    final_values[truncated] = agent.get_value(final_obs[torch.from_numpy(truncated).to(device)]).cpu().numpy()
            advantages, returns = compute_gae(
                rewards,
                b_values.view(T, N).cpu().numpy(),
                last_values,
                final_values,
                terminations,
                dones,
                args.gamma,
                args.gae_lambda,
            )
            b_advantages = torch.as_tensor(advantages.reshape(-1), dtype=torch.float32, device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), dtype=torch.float32, device=device)

            # Optimise the policy and value networks
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]

                    mb_masks = b_masks[mb_inds] if masked else None
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], mb_masks, b_actions[mb_inds])
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
                        v_clipped = b_values[mb_inds] + torch.clamp(
                            newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                        )
                        v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                    entropy_loss = entropy.mean()
                    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                    optimizer.zero_grad()
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)
                    check_finite(f"iteration {iteration}, epoch {epoch + 1}", global_step, loss=loss, grad_norm=grad_norm)
                    optimizer.step()

                if args.target_kl is not None and approx_kl.item() > args.target_kl:
                    break

            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
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

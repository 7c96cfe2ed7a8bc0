"""PPO with a Transformer-XL episodic memory (PPO-TrXL) for Discrete and MultiDiscrete actions.

Papers: Pleines, Pallasch, Zimmer, Preuss (2023), "Memory Gym: Towards Endless Tasks to Benchmark Memory
Capabilities of Agents", arXiv:2309.17207 (the episodic memory); Dai et al. (2019), "Transformer-XL",
arXiv:1901.02860; Schulman et al. (2017), arXiv:1707.06347 (PPO) with GAE (arXiv:1506.02438). Each step the agent
computes one new token; each layer attends from it to its own input and that layer's inputs at the
--trxl-memory-length previous steps of the episode, stored in the rollout: nothing is recomputed in the update.

What this file changes against CleanRL's ppo_trxl.py: the memory is one buffer per rollout
``[memory_length + num_steps, num_envs, layers, dim]`` instead of whole-episode tensors; a step attends to itself as
well as its window and masked slots get no weight; separate per-head projections; a truncation bootstraps from
V(real final observation); the learning rate anneals to 0, the entropy coefficient is fixed; a MultiDiscrete action
(one categorical per dimension) has one ratio, of the dimensions' summed log-probs, where CleanRL clips each
dimension's; no reconstruction loss. MiniGrid ids get CleanRL's 3x3 view rendered to 84x84 RGB, 96 steps.
Details and results: docs/scripts/ppo_trxl.md.

Run (the proof-of-memory task of cleanrl_utils/envs/memory.py; Memory Gym: ``--env-id memory_gym:MysteryPath-Grid-v0``,
``--env-id memory_gym:Endless-MortarMayhem-v0``, whose actions are MultiDiscrete([3 3])):
    python cleanrl/ppo_trxl.py --env-id cleanrl_utils.envs:ProofOfMemory-v0
"""

import math
import os
import signal
from dataclasses import dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tyro

from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs

os.environ.setdefault("SDL_AUDIODRIVER", "dummy")  # Memory Gym's envs call pygame.init(), which would open a sound card
try:  # the MiniGrid ids come with the minigrid extra; without it, --env-id says so
    import minigrid

    gym.register_envs(minigrid)
except ImportError:
    pass


@dataclass
class Args(RunArgs):
    """PPO-TrXL's hyperparameters; the flags every script takes (--seed, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "cleanrl_utils.envs:ProofOfMemory-v0"
    """gymnasium id of the environment (Discrete or MultiDiscrete actions; vector or HxWxC image observations; MiniGrid;
    Memory Gym as memory_gym:Endless-MortarMayhem-v0)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 100000
    """total environment steps, summed over envs"""
    learning_rate: float = 3e-4
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
    """minibatches per epoch (of single steps, each with its memory window)"""
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
    trxl_num_layers: int = 2
    """transformer layers"""
    trxl_num_heads: int = 4
    """attention heads per layer (must divide --trxl-dim)"""
    trxl_dim: int = 64
    """width of the tokens (the encoder's output and every layer's)"""
    trxl_memory_length: int = 16
    """steps of memory each layer attends to (the sliding window), besides the current step"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """steps per minibatch, batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """total_timesteps // batch_size (computed; not a flag)"""


def is_minigrid(env_id: str) -> bool:
    """Whether ``env_id`` (``"MiniGrid-..."``, with or without a ``module:`` prefix) is a MiniGrid task."""
    return env_id.rpartition(":")[2].startswith("MiniGrid-")


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with episode statistics and (training) its replay log; MiniGrid tasks as CleanRL's
    ppo_trxl sees them (a 3x3 partial view rendered as 84x84 RGB, truncated after 96 steps)."""

    def thunk():
        render = {"render_mode": "rgb_array"} if capture_video and idx == 0 else {}
        if is_minigrid(env_id):
            from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

            env = gym.make(env_id, agent_view_size=3, max_episode_steps=96, **render)
            env = ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=28))
        else:
            env = gym.make(env_id, **render)
        if capture_video and idx == 0:
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # return and length in the info of the episode's last step
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def memory_window(episode_step: torch.Tensor, memory_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions [B, M], mask [B, M])`` of a step's window: slot j holds the step M - j steps earlier, at episode
    position ``episode_step - M + j``; mask is True where that position is in the step's own episode (>= 0)."""
    positions = episode_step[:, None] - memory_length + torch.arange(memory_length, device=episode_step.device)
    return positions.clamp(min=0), positions >= 0


def gather_windows(memory: torch.Tensor, steps: torch.Tensor, envs: torch.Tensor, memory_length: int) -> torch.Tensor:
    """The windows ``[B, M, layers, dim]`` (oldest first) of rollout steps ``(steps[b], envs[b])``: rows
    ``steps[b] .. steps[b] + M - 1`` of ``memory [M + T, N, layers, dim]``."""
    rows = steps[:, None] + torch.arange(memory_length, device=steps.device)
    return memory[rows, envs[:, None]]


def sinusoidal_encoding(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal encodings of integer positions (Vaswani et al. 2017): ``[...]`` -> ``[..., dim]`` (dim even)."""
    frequencies = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))
    angles = positions[..., None].float() * frequencies
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class TransformerLayer(nn.Module):
    """A pre-layer-norm Transformer-XL block for one query token: x <- x + Attention(LN(x), LN(context)); x <- x +
    ReLU(W LN(x) + b); no gating."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.norm_query, self.norm_context, self.norm_out = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.query, self.key, self.value = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.attention_out = nn.Linear(dim, dim)
        self.projection = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x [B, dim]`` attends to ``context [B, K, dim]`` where ``mask [B, K]`` is True -> ``[B, dim]``."""
        (B, K, D), H = context.shape, self.num_heads
        q = self.query(self.norm_query(x)).view(B, 1, H, D // H).transpose(1, 2)  # [B, H, 1, D/H]
        c = self.norm_context(context)
        k = self.key(c).view(B, K, H, D // H).transpose(1, 2)  # [B, H, K, D/H]
        v = self.value(c).view(B, K, H, D // H).transpose(1, 2)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])  # masked: weight 0
        x = x + self.attention_out(attended.reshape(B, D))
        return x + self.projection(self.norm_out(x))


class Agent(nn.Module):
    """Encoder (Linear + ReLU, or the Nature CNN for images) -> Transformer-XL layers over the episodic memory -> ReLU
    layer -> actor and critic heads (initialised as ppo.py's). The actor has one categorical head per action dimension
    (Discrete(n): one of n; MultiDiscrete(nvec): one of nvec[d] for each d), their logits side by side in one layer."""

    def __init__(
        self, envs: gym.vector.VectorEnv, dim: int = 64, num_layers: int = 2, num_heads: int = 4, memory_length: int = 16
    ):
        super().__init__()
        shape, actions = envs.single_observation_space.shape, envs.single_action_space
        self.action_nvec = [int(actions.n)] if isinstance(actions, gym.spaces.Discrete) else actions.nvec.tolist()
        self.memory_length, self.num_layers, self.dim = memory_length, num_layers, dim
        if len(shape) == 3:
            cnn = nn.Sequential(
                layer_init(nn.Conv2d(shape[2], 32, 8, stride=4)),
                nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.ReLU(),
                nn.Flatten(),
            )
            with torch.no_grad():
                flat = cnn(torch.zeros(1, shape[2], shape[0], shape[1])).shape[1]
            self.encoder = nn.Sequential(cnn, layer_init(nn.Linear(flat, dim)), nn.ReLU())
        else:
            self.encoder = nn.Sequential(layer_init(nn.Linear(shape[0], dim)), nn.ReLU())
        self.layers = nn.ModuleList([TransformerLayer(dim, num_heads) for _ in range(num_layers)])
        self.post = nn.Sequential(layer_init(nn.Linear(dim, dim)), nn.ReLU())
        self.actor = layer_init(nn.Linear(dim, sum(self.action_nvec)), std=0.01)
        self.critic = layer_init(nn.Linear(dim, 1), std=1.0)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations ``[B, *obs_shape]`` -> tokens ``[B, dim]``."""
        if obs.dim() == 4:  # HxWxC images, uint8
            return self.encoder(obs.permute(0, 3, 1, 2).float() / 255.0)
        return self.encoder(obs.float())

    def trxl(self, obs: torch.Tensor, memory: torch.Tensor, episode_step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of B envs through the transformer: layer i attends from the step's token to its window's inputs of
        layer i and its own, plus sinusoidal positions in the episode, earlier episodes masked (:func:`memory_window`).
        Returns ``(hidden [B, dim], layer_inputs [B, layers, dim])``, the latter kept by the memory."""
        positions, mask = memory_window(episode_step, self.memory_length)
        positions = torch.cat([positions, episode_step[:, None]], dim=1)  # [B, M + 1]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # a step always reads itself
        position_encoding = sinusoidal_encoding(positions, self.dim)
        x, layer_inputs = self.encode(obs), []
        for i, layer in enumerate(self.layers):
            layer_inputs.append(x)
            context = torch.cat([memory[:, :, i], x[:, None]], dim=1) + position_encoding
            x = layer(x, context, mask)
        return self.post(x), torch.stack(layer_inputs, dim=1)

    def get_value(self, obs: torch.Tensor, memory: torch.Tensor, episode_step: torch.Tensor) -> torch.Tensor:
        """V of observations ``[B, *obs_shape]`` read with their memory windows (see :meth:`trxl`) -> ``[B]``."""
        return self.critic(self.trxl(obs, memory, episode_step)[0]).squeeze(-1)

    def action_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The logits of each action dimension's head, ``[B, nvec[d]]`` for each d (one for Discrete)."""
        return self.actor(hidden).split(self.action_nvec, dim=-1)

    def get_action_and_value(
        self, obs: torch.Tensor, memory: torch.Tensor, episode_step: torch.Tensor, action: Optional[torch.Tensor] = None
    ):
        """``(action [B, dims], log π(action|history), entropy, V, layer_inputs)`` given the memory window; samples
        when None. The dimensions are independent: the action's log π and the entropy are sums over them."""
        hidden, layer_inputs = self.trxl(obs, memory, episode_step)
        log_probs = [torch.log_softmax(logits, dim=-1) for logits in self.action_logits(hidden)]
        if action is None:
            action = torch.stack([torch.multinomial(lp.exp(), 1)[:, 0] for lp in log_probs], dim=1)
        log_prob = sum(lp.gather(-1, action[:, d, None])[:, 0] for d, lp in enumerate(log_probs))
        entropy = sum(-(lp.exp() * lp).sum(-1) for lp in log_probs)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1), layer_inputs


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
    """GAE over a rollout, correct at truncations (Schulman et al. 2016, eq. 16, cut at episode ends).

    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t);  A_t = δ_t + γ λ (1 - done_t) A_{t+1}; s'_t is s_{t+1}, the
    final observation where step t ended an episode (``final_values``), or the one after the rollout. Returns ``(A, A + V)``.
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
    require_positive(args, "max_grad_norm trxl_num_layers trxl_num_heads trxl_dim trxl_memory_length")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20))  # each by its own flag, before their product
    require_range(args, update_epochs=(1, 10**4))  # a stop signal waits for the update under way
    require_range(args, trxl_num_layers=(1, 64), trxl_num_heads=(1, 1024), trxl_dim=(2, 2**14))
    require_range(args, trxl_memory_length=(1, 2**14))
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1))
    require(args.trxl_dim % 2 == 0, "--trxl-dim", f"must be even (sinusoidal positions), got {args.trxl_dim}")
    heads = f"{args.trxl_num_heads} does not divide --trxl-dim {args.trxl_dim}"
    require(args.trxl_dim % args.trxl_num_heads == 0, "--trxl-num-heads", heads)
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
    actions = (gym.spaces.Discrete, gym.spaces.MultiDiscrete)  # one categorical head per action dimension
    if is_minigrid(args.env_id):  # a Dict observation, of which make_env keeps the image rendered as RGB
        _, action_space = check_env(args, actions, gym.spaces.Dict)
    else:
        observation_space, action_space = check_env(args, actions, gym.spaces.Box)
        shape, images = observation_space.shape, "HxWxC uint8 images of at least 36x36 pixels (the Nature CNN)"
        require(
            len(shape) in (1, 3),
            "--env-id",
            f"{args.env_id} has observations of shape {shape}; ppo_trxl.py supports vectors or {images}",
        )
        require(
            len(shape) == 1 or (observation_space.dtype == np.uint8 and min(shape[:2]) >= 36),
            "--env-id",
            f"{args.env_id} has {observation_space.dtype} observations of shape {shape}; ppo_trxl.py supports {images}",
        )
    table = isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim != 1
    one_row = f"{args.env_id} has MultiDiscrete actions of shape {action_space.shape}; ppo_trxl.py supports one row"
    require(not table, "--env-id", one_row)
    # after every check: a refused command prints nothing else
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = True, **options) -> np.ndarray:
    """Episodic returns ``[eval_episodes]`` of a saved model, the memory sliding along as in training; the most probable
    action, or a sampled one (``deterministic=False``). ``options``: :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    sizes = {
        name: evaluation.saved_size(f"trxl_{name}", 1, 2**14) for name in ("dim", "num_layers", "num_heads", "memory_length")
    }
    agent = evaluation.load(Agent(evaluation.envs, **sizes), "agent")
    device = evaluation.device
    generator = torch.Generator(device).manual_seed(evaluation.seed)
    M, L, D = sizes["memory_length"], sizes["num_layers"], sizes["dim"]
    memory = {
        "window": torch.zeros((1, M, L, D), device=device),
        "episode_step": torch.zeros(1, dtype=torch.long, device=device),
    }

    def policy(obs: np.ndarray) -> torch.Tensor:
        hidden, layer_inputs = agent.trxl(torch.as_tensor(obs, device=device), memory["window"], memory["episode_step"])
        memory["window"] = torch.cat([memory["window"][:, 1:], layer_inputs[:, None]], dim=1)  # slide by one step
        memory["episode_step"] = memory["episode_step"] + 1
        logits = agent.action_logits(hidden)  # one head per action dimension
        if deterministic:
            action = torch.stack([x.argmax(-1) for x in logits], dim=1)
        else:
            action = torch.stack([torch.multinomial(x.softmax(-1), 1, generator=generator)[:, 0] for x in logits], dim=1)
        return action.reshape(evaluation.envs.action_space.shape).cpu()  # Discrete: [1]; MultiDiscrete: [1, dims]

    def on_done(done: np.ndarray) -> None:  # where an episode ended, the next observation is its step 0
        memory["episode_step"] = memory["episode_step"] * torch.as_tensor(1 - done.astype(np.int64), device=device)

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
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        M, L, D = args.trxl_memory_length, args.trxl_num_layers, args.trxl_dim
        agent = Agent(envs, D, L, args.trxl_num_heads, M).to(device)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch, the rest in numpy for GAE
        T, N = args.num_steps, args.num_envs
        space = envs.single_observation_space
        obs = torch.zeros((T, N) + space.shape, dtype=torch.uint8 if len(space.shape) == 3 else torch.float32, device=device)
        episode_steps = torch.zeros((T, N), dtype=torch.long, device=device)  # position of obs[t] in its episode
        # The episodic memory: row M + t holds the inputs of every layer at step t; rows 0 .. M-1 the M steps
        # before the rollout (the previous rollout's last rows), so that every step's window is in the buffer.
        memory = torch.zeros((M + T, N, L, D), device=device)
        actions = torch.zeros((T, N, len(agent.action_nvec)), dtype=torch.long, device=device)  # one per dimension
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        final_values = np.zeros((T, N), dtype=np.float32)  # V(real final observation) at truncations
        env_ids = torch.arange(N, device=device)

        # What the next rollout carries over (the memory of the last M steps, each env's position in its episode), as
        # buffers of a module that a checkpoint holds: a forged one (another shape or dtype, non-finite values) is
        # refused in one line
        carried = nn.Module()
        carried.register_buffer("memory", torch.zeros(M, N, L, D))
        carried.register_buffer("next_episode_step", torch.zeros(N, dtype=torch.long))

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators
        state = {"agent": agent, "optimizer": optimizer, "envs": envs, "carried": carried}
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators, envs (replayed) and memory
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration, next_obs = saved["global_step"], saved["iteration"] + 1, saved["obs"]
            memory[T:] = carried.memory.to(device)
            positive = bool((carried.next_episode_step >= 0).all())
            require(positive, "--resume", f"{resumed['path']}: its 'next_episode_step' holds negative steps")
            next_episode_step = carried.next_episode_step.to(device, copy=True)
        else:
            next_obs, _ = envs.reset(seed=args.seed)
            next_episode_step = torch.zeros(N, dtype=torch.long, device=device)  # nothing before: every slot masked

        for iteration in range(start_iteration, args.num_iterations + 1):
            memory[:M] = memory[T:].clone()  # the last M steps before this rollout (zeros at the start of the run)
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            final_values.fill(0.0)
            for step in range(T):
                global_step += N
                obs[step] = torch.as_tensor(next_obs)
                episode_steps[step] = next_episode_step
                # One forward per step: the new token attends to the window of rows step .. step + M - 1
                with torch.inference_mode():
                    window = gather_windows(memory, torch.full_like(env_ids, step), env_ids, M)
                    action, logprob, _, value, layer_inputs = agent.get_action_and_value(
                        obs[step], window, episode_steps[step]
                    )
                memory[M + step] = layer_inputs
                actions[step], logprobs[step], values[step] = action, logprob, value

                env_action = action.cpu().numpy().reshape(envs.action_space.shape)  # Discrete: [N]; MultiDiscrete: [N, dims]
                next_obs, reward, termination, truncation, infos = envs.step(env_action)
                rewards[step], terminations[step] = reward, termination
                dones[step] = done = (termination | truncation).astype(np.float32)
                truncated = truncation & ~termination
                if truncated.any():
                    # V(real final observation): it continues the episode, so it reads the window that ends
                    # with this step (rows step + 1 .. step + M) at the next position in the episode.
                    which = torch.as_tensor(truncated, device=device)
                    final = torch.as_tensor(real_next_obs(next_obs, infos)[truncated], device=device)
                    with torch.inference_mode():
                        window = gather_windows(memory, torch.full_like(env_ids[which], step + 1), env_ids[which], M)
                        final_value = agent.get_value(final, window, episode_steps[step, which] + 1)
                    final_values[step, truncated] = final_value.cpu().numpy()
                next_episode_step = (episode_steps[step] + 1) * torch.as_tensor(1 - done, dtype=torch.long, device=device)
                run.log_episodes(global_step, infos)

            # V of the observations after the rollout, read with the window of the rollout's last M rows.
            with torch.no_grad():
                window = gather_windows(memory, torch.full_like(env_ids, T), env_ids, M)
                last_values = (
                    agent.get_value(torch.as_tensor(next_obs, device=device), window, next_episode_step).cpu().numpy()
                )
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )
            b_advantages = torch.as_tensor(advantages, device=device).flatten()
            b_returns = torch.as_tensor(returns, device=device).flatten()
            b_obs, b_episode_steps = obs.flatten(0, 1), episode_steps.flatten()
            b_actions, b_logprobs, b_values = actions.flatten(0, 1), logprobs.flatten(), values.flatten()

            # Optimise on minibatches of single steps, each read with its stored memory window
            # (sample b is step b // N of env b % N)
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb = b_inds[start : start + args.minibatch_size]
                    window = gather_windows(memory, mb // N, mb % N, M)  # the rollout's memory: nothing recomputed
                    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
                        b_obs[mb], window, b_episode_steps[mb], b_actions[mb]
                    )
                    logratio = newlogprob - b_logprobs[mb]
                    ratio = logratio.exp()

                    with torch.no_grad():
                        # http://joschu.net/blog/kl-approx.html
                        old_approx_kl = (-logratio).mean()
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

                    mb_advantages = b_advantages[mb]
                    if args.norm_adv:
                        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                    # Policy loss (clipped surrogate, eq. 7)
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                    # Value loss
                    if args.clip_vloss:
                        v_loss_unclipped = (newvalue - b_returns[mb]) ** 2
                        v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                        v_loss_clipped = (v_clipped - b_returns[mb]) ** 2
                        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    else:
                        v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()

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
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
            writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
            writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", run.sps(global_step), global_step)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                carried.memory.copy_(memory[T:])
                carried.next_episode_step.copy_(next_episode_step)
                run.save_checkpoint(state, global_step, model, iteration=iteration)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

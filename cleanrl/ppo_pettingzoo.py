"""Parameter-shared PPO on a PettingZoo parallel env: one policy acts for every agent, self-play on multi-agent Atari.

Papers: Schulman et al. (2017), arXiv:1707.06347 (PPO); Terry et al. (2021), arXiv:2009.14471 (PettingZoo); Terry et
al. (2020), arXiv:2005.13625 (parameter sharing). Against CleanRL's ppo_pettingzoo_ma_atari.py (same SuperSuit
preprocessing): agents are rows of the batch (env * num_agents + agent); agents that die or leave mid-episode are
masked out of GAE and the loss; a truncation bootstraps from V(final observation); each agent sees its one-hot id;
returns per agent; evaluation plays one agent against random opponents or itself. Page: docs/scripts/ppo_pettingzoo.md.

Run:
    python cleanrl/ppo_pettingzoo.py --env-id pong_v3
    python cleanrl/ppo_pettingzoo.py --env-id cleanrl_utils.envs:MinefieldRace --total-timesteps 61440 \
        --num-steps 64 --learning-rate 2.5e-3 --clip-coef 0.2 --save-model
"""

import importlib
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils.env_modules import import_env_module, shadowed
from cleanrl_utils.evals import Evaluation, OptionRefused
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.pettingzoo import ParallelEnvs, check_rollout, log_agent_episodes
from cleanrl_utils.run import start_run

FAMILIES = ("atari", "butterfly", "sisl", "classic")
"""PettingZoo's packages searched for a plain --env-id (``pong_v3`` is ``pettingzoo.atari.pong_v3``)."""


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "pong_v3"
    """a PettingZoo parallel env: a module of pettingzoo.atari (pong_v3, ...), or package.module:factory"""
    total_timesteps: int = 20000000
    """total agent steps: env steps x agents, summed over envs (each Atari step is 4 frames)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments (each holds every agent: 8 pong_v3 games are 16 rows)"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch (of the rows of agents that acted)"""
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
    agent_id: bool = True
    """if toggled, append each agent's one-hot id to its observation (pong's players see the same screen)"""
    eval_agent: int = 0
    """the agent (its index) the saved model plays in evaluation, against --eval-opponent"""
    eval_opponent: Literal["random", "self"] = "random"
    """who plays the other agents in evaluation: uniformly random actions, or the policy itself"""
    checkpoint_interval: int = 0
    """agent steps between checkpoints, the two newest kept, and one at the last step (0: only on SIGTERM or Ctrl-C)"""
    env_timeout: float = 600.0
    """not used: the envs are made and stepped in this process, untimed (RunArgs' flag, for scripts with workers)"""
    num_agents: tyro.conf.Suppress[int] = 0  # agents per env, read from the env (not a flag)
    batch_size: tyro.conf.Suppress[int] = 0  # num_envs * num_agents * num_steps (computed; not a flag)
    num_iterations: tyro.conf.Suppress[int] = 0  # total_timesteps // batch_size (computed; not a flag)


def env_factory(env_id: str):
    """``(parallel_env factory of env_id, whether it is an ALE game)``; ``module:factory`` imports the module as the
    gymnasium scripts do (the working directory searched last). Raises ValueError (one line) if there is no such env."""
    module_name, _, name = env_id.rpartition(":")
    if module_name:
        module = import_env_module(module_name)  # a refusal says where it looked
        if not callable(getattr(module, name, None)):
            raise ValueError(f"{module_name} has no env factory {name!r}{shadowed(module_name)}")
        return getattr(module, name), False
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"pettingzoo.{family}.{env_id}")
        except ModuleNotFoundError as error:
            if error.name == "pettingzoo":
                raise ValueError("PettingZoo envs need the pettingzoo extra: pip install -e '.[pettingzoo]'") from None
            continue
        if not hasattr(module, "parallel_env"):
            raise ValueError(f"pettingzoo.{family}.{env_id} has no parallel API (parallel_env)")
        return module.parallel_env, family == "atari"
    raise ValueError(f"unknown PettingZoo env {env_id!r} (looked in pettingzoo.{{{','.join(FAMILIES)}}})")


def make_env(env_id: str, idx: int, capture_video: bool, training: bool = True):
    """A thunk creating parallel env ``idx``: an ALE game preprocessed by SuperSuit (uint8 [84, 84, 4]), or as it is."""

    def thunk():
        factory, atari = env_factory(env_id)
        render = {"render_mode": "rgb_array"} if capture_video and idx == 0 else {}
        if not atari:
            return factory(**render)
        import ale_py
        import supersuit as ss

        env = factory(auto_rom_install_path=Path(ale_py.__file__).parent, **render)
        env = ss.max_observation_v0(env, 2)
        env = ss.frame_skip_v0(env, 4)
        if training:
            env = ss.clip_reward_v0(env, lower_bound=-1, upper_bound=1)
        env = ss.color_reduction_v0(env, mode="B")
        env = ss.resize_v1(env, x_size=84, y_size=84)
        return ss.frame_stack_v1(env, 4)

    return thunk


def fold_agents(dicts: list[dict], agents: list[str], shape: tuple, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Per-env dicts ``{agent: value}`` -> ``(rows, present)``: row ``env * len(agents) + a`` is ``agents[a]`` of
    ``env``; absent agents' rows are zeros and not ``present``."""
    rows = np.zeros((len(dicts) * len(agents),) + tuple(shape), dtype=dtype)
    present = np.zeros(len(dicts) * len(agents), dtype=bool)
    for env, values in enumerate(dicts):
        for a, agent in enumerate(agents):
            if agent in values:
                rows[env * len(agents) + a], present[env * len(agents) + a] = values[agent], True
    return rows, present


def unfold_agents(rows: np.ndarray, agents: list[str], present: np.ndarray) -> list[dict]:
    """The inverse of :func:`fold_agents`: rows -> per env ``{agent: row}``, the present agents only."""
    num_agents = len(agents)
    return [
        {agent: rows[env * num_agents + a] for a, agent in enumerate(agents) if present[env * num_agents + a]}
        for env in range(len(rows) // num_agents)
    ]


def add_agent_id(rows: np.ndarray, num_agents: int) -> np.ndarray:
    """Append row r's one-hot agent id (``r % num_agents``) on the last axis: 0/1 for vectors, 255/0 planes for images."""
    one = 255 if rows.dtype == np.uint8 else 1
    ids = (np.arange(len(rows))[:, None] % num_agents == np.arange(num_agents)).astype(rows.dtype) * one
    shape = (len(rows),) + (1,) * (rows.ndim - 2) + (num_agents,)
    planes = np.broadcast_to(ids.reshape(shape), rows.shape[:-1] + (num_agents,))
    return np.concatenate([rows, planes], axis=-1)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """One trunk (Nature CNN for images, 64-64 tanh MLP for vectors) shared by the actor and critic heads."""

    def __init__(self, obs_shape: tuple, num_actions: int):
        super().__init__()
        self.image = len(obs_shape) == 3
        if self.image:
            self.trunk = nn.Sequential(
                layer_init(nn.Conv2d(obs_shape[-1], 32, 8, stride=4)), nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                nn.Flatten(), layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU(),
            )  # fmt: skip
        else:
            self.trunk = nn.Sequential(
                layer_init(nn.Linear(obs_shape[0], 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh()
            )
        width = 512 if self.image else 64
        self.actor = layer_init(nn.Linear(width, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(width, 1), std=1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features ``[B, width]``; images are permuted to channels-last ``[B, C, 84, 84]`` (no copy)."""
        if self.image:
            x = x.permute(0, 3, 1, 2).to(torch.float32) / 255.0
        return self.trunk(x)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): observations ``[B, ...]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action [B], log π(action|x), entropy of π(·|x), V(x))``; ``action`` sampled from π when None."""
        hidden = self.hidden(x)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1)


def compute_gae(rewards, values, last_values, final_values, terminations, dones, alive, gamma: float, gae_lambda: float):
    """GAE over ``[T, R]`` rows (Schulman et al. 2016, eq. 16) cut at each agent's episode end, 0 where it did not act:
    δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t), A_t = alive_t (δ_t + γ λ (1 - done_t) A_{t+1}); s'_t is the final
    observation where an episode ended (``final_values``). Returns ``(advantages, advantages + values)``."""
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    next_values = np.where(dones > 0, final_values, next_values)
    deltas = rewards + gamma * (1.0 - terminations) * next_values - values
    carry = gamma * gae_lambda * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = alive[t] * (deltas[t] + carry[t] * last)
        advantages[t] = last
    return advantages, advantages + values


def minibatches(alive: torch.Tensor, num_minibatches: int) -> list[torch.Tensor]:
    """A random split of the rows where ``alive`` into at most ``num_minibatches`` non-empty index tensors."""
    rows = torch.nonzero(alive).squeeze(-1)
    split = torch.tensor_split(rows[torch.randperm(len(rows), device=rows.device)], num_minibatches)
    return [indices for indices in split if len(indices)]


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches update_epochs learning_rate clip_coef")
    require_positive(args, "max_grad_norm")
    require_range(args, num_envs=(1, 2**12), num_steps=(1, 2**20), update_epochs=(1, 10**4), gamma=(0, 1), gae_lambda=(0, 1))
    require(args.ent_coef >= 0, "--ent-coef", f"must be >= 0, got {args.ent_coef}")
    require(args.vf_coef >= 0, "--vf-coef", f"must be >= 0, got {args.vf_coef}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    try:
        env = make_env(args.env_id, 0, False)()
        agents = list(env.possible_agents)
        observation_space, action_space = env.observation_space(agents[0]), env.action_space(agents[0])
        same = all(env.observation_space(a) == observation_space and env.action_space(a) == action_space for a in agents)
        env.close()
    except ValueError as error:
        fail("--env-id", str(error))
    except Exception as error:  # a missing ROM, a broken env
        fail("--env-id", f"cannot create {args.env_id!r}: {type(error).__name__}: {error}")
    script = f"{args.script}.py"
    require(same, "--env-id", f"{args.env_id}'s agents have different spaces; {script} shares one policy (pad them)")
    require(isinstance(action_space, gym.spaces.Discrete) and action_space.start == 0, "--env-id",
            f"{args.env_id} has action space {action_space}; {script} supports Discrete (from 0) only")  # fmt: skip
    shape = getattr(observation_space, "shape", None)
    box = isinstance(observation_space, gym.spaces.Box) and (len(shape) == 1 or shape[:2] == (84, 84))
    require(box, "--env-id", f"{args.env_id} has observation space {observation_space}; "
            f"{script} supports vectors and 84x84 images only")  # fmt: skip
    args.num_agents = len(agents)
    require_range(args, eval_agent=(0, args.num_agents - 1))
    args.batch_size = args.num_envs * args.num_agents * args.num_steps
    args.num_iterations = args.total_timesteps // args.batch_size
    rows = f"{args.num_envs * args.num_agents} rows (--num-envs {args.num_envs} x {args.num_agents} agents)"
    require(args.num_minibatches <= args.batch_size // 2, "--num-minibatches", f"too many for {rows} x {args.num_steps} steps")
    rollout = f"{args.batch_size} agent steps ({rows} x --num-steps {args.num_steps})"
    require(args.num_iterations > 0, "--total-timesteps", f"less than one rollout of {rollout}")
    if args.num_iterations * args.batch_size != args.total_timesteps:
        total = args.num_iterations * args.batch_size
        print(f"training {total} steps: --total-timesteps rounded down to whole rollouts of {args.batch_size}")


def make_envs(env_id: str, seed: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """``ParallelEnvs`` of one env (evaluation: whole games, unclipped rewards), reset with ``seed``."""
    envs = ParallelEnvs([make_env(env_id, 0, capture_video, training)], video_dir if capture_video else None, video_episodes)
    envs.reset(seed=seed)
    return envs


def evaluate(model_path, eval_episodes, deterministic=False, eval_agent=-1, eval_opponent="", **options) -> np.ndarray:
    """Returns ``[eval_episodes]`` of agent ``eval_agent`` (-1: the run's) against ``eval_opponent`` ("random",
    "self"; "": the run's); OptionRefused on other values. ``options``: :class:`cleanrl_utils.evals.Evaluation`."""
    if eval_opponent not in ("random", "self", ""):
        raise OptionRefused(f"eval_opponent must be 'random', 'self' or '', got {eval_opponent!r}")
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, **options)
    envs, saved = evaluation.envs, evaluation.model["args"]
    agents = envs.possible_agents
    if not -1 <= eval_agent < len(agents):
        envs.close()
        raise OptionRefused(f"eval_agent must be -1 or an index of {agents}, got {eval_agent}")
    player = agents[saved["eval_agent"] if eval_agent == -1 else eval_agent]
    opponent = eval_opponent or saved["eval_opponent"]
    shape = envs.observation_space.shape[:-1] + (envs.observation_space.shape[-1] + len(agents) * saved["agent_id"],)
    agent = evaluation.load(Agent(shape, int(envs.action_space.n)), "agent")
    generator = torch.Generator().manual_seed(evaluation.seed)
    returns, obs = [], envs.obs
    try:
        with torch.inference_mode():
            while len(returns) < eval_episodes:
                rows, present = fold_agents(obs, agents, envs.observation_space.shape, envs.observation_space.dtype)
                rows = add_agent_id(rows, len(agents)) if saved["agent_id"] else rows
                logits = agent.actor(agent.hidden(torch.as_tensor(rows, device=evaluation.device))).cpu()
                actions = logits.argmax(-1) if deterministic else logits.softmax(-1).multinomial(1, generator=generator)[:, 0]
                if opponent == "random":
                    random = torch.randint(int(envs.action_space.n), actions.shape, generator=generator)
                    actions = torch.where(torch.tensor([a != player for a in agents] * envs.num_envs), random, actions)
                obs, _, _, _, infos = envs.step(unfold_agents(actions.numpy(), agents, present))
                returns += [info[player]["episode"]["r"] for info in infos if "episode" in info.get(player, {})]
    finally:
        envs.close()
    return np.asarray(returns[:eval_episodes], dtype=np.float64)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the rollout ends, checkpoints, exits 128 + signum
            signal.signal(signum, run.stop)

    # PettingZoo's dicts; an env whose agents have all ended resets within the step (ended agents: info["final_obs"])
    video_dir = run.video_dir if args.capture_video else None
    envs = ParallelEnvs([make_env(args.env_id, i, args.capture_video) for i in range(args.num_envs)], video_dir)
    with run.stop_on_fault(envs):  # a fault ends the run in one line
        agents, space = envs.possible_agents, envs.observation_space
        A, N, T = len(agents), args.num_envs, args.num_steps
        R = N * A  # rows: row env * A + a is agent agents[a] of env env

        def observe(obs_dicts: list[dict]) -> tuple[np.ndarray, np.ndarray]:  # rows [R, *obs_shape] with the id, present [R]
            rows, present = fold_agents(obs_dicts, agents, space.shape, space.dtype)
            return (add_agent_id(rows, A) if args.agent_id else rows), present

        obs_shape = space.shape[:-1] + (space.shape[-1] + A * args.agent_id,)
        agent = Agent(obs_shape, int(envs.action_space.n)).to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, rows]: what the network reads in torch, the rest in numpy for GAE
        obs = torch.zeros((T, R) + obs_shape, dtype=torch.from_numpy(np.zeros(0, space.dtype)).dtype, device=device)
        actions = torch.zeros((T, R), dtype=torch.long, device=device)
        logprobs, values = (torch.zeros((T, R), device=device) for _ in range(2))
        rewards, terminations, dones, alive = (np.zeros((T, R), dtype=np.float32) for _ in range(4))
        truncated = np.zeros((T, R), dtype=bool)  # the agent's episode ended by truncation, not termination
        final_obs = np.zeros((T, R) + obs_shape, dtype=space.dtype)  # its real final observation

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        state = {"agent": agent, "optimizer": optimizer, "envs": envs}  # what a checkpoint holds, besides the generators
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators and envs (replayed), in place
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration = saved["global_step"], saved["iteration"] + 1
            next_obs = envs.obs
        else:
            next_obs, _ = envs.reset(seed=args.seed)

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(T):
                global_step += R
                rows, present = observe(next_obs)
                obs[step], alive[step] = torch.as_tensor(rows), present
                with torch.inference_mode():
                    action, logprob, _, value = agent.get_action_and_value(obs[step])
                actions[step], logprobs[step], values[step] = action, logprob, value

                next_obs, reward, termination, truncation, infos = envs.step(
                    unfold_agents(action.cpu().numpy(), agents, present)
                )
                rewards[step] = fold_agents(reward, agents, (), np.float32)[0]
                terminated = fold_agents(termination, agents, (), bool)[0]
                truncated[step] = fold_agents(truncation, agents, (), bool)[0] & ~terminated
                terminations[step], dones[step] = terminated, terminated | truncated[step]
                if truncated[step].any():  # truncated (not terminated) agents bootstrap from their real final observation
                    finals = [{a: i["final_obs"] for a, i in env_infos.items() if "final_obs" in i} for env_infos in infos]
                    final_obs[step, truncated[step]] = observe(finals)[0][truncated[step]]
                log_agent_episodes(run, global_step, infos)

            # the first NaN or infinite reward or observation stops the run (final_obs: written at truncations only)
            check_rollout(global_step, agents, reward=rewards, observation=obs, final_observation=final_obs)

            # Bootstrap values: V(final obs) at truncations and V(obs after the rollout); then GAE over the rows
            with torch.no_grad():
                last_values = agent.get_value(torch.as_tensor(observe(next_obs)[0], device=device)).cpu().numpy()
                final_values = np.zeros((T, R), dtype=np.float32)
                if truncated.any():
                    final_values[truncated] = (
                        agent.get_value(torch.as_tensor(final_obs[truncated], device=device)).cpu().numpy()
                    )
            advantages, returns = compute_gae(
                rewards,
                values.cpu().numpy(),
                last_values,
                final_values,
                terminations,
                dones,
                alive,
                args.gamma,
                args.gae_lambda,
            )

            # Flatten the batch; minibatches hold the rows where an agent acted (dead or absent agents' rows in none)
            b_obs = obs.reshape((-1,) + obs_shape)
            b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), device=device)
            b_alive = torch.as_tensor(alive.reshape(-1) > 0, device=device)

            # Optimise the policy and value networks
            clipfracs = []
            for epoch in range(args.update_epochs):
                for mb_inds in minibatches(b_alive, args.num_minibatches):
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                    logratio = newlogprob - b_logprobs[mb_inds]
                    ratio = logratio.exp()

                    with torch.no_grad():
                        old_approx_kl = (-logratio).mean()  # http://joschu.net/blog/kl-approx.html
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean())

                    mb_advantages = b_advantages[mb_inds]
                    if args.norm_adv and len(mb_inds) > 1:
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

            y_pred, y_true = b_values[b_alive].cpu().numpy(), b_returns[b_alive].cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/alive_fraction", alive.mean(), global_step)
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

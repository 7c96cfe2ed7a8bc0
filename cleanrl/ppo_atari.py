"""PPO on Atari: the Nature CNN shared by actor and critic, standard DQN-style preprocessing.

Papers: Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347;
Schulman et al. (2016), "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", arXiv:1506.02438; Mnih et al. (2015), "Human-level control through deep
reinforcement learning", Nature 518:529-533; Huang et al. (2022), "The 37 Implementation Details
of Proximal Policy Optimization" (ICLR blog track), as CleanRL's ppo_atari.py has them.

What this file changes: a time-limit truncation (108,000 frames per game) is not a termination:
the advantage bootstraps from V(real final observation); a lost life is a termination for
training. ``charts/episodic_return`` is the game score. The frame stack is zero-padded at each
(life) episode start (CleanRL repeats the first frame). ``--env-mode alternating`` steps two
groups of envs in turn. Details, flags, metrics and results: docs/scripts/ppo_atari.md.

Run:
    python cleanrl/ppo_atari.py --env-id BreakoutNoFrameskip-v4
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

MAX_EPISODE_FRAMES = 108_000
"""Frames per game before a time-limit truncation (30 minutes at 60 Hz; 27,000 agent steps at frame skip 4)."""


@dataclass
class Args(RunArgs):
    """PPO's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id of an Atari game (a NoFrameskip-v4 id: frame skipping is done here)"""
    env_mode: Literal["sync", "async", "alternating"] = "sync"
    """envs in this process (sync), one subprocess each (async), or two groups stepped in turn (alternating)"""
    total_timesteps: int = 10000000
    """total agent steps, summed over envs (4 frames each)"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start (annealed linearly to 0 with --anneal-lr)"""
    num_envs: int = 8
    """number of parallel environments"""
    num_steps: int = 128
    """steps per environment in each rollout"""
    anneal_lr: bool = True
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.99
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 4
    """minibatches per epoch"""
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
    max_episode_frames: int = MAX_EPISODE_FRAMES,
):
    """A thunk creating env ``idx``: the Atari preprocessing (observations uint8 ``[4, 84, 84]``), game statistics
    (score, frames) and, with ``training``, episodic life, sign-clipped rewards and a replay log; env 0 records
    videos into ``video_dir`` if asked. A game is truncated after ``max_episode_frames`` frames."""

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", max_num_frames_per_episode=max_episode_frames)
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id, max_num_frames_per_episode=max_episode_frames)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the game's score and frames, in the info of its last step
        env = atari_wrappers.NoopResetEnv(env, noop_max=30)
        env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
        if training:
            env = atari_wrappers.EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = atari_wrappers.FireResetEnv(env)
        if training:
            env = atari_wrappers.ClipRewardEnv(env)
        env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
        env = gym.wrappers.ReshapeObservation(env, (84, 84))
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights with gain ``std`` and constant bias (Huang et al. 2022, detail 2)."""
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """The Nature CNN trunk (Mnih et al. 2015) shared by a policy head (logits) and a value head; frames uint8 0-255."""

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, int(envs.single_action_space.n)), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Trunk features ``[B, 512]`` of frames ``[B, 4, 84, 84]`` (float, channels-last: faster convolutions on CPU)."""
        return self.trunk(x.to(dtype=torch.float32, memory_format=torch.channels_last) / 255.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        """V(x): frames ``[B, 4, 84, 84]`` -> values ``[B]``."""
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        """``(action, log π(action|x), entropy, V(x))``, each ``[B]``, one pass of the trunk; ``action`` sampled when None."""
        hidden = self.hidden(x)
        log_probs = torch.log_softmax(self.actor(hidden), dim=-1)
        if action is None:
            action = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_prob, entropy, self.critic(hidden).squeeze(-1)


def compute_gae(rewards, values, last_values, final_values, terminations, dones, gamma: float, gae_lambda: float):
    """Generalized advantage estimation, correct at truncations, as ppo.py's ``compute_gae`` (arrays ``[T, N]``,
    ``last_values [N]``): only a termination, here also a lost life, stops bootstrapping. Returns (advantages, returns)."""
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
    require(args.env_mode != "alternating" or args.num_envs >= 2, "--env-mode", "alternating needs --num-envs 2 or more")
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
    """Game scores ``[eval_episodes]`` of a saved model: whole games, actions sampled from π as CleanRL evaluates
    (greedy can stand still after a lost life in Breakout). ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    agent = evaluation.load(Agent(evaluation.envs).to(memory_format=torch.channels_last), "agent")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits = agent.actor(agent.hidden(torch.as_tensor(obs, device=evaluation.device)))
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    if resumed:  # a checkpoint holds one vector env's replay logs (sync, async) or two groups' (alternating)
        in_groups = "envs_b" in resumed["state"]
        modes = "alternating" if in_groups else "sync or async"
        require(in_groups == (args.env_mode == "alternating"), "--env-mode", f"its checkpoint continues with {modes}")
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the rollout ends, checkpoints, exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an ended episode's last observation is in infos["final_obs"]
    T, N = args.num_steps, args.num_envs
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(N)]
    if args.env_mode == "alternating":  # rlpyt's alternating sampler (Stooke & Abbeel 2019): two groups of workers
        h = N // 2
        envs_a = gym.vector.AsyncVectorEnv(thunks[:h], autoreset_mode=SAME_STEP, context="forkserver")  # envs 0 .. h-1
        envs_b = gym.vector.AsyncVectorEnv(thunks[h:], autoreset_mode=SAME_STEP, context="forkserver")  # envs h .. N-1
        envs_b.set_attr("index", list(range(N - h)))  # each ReplayableEnv's place in its vector env picks its saved log
        vector_envs = {"envs_a": envs_a, "envs_b": envs_b}
    else:  # one vector env: in this process (sync), or one worker process per env (async, from a fresh interpreter)
        if args.env_mode == "async":  # each worker answers a step within --env-timeout
            envs = gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver")
            envs = TimedSteps(envs, args.env_timeout)
        else:
            envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
        vector_envs = {"envs": envs}
    with run.stop_on_fault(*vector_envs.values()):  # a fault ends the run in one line; any error ends the env workers too
        spaces = envs_a if args.env_mode == "alternating" else envs  # the spaces of one env, the same in every group
        obs_shape = spaces.single_observation_space.shape  # (4, 84, 84)
        # channels-last weights and inputs: faster convolutions on CPU (benchmark/README.md)
        agent = Agent(spaces).to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

        # Rollout storage [num_steps, num_envs]: what the networks read in torch (frames uint8), the rest in numpy
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, dones = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        truncated = np.zeros((T, N), dtype=bool)  # episode ended by truncation, not termination
        final_obs = np.zeros((T, N) + obs_shape, dtype=np.uint8)  # its real final observation

        def record(t: int, cols: slice, step_obs, reward, termination, truncation, infos) -> np.ndarray:
            """Store step t's results of the envs ``cols`` (all, or one group's: arrays ``[len(cols), ...]`` as the
            vector env's step returns them); return their next observations ``step_obs``."""
            rewards[t, cols], terminations[t, cols], dones[t, cols] = reward, termination, termination | truncation
            # Truncated (not terminated) envs will bootstrap from their real final observation.
            truncated[t, cols] = ended = truncation & ~termination
            if ended.any():
                final_obs[t, cols][ended] = real_next_obs(step_obs, infos)[ended]
            run.log_episodes(global_step, infos)
            return step_obs

        model = {"agent": agent}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators (and the next observation, among its counters)
        state = {"agent": agent, "optimizer": optimizer, **vector_envs}
        global_step, start_iteration = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, generators and envs (replayed), in place
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_iteration, next_obs = saved["global_step"], saved["iteration"] + 1, saved["next_obs"].numpy()
        elif args.env_mode == "alternating":  # env i is seeded with seed + i, as in one vector env
            envs_a.reset_async(seed=args.seed), envs_b.reset_async(seed=args.seed + h)
            next_obs = np.concatenate([group.reset_wait(timeout=args.env_timeout)[0] for group in (envs_a, envs_b)])
        else:
            next_obs, _ = envs.reset(seed=args.seed)

        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            if args.env_mode != "alternating":  # the policy acts for every env, then they step
                for step in range(T):
                    global_step += N
                    obs[step] = torch.as_tensor(next_obs)
                    with torch.inference_mode():
                        action, logprob, _, value = agent.get_action_and_value(obs[step])
                    actions[step], logprobs[step], values[step] = action, logprob, value
                    next_obs = record(step, slice(None), *envs.step(action.cpu().numpy()))
            else:  # the alternating sampler: the policy chooses one group's actions while the other group steps
                for step in range(T + 1):  # each group's step t is sent at loop step t, received at t + 1
                    if step > 0:
                        global_step += N
                    for group, cols in ((envs_a, slice(0, h)), (envs_b, slice(h, N))):
                        if step > 0:
                            next_obs[cols] = record(step - 1, cols, *group.step_wait(timeout=args.env_timeout))
                        if step < T:
                            obs[step, cols] = torch.as_tensor(next_obs[cols])
                            with torch.inference_mode():
                                action, logprob, _, value = agent.get_action_and_value(obs[step, cols])
                            actions[step, cols], logprobs[step, cols], values[step, cols] = action, logprob, value
                            group.step_async(action.cpu().numpy())

            # Bootstrap values: V(final obs) at truncations and V(obs after the rollout); then GAE
            with torch.no_grad():
                last_values = agent.get_value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
                final_values = np.zeros((T, N), dtype=np.float32)
                if truncated.any():
                    final_values[truncated] = (
                        agent.get_value(torch.as_tensor(final_obs[truncated], device=device)).cpu().numpy()
                    )
            advantages, returns = compute_gae(
                rewards, values.cpu().numpy(), last_values, final_values, terminations, dones, args.gamma, args.gae_lambda
            )

            # Flatten the batch; frames channels-last once per update (each minibatch's conversion is then elementwise)

            b_obs = obs.reshape((-1,) + obs_shape).contiguous(memory_format=torch.channels_last)
            b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
            b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
            b_returns = torch.as_tensor(returns.reshape(-1), device=device)

            # Optimise the policy and value networks
            clipfracs = []
            for epoch in range(args.update_epochs):
                b_inds = torch.randperm(args.batch_size, device=device)
                for start in range(0, args.batch_size, args.minibatch_size):
                    mb_inds = b_inds[start : start + args.minibatch_size]

                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
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
                run.save_checkpoint(state, global_step, model, iteration=iteration, next_obs=torch.from_numpy(next_obs))
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(*vector_envs.values())

        for vector_env in vector_envs.values():
            vector_env.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

"""Soft actor-critic for discrete actions (SAC-Discrete) on Atari.

A categorical policy, twin soft Q-critics (each a Nature CNN with Q(s, ·) for every action), target
critics copied every --target-network-frequency steps and a learned temperature α:
    Christodoulou (2019), "Soft Actor-Critic for Discrete Action Settings", arXiv:1910.07207: with
        discrete actions the soft state value, the policy loss and the temperature loss are exact
        sums over the actions, without sampling or reparameterisation;
    Haarnoja et al. (2018), "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905
        (automatic entropy adjustment);
    Mnih et al. (2015), Nature 518:529-533: the Nature CNN and the Atari preprocessing.
Hyperparameters are CleanRL's sac_atari.py's (target entropy 0.89 log |A|; Christodoulou: 0.98).

What this file changes: the replay stores each frame once (a truncation bootstraps from the real
final frame stack, as in CleanRL); the temperature loss multiplies log α rather than α (same sign
and fixed point: `discrete_temperature_loss`); the actor and temperature losses sum over actions and
average over states as in the paper (CleanRL averages over both, dividing the gradients by |A|).
Details, flags, metrics and results: docs/scripts/sac_atari.md.

Run:
    python cleanrl/sac_atari.py --env-id BreakoutNoFrameskip-v4
"""

import math
import signal
from dataclasses import dataclass
from typing import Literal, Union

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from stable_baselines3.common import atari_wrappers  # SB3's Atari preprocessing

try:  # the Atari games come with the atari extra; without it, --env-id says so
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
except ImportError:
    ale_py = None

from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, fail, parse_args, require, require_positive, require_range
from cleanrl_utils.run import start_run
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv, TimedSteps, real_next_obs


@dataclass
class Args(RunArgs):
    """SAC-Discrete's hyperparameters; the flags every script takes (--seed, --track, --resume ...) come from RunArgs."""

    checkpoint_buffer: bool = False
    """if toggled, checkpoints hold the replay buffer too (its size is printed) and --resume continues exactly"""

    # Algorithm specific arguments (defaults: CleanRL's sac_atari.py, whose default game is BeamRider)
    env_id: str = "BreakoutNoFrameskip-v4"
    """gymnasium id of an Atari game (a NoFrameskip-v4 id: frame skipping is done here)"""
    env_mode: Literal["sync", "async"] = "sync"
    """step the envs in this process (sync) or in one subprocess each (async)"""
    total_timesteps: int = 5000000
    """total environment steps, summed over envs"""
    num_envs: int = 1
    """number of parallel environments"""
    buffer_size: int = 1000000
    """replay capacity in transitions (the real final observation of each episode takes one more)"""
    gamma: float = 0.99
    """discount factor γ"""
    tau: float = 1.0
    """target critic update rate (1.0: hard copy)"""
    batch_size: int = 64
    """transitions per gradient step"""
    learning_starts: int = 20000
    """environment steps of uniformly random actions before training starts"""
    policy_lr: float = 3e-4
    """Adam learning rate of the actor"""
    q_lr: float = 3e-4
    """Adam learning rate of the twin critics and of the temperature"""
    adam_eps: float = 1e-4
    """Adam ε of all three optimisers (CleanRL's 1e-4, for numerical stability; torch's default is 1e-8)"""
    update_frequency: int = 4
    """vector steps between gradient steps (each updates the critics, the actor and α once)"""
    target_network_frequency: int = 8000
    """vector steps between target critic updates"""
    alpha: float = 0.2
    """entropy temperature α, used as it is with --no-autotune (with --autotune α starts at 1)"""
    autotune: bool = True
    """if toggled, learn α so that the policy entropy tracks the target entropy"""
    target_entropy_scale: float = 0.89
    """target entropy H̄ as a fraction of the largest entropy log |A| (nats): H̄ = scale · log |A|"""


def make_env(env_id: str, idx: int, capture_video: bool, video_dir: str, training: bool = True, video_episodes=None):
    """A thunk creating env ``idx`` with the standard Atari preprocessing (episode statistics: the game's score, below
    episodic life; frame stacks zero-padded at each life's start); env 0 records videos if asked. ``training=False``:
    an evaluation env, without replay log."""

    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, video_dir, episode_trigger=video_episodes)
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # the game's score and length, below episodic life
        env = atari_wrappers.NoopResetEnv(env, noop_max=30)
        env = atari_wrappers.MaxAndSkipEnv(env, skip=4)
        env = atari_wrappers.EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = atari_wrappers.FireResetEnv(env)
        env = atari_wrappers.ClipRewardEnv(env)
        env = atari_wrappers.WarpFrame(env, 84, 84)  # grayscale (ITU-R 601 luma), then 84x84 by area: [84, 84, 1]
        env = gym.wrappers.ReshapeObservation(env, (84, 84))
        env = gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")
        env = CheckedEnv(env, idx)  # the first reset and step checked in full, then finite numbers at every step
        return ReplayableEnv(env, idx) if training else env  # logs the seed and actions a checkpoint replays

    return thunk


def layer_init(layer: nn.Module) -> nn.Module:
    """He-normal weights and zero biases, as CleanRL's sac_atari.py initialises every layer."""
    nn.init.kaiming_normal_(layer.weight)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class NatureCNN(nn.Module):
    """The Nature CNN (Mnih et al. 2015): 4 stacked 84x84 frames -> one output per action (the actor's logits or a
    critic's Q(s, ·); each has its own encoder)."""

    def __init__(self, num_actions: int):
        super().__init__()
        self.encoder = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(3136, 512)),
            nn.ReLU(),
        )
        self.head = layer_init(nn.Linear(512, num_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Frames uint8 ``[B, 4, 84, 84]`` (0-255) -> ``[B, num_actions]`` (logits or Q-values)."""
        return self.head(self.encoder(x.float() / 255.0))


def soft_state_value(
    probs: torch.Tensor, log_probs: torch.Tensor, q_min: torch.Tensor, alpha: Union[float, torch.Tensor]
) -> torch.Tensor:
    """The soft state value V(s) = Σ_a π(a|s) [Q(s, a) - α log π(a|s)] ``[B]``, exactly (Christodoulou 2019);
    ``probs``, ``log_probs`` and ``q_min`` (the twin critics' minimum) ``[B, A]``."""
    return (probs * (q_min - alpha * log_probs)).sum(dim=-1)


def soft_td_target(
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    next_probs: torch.Tensor,
    next_log_probs: torch.Tensor,
    next_q1_target: torch.Tensor,
    next_q2_target: torch.Tensor,
    alpha: Union[float, torch.Tensor],
    gamma: float,
) -> torch.Tensor:
    """The critics' target y = r + γ (1 - terminated) V(s') ``[B]``, V(s') from the smaller of the twin target critics
    (:func:`soft_state_value`); ``rewards``, ``terminations`` ``[B]``, the rest ``[B, A]``. s' is the real next state,
    so a truncated transition bootstraps."""
    q_min = torch.min(next_q1_target, next_q2_target)
    return rewards + gamma * (1 - terminations) * soft_state_value(next_probs, next_log_probs, q_min, alpha)


def discrete_actor_loss(
    probs: torch.Tensor, log_probs: torch.Tensor, q_min: torch.Tensor, alpha: Union[float, torch.Tensor]
) -> torch.Tensor:
    """The policy loss J_π = mean_s Σ_a π(a|s) [α log π(a|s) - min_i Q_i(s, a)] (Christodoulou 2019), inputs ``[B, A]``;
    minimised by the softmax of Q / α; gradients reach the actor only (``q_min`` is detached)."""
    return (probs * (alpha * log_probs - q_min.detach())).sum(dim=-1).mean()


def discrete_temperature_loss(
    log_alpha: torch.Tensor, probs: torch.Tensor, log_probs: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """The temperature loss on log α: mean_s Σ_a π(a|s) [-log α (log π(a|s) + H̄)] = log α (H(π) - H̄), π held fixed.

    Haarnoja et al.'s J(α) = α (H - H̄) has ∂J / ∂log α = α (H - H̄); this loss has H - H̄: the same sign and fixed
    point, and steps in log α that do not shrink with α (derivation: docs/scripts/sac_atari.md).
    """
    return (probs.detach() * (-log_alpha * (log_probs.detach() + target_entropy))).sum(dim=-1).mean()


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs buffer_size batch_size policy_lr q_lr adam_eps update_frequency")
    require_positive(args, "target_network_frequency")
    # each size by its own flag, before any product or quotient of them is checked
    require_range(args, num_envs=(1, 2**16), batch_size=(1, 2**20), buffer_size=(1, 2**40))
    require_range(args, gamma=(0, 1), target_entropy_scale=(0, 1))
    require(0 < args.tau <= 1, "--tau", f"must be in (0, 1], got {args.tau}")
    require(args.alpha >= 0, "--alpha", f"must be >= 0, got {args.alpha}")
    require(args.learning_starts >= 0, "--learning-starts", f"must be >= 0, got {args.learning_starts}")
    no_training = f"{args.learning_starts} leaves no training within --total-timesteps {args.total_timesteps}"
    require(args.learning_starts < args.total_timesteps, "--learning-starts", no_training)
    require(args.buffer_size >= args.batch_size, "--buffer-size", f"smaller than --batch-size {args.batch_size}")
    steps = args.buffer_size // args.num_envs
    per_env = f"{steps} steps per env with --num-envs {args.num_envs}"
    require(steps >= 6, "--buffer-size", f"{per_env}; the frame-stacked replay needs at least 6")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = True, epsilon: float = 0.0, **options) -> np.ndarray:
    """Game scores ``[eval_episodes]`` of a saved model: the most probable action (``deterministic=False``: sampled from
    π), uniformly random with probability ``epsilon``. ``options``: see :class:`cleanrl_utils.evals.Evaluation`."""
    evaluation = Evaluation(__file__, model_path, eval_episodes, make_env, **options)
    num_actions = int(evaluation.envs.single_action_space.n)
    actor = evaluation.load(NatureCNN(num_actions), "actor")
    rng, generator = np.random.default_rng(evaluation.seed), torch.Generator().manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> np.ndarray:
        logits = actor(torch.as_tensor(obs, device=evaluation.device)).cpu()
        if deterministic:
            actions = logits.argmax(-1).numpy()
        else:
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1).numpy()
        explore = rng.random(len(actions)) < epsilon
        return np.where(explore, rng.integers(num_actions, size=len(actions)), actions)

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    check_env(args, gym.spaces.Discrete, gym.spaces.Box, id_suffix="NoFrameskip-v4")
    with gym.make(args.env_id) as game:
        atari = f"{args.env_id} is not an Atari game; {args.script}.py takes ALE ids such as BreakoutNoFrameskip-v4"
        require(hasattr(game.unwrapped, "ale"), "--env-id", atari)
        skip = f"{args.env_id} skips frames itself; take its NoFrameskip-v4 id: the frame skipping is done here"
        require(game.spec.kwargs.get("frameskip", 1) == 1, "--env-id", skip)
    N = args.num_envs
    with make_env(args.env_id, 0, False, "", training=False)() as probe:  # the preprocessed spaces size the replay
        try:  # one-step transitions in [buffer_size / N, N] rows, each frame stored once
            spaces = (probe.observation_space, probe.action_space)
            rb = ReplayBuffer(args.buffer_size // N, N, *spaces, frame_stack=4, seed=args.seed)
        except MemoryError as error:
            fail("--buffer-size", str(error))
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    rb.device = device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the loop checkpoints, then exits 128 + signum
            signal.signal(signum, run.stop)

    # Same-step autoreset: an env whose episode ends is reset within that step(); its last observation is infos["final_obs"]
    thunks = [make_env(args.env_id, i, args.capture_video, run.video_dir) for i in range(N)]
    if args.env_mode == "async":  # a worker process per env (forkserver), each answering a step within --env-timeout
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), args.env_timeout)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    with run.stop_on_fault(envs):  # a fault ends the run in one line; any error ends the env workers too
        num_actions = int(envs.single_action_space.n)
        # channels-last convolutions: faster updates on CPU (benchmark/README.md)
        actor = NatureCNN(num_actions).to(device, memory_format=torch.channels_last)
        qf1 = NatureCNN(num_actions).to(device, memory_format=torch.channels_last)
        qf2 = NatureCNN(num_actions).to(device, memory_format=torch.channels_last)
        qf1_target = NatureCNN(num_actions).to(device, memory_format=torch.channels_last)
        qf2_target = NatureCNN(num_actions).to(device, memory_format=torch.channels_last)
        qf1_target.load_state_dict(qf1.state_dict())
        qf2_target.load_state_dict(qf2.state_dict())
        q_optimizer = optim.Adam([*qf1.parameters(), *qf2.parameters()], lr=args.q_lr, eps=args.adam_eps, fused=True)
        actor_optimizer = optim.Adam(actor.parameters(), lr=args.policy_lr, eps=args.adam_eps, fused=True)

        # Temperature: learned in log space from α = 1 (--autotune), or fixed at --alpha.
        target_entropy = args.target_entropy_scale * math.log(num_actions)  # H̄ = -scale · log(1 / |A|)
        log_alpha = torch.zeros((), device=device, requires_grad=True)
        alpha_optimizer = optim.Adam([log_alpha], lr=args.q_lr, eps=args.adam_eps)  # used with --autotune
        alpha = log_alpha.exp().item() if args.autotune else args.alpha
        rng = np.random.default_rng(args.seed)

        def model() -> dict:  # what --save-model writes (α as it is then); checkpoints hold it too
            return {"actor": actor, "qf1": qf1, "qf2": qf2, "alpha": torch.tensor(alpha)}

        # what a checkpoint holds, besides the global random generators
        state = dict(actor=actor, qf1=qf1, qf2=qf2, qf1_target=qf1_target, qf2_target=qf2_target, log_alpha=log_alpha)
        state.update(q_optimizer=q_optimizer, actor_optimizer=actor_optimizer, alpha_optimizer=alpha_optimizer)
        state.update(rng=rng, envs=envs, replay_rng=rb.rng)
        if args.checkpoint_buffer:
            state["replay_buffer"] = rb
            print(f"each checkpoint holds the replay buffer ({rb.nbytes / 2**20:.3g} MiB)")
        global_step, updates_start = 0, args.learning_starts  # updates once global_step > updates_start
        pad_first_add = False  # the first add of a resume without the replay: no frames before it are stored
        if run.resumed:  # the checkpoint's networks, optimisers, temperature, generators, envs (replayed) and buffer
            saved = run.restore({**state, "replay_buffer": rb})
            global_step, updates_start, obs = saved["global_step"], saved["updates_start"], saved["obs"]
            alpha = log_alpha.exp().item() if args.autotune else args.alpha
            if "replay_buffer" in saved["missing"]:  # an empty buffer: refill it before updating again
                updates_start, pad_first_add = global_step + args.learning_starts, True
                print(f"the checkpoint has no replay buffer: refilling it until step {updates_start} before updating")
        else:
            obs, _ = envs.reset(seed=args.seed)

        for iteration in range(global_step // N, args.total_timesteps // N):
            global_step += N
            if global_step <= args.learning_starts:  # warm-up: uniformly random actions
                actions = rng.integers(num_actions, size=N)
            else:  # exploration comes from the stochastic policy: a ~ π(·|s)
                with torch.inference_mode():
                    logits = actor(torch.as_tensor(obs, device=device))
                    actions = torch.distributions.Categorical(logits=logits).sample().cpu().numpy()

            next_obs, rewards, terminations, truncations, infos = envs.step(actions)
            run.log_episodes(global_step, infos)
            if pad_first_add:  # the replay starts here: its episodes start here, zero-padded as at a reset
                obs, pad_first_add = obs.copy(), False
                obs[:, :-1] = 0
            # s' is the real next observation: where an episode ended, its final observation.
            rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
            obs = next_obs

            if global_step > updates_start and len(rb) > 0:
                if iteration % args.update_frequency == 0:
                    data = rb.sample(args.batch_size)
                    # Critics: regress Q_i(s, a) on y = r + γ (1 - terminated) V(s'), V from the target critics.
                    with torch.no_grad():
                        next_log_probs = F.log_softmax(actor(data.next_obs), dim=-1)
                        td_target = soft_td_target(
                            data.rewards[:, 0],  # the one-step window
                            data.terminations[:, 0],
                            next_log_probs.exp(),
                            next_log_probs,
                            qf1_target(data.next_obs),
                            qf2_target(data.next_obs),
                            alpha,
                            args.gamma,
                        )
                    qf1_a_values = qf1(data.obs).gather(1, data.actions.unsqueeze(1)).squeeze(1)
                    qf2_a_values = qf2(data.obs).gather(1, data.actions.unsqueeze(1)).squeeze(1)
                    qf1_loss = F.mse_loss(qf1_a_values, td_target)
                    qf2_loss = F.mse_loss(qf2_a_values, td_target)
                    qf_loss = qf1_loss + qf2_loss
                    q_optimizer.zero_grad()
                    qf_loss.backward()
                    check_finite(iteration // args.update_frequency, global_step, qf_loss=qf_loss)  # stops divergence here
                    q_optimizer.step()

                    # Actor: minimise Σ_a π(a|s) [α log π(a|s) - min_i Q_i(s, a)] against the updated critics.
                    log_probs = F.log_softmax(actor(data.obs), dim=-1)
                    probs = log_probs.exp()
                    with torch.no_grad():
                        q_min = torch.min(qf1(data.obs), qf2(data.obs))
                    actor_loss = discrete_actor_loss(probs, log_probs, q_min, alpha)
                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    check_finite(iteration // args.update_frequency, global_step, actor_loss=actor_loss)
                    actor_optimizer.step()

                    # Temperature: raise α while the entropy is below H̄, lower it while above.
                    if args.autotune:
                        alpha_loss = discrete_temperature_loss(log_alpha, probs, log_probs, target_entropy)
                        alpha_optimizer.zero_grad()
                        alpha_loss.backward()
                        alpha_optimizer.step()
                        alpha = log_alpha.exp().item()

                    if iteration % (100 * args.update_frequency) == 0:
                        with torch.no_grad():
                            entropy = -(probs * log_probs).sum(dim=-1).mean()
                        writer.add_scalar("losses/qf1_values", qf1_a_values.mean().item(), global_step)
                        writer.add_scalar("losses/qf2_values", qf2_a_values.mean().item(), global_step)
                        writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                        writer.add_scalar("losses/qf2_loss", qf2_loss.item(), global_step)
                        writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)  # mean of the two
                        writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                        writer.add_scalar("losses/alpha", alpha, global_step)
                        writer.add_scalar("losses/entropy", entropy.item(), global_step)
                        if args.autotune:
                            writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)
                        writer.add_scalar("charts/learning_rate", q_optimizer.param_groups[0]["lr"], global_step)
                        writer.add_scalar("charts/SPS", run.sps(global_step), global_step)

                # Target critics: θ' ← τ θ + (1 - τ) θ'
                if iteration % args.target_network_frequency == 0:
                    with torch.no_grad():
                        for critic, target in ((qf1, qf1_target), (qf2, qf2_target)):
                            for target_param, param in zip(target.parameters(), critic.parameters()):
                                target_param.lerp_(param, args.tau)
            if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after SIGTERM or Ctrl-C
                run.save_checkpoint(state, global_step, model(), updates_start=updates_start)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model(), evaluate)
    run.close()

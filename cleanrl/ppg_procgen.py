"""PPG on Procgen: Phasic Policy Gradient with the IMPALA CNN, separate policy and value networks.

Papers: Cobbe, Hilton, Klimov, Schulman (2020), "Phasic Policy Gradient", arXiv:2009.04416 (Algorithm 1: a policy
phase of N_pi PPO iterations, then an auxiliary phase: L_joint = L_aux + beta_clone KL(pi_old || pi), eq. 2-3, and
L_value on the value network); PPO: Schulman et al. (2017), arXiv:1707.06347; GAE: arXiv:1506.02438; the IMPALA
CNN: Espeholt et al. (2018), arXiv:1802.01561; Procgen: Cobbe et al. (2020), arXiv:1912.01588. Hyperparameters are
CleanRL's ppg_procgen.py's.

What this file changes against CleanRL's ppg_procgen.py:
- two networks, the paper's "dual" architecture: the value network has its own IMPALA trunk; gradients are clipped
  per network;
- a time-limit truncation bootstraps from V of the episode's last observation (Procgen returns no final one);
- E_V may differ from E_pi; no --n-aux-grad-accum; whole phases only;
- checkpoints only at phase boundaries (SIGTERM returns to the phase's start); --resume makes new envs.
Details and results: docs/scripts/ppg_procgen.md.

Run:
    python cleanrl/ppg_procgen.py --env-id starpilot
"""

import copy
import signal
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro

from cleanrl_utils import checkpoint as checkpoints
from cleanrl_utils.envpool_atari import GameStatistics, check_rollout
from cleanrl_utils.evals import Evaluation
from cleanrl_utils.faults import check_finite
from cleanrl_utils.flags import RunArgs, parse_args, require, require_positive, require_range
from cleanrl_utils.normalization import RewardNormalization
from cleanrl_utils.procgen import ProcgenVectorEnv, check_procgen
from cleanrl_utils.run import start_run

REWARD_CLIP = 10.0
"""Normalised rewards are clipped to ±10 (CleanRL's and PPG's)."""


@dataclass
class Args(RunArgs):
    """PPG's hyperparameters; the flags every script takes (--seed, --track, --save-model, --resume ...) come from RunArgs."""

    env_id: str = "starpilot"
    """Procgen game (bigfish, coinrun, starpilot, ...)"""
    distribution_mode: Literal["easy", "hard"] = "easy"
    """Procgen's level distribution: easy or hard"""
    num_levels: int = 0
    """levels to train on (0: every level)"""
    start_level: int = 0
    """the first level's seed (with --num-levels > 0)"""
    total_timesteps: int = 25000000
    """total agent steps, summed over envs (rounded down to whole phases)"""
    learning_rate: float = 5e-4
    """Adam learning rate of both phases"""
    num_envs: int = 64
    """number of parallel environments"""
    num_steps: int = 256
    """steps per environment in each rollout"""
    anneal_lr: bool = False
    """if toggled, anneal the learning rate linearly to 0 over training"""
    gamma: float = 0.999
    """discount factor γ"""
    gae_lambda: float = 0.95
    """GAE λ"""
    num_minibatches: int = 8
    """minibatches per policy-phase epoch"""
    adv_norm_fullbatch: bool = True
    """if toggled, normalise the advantages over the whole rollout (PPG's code); else they are not normalised"""
    clip_coef: float = 0.2
    """surrogate clipping ε (ratio kept in [1-ε, 1+ε]); also the value clip"""
    clip_vloss: bool = True
    """if toggled, clip the value loss of the policy phase as CleanRL does"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient (policy phase)"""
    max_grad_norm: float = 0.5
    """gradient-norm clip, per network"""
    target_kl: Optional[float] = None
    """stop an iteration's policy epochs early when the approximate KL exceeds this"""
    n_iteration: int = 32
    """N_pi: policy-phase iterations (rollouts) per phase"""
    e_policy: int = 1
    """E_pi: policy epochs over each rollout"""
    v_value: int = 1
    """E_V: value epochs over each rollout"""
    e_auxiliary: int = 6
    """E_aux: auxiliary-phase epochs over the phase's rollouts"""
    beta_clone: float = 1.0
    """β_clone: weight of the KL behavioural-cloning term of the auxiliary phase"""
    num_aux_rollouts: int = 4
    """env rollouts (of --num-steps steps) per auxiliary-phase minibatch"""

    # filled in at run time
    batch_size: tyro.conf.Suppress[int] = 0
    """rollout size, num_envs * num_steps (computed; not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """batch_size // num_minibatches (computed; not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """num_phases * n_iteration (computed; not a flag)"""
    num_phases: tyro.conf.Suppress[int] = 0
    """total_timesteps // (batch_size * n_iteration) (computed; not a flag)"""
    aux_batch_rollouts: tyro.conf.Suppress[int] = 0
    """env rollouts stored per phase, num_envs * n_iteration (computed; not a flag)"""


def make_envs(
    env_id: str,
    seed: int,
    capture_video: bool,
    video_dir: str,
    training: bool = True,
    video_episodes=None,
    num_envs: int = 1,
    num_levels: int = 0,
    start_level: int = 0,
    distribution_mode: str = "easy",
):
    """Procgen's envs (same-step autoreset, uint8 ``[num_envs, 64, 64, 3]``) with game statistics; rewards are the game's."""
    envs = ProcgenVectorEnv(env_id, num_envs, seed, num_levels, start_level, distribution_mode, render=capture_video)
    return GameStatistics(envs, 1, video_dir if capture_video else None, video_episodes)


def normed(layer: nn.Module, scale: float = 1.0) -> nn.Module:
    """PPG's initialisation: each output unit's weights rescaled to L2 norm ``scale``, bias 0 (its NormedLinear/Conv)."""
    with torch.no_grad():
        dims = tuple(range(1, layer.weight.dim()))
        layer.weight.mul_(scale / torch.linalg.vector_norm(layer.weight, dim=dims, keepdim=True))
        layer.bias.zero_()
    return layer


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convolutions keeping ``channels`` and the size."""

    def __init__(self, channels: int, scale: float):
        super().__init__()
        self.conv0 = normed(nn.Conv2d(channels, channels, 3, padding=1), np.sqrt(scale))
        self.conv1 = normed(nn.Conv2d(channels, channels, 3, padding=1), np.sqrt(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala_cnn(in_channels: int = 3, height: int = 64, width: int = 64) -> nn.Sequential:
    """The IMPALA CNN (Espeholt et al. 2018): 3 stacks of conv 3x3 + max-pool 3x3/2 + 2 residual blocks (16, 32, 32
    channels), ReLU, linear 256, ReLU; with PPG's initialisation scales. ``[B, C, H, W]`` float -> ``[B, 256]``."""
    layers, scale = [], 1 / np.sqrt(3)  # the scale of each stack's residual output (PPG's code)
    for out_channels in (16, 32, 32):
        layers += [normed(nn.Conv2d(in_channels, out_channels, 3, padding=1)), nn.MaxPool2d(3, stride=2, padding=1)]
        layers += [ResidualBlock(out_channels, scale / np.sqrt(2)), ResidualBlock(out_channels, scale / np.sqrt(2))]
        in_channels, height, width = out_channels, (height + 1) // 2, (width + 1) // 2
    layers += [nn.Flatten(), nn.ReLU(), normed(nn.Linear(in_channels * height * width, 256), 1.4), nn.ReLU()]
    return nn.Sequential(*layers)


def frames(x: torch.Tensor) -> torch.Tensor:
    """uint8 observations ``[B, 64, 64, 3]`` (HWC) -> float ``[B, 3, 64, 64]`` in [0, 1] (channels-last in memory)."""
    return x.permute(0, 3, 1, 2).float() / 255.0


class PolicyNetwork(nn.Module):
    """π's network: the IMPALA trunk, the policy head (256 -> ``num_actions`` logits) and the auxiliary value head
    (256 -> 1) that the auxiliary phase trains to distil the value into the policy's features (sec. 2)."""

    def __init__(self, envs):
        super().__init__()
        self.trunk = impala_cnn()
        self.actor = normed(nn.Linear(256, int(envs.single_action_space.n)), 0.1)
        self.aux_critic = normed(nn.Linear(256, 1), 0.1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Observations uint8 ``[B, 64, 64, 3]`` -> ``(logits [B, num_actions], auxiliary value [B])``."""
        hidden = self.trunk(frames(x))
        return self.actor(hidden), self.aux_critic(hidden).squeeze(-1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """π's logits ``[B, num_actions]`` for observations ``[B, 64, 64, 3]`` (the auxiliary head skipped)."""
        return self.actor(self.trunk(frames(x)))


class ValueNetwork(nn.Module):
    """V's network: its own IMPALA trunk and a value head (256 -> 1)."""

    def __init__(self):
        super().__init__()
        self.trunk = impala_cnn()
        self.critic = normed(nn.Linear(256, 1), 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Observations uint8 ``[B, 64, 64, 3]`` -> V ``[B]``."""
        return self.critic(self.trunk(frames(x))).squeeze(-1)


def score_actions(logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(action) ``[B]`` and the entropy of π ``[B]`` from ``logits [B, A]`` and int64 ``action [B]``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_values: np.ndarray,
    terminations: np.ndarray,
    truncations: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over a Procgen rollout (same-step autoreset; Schulman et al. 2016, eq. 16, cut at episode ends).

    δ_t = r_t + γ V_next(t) - V(s_t), A_t = δ_t + γ λ (1 - done_t) A_{t+1}. V_next(t) is V(s_{t+1}) within an episode,
    0 after a termination, and V(s_t) after a truncation (Procgen returns no final observation). Returns ``(A, A + V)``.
    """
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    next_values = np.where(truncations.astype(bool), values, next_values)  # V(s_{T-1}) for the unseen final obs
    next_values = np.where(terminations.astype(bool), 0.0, next_values)
    deltas = rewards + gamma * next_values - values
    carry = gamma * gae_lambda * (1.0 - np.logical_or(terminations, truncations))
    advantages = np.zeros_like(deltas)
    last = np.zeros_like(deltas[0])
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    advantages = advantages.astype(values.dtype)
    return advantages, advantages + values


def normalize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """Full-batch normalisation ``[B]`` -> ``[B]``: (A - mean) / (unbiased std + 1e-8), before the minibatches (PPG)."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def ppo_losses(
    newlogprob: torch.Tensor,
    entropy: torch.Tensor,
    newvalue: torch.Tensor,
    oldlogprob: torch.Tensor,
    oldvalue: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool = True,
) -> dict[str, torch.Tensor]:
    """The policy phase's loss terms (PPG sec. 2): clipped surrogate on π's network, value loss on V's (CleanRL's
    clipped form with ``clip_vloss``), entropy, the two KL estimates and the clip fraction."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    with torch.no_grad():  # http://joschu.net/blog/kl-approx.html
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    pg_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    v_loss = (newvalue - returns) ** 2
    if clip_vloss:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss = torch.max(v_loss, (v_clipped - returns) ** 2)
    return {
        "policy_loss": pg_loss,
        "value_loss": 0.5 * v_loss.mean(),
        "entropy": entropy.mean(),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }


def aux_losses(
    new_logits: torch.Tensor,
    old_logits: torch.Tensor,
    aux_values: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    beta_clone: float,
) -> dict[str, torch.Tensor]:
    """The auxiliary phase's loss terms (PPG eq. 2-3): L_joint = 0.5 mean (V_aux - R)² + β_clone KL(π_old || π) on
    π's network, L_value = 0.5 mean (V - R)² on V's network; R is the return stored in the policy phase."""
    old_log_probs, new_log_probs = torch.log_softmax(old_logits, -1), torch.log_softmax(new_logits, -1)
    kl = (old_log_probs.exp() * (old_log_probs - new_log_probs)).sum(-1).mean()
    aux_value_loss = 0.5 * ((aux_values - returns) ** 2).mean()
    return {
        "joint_loss": aux_value_loss + beta_clone * kl,
        "aux_value_loss": aux_value_loss,
        "kl_loss": kl,
        "real_value_loss": 0.5 * ((values - returns) ** 2).mean(),
    }


def gradient_step(optimizer: optim.Optimizer, loss: torch.Tensor, networks: dict, max_grad_norm: float, where: str, step: int):
    """One gradient step on ``loss`` with each network's gradient norm clipped on its own; non-finite values stop the run."""
    optimizer.zero_grad()
    loss.backward()
    norms = {f"{name}_grad_norm": nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm) for name, net in networks.items()}
    check_finite(where, step, loss=loss, **norms)
    optimizer.step()


# ---- plumbing a reader may skip: argument checks and the evaluation of a saved model


def check_args(args: Args) -> None:
    """Fill in the computed fields; stop with one line naming the flag on bad input."""
    require_positive(args, "total_timesteps num_envs num_steps num_minibatches learning_rate clip_coef max_grad_norm")
    require_positive(args, "n_iteration e_policy v_value e_auxiliary num_aux_rollouts")
    require_range(args, num_envs=(1, 2**16), num_steps=(1, 2**20), n_iteration=(1, 2**16))  # before their products
    require_range(args, e_policy=(1, 10**4), v_value=(1, 10**4), e_auxiliary=(1, 10**4))  # a stop waits for an epoch
    require_range(args, gamma=(0, 1), gae_lambda=(0, 1), num_levels=(0, 2**31 - 1), start_level=(0, 2**31 - 1))
    for name in ("ent_coef", "vf_coef", "beta_clone"):
        require(getattr(args, name) >= 0, f"--{name.replace('_', '-')}", f"must be >= 0, got {getattr(args, name)}")
    require(args.target_kl is None or args.target_kl > 0, "--target-kl", f"must be positive, got {args.target_kl}")
    args.batch_size, args.aux_batch_rollouts = args.num_envs * args.num_steps, args.num_envs * args.n_iteration
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_phases = args.total_timesteps // (args.batch_size * args.n_iteration)
    args.num_iterations = args.num_phases * args.n_iteration
    batch = f"the batch of {args.batch_size} (--num-envs {args.num_envs} x --num-steps {args.num_steps})"
    require(args.batch_size % args.num_minibatches == 0, "--num-minibatches", f"does not divide {batch}")
    require(args.num_aux_rollouts <= args.aux_batch_rollouts, "--num-aux-rollouts", "exceeds the rollouts of a phase")
    phase = f"{args.batch_size * args.n_iteration} steps (--n-iteration {args.n_iteration} rollouts of {args.batch_size})"
    require(args.num_phases > 0, "--total-timesteps", f"less than one phase of {phase}")
    check_procgen(args)
    # after every check: a refused command prints nothing else
    if (total := args.num_iterations * args.batch_size) != args.total_timesteps:
        print(f"training {total} steps: --total-timesteps rounded down to whole phases of {phase}")


def evaluate(model_path: str, eval_episodes: int, deterministic: bool = False, **options) -> np.ndarray:
    """Game returns ``[eval_episodes]`` of a saved model in the levels it trained on; actions sampled from π
    (``deterministic``: the most probable). ``options``: :class:`cleanrl_utils.evals.Evaluation`."""
    levels = ("distribution_mode", "num_levels", "start_level")
    evaluation = Evaluation(__file__, model_path, eval_episodes, None, make_envs=make_envs, env_args=levels, **options)
    policy_network = evaluation.load(PolicyNetwork(evaluation.envs), "policy")
    generator = torch.Generator(evaluation.device).manual_seed(evaluation.seed)

    def policy(obs: np.ndarray) -> torch.Tensor:
        logits = policy_network.logits(torch.as_tensor(obs, device=evaluation.device))
        if deterministic:
            return logits.argmax(-1).cpu()
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].cpu()

    return evaluation.run(policy)


if __name__ == "__main__":
    # ---- plumbing: flags and --resume (bad input stops here), run directory, trackers, seeding, signals
    args, resumed = parse_args(Args, __file__, check_args)
    run = start_run(args, resumed)
    writer, device = run.writer, run.device
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a scheduler, Ctrl-C, a closed terminal (not nohup):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # recorded; the rollout ends, checkpoints, exits 128 + signum
            signal.signal(signum, run.stop)

    # The envs are not checkpointed: a resumed run makes new ones, seeded from --seed and its step (other levels)
    seed = args.seed
    if resumed:
        seed = int(np.random.SeedSequence([args.seed, resumed["global_step"]]).generate_state(1)[0] % 2**31)
    levels = dict(num_levels=args.num_levels, start_level=args.start_level, distribution_mode=args.distribution_mode)
    envs = make_envs(args.env_id, seed, args.capture_video, run.video_dir, num_envs=args.num_envs, **levels)
    with run.stop_on_fault(envs):  # a fault ends the run in one line
        normalization = RewardNormalization(envs, args.gamma, REWARD_CLIP)  # r / std(discounted return), clipped to ±10
        obs_shape = envs.single_observation_space.shape  # (64, 64, 3)

        policy = PolicyNetwork(envs).to(device, memory_format=torch.channels_last)
        value = ValueNetwork().to(device, memory_format=torch.channels_last)
        optimizer = optim.Adam([*policy.parameters(), *value.parameters()], lr=args.learning_rate, eps=1e-8)

        # Rollout storage [num_steps, num_envs]; the auxiliary phase's [num_steps, num_envs * n_iteration] (uint8 frames)
        T, N, R = args.num_steps, args.num_envs, args.aux_batch_rollouts
        obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=device)
        actions = torch.zeros((T, N), dtype=torch.long, device=device)
        logprobs = torch.zeros((T, N), device=device)
        values = torch.zeros((T, N), device=device)
        rewards, terminations, truncations = (np.zeros((T, N), dtype=np.float32) for _ in range(3))
        game_rewards = np.zeros((T, N), dtype=np.float32)  # the games' own, before scaling: checked after the rollout
        aux_obs = torch.zeros((T, R) + obs_shape, dtype=torch.uint8)
        aux_returns = torch.zeros((T, R))

        model = {"policy": policy, "value": value}  # what --save-model writes; checkpoints hold it too
        # what a checkpoint holds, besides the generators: not the envs, not the auxiliary buffer
        state = {"policy": policy, "value": value, "optimizer": optimizer, "reward_normalization": normalization}
        global_step, start_phase = 0, 1
        if run.resumed:  # the checkpoint's networks, optimiser, statistics and generators, in place; the envs are new
            saved = run.restore(state, steps_per_iteration=args.batch_size)
            global_step, start_phase = saved["global_step"], saved["iteration"] // args.n_iteration + 1
            require(saved["iteration"] % args.n_iteration == 0, "--resume", f"{resumed['path']}: not at a phase's end")
        next_obs, _ = normalization.envs.reset()

        for phase in range(start_phase, args.num_phases + 1):
            # the state at the phase's start, written instead of the current one when a stop signal comes mid-phase
            phase_start = (copy.deepcopy(checkpoints.capture(state)), checkpoints.rng_state(), global_step)

            # ---- POLICY PHASE: N_pi iterations of PPO (E_pi policy epochs, E_V value epochs each)
            for update in range(1, args.n_iteration + 1):
                iteration = (phase - 1) * args.n_iteration + update
                if args.anneal_lr:
                    optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

                for step in range(T):
                    global_step += N
                    obs[step] = torch.as_tensor(next_obs)
                    with torch.inference_mode():
                        logits, _ = policy(obs[step])
                        action = torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
                        logprobs[step] = score_actions(logits, action)[0]
                        # V(s_t): also the bootstrap value of a truncation at this step (Procgen hides the final obs)
                        values[step], actions[step] = value(obs[step]), action
                    next_obs, reward, termination, truncation, info = normalization.envs.step(action.cpu().numpy())
                    rewards[step], terminations[step], truncations[step] = reward, termination, truncation
                    game_rewards[step] = info["reward"]
                    run.log_episodes(global_step, info)  # game returns (GameStatistics)

                # the first NaN or infinite game reward stops the run (frames: uint8); the scaling mixes the envs' rewards
                check_rollout(global_step, reward=game_rewards)
                with torch.no_grad():
                    last_values = value(torch.as_tensor(next_obs, device=device)).cpu().numpy()
                advantages, returns = compute_gae(
                    rewards, values.cpu().numpy(), last_values, terminations, truncations, args.gamma, args.gae_lambda
                )

                b_obs = obs.reshape((-1,) + obs_shape)
                b_logprobs, b_actions, b_values = logprobs.reshape(-1), actions.reshape(-1), values.reshape(-1)
                b_advantages = torch.as_tensor(advantages.reshape(-1), device=device)
                if args.adv_norm_fullbatch:
                    b_advantages = normalize_advantages(b_advantages)
                b_returns = torch.as_tensor(returns.reshape(-1), device=device)

                clipfracs, policy_epochs = [], args.e_policy
                for epoch in range(max(args.e_policy, args.v_value)):
                    train_policy, train_value = epoch < policy_epochs, epoch < args.v_value
                    if not (train_policy or train_value):  # --target-kl ended the policy's epochs, the value's are done
                        break
                    b_inds = torch.randperm(args.batch_size, device=device)
                    for start in range(0, args.batch_size, args.minibatch_size):
                        mb = b_inds[start : start + args.minibatch_size]
                        newlogprob, entropy = b_logprobs[mb], torch.zeros_like(b_logprobs[mb])  # constants when not trained
                        if train_policy:
                            newlogprob, entropy = score_actions(policy.logits(b_obs[mb]), b_actions[mb])
                        newvalue = value(b_obs[mb]) if train_value else b_values[mb]
                        losses = ppo_losses(
                            newlogprob, entropy, newvalue, b_logprobs[mb], b_values[mb], b_advantages[mb], b_returns[mb],
                            args.clip_coef, args.clip_vloss,
                        )  # fmt: skip
                        policy_loss = losses["policy_loss"] - args.ent_coef * losses["entropy"]
                        loss = policy_loss * train_policy + args.vf_coef * losses["value_loss"] * train_value
                        trained = {"policy": policy} if train_policy else {}
                        trained |= {"value": value} if train_value else {}
                        gradient_step(
                            optimizer,
                            loss,
                            trained,
                            args.max_grad_norm,
                            f"iteration {iteration}, epoch {epoch + 1}",
                            global_step,
                        )
                        if train_policy:
                            clipfracs.append(losses["clipfrac"])
                    if train_policy and args.target_kl is not None and losses["approx_kl"].item() > args.target_kl:
                        policy_epochs = epoch + 1  # the policy's epochs end here; the value's go on

                y_pred, y_true = b_values.cpu().numpy(), returns.reshape(-1)
                var_y = np.var(y_true)
                explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
                writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
                for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):
                    writer.add_scalar(f"losses/{name}", losses[name].item(), global_step)
                writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
                writer.add_scalar("losses/explained_variance", explained_var, global_step)
                writer.add_scalar("charts/SPS", run.sps(global_step), global_step)

                # the rollout kept whole, per env, for the auxiliary phase: its observations and value targets
                aux_obs[:, (update - 1) * N : update * N] = obs.cpu()
                aux_returns[:, (update - 1) * N : update * N] = torch.as_tensor(returns)
                if run.stop_signal:
                    break

            # ---- AUXILIARY PHASE: E_aux epochs over the phase's rollouts, num_aux_rollouts whole rollouts a minibatch
            complete = not run.stop_signal  # a stop signal in the policy phase skips it
            if complete:
                aux_logits = torch.zeros((T, R, envs.single_action_space.n))  # π_old: the policy before this phase
                with torch.no_grad():
                    for start in range(0, R, args.num_aux_rollouts):
                        chunk = slice(start, start + args.num_aux_rollouts)
                        aux_logits[:, chunk] = (
                            policy.logits(aux_obs[:, chunk].to(device).flatten(0, 1)).cpu().unflatten(0, (T, -1))
                        )
                for aux_epoch in range(1, args.e_auxiliary + 1):
                    aux_inds = torch.randperm(R)
                    for start in range(0, R, args.num_aux_rollouts):
                        mb = aux_inds[start : start + args.num_aux_rollouts]
                        mb_obs = aux_obs[:, mb].to(device).flatten(0, 1)
                        new_logits, new_aux_values = policy(mb_obs)
                        aux = aux_losses(
                            new_logits, aux_logits[:, mb].to(device).flatten(0, 1), new_aux_values, value(mb_obs),
                            aux_returns[:, mb].to(device).flatten(0, 1), args.beta_clone,
                        )  # fmt: skip
                        loss = aux["joint_loss"] + aux["real_value_loss"]  # L_joint on π's network, L_value on V's
                        where = f"phase {phase}, auxiliary epoch {aux_epoch}"
                        gradient_step(
                            optimizer, loss, {"policy": policy, "value": value}, args.max_grad_norm, where, global_step
                        )
                    if run.stop_signal and aux_epoch < args.e_auxiliary:
                        complete = False
                        break
                for name in ("kl_loss", "aux_value_loss", "real_value_loss"):
                    writer.add_scalar(f"losses/aux/{name}", aux[name].item(), global_step)

            if not complete:  # stopped mid-phase: the auxiliary buffer is not saved, so the checkpoint holds the phase's start
                captured, rng, global_step = phase_start
                for name, obj in state.items():
                    obj.load_state_dict(captured[name])
                checkpoints.set_rng_state(rng)
                print(f"stopped in phase {phase}: the checkpoint holds the state at its start, step {global_step}", flush=True)
            if run.checkpoint_due(global_step):  # at phase ends: every --checkpoint-interval steps, and after a signal
                run.save_checkpoint(state, global_step, model, iteration=global_step // args.batch_size)
            if run.stop_signal:  # after SIGTERM or Ctrl-C, with the checkpoint written: exit 143 or 130
                run.exit(envs)

        envs.close()
    if args.save_model:
        run.save_model(model, evaluate)
    run.close()

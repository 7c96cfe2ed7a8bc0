"""Speed benchmark: our scripts against stable-baselines3 at identical hyperparameters.

Runs, alternately and in one invocation, ``cleanrl/ppo.py`` and SB3's ``PPO``, then
``cleanrl/dqn.py`` and SB3's ``DQN``, on CartPole-v1, and ``cleanrl/dqn_atari.py`` and SB3's
``DQN`` (``CnnPolicy``, memory-optimised buffer) on Breakout, and ``cleanrl/sac_continuous.py``,
``td3_continuous.py`` and ``ddpg_continuous.py`` and SB3's ``SAC``, ``TD3`` and ``DDPG`` on
Hopper-v5, and ``cleanrl/ppo_atari.py`` and SB3's ``PPO`` (``CnnPolicy``) on Breakout, and
``cleanrl/ppo_continuous.py`` and SB3's ``PPO`` with ``VecNormalize`` on Hopper-v5, and
``cleanrl/ppo_atari_envpool.py`` against ``cleanrl/ppo_atari.py`` (the baseline there is ours), each as a
fresh process, and prints
steps per second (environment steps over the wall time of the training loop, as each
library reports it) and the ratio ours / SB3 (median over the repeats).

    python benchmark/scripts/speed.py --algos ppo dqn --total-timesteps 100000 --repeats 3
    python benchmark/scripts/speed.py --algos dqn_atari --atari-timesteps 10000 --repeats 3
    python benchmark/scripts/speed.py --algos sac td3 ddpg --mujoco-timesteps 3000 --repeats 3
    python benchmark/scripts/speed.py --algos ppo_atari ppo_atari_envpool --atari-timesteps 20480 --repeats 3
    python benchmark/scripts/speed.py --algos ppo_continuous --total-timesteps 40960 --repeats 3

Both sides use the same number of torch threads (``--torch-threads``). Hyperparameters that
SB3 cannot express exactly are listed in the output (DQN: SB3 uses the Huber loss and clips
gradients at norm 10; ours uses the squared error without clipping, as CleanRL does).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[2]

# Hyperparameters shared by both sides; ours are the scripts' defaults.
PPO = dict(
    num_envs=4,
    num_steps=128,
    learning_rate=2.5e-4,
    gamma=0.99,
    gae_lambda=0.95,
    num_minibatches=4,
    update_epochs=4,
    clip_coef=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
DQN = dict(
    num_envs=1,
    buffer_size=10000,
    learning_rate=2.5e-4,
    gamma=0.99,
    tau=1.0,
    target_network_frequency=500,
    batch_size=128,
    start_e=1.0,
    end_e=0.05,
    exploration_fraction=0.5,
    learning_starts=10000,
    train_frequency=10,
)

# dqn_atari.py at its defaults (CleanRL's Atari settings) except a 100k buffer and training from
# step 2000, so that a short run measures training speed; both sides
# preprocess with SB3's Atari wrappers (frame skip 4, 84x84 grayscale, 4 stacked frames, episodic
# life, FIRE reset, clipped rewards) and train the Nature CNN.
DQN_ATARI = dict(
    num_envs=1,
    buffer_size=100000,
    learning_rate=1e-4,
    gamma=0.99,
    tau=1.0,
    target_network_frequency=1000,
    batch_size=32,
    start_e=1.0,
    end_e=0.01,
    exploration_fraction=0.1,
    learning_starts=2000,
    train_frequency=4,
)
ATARI_ENV = "BreakoutNoFrameskip-v4"

# The Q-value policy gradients on Hopper-v5 as issue 6 fixes them: one gradient step per
# environment step, batch 256, 256-256 networks, 1000 random steps first (so a short run
# measures training: the random steps take about a second of it). SAC updates its policy at
# every step with one learning rate (SB3 has no policy delay); TD3 every second step; SB3's
# DDPG updates its policy at every step, so ours does too here (its default is every second).
MUJOCO_ENV = "Hopper-v5"
OFF_POLICY = dict(num_envs=1, buffer_size=100000, batch_size=256, gamma=0.99, tau=0.005, learning_starts=1000)
SAC = dict(OFF_POLICY, policy_lr=3e-4, q_lr=3e-4, policy_frequency=1, target_network_frequency=1, alpha=0.2)
TD3 = dict(OFF_POLICY, learning_rate=3e-4, policy_frequency=2, exploration_noise=0.1, policy_noise=0.2, noise_clip=0.5)
DDPG = dict(OFF_POLICY, learning_rate=3e-4, policy_frequency=1, exploration_noise=0.1)

# PPO on Atari at the standard settings (ppo_atari.py's defaults): 8 envs x 128 steps, 4 epochs of
# 4 minibatches, clip 0.1 (also for the value loss), both sides with SB3's Atari wrappers in one
# process. ppo_atari_envpool.py runs the same with EnvPool's Breakout-v5 (the same preprocessing).
PPO_ATARI = dict(
    num_envs=8,
    num_steps=128,
    learning_rate=2.5e-4,
    gamma=0.99,
    gae_lambda=0.95,
    num_minibatches=4,
    update_epochs=4,
    clip_coef=0.1,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
ENVPOOL_ATARI_ENV = "Breakout-v5"

# PPO on MuJoCo at the standard settings (ppo_continuous.py's defaults): 1 env x 2048 steps,
# 10 epochs of 32 minibatches, observation and reward normalisation clipped at 10.
PPO_CONTINUOUS = dict(
    num_envs=1,
    num_steps=2048,
    learning_rate=3e-4,
    gamma=0.99,
    gae_lambda=0.95,
    num_minibatches=32,
    update_epochs=10,
    clip_coef=0.2,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
)

SB3_PPO_ATARI = (
    """
import json, sys, time, torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack
import gymnasium as gym, ale_py
gym.register_envs(ale_py)
h, steps, seed, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
env = VecFrameStack(make_atari_env("%s", n_envs=h["num_envs"], seed=seed), n_stack=4)
model = PPO("CnnPolicy", env, n_steps=h["num_steps"], batch_size=h["num_envs"] * h["num_steps"] // h["num_minibatches"],
            n_epochs=h["update_epochs"], learning_rate=lambda f: f * h["learning_rate"], gamma=h["gamma"],
            gae_lambda=h["gae_lambda"], clip_range=h["clip_coef"], clip_range_vf=h["clip_coef"], ent_coef=h["ent_coef"],
            vf_coef=h["vf_coef"], max_grad_norm=h["max_grad_norm"], normalize_advantage=True,
            seed=seed, device="cpu", verbose=0)
start = time.perf_counter()
model.learn(steps)
print("SPS", model.num_timesteps / (time.perf_counter() - start))
"""
    % ATARI_ENV
)

SB3_PPO_CONTINUOUS = (
    """
import json, sys, time, torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
h, steps, seed, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
env = VecNormalize(make_vec_env("%s", n_envs=h["num_envs"], seed=seed), gamma=h["gamma"], clip_obs=10.0, clip_reward=10.0)
model = PPO("MlpPolicy", env, n_steps=h["num_steps"], batch_size=h["num_envs"] * h["num_steps"] // h["num_minibatches"],
            n_epochs=h["update_epochs"], learning_rate=lambda f: f * h["learning_rate"], gamma=h["gamma"],
            gae_lambda=h["gae_lambda"], clip_range=h["clip_coef"], clip_range_vf=h["clip_coef"], ent_coef=h["ent_coef"],
            vf_coef=h["vf_coef"], max_grad_norm=h["max_grad_norm"], normalize_advantage=True,
            policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh, ortho_init=True,
                               log_std_init=0.0),
            seed=seed, device="cpu", verbose=0)
start = time.perf_counter()
model.learn(steps)
print("SPS", model.num_timesteps / (time.perf_counter() - start))
"""
    % MUJOCO_ENV
)

SB3_OFF_POLICY = (
    """
import json, sys, time, numpy as np, torch, gymnasium as gym
from stable_baselines3 import SAC, TD3, DDPG
from stable_baselines3.common.noise import NormalActionNoise
h, steps, seed, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
env = gym.make("%s")
common = dict(buffer_size=h["buffer_size"], learning_starts=h["learning_starts"], batch_size=h["batch_size"],
              tau=h["tau"], gamma=h["gamma"], train_freq=1, gradient_steps=1,
              policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu", verbose=0)
if "alpha" in h:  # SAC, α tuned from 0.2 towards the target entropy -|A|
    model = SAC("MlpPolicy", env, learning_rate=h["q_lr"], ent_coef=f"auto_{h['alpha']}", **common)
else:
    noise = NormalActionNoise(np.zeros(env.action_space.shape), h["exploration_noise"] * np.ones(env.action_space.shape))
    if "policy_noise" in h:
        model = TD3("MlpPolicy", env, learning_rate=h["learning_rate"], policy_delay=h["policy_frequency"],
                    target_policy_noise=h["policy_noise"], target_noise_clip=h["noise_clip"], action_noise=noise, **common)
    else:
        model = DDPG("MlpPolicy", env, learning_rate=h["learning_rate"], action_noise=noise, **common)
start = time.perf_counter()
model.learn(steps)
print("SPS", model.num_timesteps / (time.perf_counter() - start))
"""
    % MUJOCO_ENV
)

SB3_PPO = """
import json, sys, time, torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
h, steps, seed, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
env = make_vec_env("CartPole-v1", n_envs=h["num_envs"], seed=seed)
model = PPO("MlpPolicy", env, n_steps=h["num_steps"], batch_size=h["num_envs"] * h["num_steps"] // h["num_minibatches"],
            n_epochs=h["update_epochs"], learning_rate=lambda f: f * h["learning_rate"], gamma=h["gamma"],
            gae_lambda=h["gae_lambda"], clip_range=h["clip_coef"], clip_range_vf=h["clip_coef"], ent_coef=h["ent_coef"],
            vf_coef=h["vf_coef"], max_grad_norm=h["max_grad_norm"], normalize_advantage=True,
            policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh, ortho_init=True),
            seed=seed, device="cpu", verbose=0)
start = time.perf_counter()
model.learn(steps)
print("SPS", model.num_timesteps / (time.perf_counter() - start))
"""

SB3_DQN = """
import json, sys, time, torch
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_vec_env
h, steps, seed, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
env = make_vec_env("CartPole-v1", n_envs=h["num_envs"], seed=seed)
model = DQN("MlpPolicy", env, learning_rate=h["learning_rate"], buffer_size=h["buffer_size"],
            learning_starts=h["learning_starts"], batch_size=h["batch_size"], tau=h["tau"], gamma=h["gamma"],
            train_freq=h["train_frequency"], gradient_steps=1, target_update_interval=h["target_network_frequency"],
            exploration_fraction=h["exploration_fraction"], exploration_initial_eps=h["start_e"],
            exploration_final_eps=h["end_e"], policy_kwargs=dict(net_arch=[120, 84]), seed=seed, device="cpu", verbose=0)
start = time.perf_counter()
model.learn(steps)
print("SPS", model.num_timesteps / (time.perf_counter() - start))
"""

SB3_DQN_ATARI = (
    """
import json, sys, time, torch
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack
import gymnasium as gym, ale_py
gym.register_envs(ale_py)
h, steps, seed, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
env = VecFrameStack(make_atari_env("%s", n_envs=h["num_envs"], seed=seed), n_stack=4)
model = DQN("CnnPolicy", env, learning_rate=h["learning_rate"], buffer_size=h["buffer_size"],
            learning_starts=h["learning_starts"], batch_size=h["batch_size"], tau=h["tau"], gamma=h["gamma"],
            train_freq=h["train_frequency"], gradient_steps=1, target_update_interval=h["target_network_frequency"],
            exploration_fraction=h["exploration_fraction"], exploration_initial_eps=h["start_e"],
            exploration_final_eps=h["end_e"], optimize_memory_usage=True,
            replay_buffer_kwargs=dict(handle_timeout_termination=False), seed=seed, device="cpu", verbose=0)
start = time.perf_counter()
model.learn(steps)
print("SPS", model.num_timesteps / (time.perf_counter() - start))
"""
    % ATARI_ENV
)


def flags(hyperparameters: dict) -> list[str]:
    return [f"--{key.replace('_', '-')}={value}" for key, value in hyperparameters.items()]


def run_ours(script: str, hyperparameters: dict, steps: int, seed: int, threads: int, env_id: str) -> float:
    """Train our script in a fresh process; return the SPS of its last progress line."""
    with tempfile.TemporaryDirectory() as runs:
        command = [
            sys.executable,
            str(ROOT / "cleanrl" / script),
            f"--env-id={env_id}",
            f"--total-timesteps={steps}",
            f"--seed={seed}",
            f"--torch-threads={threads}",
            *flags(hyperparameters),
        ]
        out = subprocess.run(command, cwd=runs, capture_output=True, text=True, check=True).stdout
    return float(re.findall(r"SPS (\d+)", out)[-1])


def run_sb3(program: str, hyperparameters: dict, steps: int, seed: int, threads: int) -> float:
    command = [sys.executable, "-c", program, json.dumps(hyperparameters), str(steps), str(seed), str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return float(re.findall(r"SPS ([\d.]+)", out)[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--algos",
        nargs="+",
        default=["ppo", "dqn"],
        choices=["ppo", "dqn", "dqn_atari", "sac", "td3", "ddpg", "ppo_atari", "ppo_continuous", "ppo_atari_envpool"],
    )
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--atari-timesteps", type=int, default=10_000, help="steps of the Atari runs")
    parser.add_argument("--mujoco-timesteps", type=int, default=3000, help="steps of the Hopper runs")
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs of runs per algorithm")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    results = {}
    for algo in args.algos:
        script, hyperparameters, program, env_id = {
            "ppo": ("ppo.py", PPO, SB3_PPO, "CartPole-v1"),
            "dqn": ("dqn.py", DQN, SB3_DQN, "CartPole-v1"),
            "dqn_atari": ("dqn_atari.py", DQN_ATARI, SB3_DQN_ATARI, ATARI_ENV),
            "sac": ("sac_continuous.py", SAC, SB3_OFF_POLICY, MUJOCO_ENV),
            "td3": ("td3_continuous.py", TD3, SB3_OFF_POLICY, MUJOCO_ENV),
            "ddpg": ("ddpg_continuous.py", DDPG, SB3_OFF_POLICY, MUJOCO_ENV),
            "ppo_atari": ("ppo_atari.py", PPO_ATARI, SB3_PPO_ATARI, ATARI_ENV),
            "ppo_continuous": ("ppo_continuous.py", PPO_CONTINUOUS, SB3_PPO_CONTINUOUS, MUJOCO_ENV),
            # the baseline of ppo_atari_envpool.py is ours: ppo_atari.py at the same settings
            "ppo_atari_envpool": ("ppo_atari_envpool.py", PPO_ATARI, None, ENVPOOL_ATARI_ENV),
        }[algo]
        steps = {
            "dqn_atari": args.atari_timesteps,
            "sac": args.mujoco_timesteps,
            "td3": args.mujoco_timesteps,
            "ddpg": args.mujoco_timesteps,
            "ppo_atari": args.atari_timesteps,
            "ppo_atari_envpool": args.atari_timesteps,
        }.get(algo, args.total_timesteps)
        baseline = "SB3" if program is not None else "ppo_atari.py"
        ours, sb3 = [], []
        for repeat in range(args.repeats):
            ours.append(run_ours(script, hyperparameters, steps, args.seed, args.torch_threads, env_id))
            if program is None:  # against our own ppo_atari.py
                sb3.append(run_ours("ppo_atari.py", hyperparameters, steps, args.seed, args.torch_threads, ATARI_ENV))
            else:
                sb3.append(run_sb3(program, hyperparameters, steps, args.seed, args.torch_threads))
            print(f"{algo} repeat {repeat + 1}: ours {ours[-1]:.0f} SPS, {baseline} {sb3[-1]:.0f} SPS", flush=True)
        ratio = statistics.median(ours) / statistics.median(sb3)
        results[algo] = dict(ours=ours, sb3=sb3, ratio=ratio, baseline=baseline)
        print(
            f"{algo}: ours {statistics.median(ours):.0f} SPS, {baseline} {statistics.median(sb3):.0f} SPS "
            f"(medians of {args.repeats}), ratio {ratio:.2f}x",
            flush=True,
        )
    if "dqn" in results or "dqn_atari" in results:
        print("note: SB3's DQN uses the Huber loss and clips gradients at norm 10; ours use the squared TD error")
    if args.json:
        commit = provenance.commit()
        meta = dict(
            steps=args.total_timesteps,
            atari_steps=args.atari_timesteps,
            mujoco_steps=args.mujoco_timesteps,
            seed=args.seed,
            torch_threads=args.torch_threads,
            cpus=os.cpu_count(),
            commit=commit,
            time=time.strftime("%Y-%m-%dT%H:%M:%S"),
        )
        args.json.write_text(json.dumps(dict(meta=meta, results=results), indent=2) + "\n")


if __name__ == "__main__":
    main()

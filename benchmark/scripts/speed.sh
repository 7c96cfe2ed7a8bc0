#!/usr/bin/env bash
# Reproduces speed tables of benchmark/results/speed/: ours vs stable-baselines3, alternating runs. The CartPole
# record is dated (the earlier ones stay beside it); a rerun of the other two replaces theirs.
set -euo pipefail
cd "$(dirname "$0")/../.."
python benchmark/scripts/speed.py --algos ppo dqn --total-timesteps 100000 --repeats 3 --json "benchmark/results/speed/cartpole_ppo_dqn_vs_sb3_$(date +%F).json" "$@"
python benchmark/scripts/speed.py --algos dqn_atari --atari-timesteps 6000 --repeats 3 --json benchmark/results/speed/breakout_dqn_atari_vs_sb3.json "$@"
python benchmark/scripts/speed.py --algos sac td3 ddpg --mujoco-timesteps 3000 --repeats 3 --json benchmark/results/speed/hopper_sac_td3_ddpg_vs_sb3.json "$@"

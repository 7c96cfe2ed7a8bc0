#!/usr/bin/env bash
# Reproduces the speed tables in benchmark/README.md: ours vs stable-baselines3, alternating runs.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/speed.py --algos ppo dqn --total-timesteps 100000 --repeats 3 --json benchmark/speed.json "$@"
python benchmark/speed.py --algos dqn_atari --atari-timesteps 6000 --repeats 3 --json benchmark/speed_dqn_atari.json "$@"
python benchmark/speed.py --algos sac td3 ddpg --mujoco-timesteps 3000 --repeats 3 --json benchmark/speed_mujoco.json "$@"

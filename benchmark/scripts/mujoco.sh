#!/usr/bin/env bash
# Reproduces the MuJoCo learning runs in benchmark/results/mujoco/: DDPG, TD3 and SAC at their defaults
# (CleanRL's hyperparameters: batch 256, 256-256 networks, one gradient step per environment
# step; random actions for the first 25k steps (DDPG, TD3) or 5k (SAC)) on Hopper-v5 and
# HalfCheetah-v5 for STEPS environment steps, one torch thread each, two runs at a time on
# a 2-core machine.
# Usage: benchmark/scripts/mujoco.sh [STEPS] [SEED]      (defaults: 100000 steps, seed 1)
# STEPS must exceed 25000, where DDPG and TD3 start training.
# Then: python benchmark/scripts/curve.py runs/Hopper-v5__* --bin 10000 --random-games 30 --json benchmark/results/mujoco/hopper_60k_ddpg_td3_sac.json \
#         --plot benchmark/results/mujoco/hopper_60k_ddpg_td3_sac.png
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-100000}"
seed="${2:-1}"
run() {  # script env
  local log="runs/$1_$2_$seed.log"
  if ! python "cleanrl/$1.py" --env-id "$2" --seed "$seed" --total-timesteps "$steps" --torch-threads 1 \
      > "$log" 2>&1; then
    echo "$1 on $2 failed; the end of $log:" >&2
    tail -n 5 "$log" >&2
    return 1
  fi
}
mkdir -p runs
(run sac_continuous Hopper-v5; run td3_continuous Hopper-v5; run ddpg_continuous Hopper-v5) & hopper=$!
(run sac_continuous HalfCheetah-v5; run td3_continuous HalfCheetah-v5; run ddpg_continuous HalfCheetah-v5) & cheetah=$!
wait "$hopper"  # a failed run fails the script (its log is in runs/)
wait "$cheetah"

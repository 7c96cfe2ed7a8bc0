#!/usr/bin/env bash
# Reproduces benchmark/results/classic_control/ppo_dqn/ with the project's own tools: ppo.py and dqn.py
# at their defaults (500k steps) on CartPole-v1 and Acrobot-v1, seeds 1-3, run by the
# benchmark launcher (cleanrl_utils.benchmark), then learning curves, the final-return table and
# the aggregate metrics (IQM, median, mean, optimality gap with stratified bootstrap CIs) by
# cleanrl_utils.plot into benchmark/results/classic_control/ppo_dqn/.
#
# usage: benchmark/scripts/classic_control.sh [WORKERS] [RUNS_PARENT]
#   WORKERS      runs at a time, each pinned to its own 1/WORKERS of the cores (default 1)
#   RUNS_PARENT  where the runs/ folder is made (default runs/classic_control_benchmark)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORKERS="${1:-1}"
PARENT="${2:-$ROOT/runs/classic_control_benchmark}"
mkdir -p "$PARENT"
cd "$PARENT"
for script in ppo dqn; do
  python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 --command "python $ROOT/cleanrl/$script.py" \
    --num-seeds 3 --workers "$WORKERS"  # the scripts default to one torch thread
done
# random: uniformly random actions, 100 episodes (benchmark/scripts/curve.py's random_policy_returns, seed 0);
# reference: CartPole-v1's maximum return, and CleanRL's published PPO on Acrobot-v1 (../shared/REFERENCE.md)
OUT="$ROOT/benchmark/results/classic_control/ppo_dqn"
python -m cleanrl_utils.plot runs --scores "$OUT/scores.json" --smooth 10 --out "$OUT"

#!/usr/bin/env bash
# Reproduces benchmark/results/structured/ (ppo_structured.py, dqn_structured.py), seeds 1-3, run by the
# benchmark launcher (cleanrl_utils.benchmark), summarised by benchmark/scripts/curve.py into benchmark/results/structured/:
#   - ppo_structured.py on MiniGrid-DoorKey-5x5-v0 at its defaults (300k steps; image and direction, unflattened);
#   - dqn_structured.py on cleanrl_utils.envs:CombinationLock-v0 at its defaults (50k steps), masked and with
#     --action-mask off (the same agent without masks, same budget);
#   - ppo_structured.py on CombinationLock-v0, 100k steps, masked and with --action-mask off;
#   - ppo_structured.py on cleanrl_utils.envs:MultiDiscreteIdentity-v0, 100k steps, 8 envs.
# About 11 minutes on one core (needs the minigrid extra: pip install -e '.[minigrid]').
#
# usage: benchmark/scripts/structured.sh [WORKERS] [RUNS_PARENT]
#   WORKERS      runs at a time, each pinned to its own 1/WORKERS of the cores (default 1)
#   RUNS_PARENT  where the runs/ folder is made (default runs/structured_benchmark)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORKERS="${1:-1}"
PARENT="${2:-$ROOT/runs/structured_benchmark}"
mkdir -p "$PARENT"
cd "$PARENT"
LOCK=cleanrl_utils.envs:CombinationLock-v0
IDENTITY=cleanrl_utils.envs:MultiDiscreteIdentity-v0
launch() { python -m cleanrl_utils.benchmark --num-seeds 3 --workers "$WORKERS" "$@"; }  # one torch thread per run
launch --env-ids MiniGrid-DoorKey-5x5-v0 --command "python $ROOT/cleanrl/ppo_structured.py"
launch --env-ids "$LOCK" --command "python $ROOT/cleanrl/dqn_structured.py"
launch --env-ids "$LOCK" --command "python $ROOT/cleanrl/dqn_structured.py" -- --action-mask off --exp-name dqn_structured_mask_off
launch --env-ids "$LOCK" --command "python $ROOT/cleanrl/ppo_structured.py" -- --total-timesteps 100000
launch --env-ids "$LOCK" --command "python $ROOT/cleanrl/ppo_structured.py" -- --total-timesteps 100000 \
  --action-mask off --exp-name ppo_structured_mask_off
launch --env-ids "$IDENTITY" --command "python $ROOT/cleanrl/ppo_structured.py" -- --total-timesteps 100000 --num-envs 8
OUT="$ROOT/benchmark/results/structured"
mkdir -p "$OUT"
python "$ROOT/benchmark/scripts/curve.py" runs/MiniGrid-DoorKey-5x5-v0__ppo_structured__* --bin 20000 --random-games 100 \
  --json "$OUT/doorkey_ppo.json"
for exp in dqn_structured dqn_structured_mask_off ppo_structured ppo_structured_mask_off; do
  python "$ROOT/benchmark/scripts/curve.py" runs/cleanrl_utils.envs-CombinationLock-v0__"$exp"__* --bin 5000 --random-games 100 \
    --json "$OUT/lock_$exp.json"
done
python "$ROOT/benchmark/scripts/curve.py" runs/cleanrl_utils.envs-MultiDiscreteIdentity-v0__ppo_structured__* --bin 10000 \
  --random-games 100 --json "$OUT/identity_ppo.json"

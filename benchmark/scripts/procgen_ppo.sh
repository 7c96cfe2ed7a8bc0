#!/usr/bin/env bash
# Reproduces benchmark/results/procgen/starpilot_ppo_vs_cleanrl.json: ours and CleanRL's ppo_procgen.py (unmodified) on
# starpilot (easy, all levels) at CleanRL's default hyperparameters (64 envs x 256 steps, 3 epochs x 8 minibatches,
# lr 5e-4, γ 0.999), the same steps, seeds 1 and 2, alternating (ours 1, CleanRL 1, ours 2, CleanRL 2), each
# pinned to one core with one torch thread; then benchmark/scripts/procgen_report.py writes benchmark/results/procgen/starpilot_ppo_vs_cleanrl.json.
#
#   bash benchmark/scripts/procgen_ppo.sh [STEPS] [RUNS_DIR] [CORE]   # STEPS default 32768 (2 rollouts), CORE default 0
#
# CleanRL's side needs the venv of benchmark/scripts/procgen_peer_venv.sh at $PEER (default /tmp/procgen-peer).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-32768}
RUNS=${2:-/tmp/procgen-ppo-bench}
CORE=${3:-0}
PEER=${PEER:-/tmp/procgen-peer}
REPO=$PWD
rm -rf "$RUNS"
for seed in 1 2; do
  for side in ours cleanrl; do
    dir="$RUNS/$side-$seed"
    mkdir -p "$dir"
    if [ "$side" = ours ]; then
      cmd=(python "$REPO/cleanrl/ppo_procgen.py" --torch-threads 1)
    else
      cmd=("$PEER/bin/python" "$PEER/cleanrl_peer/ppo_procgen.py")
    fi
    cmd+=(--env-id starpilot --seed "$seed" --total-timesteps "$STEPS")
    echo "OMP_NUM_THREADS=1 taskset -c $CORE ${cmd[*]}" > "$dir/command.txt"
    echo "$side seed $seed: $(cat "$dir/command.txt")"
    (cd "$dir" && OMP_NUM_THREADS=1 PYTHONPATH="$REPO" /usr/bin/time -f "%e %U %S" -o time.txt \
      taskset -c "$CORE" "${cmd[@]}" > log.txt 2>&1)
  done
done
python benchmark/scripts/procgen_report.py "$RUNS" --steps "$STEPS" --core "$CORE" --json benchmark/results/procgen/starpilot_ppo_vs_cleanrl.json

#!/usr/bin/env bash
# Reproduces benchmark/results/procgen/starpilot_ppg_vs_cleanrl.json: ours and CleanRL's ppg_procgen.py (unmodified) on
# starpilot (easy, every level) at the same steps and hyperparameters, seeds alternating, each run pinned to one
# core with one torch thread; then the last-20-episode return of each run, its wall-clock speed and the ratio.
#
#   bash benchmark/scripts/procgen_ppg.sh [NUM_ENVS] [CORE] [RUNS_DIR]    # defaults 1, 1, /tmp/procgen-ppg-bench
#
# One phase is n_iteration (32) rollouts of NUM_ENVS x 256 steps: at CleanRL's 64 envs that is 524,288 steps, hours
# on one CPU core; NUM_ENVS 1 (8,192 steps: 32 policy iterations, then one auxiliary phase of 6 epochs) is the
# default here, the same for both scripts. CleanRL's side needs Procgen's old gym API: the venv at $PEER
# (default /tmp/procgen-peer) with torch 2.13.0, gym 0.26.2, procgen-mirror (numpy < 2), tyro and tensorboard, and
# CleanRL's file at $PEER/cleanrl_peer/ppg_procgen.py (commit in $PEER/cleanrl_peer/COMMIT).
set -euo pipefail
cd "$(dirname "$0")/../.."
NUM_ENVS=${1:-1}
CORE=${2:-1}
RUNS=${3:-/tmp/procgen-ppg-bench}
PEER=${PEER:-/tmp/procgen-peer}
STEPS=$((NUM_ENVS * 256 * 32))
FLAGS=(--env-id starpilot --num-envs "$NUM_ENVS" --total-timesteps "$STEPS")
export OMP_NUM_THREADS=1
for seed in 1 2; do
  for side in ours cleanrl; do
    out="$RUNS/$side-$seed"
    rm -rf "$out" && mkdir -p "$out"
    if [ "$side" = ours ]; then
      command=(env PYTHONPATH="$PWD" python "$PWD/cleanrl/ppg_procgen.py" "${FLAGS[@]}" --seed "$seed" --torch-threads 1)
    else
      command=("$PEER/bin/python" "$PEER/cleanrl_peer/ppg_procgen.py" "${FLAGS[@]}" --seed "$seed" --no-cuda)
    fi
    start=$(date +%s.%N)
    (cd "$out" && taskset -c "$CORE" "${command[@]}" > log.txt 2>&1)
    end=$(date +%s.%N)
    echo "$start $end" > "$out/wall.txt"
    echo "$side seed $seed: $(echo "$end - $start" | bc) s"
  done
done
python - "$RUNS" "$STEPS" "$NUM_ENVS" "$PEER" <<'EOF'
import json
import sys
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from benchmark.scripts.provenance import describe

runs, steps, num_envs, peer = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
result = {
    **describe(),
    "peer_commit": (peer / "cleanrl_peer" / "COMMIT").read_text().strip(),
    "command": f"bash benchmark/scripts/procgen_ppg.sh {num_envs}",
    "env": "starpilot, easy, every level",
    "steps": steps,
    "num_envs": num_envs,
    "runs": {},
}
for side in ("ours", "cleanrl"):
    for seed in (1, 2):
        directory = next((runs / f"{side}-{seed}" / "runs").iterdir())
        events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
        events.Reload()
        episodes = [e.value for e in events.Scalars("charts/episodic_return") if e.step <= steps]
        start, end = map(float, (runs / f"{side}-{seed}" / "wall.txt").read_text().split())
        aux = [e.step for e in events.Scalars("losses/aux/kl_loss")]
        result["runs"][f"{side}-{seed}"] = {
            "episodes": len(episodes),
            "return_last_20": float(np.mean(episodes[-20:])),
            "wall_seconds": round(end - start, 1),
            "sps_wall": round(steps / (end - start), 2),
            "aux_phases_at": aux,
        }
for side in ("ours", "cleanrl"):
    rows = [result["runs"][f"{side}-{seed}"] for seed in (1, 2)]
    result[side] = {
        "return_last_20_mean": float(np.mean([r["return_last_20"] for r in rows])),
        "sps_wall_mean": float(np.mean([r["sps_wall"] for r in rows])),
    }
result["sps_ratio_ours_over_cleanrl"] = round(result["ours"]["sps_wall_mean"] / result["cleanrl"]["sps_wall_mean"], 3)
Path("benchmark/results/procgen/starpilot_ppg_vs_cleanrl.json").write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
EOF

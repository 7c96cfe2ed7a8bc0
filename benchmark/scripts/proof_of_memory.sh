#!/usr/bin/env bash
# Reproduces benchmark/results/memory/: on the proof-of-memory task
# (cleanrl_utils.envs:ProofOfMemory-v0: a cue, 4-12 blank steps, a choice worth +1 or -1), ppo_trxl.py,
# ppo_lstm.py and ppo.py (no memory) at the same steps, each at its defaults, seeds 1-3, one torch thread, one core;
# a uniformly random policy's return over 10,000 episodes (chance); then, if CleanRL's side is set up, the speed of
# ours and of CleanRL's ppo_trxl.py (unmodified) at the same steps and hyperparameters on CleanRL's own ProofofMemory-v0 (pom_env.py).
#
#   bash benchmark/scripts/proof_of_memory.sh [STEPS] [CORE] [RUNS_DIR]    # defaults 49152, 1, /tmp/proof-of-memory-bench
#
# CleanRL's side needs memory_gym, einops and gymnasium 0.29 (its pin: it reads infos["final_info"]): the venv at
# $PEER (default /tmp/trxl-peer), e.g. `python -m venv --system-site-packages $PEER && $PEER/bin/pip install
# "numpy<2" gymnasium==0.29.1 einops==0.7.0 && $PEER/bin/pip install --no-deps memory-gym==1.0.2`, with CleanRL's
# cleanrl/ppo_trxl/{ppo_trxl,pom_env}.py in $PEER/cleanrl_peer/ (commit in $PEER/cleanrl_peer/COMMIT).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-49152}
CORE=${2:-1}
RUNS=${3:-/tmp/proof-of-memory-bench}
PEER=${PEER:-/tmp/trxl-peer}
export OMP_NUM_THREADS=1
timed() {  # timed OUT_DIR COMMAND...: run COMMAND in OUT_DIR on one core, its wall-clock start and end in wall.txt
  local out=$1
  shift
  rm -rf "$out" && mkdir -p "$out"
  local start end
  start=$(date +%s.%N)
  (cd "$out" && taskset -c "$CORE" "$@" > log.txt 2>&1)
  end=$(date +%s.%N)
  echo "$start $end" > "$out/wall.txt"
  echo "$(basename "$out"): $(echo "$end - $start" | bc) s"
}
for seed in 1 2 3; do
  for script in ppo_trxl ppo_lstm ppo; do
    timed "$RUNS/$script-$seed" env PYTHONPATH="$PWD" python "$PWD/cleanrl/$script.py" \
      --env-id cleanrl_utils.envs:ProofOfMemory-v0 --total-timesteps "$STEPS" --seed "$seed"
  done
done
# speed beside CleanRL's: the same flags for both (our defaults), on CleanRL's task
SAME=(--env-id ProofofMemory-v0 --total-timesteps "$STEPS" --num-envs 16 --num-steps 128 --num-minibatches 8
  --update-epochs 4 --trxl-num-layers 2 --trxl-num-heads 4 --trxl-dim 64 --trxl-memory-length 16)
if [ -f "$PEER/cleanrl_peer/ppo_trxl.py" ]; then
  for seed in 1 2; do
    timed "$RUNS/speed-ours-$seed" env PYTHONPATH="$PWD:$PEER/cleanrl_peer" python "$PWD/cleanrl/ppo_trxl.py" \
      "${SAME[@]/#ProofofMemory-v0/pom_env:ProofofMemory-v0}" --seed "$seed"
    timed "$RUNS/speed-cleanrl-$seed" env PYTHONPATH="$PEER/cleanrl_peer" "$PEER/bin/python" \
      "$PEER/cleanrl_peer/ppo_trxl.py" "${SAME[@]}" --seed "$seed" --no-cuda
  done
fi
PYTHONPATH="$PWD:$PWD/benchmark/scripts" python - "$RUNS" "$STEPS" "$PEER" <<'EOF'
import json
import sys
from pathlib import Path

import numpy as np

import cleanrl_utils.envs  # noqa: F401
from benchmark.scripts.curve import binned, random_policy_returns, read_run
from benchmark.scripts.provenance import describe

runs, steps, peer = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
BIN = 4096
chance = random_policy_returns("cleanrl_utils.envs:ProofOfMemory-v0", 10000, seed=0)
result = {
    **describe(),
    "command": f"bash benchmark/scripts/proof_of_memory.sh {steps}",
    "env": "cleanrl_utils.envs:ProofOfMemory-v0",
    "steps": steps,
    "bin_steps": BIN,
    "random_policy_return": {"episodes": len(chance), "mean": round(float(np.mean(chance)), 4)},
    "runs": {},
    "speed": {},
}


def wall(out: Path) -> float:
    start, end = map(float, (out / "wall.txt").read_text().split())
    return end - start


for script in ("ppo_trxl", "ppo_lstm", "ppo"):
    for seed in (1, 2, 3):
        out = runs / f"{script}-{seed}"
        run = read_run(next((out / "runs").iterdir()))
        curve = binned(run["steps"], run["returns"], BIN, steps)
        result["runs"][f"{script}-{seed}"] = {
            "script": f"{script}.py",
            "seed": seed,
            "episodes": len(run["returns"]),
            "return_last_100": round(float(np.mean(run["returns"][-100:])), 4),
            "wall_seconds": round(wall(out), 1),
            "curve": [None if value is None else round(value, 4) for value in curve],
        }
    rows = [result["runs"][f"{script}-{seed}"]["return_last_100"] for seed in (1, 2, 3)]
    result[f"{script}.py"] = {"return_last_100_mean": round(float(np.mean(rows)), 4), "per_seed": rows}
if (runs / "speed-ours-1").exists():
    result["speed"]["peer_commit"] = (peer / "cleanrl_peer" / "COMMIT").read_text().strip()
    result["speed"]["env"] = "ProofofMemory-v0 (CleanRL's pom_env.py), the same flags for both"
    for side in ("ours", "cleanrl"):
        seconds = [wall(runs / f"speed-{side}-{seed}") for seed in (1, 2)]
        result["speed"][side] = {"wall_seconds": [round(s, 1) for s in seconds], "sps_wall_mean": round(steps / np.mean(seconds), 1)}
    result["speed"]["sps_ratio_ours_over_cleanrl"] = round(
        result["speed"]["ours"]["sps_wall_mean"] / result["speed"]["cleanrl"]["sps_wall_mean"], 3
    )
Path("benchmark/results/memory/proof_of_memory_trxl_lstm_ppo.json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
EOF

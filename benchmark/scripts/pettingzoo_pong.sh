#!/usr/bin/env bash
# Reproduces benchmark/results/multi_agent/: speed beside CleanRL's
# ppo_pettingzoo_ma_atari.py on pong_v3 self-play (same steps, each side's defaults, which agree: 8 games x 2 agents
# = 16 rows x 128 steps, 4 minibatches, 4 epochs), ours and CleanRL's alternating, pinned to one core, one torch
# thread; then benchmark/results/multi_agent/pong_selfplay_vs_cleanrl.json, with the episode lengths of any self-play runs named in CURVES.
#
#   bash benchmark/scripts/pettingzoo_pong.sh [STEPS] [PAIRS] [CORE] [RUNS_DIR]   # defaults 12288, 3, 1, /tmp/pettingzoo-pong
#   CURVES="ours=DIR cleanrl=DIR" bash benchmark/scripts/pettingzoo_pong.sh ...    # add longer runs' curves to the JSON
#   CURVES=... bash benchmark/scripts/pettingzoo_pong.sh 0 0                      # only the curves; the speed kept as it is
#
# CleanRL's side needs its pins (PettingZoo 1.18.1, SuperSuit 3.4.0, multi-agent-ale-py 0.1.11, gym 0.23.1,
# numpy < 2; multi-agent-ale-py has no wheel past Python 3.10): the venv at $PEER (default /tmp/pz-peer), e.g.
# `python3.10 -m venv $PEER && $PEER/bin/pip install torch==2.13.0 "numpy<2" gym==0.23.1 pettingzoo==1.18.1
# supersuit==3.4.0 multi-agent-ale-py==0.1.11 tensorboard`, ale-py's pong.bin copied into
# multi_agent_ale_py/roms/, and CleanRL's cleanrl/ppo_pettingzoo_ma_atari.py in $PEER/cleanrl_peer/.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-12288}
PAIRS=${2:-3}
CORE=${3:-1}
RUNS=${4:-/tmp/pettingzoo-pong}
PEER=${PEER:-/tmp/pz-peer}
export OMP_NUM_THREADS=1
mkdir -p "$RUNS"
: > "$RUNS/times.txt"
timed() {  # timed NAME DIR COMMAND...: run COMMAND in DIR on one core; "NAME SECONDS" appended to times.txt
  local name=$1 out=$2
  shift 2
  rm -rf "$out" && mkdir -p "$out"
  local start end
  start=$(date +%s.%N)
  (cd "$out" && taskset -c "$CORE" "$@" > log.txt 2>&1)
  end=$(date +%s.%N)
  echo "$name $(echo "$end - $start" | bc)" | tee -a "$RUNS/times.txt"
}
for seed in $(seq 1 "$PAIRS"); do
  timed ours "$RUNS/ours-$seed" env PYTHONPATH="$PWD" python "$PWD/cleanrl/ppo_pettingzoo.py" \
    --env-id pong_v3 --total-timesteps "$STEPS" --seed "$seed"
  timed cleanrl "$RUNS/cleanrl-$seed" "$PEER/bin/python" "$PEER/cleanrl_peer/ppo_pettingzoo_ma_atari.py" \
    --total-timesteps "$STEPS" --seed "$seed"
done
STEPS=$STEPS RUNS=$RUNS CURVES=${CURVES:-} python - <<'PY'
import json, os, platform
from pathlib import Path
from statistics import median

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from benchmark.scripts.provenance import describe

runs, output = Path(os.environ["RUNS"]), Path("benchmark/results/multi_agent/pong_selfplay_vs_cleanrl.json")
times = {"ours": [], "cleanrl": []}
for line in (runs / "times.txt").read_text().split("\n"):
    if line:
        name, seconds = line.split()
        times[name].append(round(float(seconds), 1))
if times["ours"]:
    report = {
        **describe(),
        "python": platform.python_version(),
        "steps": int(os.environ["STEPS"]),
        "wall_seconds": times,
        "ratio_of_medians": round(median(times["cleanrl"]) / median(times["ours"]), 2),
    }
else:  # no pairs run: keep the speed measured before
    report = json.loads(output.read_text())
report["curves"] = {}
for item in os.environ["CURVES"].split():  # side=DIR: the run directory (or a folder holding one) of a self-play run
    side, directory = item.split("=", 1)
    events = EventAccumulator(str(next(Path(directory).rglob("events.out.tfevents.*")).parent), size_guidance={"scalars": 0})
    events.Reload()
    # one agent's episodes (ours: charts/episodic_length/first_0, CleanRL's: -player0); both agents share the length
    tag = min(t for t in events.Tags()["scalars"] if t.startswith("charts/episodic_length") and t != "charts/episodic_length")
    report["curves"][side] = {"tag": tag, "episodic_length": [[e.step, e.value] for e in events.Scalars(tag)]}
output.write_text(json.dumps(report, indent=1) + "\n")
print(json.dumps({k: v for k, v in report.items() if k != "curves"}))
PY

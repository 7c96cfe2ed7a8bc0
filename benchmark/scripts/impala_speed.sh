#!/usr/bin/env bash
# Speed of impala_atari.py beside CleanRL's ppo_atari.py and our ppo_atari.py on BreakoutNoFrameskip-v4: each run a
# fresh process of STEPS env steps at the script's defaults, seed 1, its wall time measured; in each of PAIRS rounds,
# in this order: ours impala_atari.py --env-mode sync, ours impala_atari.py --env-mode async, CleanRL's
# ppo_atari.py, ours ppo_atari.py --torch-threads 2. Then benchmark/results/parallel/impala_speed_30k.json: per-run wall seconds and
# steps/s (STEPS / wall), the steps each of our runs reports, and the speed ratios of the medians.
#
#   bash benchmark/scripts/impala_speed.sh [STEPS] [PAIRS]   # defaults 51200, 3
#
# No core is pinned and no thread count forced (OMP_NUM_THREADS and MKL_NUM_THREADS are unset): IMPALA's point is
# to step its two actors and learn at once on both cores; CleanRL's ppo_atari.py leaves torch at its default threads
# (one per core), and ours ppo_atari.py gets --torch-threads 2 so that both PPO sides use the two cores. Run it on an
# otherwise idle machine.
#
# Steps: CleanRL's and ours ppo_atari.py run STEPS rounded down to whole batches of 1,024 (8 envs x 128);
# impala_atari.py learns in batches of 640 (32 trajectories x 20) and its actors fill whole slots, so it steps past
# STEPS (2,560 for 2,048). steps/s counts STEPS all the same; reported_steps says what each of our runs stepped.
# A STEPS that is a multiple of 5,120 is whole batches on every side; under 640 impala_atari.py refuses to start.
# Each run is in its own folder of a temporary directory, deleted at the end (a failed run's log tail is printed).
#
# CleanRL's side runs in the venv at $PEER (default /tmp/crl-atari) that benchmark/scripts/cleanrl_atari_venv.sh builds;
# ours with $PYTHON (default python).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-51200}
PAIRS=${2:-3}
PEER=${PEER:-/tmp/crl-atari}
PYTHON=${PYTHON:-python}
if ! [ "$STEPS" -gt 0 ] || ! [ "$PAIRS" -gt 0 ]; then
    echo "STEPS and PAIRS must be positive" >&2
    exit 1
fi
if ! [ -x "$PEER/bin/python" ] || ! [ -f "$PEER/cleanrl_peer/ppo_atari.py" ]; then
    echo "no CleanRL venv at $PEER: run benchmark/scripts/cleanrl_atari_venv.sh $PEER first" >&2
    exit 1
fi
unset OMP_NUM_THREADS MKL_NUM_THREADS
RUNS=$(mktemp -d /tmp/impala-speed.XXXXXX)
trap 'rm -rf "$RUNS"' EXIT
: > "$RUNS/times.txt"

timed() {  # timed NAME COMMAND...: run COMMAND in a fresh folder of RUNS; "NAME SECONDS LOG" appended to times.txt
    local name=$1 out
    shift
    out=$(mktemp -d "$RUNS/$name.XXXX")
    local start end
    start=$(date +%s.%N)
    if ! (cd "$out" && "$@" > log.txt 2>&1); then
        echo "$name failed: $*" >&2
        tail -n 20 "$out/log.txt" >&2
        exit 1
    fi
    end=$(date +%s.%N)
    echo "$name $(echo "$end - $start" | bc) $out/log.txt" | tee -a "$RUNS/times.txt"
}

ours=(env PYTHONPATH="$PWD" "$PYTHON")
common=(--env-id BreakoutNoFrameskip-v4 --total-timesteps "$STEPS" --seed 1)
for _ in $(seq 1 "$PAIRS"); do
    timed impala_sync "${ours[@]}" "$PWD/cleanrl/impala_atari.py" "${common[@]}" --env-mode sync
    timed impala_async "${ours[@]}" "$PWD/cleanrl/impala_atari.py" "${common[@]}" --env-mode async
    timed cleanrl_ppo_atari "$PEER/bin/python" "$PEER/cleanrl_peer/ppo_atari.py" "${common[@]}"
    timed ours_ppo_atari "${ours[@]}" "$PWD/cleanrl/ppo_atari.py" "${common[@]}" --torch-threads 2
done

STEPS=$STEPS PAIRS=$PAIRS RUNS=$RUNS PEER=$PEER "$PYTHON" - <<'PY'
import json, os, re, subprocess
from importlib.metadata import version
from pathlib import Path
from statistics import median

from benchmark.scripts.provenance import describe, git

steps, runs, peer = int(os.environ["STEPS"]), Path(os.environ["RUNS"]), Path(os.environ["PEER"])
names = ("impala_sync", "impala_async", "cleanrl_ppo_atari", "ours_ppo_atari")
wall, reported = {n: [] for n in names}, {n: [] for n in names}
for line in (runs / "times.txt").read_text().splitlines():
    name, seconds, log = line.split()
    wall[name].append(round(float(seconds), 2))
    if name == "cleanrl_ppo_atari":  # it prints no total; it runs whole batches of 8 x 128
        reported[name].append(steps // 1024 * 1024)
    else:  # our Progress line: "step N/TOTAL (..%) | SPS ..."
        found = re.findall(r"^step (\d+)/", Path(log).read_text(), re.M)
        reported[name].append(int(found[-1]) if found else None)

packages = ("torch", "gymnasium", "ale-py", "numpy")
peer_versions = subprocess.run(
    [peer / "bin/python", "-c", f"import json; from importlib.metadata import version; print(json.dumps({{p: version(p) for p in {packages!r}}}))"],
    capture_output=True, text=True, check=True,
).stdout

def ratio(faster: str, slower: str) -> float:  # speed of `faster` over `slower`: > 1 when `faster` is faster
    return round(median(wall[slower]) / median(wall[faster]), 3)

report = {
    **describe(),
    "uncommitted": git("status", "--porcelain", "--", "cleanrl/impala_atari.py", "cleanrl/ppo_atari.py", "cleanrl_utils").splitlines(),
    "env_id": "BreakoutNoFrameskip-v4",
    "seed": 1,
    "steps": steps,
    "pairs": int(os.environ["PAIRS"]),
    "order": list(names),
    "flags": {
        "impala_sync": "cleanrl/impala_atari.py --env-mode sync (the default: 2 actors x 8 envs, learner 1 torch thread)",
        "impala_async": "cleanrl/impala_atari.py --env-mode async: one subprocess per env",
        "cleanrl_ppo_atari": "CleanRL's cleanrl/ppo_atari.py at its defaults (torch's default threads)",
        "ours_ppo_atari": "cleanrl/ppo_atari.py --torch-threads 2",
    },
    "cleanrl_commit": (peer / "cleanrl_peer/COMMIT").read_text().strip(),
    "versions": {"ours": {p: version(p) for p in packages}, "cleanrl": json.loads(peer_versions)},
    "wall_seconds": wall,
    "steps_per_second": {n: [round(steps / s, 1) for s in wall[n]] for n in names},
    "reported_steps": reported,
    "median_wall_seconds": {n: median(wall[n]) for n in names},
    "ratios_of_medians": {
        "impala_sync/cleanrl_ppo_atari": ratio("impala_sync", "cleanrl_ppo_atari"),
        "impala_async/cleanrl_ppo_atari": ratio("impala_async", "cleanrl_ppo_atari"),
        "impala_sync/ours_ppo_atari": ratio("impala_sync", "ours_ppo_atari"),
        "impala_async/ours_ppo_atari": ratio("impala_async", "ours_ppo_atari"),
        "ours_ppo_atari/cleanrl_ppo_atari": ratio("ours_ppo_atari", "cleanrl_ppo_atari"),
    },
    "ratio_note": "A/B: B's median wall seconds over A's, that is STEPS/s of A over B; > 1 when A is faster",
}
Path("benchmark/results/parallel/impala_speed_30k.json").write_text(json.dumps(report, indent=1) + "\n")
print(json.dumps({k: report[k] for k in ("steps", "pairs", "median_wall_seconds", "ratios_of_medians")}))
PY

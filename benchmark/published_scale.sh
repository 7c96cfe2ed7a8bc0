#!/usr/bin/env bash
# Reproduces the results at published scale (README "Results"): ppo_continuous.py at 1M steps on
# Hopper-v4, HalfCheetah-v4 and Walker2d-v4, and dqn.py and c51.py at 500k steps on CartPole-v1,
# Acrobot-v1 and MountainCar-v0, seeds 1-3, every script at its defaults (CleanRL's
# hyperparameters), run by the benchmark launcher with one core and one torch thread per run;
# then the figures and the tables (mean of the last 100 training episodes, the window of
# CleanRL's published tables) by cleanrl_utils.plot, and the per-run curves by
# benchmark/curve.py, into benchmark/.
#
# usage: benchmark/published_scale.sh [WORKERS] [RUNS_PARENT]
#   WORKERS      runs at a time, each pinned to its own 1/WORKERS of the cores (default 2)
#   RUNS_PARENT  where the runs/ folder is made (default runs/published_scale)
# With WORKERS equal to the number of cores, each run has one core and one torch thread. On 2 cores:
# about 1 h 15 min for the 9 MuJoCo runs (12-21 min each) and 45 min for the 18 classic-control
# runs (3.5-7 min each). Each figure, table and curve file is made from the runs that its grid's
# summary lists, so earlier runs in RUNS_PARENT are not mixed in; each summary is copied beside its
# figure with the commit of the scripts added to every entry.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORKERS="${1:-2}"
PARENT="${2:-$ROOT/runs/published_scale}"
mkdir -p "$PARENT"
cd "$PARENT"
launch() {  # launch LOG_NAME SCRIPT ENV_IDS... [-- FLAGS...]
  local name="$1" script="$2"
  shift 2
  python -m cleanrl_utils.benchmark --workers "$WORKERS" --torch-threads-flag --num-seeds 3 \
    --log-dir "runs/benchmark_logs/$name" --command "python $ROOT/cleanrl/$script" --env-ids "$@"
}
launch ppo_continuous ppo_continuous.py Hopper-v4 HalfCheetah-v4 Walker2d-v4 -- --total-timesteps 1000000
launch dqn dqn.py CartPole-v1 Acrobot-v1 MountainCar-v0
launch c51 c51.py CartPole-v1 Acrobot-v1 MountainCar-v0

commit="$(git -C "$ROOT" rev-parse --short HEAD)"
runs_of() {  # runs_of NAME ENV_ID: the run directories of that grid and environment
  python -c 'import json, sys; print(" ".join(e["run_dir"] for e in json.load(open(sys.argv[1]))
      if e["env_id"] == sys.argv[2] and e["status"] == "ok"))' "runs/benchmark_logs/$1/summary.json" "$2"
}
for name in ppo_continuous dqn c51; do
  mkdir -p "$ROOT/benchmark/published_scale/$name"
  python -c 'import json, sys; json.dump([{"commit": sys.argv[2], **e} for e in json.load(open(sys.argv[1]))],
      open(sys.argv[3], "w"), indent=2)' "runs/benchmark_logs/$name/summary.json" "$commit" \
    "$ROOT/benchmark/published_scale/$name/summary.json"
  python -m cleanrl_utils.plot --summary "runs/benchmark_logs/$name/summary.json" \
    --reference "$ROOT/benchmark/published_$name.json" --last-episodes 100 --smooth 20 --band range \
    --ylabel "return (20-episode moving mean)" --legend "$name=ours, $name.py (3 seeds)" --figsize 7 2.8 \
    --format png pdf svg --out "$ROOT/benchmark/published_scale/$name"
done
for env in Hopper-v4 HalfCheetah-v4 Walker2d-v4; do
  # shellcheck disable=SC2046  # one argument per run directory
  python "$ROOT/benchmark/curve.py" $(runs_of ppo_continuous "$env") --bin 50000 --random-games 100 \
    --json "$ROOT/benchmark/published_scale/$env.json"
done
for script in dqn c51; do
  for env in CartPole-v1 Acrobot-v1 MountainCar-v0; do
    # shellcheck disable=SC2046
    python "$ROOT/benchmark/curve.py" $(runs_of "$script" "$env") --bin 50000 --random-games 100 \
      --json "$ROOT/benchmark/published_scale/${env}_$script.json"
  done
done

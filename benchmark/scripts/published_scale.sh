#!/usr/bin/env bash
# Reproduces benchmark/results/published_scale/: ppo_continuous.py at 1M steps on
# Hopper-v4, HalfCheetah-v4 and Walker2d-v4, rpo_continuous.py at 1M steps on those and on
# dm_control/cartpole-balance-v0 and dm_control/walker-walk-v0 (needs the dm_control extra), and
# dqn.py and c51.py at 500k steps on CartPole-v1, Acrobot-v1 and MountainCar-v0, seeds 1-3, every
# script at its defaults (CleanRL's hyperparameters; rpo_continuous's α 0.5) but for the steps
# named (RPO's default is 8M), run by the benchmark launcher with one core and one torch thread per run;
# then the figures and the tables (mean of the last 100 training episodes, the window of
# CleanRL's published tables) by cleanrl_utils.plot, and the per-run curves by
# benchmark/scripts/curve.py, into benchmark/results/published_scale/<grid>/ (the grid's figure, returns.md, the
# launcher's summary.json, one curve file per environment; CleanRL's published results are its cleanrl_published.json).
#
# usage: benchmark/scripts/published_scale.sh [WORKERS] [RUNS_PARENT] [GRIDS]
#   WORKERS      runs at a time, each pinned to its own 1/WORKERS of the cores (default 2)
#   RUNS_PARENT  where the runs/ folder is made (default runs/published_scale)
#   GRIDS        which grids to run and draw, separated by spaces (default all four:
#                "ppo_continuous rpo_continuous dqn c51")
# With WORKERS equal to the number of cores, each run has one core and one torch thread. On 2 cores:
# about 1 h 15 min for the 9 MuJoCo runs (12-21 min each) and 45 min for the 18 classic-control
# runs (3.5-7 min each); the 15 RPO runs took 9-19 min each (about 1 h 50 min, 2 at a time, on a partly shared machine). CleanRL's RPO results
# (benchmark/results/published_scale/rpo_continuous/cleanrl_published.json) are at 8M steps: drawn at 8M, beside runs of 1M.
# Each figure, table and curve file is made from the runs that its grid's
# summary lists, so earlier runs in RUNS_PARENT are not mixed in; each summary is copied beside its
# figure with the commit of the scripts added to every entry.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORKERS="${1:-2}"
PARENT="${2:-$ROOT/runs/published_scale}"
GRIDS=" ${3:-ppo_continuous rpo_continuous dqn c51} "
wanted() { [[ "$GRIDS" == *" $1 "* ]]; }  # wanted NAME: whether that grid was asked for
mkdir -p "$PARENT"
cd "$PARENT"
launch() {  # launch LOG_NAME SCRIPT ENV_IDS... [-- FLAGS...]
  local name="$1" script="$2"
  shift 2
  python -m cleanrl_utils.benchmark --workers "$WORKERS" --torch-threads-flag --num-seeds 3 \
    --log-dir "runs/benchmark_logs/$name" --command "python $ROOT/cleanrl/$script" --env-ids "$@"
}
wanted ppo_continuous && launch ppo_continuous ppo_continuous.py Hopper-v4 HalfCheetah-v4 Walker2d-v4 -- --total-timesteps 1000000
wanted rpo_continuous && launch rpo_continuous rpo_continuous.py Hopper-v4 HalfCheetah-v4 Walker2d-v4 \
  dm_control/cartpole-balance-v0 dm_control/walker-walk-v0 -- --total-timesteps 1000000
wanted dqn && launch dqn dqn.py CartPole-v1 Acrobot-v1 MountainCar-v0
wanted c51 && launch c51 c51.py CartPole-v1 Acrobot-v1 MountainCar-v0

commit="$(git -C "$ROOT" rev-parse --short HEAD)"
OUT="$ROOT/benchmark/results/published_scale"
runs_of() {  # runs_of NAME ENV_ID: the run directories of that grid and environment
  python -c 'import json, sys; print(" ".join(e["run_dir"] for e in json.load(open(sys.argv[1]))
      if e["env_id"] == sys.argv[2] and e["status"] == "ok"))' "runs/benchmark_logs/$1/summary.json" "$2"
}
height_of() {  # height_of NAME: the figure's height in inches (3 subplots a row)
  if [ "$1" = rpo_continuous ]; then echo 5.2; else echo 2.8; fi
}
for name in ppo_continuous rpo_continuous dqn c51; do
  wanted "$name" || continue
  mkdir -p "$OUT/$name"
  python -c 'import json, sys; json.dump([{"commit": sys.argv[2], **e} for e in json.load(open(sys.argv[1]))],
      open(sys.argv[3], "w"), indent=2)' "runs/benchmark_logs/$name/summary.json" "$commit" \
    "$OUT/$name/summary.json"
  python -m cleanrl_utils.plot --summary "runs/benchmark_logs/$name/summary.json" \
    --reference "$OUT/$name/cleanrl_published.json" --last-episodes 100 --smooth 20 --band range \
    --ylabel "return (20-episode moving mean)" --legend "$name=ours, $name.py (3 seeds)" --figsize 7 "$(height_of "$name")" \
    --format png pdf svg --out "$OUT/$name"
done
for env in Hopper-v4 HalfCheetah-v4 Walker2d-v4; do
  wanted ppo_continuous || break
  # shellcheck disable=SC2046  # one argument per run directory
  python "$ROOT/benchmark/scripts/curve.py" $(runs_of ppo_continuous "$env") --bin 50000 --random-games 100 \
    --json "$OUT/ppo_continuous/$env.json"
done
for env in Hopper-v4 HalfCheetah-v4 Walker2d-v4 dm_control/cartpole-balance-v0 dm_control/walker-walk-v0; do
  wanted rpo_continuous || break
  # shellcheck disable=SC2046
  python "$ROOT/benchmark/scripts/curve.py" $(runs_of rpo_continuous "$env") --bin 50000 --random-games 100 \
    --json "$OUT/rpo_continuous/${env//\//-}.json"
done
for script in dqn c51; do
  wanted "$script" || continue
  for env in CartPole-v1 Acrobot-v1 MountainCar-v0; do
    # shellcheck disable=SC2046
    python "$ROOT/benchmark/scripts/curve.py" $(runs_of "$script" "$env") --bin 50000 --random-games 100 \
      --json "$OUT/$script/$env.json"
  done
done

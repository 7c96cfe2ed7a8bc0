#!/usr/bin/env bash
# Reproduces benchmark/results/exploration/: ours, ours with --int-coef 0 (PPO without the
# intrinsic reward) and CleanRL's ppo_rnd_envpool.py (unmodified) on MontezumaRevenge-v5 at equal steps, one after
# the other, each pinned to one core; then the same measuring evaluation of the three final policies and of a
# uniformly random one, the table, and the speed pairs.
#
#   bash benchmark/scripts/rnd.sh [STEPS] [RUNS_DIR]      # STEPS default 40960 (8 envs x 128 steps x 40 rollouts)
#
# CleanRL's side needs the venv of benchmark/scripts/peer_venv.sh at /tmp/rnd-peer with CleanRL's ppo_rnd_envpool.py
# beside the scripts it copies (CLEANRL: a clone or bare git directory of vwxyzjn/cleanrl):
#   bash benchmark/scripts/peer_venv.sh /tmp/rnd-peer "$CLEANRL"
#   git --git-dir "$CLEANRL" show fe8d8a03c41a7ef5b523e2e354bd01c363e786bb:cleanrl/ppo_rnd_envpool.py \
#       > /tmp/rnd-peer/cleanrl_peer/ppo_rnd_envpool.py      # (git -C "$CLEANRL" for a clone)
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-40960}
RUNS=${2:-/tmp/rnd-bench}
for side in ours peer ours-no-rnd; do
  python benchmark/scripts/rnd_exploration.py train "$side" --out "$RUNS/$side" --seed 1 --num-envs 8 --num-steps 128 \
    --total-timesteps "$STEPS" --init-rollouts 50
done
python benchmark/scripts/rnd_exploration.py evaluate "$RUNS/ours" "$RUNS/peer" "$RUNS/ours-no-rnd" --games 16 \
  --json benchmark/results/exploration/montezuma_rnd_evaluation.json
python benchmark/scripts/rnd_exploration.py report "$RUNS/ours" "$RUNS/peer" "$RUNS/ours-no-rnd" \
  --evaluation benchmark/results/exploration/montezuma_rnd_evaluation.json --json benchmark/results/exploration/montezuma_rnd_training.json
python benchmark/scripts/rnd_exploration.py speed --repeats 3 --json benchmark/results/exploration/montezuma_rnd_speed_vs_cleanrl.json

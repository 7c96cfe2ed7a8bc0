#!/usr/bin/env bash
# Reproduces the replay-buffer table in benchmark/results/replay/: ours (uniform, prioritized) vs
# stable-baselines3's ReplayBuffer on Atari-shaped data. Needs about 8 GiB of free memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
python benchmark/scripts/replay.py --sizes 100000 1000000 --json benchmark/results/replay/buffers_vs_sb3.json "$@"

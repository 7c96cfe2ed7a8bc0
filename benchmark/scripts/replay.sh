#!/usr/bin/env bash
# Reproduces the replay-buffer table in benchmark/README.md: ours (uniform, prioritized) vs
# stable-baselines3's ReplayBuffer on Atari-shaped data. Needs about 8 GiB of free memory.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/replay.py --sizes 100000 1000000 --json benchmark/replay.json "$@"

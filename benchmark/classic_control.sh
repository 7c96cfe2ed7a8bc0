#!/usr/bin/env bash
# Reproduces the classic-control returns in README.md and benchmark/README.md:
# ppo.py, dqn.py and c51.py at their defaults (500k steps) on CartPole-v1, seeds 1-3, one after another.
# Each run's "return (last 20)" in its final progress line is the number reported.
set -euo pipefail
cd "$(dirname "$0")/.."
for seed in 1 2 3; do
  for script in ppo dqn c51; do
    python "cleanrl/${script}.py" --env-id CartPole-v1 --seed "$seed" | tail -n 1 | sed "s/^/${script} seed ${seed}: /"
  done
done

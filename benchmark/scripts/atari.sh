#!/usr/bin/env bash
# Reproduces the Breakout learning runs in benchmark/results/atari/: what each Atari script learns
# in about 30 minutes of training on this 2-core machine (120k agent steps = 480k frames).
# Usage: benchmark/scripts/atari.sh SCRIPT [SEED]   (SCRIPT: dqn_atari, c51_atari, rainbow_atari, sac_atari,
# ppo_atari, ppo_atari_lstm, ppo_atari_envpool, r2d2_async, apex_dqn_atari or impala_atari; sac_atari, the PPO scripts and IMPALA run other
# step counts, see their cases below)
# The short budget moves the schedules forward against the 10M-step defaults: training starts
# after 10k steps and ε (where there is one) reaches its final value at 30k steps. Everything
# else is the script's defaults, except that Rainbow copies its target network every 2k steps
# and learns at 1e-4 (as data-efficient Rainbow, van Hasselt et al. 2019) instead of 6.25e-5.
# The learning curve is in the run's TensorBoard events (charts/episodic_return, full-game
# scores); benchmark/scripts/curve.py summarises it.
set -euo pipefail
cd "$(dirname "$0")/../.."
script="${1:?usage: benchmark/scripts/atari.sh dqn_atari|c51_atari|rainbow_atari|sac_atari|ppo_atari|ppo_atari_lstm|ppo_atari_envpool|r2d2_async|apex_dqn_atari|impala_atari [SEED]}"
seed="${2:-1}"
common=(--env-id BreakoutNoFrameskip-v4 --seed "$seed" --total-timesteps 120000
        --learning-starts 10000 --buffer-size 120000)
# PPO has no replay and no warm-up: its defaults (CleanRL's Atari settings: 8 envs x 128 steps,
# learning rate 2.5e-4 annealed to 0 over the run) with 245,760 steps (240 updates), about what
# this machine trains in 30 minutes at one torch thread; EnvPool's id for the same game is
# Breakout-v5 (no sticky actions, the same preprocessing, see ppo_atari_envpool.py)
ppo=(--seed "$seed" --total-timesteps 245760 --torch-threads 1)
case "$script" in
  dqn_atari|c51_atari) extra=(--exploration-fraction 0.25 --target-network-frequency 1000) ;;
  rainbow_atari) extra=(--target-network-frequency 2000 --learning-rate 1e-4) ;;
  # SAC-Discrete makes about 14 network passes per update (DQN: 4): 50k steps, training from
  # 5k, target copies every 2k steps. One torch thread, as the other runs: two threads were
  # 1.6x faster on the idle machine but several times slower than one as soon as anything
  # else used a core (threads waiting on each other)
  sac_atari) extra=(--total-timesteps 50000 --learning-starts 5000 --target-network-frequency 2000
                    --torch-threads 1) ;;
  ppo_atari|ppo_atari_lstm) common=(--env-id BreakoutNoFrameskip-v4 "${ppo[@]}"); extra=() ;;
  ppo_atari_envpool) common=(--env-id Breakout-v5 "${ppo[@]}"); extra=() ;;
  # R2D2: one actor with 8 envs (the learner needs the other core); --buffer-size counts
  # sequences of 80 stacked frames (1000 = 80k steps, 2.3 GB); --replay-ratio 4 learns on each
  # env step 4 times (DQN's 32-transition batch every 4 steps would be 8, but at 8 one learner
  # update of 32 x 80 frames every 5 s held the run at 32 steps/s: 1 hour); the target network
  # is copied every 200 gradient steps (R2D2's 2500 would never copy in this budget)
  r2d2_async) common=(--env-id BreakoutNoFrameskip-v4 --seed "$seed" --total-timesteps 120000
                      --learning-starts 10000 --buffer-size 1000)
              extra=(--num-actors 1 --num-envs 8 --replay-ratio 4 --target-network-frequency 200) ;;
  # Ape-X: its defaults (2 actors x 4 envs on the ε ladder, batch 32 at dqn_atari.py's replay ratio 8, fused
  # Adam, n = 3) with dqn_atari's 120k budget, buffer and warm-up; its target copied every 250 gradient steps,
  # dqn_atari's 1000 env steps at a gradient step every 4
  apex_dqn_atari) extra=(--target-network-frequency 250) ;;
  # IMPALA: its defaults (2 actors x 8 envs in subprocesses, unrolls of 20, batches of 32, RMSProp 6e-4 annealed
  # to 0 over the run) for PPO's 245,760 steps, the equal-steps comparison with ppo_atari.py
  impala_atari) common=(--env-id BreakoutNoFrameskip-v4 --seed "$seed" --total-timesteps 245760); extra=() ;;
  *) echo "unknown script $script" >&2; exit 2 ;;
esac
python "cleanrl/${script}.py" "${common[@]}" "${extra[@]}"

#!/usr/bin/env bash
# Do two checkouts train alike? Short seeded runs of every replay script (n = 1 and 3,
# prioritized) in each tree, then every logged scalar (SPS aside) compared, value for value.
# Issue 30 ran it with the commit before the replay buffers stopped computing returns:
#   git worktree add /tmp/before 5661dff
#   bash benchmark/scripts/same_losses.sh /tmp/before . /tmp/same_losses
# usage: same_losses.sh TREE_A TREE_B OUTDIR   (ONLY="a2c c51" in the environment: those runs alone)
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); OUT=$3
export OMP_NUM_THREADS=1
runs() {  # TREE DIR
    local tree=$1 dir=$2
    run() {
        local name=$1; shift
        [[ -z "${ONLY:-}" || " $ONLY " == *" $name "* ]] || return 0
        mkdir -p "$dir/$name"; (cd "$dir/$name" && PYTHONPATH=$tree python "$tree/cleanrl/$@" > log.txt 2>&1)
    }
    run dqn1 dqn.py --total-timesteps 3000 --learning-starts 500 --train-frequency 2 --num-envs 2
    run dqn3 dqn.py --total-timesteps 3000 --learning-starts 500 --train-frequency 2 --n-step 3 --num-envs 2
    run dqnp dqn.py --total-timesteps 3000 --learning-starts 500 --train-frequency 2 --n-step 3 --prioritized-replay
    run c51 c51.py --total-timesteps 3000 --learning-starts 500 --train-frequency 2 --n-step 3
    run ddpg ddpg_continuous.py --env-id Pendulum-v1 --total-timesteps 800 --learning-starts 300 --batch-size 32
    run td3 td3_continuous.py --env-id Pendulum-v1 --total-timesteps 800 --learning-starts 300 --batch-size 32
    run sac sac_continuous.py --env-id Pendulum-v1 --total-timesteps 800 --learning-starts 300 --batch-size 32
    run dqns dqn_structured.py --total-timesteps 3000 --num-envs 2 --learning-starts 500
    local atari=(--total-timesteps 1200 --learning-starts 400 --buffer-size 2000 --batch-size 8)
    run dqna dqn_atari.py "${atari[@]}" --n-step 3 --train-frequency 4
    run c51a c51_atari.py "${atari[@]}" --n-step 3 --train-frequency 4
    run rainbow rainbow_atari.py "${atari[@]}" --train-frequency 4
    run saca sac_atari.py "${atari[@]}"
    run a2c a2c.py --total-timesteps 4000 --num-envs 4 --log-interval 5 --anneal-lr
    run pqn pqn.py --total-timesteps 4096 --num-envs 2 --num-steps 64
    local ppoc=(--env-id Pendulum-v1 --num-envs 2 --num-steps 64 --num-minibatches 2 --update-epochs 2 --total-timesteps 1920)
    run ppoc ppo_continuous.py "${ppoc[@]}"
    run rpoc rpo_continuous.py "${ppoc[@]}"
    run qrdqn qrdqn.py --total-timesteps 3000 --learning-starts 500 --train-frequency 2 --n-step 3 --double-q --num-envs 2
}
rm -rf "$OUT"; runs "$A" "$OUT/a"; runs "$B" "$OUT/b"
python - "$OUT" <<'PY'
import glob, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

def scalars(side):
    out = {}
    for d in sorted(glob.glob(f"{sys.argv[1]}/{side}/*/runs/*")):
        ea = EventAccumulator(d, size_guidance={"scalars": 0})
        ea.Reload()
        out[d.split("/")[-3]] = {t: [e.value for e in ea.Scalars(t)] for t in ea.Tags()["scalars"] if not t.endswith("SPS")}
    return out

a, b = scalars("a"), scalars("b")
differ = [name for name in a if a[name] != b.get(name)]
for name in a:
    print(f"{name}: {'differ' if name in differ else 'identical'} ({sum(map(len, a[name].values()))} values)")
sys.exit(1 if differ or set(a) != set(b) else 0)
PY

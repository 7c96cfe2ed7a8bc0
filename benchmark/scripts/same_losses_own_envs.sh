#!/usr/bin/env bash
# Do two checkouts train alike? Short seeded runs of the scripts whose envs are a vector env of their own library
# (EnvPool, Procgen, PettingZoo) in each tree, then every logged scalar (SPS aside) compared, value for value
# (NaN equal to NaN).
# Issue 47 ran it with the tree before the runtime rewrite against the ported one:
#   git worktree add /tmp/before d3f1fc6
#   bash benchmark/scripts/same_losses_own_envs.sh /tmp/before . /tmp/same_losses_own_envs [NAME ...]
# usage: same_losses_own_envs.sh TREE_A TREE_B OUTDIR [NAME ...]   (NAME: a run below; all of them by default)
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); OUT=$3; shift 3
ONLY=" $* "
export OMP_NUM_THREADS=1
runs() {  # TREE DIR
    local tree=$1 dir=$2
    run() {
        local name=$1; shift
        [[ "$ONLY" == "  " || "$ONLY" == *" $name "* ]] || return 0
        mkdir -p "$dir/$name"; (cd "$dir/$name" && PYTHONPATH=$tree python "$tree/cleanrl/$@" > log.txt 2>&1)
    }
    run ppoe ppo_atari_envpool.py --num-envs 2 --num-steps 32 --total-timesteps 256 --num-threads 1
    run rnd ppo_rnd_envpool.py --num-envs 4 --num-steps 16 --num-iterations-obs-norm-init 1 --num-threads 1 --total-timesteps 128
    run pqn pqn_atari_envpool.py --num-envs 2 --num-steps 32 --total-timesteps 256 --num-minibatches 2 --num-threads 1
    run pqnl pqn_atari_envpool_lstm.py --num-envs 2 --num-steps 32 --total-timesteps 256 --num-minibatches 2 --num-threads 1
    run ppop ppo_procgen.py --num-envs 2 --num-steps 32 --num-minibatches 2 --total-timesteps 256
    run ppg ppg_procgen.py --num-envs 2 --num-steps 16 --n-iteration 2 --num-minibatches 2 --e-auxiliary 2 \
        --num-aux-rollouts 2 --total-timesteps 128
    run race ppo_pettingzoo.py --env-id cleanrl_utils.envs:MinefieldRace --num-envs 2 --num-steps 32 --total-timesteps 512
    run pong ppo_pettingzoo.py --num-envs 1 --num-steps 16 --num-minibatches 2 --update-epochs 1 --total-timesteps 128
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
        out[d.split("/")[-3]] = {t: [repr(e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"] if not t.endswith("SPS")}
    return out

a, b = scalars("a"), scalars("b")
differ = [name for name in a if a[name] != b.get(name)]
for name in a:
    print(f"{name}: {'differ' if name in differ else 'identical'} ({sum(map(len, a[name].values()))} values)")
sys.exit(1 if differ or not a or set(a) != set(b) else 0)
PY

#!/usr/bin/env bash
# Does ddp_ppo.py train alike in two checkouts? Short seeded runs (one rank with sync and async envs, two ranks
# under torchrun, one rank on Breakout) in each tree, then every logged scalar (SPS aside) compared, value for value.
# Issue 47 ran it with the tree before the runtime rewrite:
#   bash benchmark/scripts/same_scalars_ddp.sh /work/before . /tmp/same_scalars_ddp
# usage: same_scalars_ddp.sh TREE_A TREE_B OUTDIR
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); OUT=$3
export OMP_NUM_THREADS=1
runs() {  # TREE DIR
    local tree=$1 dir=$2
    run() {  # NAME LAUNCHER... -- FLAGS...
        local name=$1; shift; mkdir -p "$dir/$name"
        (cd "$dir/$name" && PYTHONPATH=$tree "$@" > log.txt 2>&1)
    }
    local cartpole=(--env-id CartPole-v1 --num-envs 2 --clip-coef 0.2 --save-model --eval-episodes 2)
    run sync python "$tree/cleanrl/ddp_ppo.py" "${cartpole[@]}" --num-steps 64 --total-timesteps 2048
    run async python "$tree/cleanrl/ddp_ppo.py" "${cartpole[@]}" --num-steps 64 --total-timesteps 2048 --env-mode async
    run ranks2 python -m torch.distributed.run --standalone --nproc-per-node 2 "$tree/cleanrl/ddp_ppo.py" \
        "${cartpole[@]}" --num-steps 32 --total-timesteps 2048 --check-params-every 4
    run breakout python "$tree/cleanrl/ddp_ppo.py" --env-id BreakoutNoFrameskip-v4 --num-envs 2 --num-steps 32 \
        --num-minibatches 2 --update-epochs 1 --total-timesteps 256
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
        out[d.split("/")[-3]] = {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"] if not t.endswith("SPS")}
    return out

a, b = scalars("a"), scalars("b")
differ = [name for name in a if a[name] != b.get(name)]
for name in a:
    print(f"{name}: {'differ' if name in differ else 'identical'} ({sum(map(len, a[name].values()))} values, {len(a[name])} tags)")
sys.exit(1 if differ or set(a) != set(b) or not a else 0)
PY

#!/usr/bin/env bash
# The peer side of benchmark/scripts/procgen_ppo.sh: CleanRL's ppo_procgen.py and ppg_procgen.py, unmodified, in a virtual
# environment with the APIs they were written for.
#
#   bash benchmark/scripts/procgen_peer_venv.sh [VENV] [CLEANRL]
#
# VENV     where to build it (default /tmp/procgen-peer); the scripts go to VENV/cleanrl_peer/ with the CleanRL
#          commit they come from in VENV/cleanrl_peer/COMMIT.
# CLEANRL  a clone (or bare git directory) of vwxyzjn/cleanrl; default $CLEANRL_REPO, else a shallow clone into
#          VENV/cleanrl-src. CLEANRL_REV picks the commit (default the one measured).
#
# Versions: torch 2.13.0 (this repository's); gym 0.23.1, CleanRL's pin: the scripts wrap Procgen's gym3 vector env
# in gym's wrappers with the old 4-tuple step (gym 0.26 expects the 5-tuple); procgen-mirror 0.10.7 (procgen 0.10.7
# built for Python 3.11) with its declared numpy<2.
set -euo pipefail
VENV=${1:-/tmp/procgen-peer}
CLEANRL=${2:-${CLEANRL_REPO:-}}
REV=${CLEANRL_REV:-fe8d8a03c41a7ef5b523e2e354bd01c363e786bb}
PYTHON=${PYTHON:-python3.11}

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet torch==2.13.0
"$VENV/bin/pip" install --quiet procgen-mirror==0.10.7 gym==0.23.1 tyro==1.0.17 tensorboard==2.21.0

if [ -z "$CLEANRL" ]; then
    CLEANRL="$VENV/cleanrl-src"
    [ -d "$CLEANRL" ] || git clone --quiet --filter=blob:none https://github.com/vwxyzjn/cleanrl "$CLEANRL"
fi
mkdir -p "$VENV/cleanrl_peer"
for script in ppo_procgen.py ppg_procgen.py; do
    git --git-dir "$(git -C "$CLEANRL" rev-parse --absolute-git-dir 2>/dev/null || echo "$CLEANRL")" \
        show "$REV:cleanrl/$script" > "$VENV/cleanrl_peer/$script"
done
echo "$REV" > "$VENV/cleanrl_peer/COMMIT"

# one rollout of CleanRL's ppo_procgen.py, tiny
cd "$(mktemp -d)"
OMP_NUM_THREADS=1 "$VENV/bin/python" "$VENV/cleanrl_peer/ppo_procgen.py" --num-envs 8 --num-steps 32 \
    --total-timesteps 256 --no-cuda | tail -1
echo "CleanRL scripts at $REV in $VENV/cleanrl_peer"

#!/usr/bin/env bash
# The peer side of benchmark/scripts/value_breadth.py: CleanRL's pqn.py, pqn_atari_envpool.py and
# pqn_atari_envpool_lstm.py, unmodified, in a virtual environment with the APIs they were written for.
#
#   bash benchmark/scripts/peer_venv.sh [VENV] [CLEANRL]
#
# VENV     where to build it (default /tmp/crl-venv); the three scripts go to VENV/cleanrl_peer/ with
#          the CleanRL commit they come from in VENV/cleanrl_peer/COMMIT.
# CLEANRL  a clone (or bare git directory) of vwxyzjn/cleanrl; default $CLEANRL_REPO, else a shallow
#          clone into VENV/cleanrl-src. CLEANRL_REV picks the commit (default the one checked here).
# PYTHON   the interpreter (default python3.11; CleanRL pins python <3.11, but envpool 0.6.x has no
#          3.11 wheel and this repository runs on 3.11).
#
# Versions: torch 2.13.0 (this repository's); gymnasium 0.29.1 (CleanRL's pin: pqn.py reads
# infos["final_info"], which gymnasium 1.x no longer fills); numpy < 2 (gymnasium 0.29.1 uses
# np.bool8); gym 0.23.1 and envpool 0.8.4 for the Atari scripts, which call envpool with
# env_type="gym" and unpack the old 4-tuple step and the bare reset: envpool 0.8.4 is the oldest
# release with a Python 3.11 wheel (CleanRL pins 0.6.6) and still returns that API with gym 0.23.1;
# envpool 1.2.5 (this repository's) returns the 5-tuple there and the scripts fail.
set -euo pipefail
VENV=${1:-/tmp/crl-venv}
CLEANRL=${2:-${CLEANRL_REPO:-}}
REV=${CLEANRL_REV:-fe8d8a03c41a7ef5b523e2e354bd01c363e786bb}
PYTHON=${PYTHON:-python3.11}

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet torch==2.13.0
"$VENV/bin/pip" install --quiet "numpy<2" gymnasium==0.29.1 gym==0.23.1 envpool==0.8.4 tyro==1.0.17 tensorboard==2.21.0

if [ -z "$CLEANRL" ]; then
    CLEANRL="$VENV/cleanrl-src"
    [ -d "$CLEANRL" ] || git clone --quiet --filter=blob:none https://github.com/vwxyzjn/cleanrl "$CLEANRL"
fi
mkdir -p "$VENV/cleanrl_peer"
for script in pqn.py pqn_atari_envpool.py pqn_atari_envpool_lstm.py; do
    git -C "$CLEANRL" show "$REV:cleanrl/$script" > "$VENV/cleanrl_peer/$script"
done
git -C "$CLEANRL" rev-parse "$REV" > "$VENV/cleanrl_peer/COMMIT"

# what the scripts import, and the Atari API they expect
OMP_NUM_THREADS=1 "$VENV/bin/python" - <<'EOF'
import envpool, gym, gymnasium, numpy, torch, tyro
from torch.utils.tensorboard import SummaryWriter

envs = envpool.make("Breakout-v5", env_type="gym", num_envs=2, episodic_life=True, reward_clip=True, seed=1)
assert envs.reset().shape == (2, 4, 84, 84), "envpool's gym reset should return the bare observation"
assert len(envs.step(numpy.zeros(2, dtype=int))) == 4, "envpool's gym step should return the old 4-tuple"
print(f"peer venv ready: torch {torch.__version__}, gymnasium {gymnasium.__version__}, gym {gym.__version__}, "
      f"envpool {envpool.__version__}, numpy {numpy.__version__}, tyro {tyro.__version__}")
EOF
echo "CleanRL scripts at $(cat "$VENV/cleanrl_peer/COMMIT") in $VENV/cleanrl_peer"

#!/usr/bin/env bash
# The peer side of benchmark/scripts/impala_speed.sh and benchmark/scripts/apex_speed.py: CleanRL's cleanrl/ppo_atari.py and
# cleanrl/dqn_atari.py, unmodified, in a virtual environment with the APIs they were written for, the Atari ROMs
# included (nothing is downloaded when they run).
#
#   bash benchmark/scripts/cleanrl_atari_venv.sh [VENV] [CLEANRL]
#
# VENV     where to build it (default /tmp/crl-atari); ppo_atari.py and dqn_atari.py go to VENV/cleanrl_peer/ with
#          the three files of CleanRL's cleanrl_utils they import (__init__.py; atari_wrappers.py and buffers.py, its
#          own copies of SB3's Atari wrappers and replay buffer, since CleanRL's "Remove SB3 as a necessary module",
#          so no stable-baselines3 here) and the CleanRL commit they come from in VENV/cleanrl_peer/COMMIT. Run one
#          as VENV/bin/python VENV/cleanrl_peer/ppo_atari.py: the script's folder comes first on sys.path, so it
#          imports CleanRL's cleanrl_utils, not ours.
# CLEANRL  a clone (or bare git directory) of vwxyzjn/cleanrl; default $CLEANRL_REPO, else a clone into
#          VENV/cleanrl-src. CLEANRL_REV picks the commit (default the one checked here).
# PYTHON   the interpreter (default python3.11, this repository's; CleanRL pins python <3.11, and every pin below has a
#          3.11 wheel).
#
# Versions: torch 2.13.0 (this repository's; CPU); gymnasium 0.29.1 (CleanRL's pin: the script reads
# infos["final_info"], uses gym.wrappers.GrayScaleObservation/FrameStack and the 0.29 vector API); numpy < 2
# (gymnasium 0.29.1 uses np.bool8); ale-py 0.8.1 with Shimmy 1.3.0, CleanRL's atari pins: under gymnasium 0.29 the
# NoFrameskip-v4 ids come from Shimmy's gymnasium.envs entry point, which wants ale-py 0.8's ROM API; CleanRL's third
# atari pin, AutoROM[accept-rom-license], downloads the ROMs from outside PyPI while it installs, so instead the ROMs
# that the ale-py 0.9.1 wheel ships are imported with ale-py 0.8.1's own `ale-import-roms`. ale-py 0.9.x alone ships
# its ROMs but registers the ids only when `import ale_py` runs (no entry point), which ppo_atari.py never does:
# gym.make("BreakoutNoFrameskip-v4") fails with NameNotFound. tyro 1.0.17 and tensorboard 2.21.0 (this repository's;
# tyro warns that wandb_entity and target_kl default to None, and parses them); opencv-python-headless 4.11.0.86 (the
# last that pip resolves with numpy < 2; gymnasium 0.29's ResizeObservation needs cv2).
set -euo pipefail
VENV=${1:-/tmp/crl-atari}
CLEANRL=${2:-${CLEANRL_REPO:-}}
REV=${CLEANRL_REV:-fe8d8a03c41a7ef5b523e2e354bd01c363e786bb}
PYTHON=${PYTHON:-python3.11}

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet torch==2.13.0
"$VENV/bin/pip" install --quiet "numpy<2" gymnasium==0.29.1 ale-py==0.8.1 shimmy==1.3.0 tyro==1.0.17 \
    tensorboard==2.21.0 opencv-python-headless==4.11.0.86

# the ROMs: from the ale-py 0.9.1 wheel (not installed, only unpacked) into ale-py 0.8.1's ale_py/roms/
roms=$(mktemp -d)
trap 'rm -rf "$roms"' EXIT
"$VENV/bin/pip" download --quiet --no-deps --only-binary=:all: --dest "$roms" ale-py==0.9.1
"$VENV/bin/python" - "$roms" <<'EOF'
import sys, zipfile
from pathlib import Path

folder = Path(sys.argv[1])
with zipfile.ZipFile(next(folder.glob("ale_py-0.9.1-*.whl"))) as wheel:
    wheel.extractall(folder, [n for n in wheel.namelist() if n.startswith("ale_py/roms/") and n.endswith(".bin")])
EOF
"$VENV/bin/ale-import-roms" "$roms/ale_py/roms" | tail -n 1

if [ -z "$CLEANRL" ]; then
    CLEANRL="$VENV/cleanrl-src"
    [ -d "$CLEANRL" ] || git clone --quiet --filter=blob:none https://github.com/vwxyzjn/cleanrl "$CLEANRL"
fi
mkdir -p "$VENV/cleanrl_peer/cleanrl_utils"
for script in ppo_atari.py dqn_atari.py; do
    git -C "$CLEANRL" show "$REV:cleanrl/$script" > "$VENV/cleanrl_peer/$script"
done
for file in __init__.py atari_wrappers.py buffers.py; do
    git -C "$CLEANRL" show "$REV:cleanrl_utils/$file" > "$VENV/cleanrl_peer/cleanrl_utils/$file"
done
git -C "$CLEANRL" rev-parse "$REV" > "$VENV/cleanrl_peer/COMMIT"

# what the script imports, and the Atari env it makes
(cd "$VENV/cleanrl_peer" && OMP_NUM_THREADS=1 "$VENV/bin/python" - <<'EOF'
import ale_py, cv2, gymnasium as gym, numpy, shimmy, torch, tyro
from torch.utils.tensorboard import SummaryWriter
from cleanrl_utils.atari_wrappers import ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv, NoopResetEnv
from cleanrl_utils.buffers import ReplayBuffer

env = gym.make("BreakoutNoFrameskip-v4")
assert env.spec.entry_point == "shimmy.atari_env:AtariEnv", env.spec.entry_point
assert env.reset(seed=1)[0].shape == (210, 160, 3)
assert env.unwrapped.get_action_meanings() == ["NOOP", "FIRE", "RIGHT", "LEFT"]
env.close()
print(f"peer venv ready: torch {torch.__version__}, gymnasium {gym.__version__}, ale-py {ale_py.__version__}, "
      f"shimmy {shimmy.__version__}, numpy {numpy.__version__}, opencv {cv2.__version__}, tyro {tyro.__version__}")
EOF
)
echo "CleanRL's ppo_atari.py and dqn_atari.py at $(cat "$VENV/cleanrl_peer/COMMIT") in $VENV/cleanrl_peer"

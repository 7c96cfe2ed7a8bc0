"""Process helpers of the tests of the asynchronous scripts (r2d2_async.py, apex_dqn_atari.py, impala_atari.py): start
a script in its own process group, find its descendants, and the shared-memory files live processes map."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from cleanrl_utils.files import checkpoints
from tests.conftest import ROOT, run_dir


def descendants(pid: int) -> set[int]:
    """PIDs of all processes below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start(script: str, flags: list[str], cwd: Path) -> subprocess.Popen:
    """Run ``cleanrl/<script>`` with ``flags`` in a new session (its own process group), SIGINT at its default."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    # SIGINT as in a terminal's foreground job: a job started in the background by a non-interactive
    # shell (as CI may run pytest) inherits SIGINT ignored, and Python then installs no handler for it
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cleanrl" / script), *flags],
        cwd=cwd,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_training(process: subprocess.Popen, cwd: Path, processes: int) -> set[int]:
    """Wait until the run directory exists and ``processes`` descendants run; return them."""
    for _ in range(1200):
        assert process.poll() is None, process.communicate()
        found = descendants(process.pid)
        if list(cwd.glob("runs/*/events*")) and len(found) >= processes:
            time.sleep(2.0)  # the actors are stepping, the learner updating
            return descendants(process.pid)
        time.sleep(0.1)
    raise AssertionError("the run did not start")


def stops_within(script: str, flags: list[str], cwd, seconds: float) -> tuple[subprocess.Popen, str, str, set[int]]:
    """Run ``script`` in its own session until it ends, within ``seconds`` (else kill its session and fail); return it,
    its output and every process seen below it."""
    process, seen, deadline = start(script, flags, cwd), set(), time.monotonic() + seconds
    while process.poll() is None:
        seen |= descendants(process.pid)
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            for pid in seen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"{script} did not stop within {seconds} s: {process.communicate()}")
        time.sleep(0.05)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # processes below it, orphans now, still hold its output
        for pid in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"{script} ended, but processes below it were left running: {process.communicate()}") from None
    return process, out, err, seen


def shm_in_use() -> set[str]:
    """Names of /dev/shm files that a live process maps (semaphores, shared arrays)."""
    names = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        names.update(line.split("/dev/shm/", 1)[1].split()[0] for line in text.splitlines() if "/dev/shm/" in line)
    return names


def assert_gone(pids: set[int], shm_before: set[str]) -> None:
    """The processes ``pids`` end within 10 s, and every /dev/shm file made since ``shm_before`` (multiprocessing's
    semaphores, torch's shared tensors) is removed within 10 s, but for those another live process maps."""
    for _ in range(100):
        if not any(alive(pid) for pid in pids):
            break
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]

    def left() -> set[str]:  # a name another live process maps is not ours
        new = {name for name in set(os.listdir("/dev/shm")) - shm_before if name.startswith(("sem.mp", "torch_", "psm_"))}
        return new - shm_in_use()

    for _ in range(50):  # with two test processes, another test's semaphores may await its resource tracker a moment
        if not left():
            break
        time.sleep(0.2)
    assert not left(), left()


def ctrl_c_leaves_nothing(script: str, flags: list[str], cwd: Path, processes: int) -> None:
    """Start ``script``, wait for ``processes`` descendants (its actors ...) to run, send SIGINT to its process group
    (Ctrl-C in a terminal), and check that it wrote its checkpoint, exited 130 without a traceback, and left no
    process and no shared-memory file behind (:func:`assert_gone`)."""
    shm_before = set(os.listdir("/dev/shm"))
    process = start(script, flags, cwd)
    pids = wait_for_training(process, cwd, processes)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert "SIGINT: checkpoint written" in out
    assert_gone(pids, shm_before)


def sigterm_after_a_checkpoint(script: str, flags: list[str], cwd: Path) -> tuple[Path, dict]:
    """Start ``script``, send SIGTERM to its main process (as a scheduler would) once a checkpoint exists, check that
    it wrote its checkpoint and exited 143, and return the run directory and its newest checkpoint (loaded)."""
    process = start(script, flags, cwd)
    while not list(cwd.glob("runs/*/checkpoints/step_*.pt")):  # training is under way
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "SIGTERM: checkpoint written" in out
    run = run_dir(cwd)
    return run, torch.load(checkpoints(run)[-1], weights_only=True)


def an_actor_killed_in_the_lock_stops_the_run(script: str, flags: list[str], actor: str, tmp_path: Path) -> None:
    """``script`` (an asynchronous script whose actors share a replay) with ``flags`` on
    ``tests.envs:ActorDiesHoldingReplayLock-v0``, one actor SIGKILLed inside the replay's lock: the run ends within
    120 s with one line naming the dead actor (``{actor}-0`` or ``-1``), exit 1, no process or shared memory left."""
    shm_before = set(os.listdir("/dev/shm"))
    flags = [*flags, "--debug-learner-sleep", "0.02"]  # a learner behind its actors: it always has a batch to sample
    process, _, err, seen = stops_within(script, [*flags, "--total-timesteps", "100000"], tmp_path, 120)
    assert process.returncode == 1 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"{script}: ") and line.endswith("; last checkpoint: none"), err
    dead = rf"\({actor}-[01]\) died while it held the replay buffer's lock|actor [01] died \(killed by SIGKILL"
    assert re.search(dead, line), line
    assert_gone(seen, shm_before)

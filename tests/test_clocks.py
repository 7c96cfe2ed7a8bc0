"""Intervals and deadlines use a monotonic clock (issue 48, item 4): a wall clock set back (NTP, an admin) silences no
metric and stretches no deadline.

The async scripts' one-second logging throttles and ``stop_actors``' deadline read ``time.time()``; after the clock
stepped back an hour no loss, SPS or update metric was logged for an hour, and stopping the actors could wait an hour.
A source check keeps ``time.time()`` to wall-clock stamps (``int(time.time())``, the run name's) across the project;
behavioural checks set the clock back in the process and see the deadline and the metrics unmoved.
"""

from __future__ import annotations

import ast
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

from cleanrl_utils import actors
from tests.conftest import ROOT, run_dir, run_script, scalars

WALL_CLOCKS = {("time", "time"), ("time", "time_ns"), ("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today")}


def wall_clock_reads(source: str) -> list[tuple[int, str, bool]]:
    """``(line, call, is_stamp)`` for each read of a wall clock in ``source``: ``time.time()``, ``time.time_ns()``,
    ``datetime.now()`` and kin, or ``time()`` imported from ``time``. A stamp is a read made whole at once by
    ``int(...)`` (a name or a file's tag), never a difference."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
        if alias.name in ("time", "time_ns")
    }
    stamps = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and node.args
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = func.value.attr if isinstance(func.value, ast.Attribute) else getattr(func.value, "id", None)
            name = f"{owner}.{func.attr}" if (owner, func.attr) in WALL_CLOCKS else None
        else:
            name = f"{func.id}" if isinstance(func, ast.Name) and func.id in imported else None
        if name:
            found.append((node.lineno, name, id(node) in stamps))
    return sorted(found)


def test_the_source_check_finds_a_wall_clock_interval_and_allows_a_stamp():
    source = "import time\nfrom time import time as now\nstart = time.time()\nname = f'{int(time.time())}'\nx = now()\n"
    assert wall_clock_reads(source) == [(3, "time.time", False), (4, "time.time", True), (5, "now", False)]
    assert wall_clock_reads("import datetime\nt = datetime.datetime.now()\n") == [(2, "datetime.now", False)]


def test_no_interval_or_deadline_in_the_project_reads_the_wall_clock():
    """Every script, every module of cleanrl_utils and every benchmark script: a wall clock is read only as a stamp."""
    files = [path for folder in ("cleanrl", "cleanrl_utils", "benchmark") for path in sorted((ROOT / folder).rglob("*.py"))]
    assert len(files) > 60
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {call}()"
        for path in files
        for line, call, stamp in wall_clock_reads(path.read_text())
        if not stamp
    ]
    assert not offending, "a wall clock measures an interval (use time.monotonic()): " + ", ".join(offending)


class _Process:
    """An actor process for ``stop_actors``: records the timeout of each ``join``; already ended."""

    def __init__(self):
        self.pid, self.timeouts = 1, []

    def join(self, timeout=None):
        self.timeouts.append(timeout)

    def is_alive(self):
        return False


def test_stop_actors_waits_no_longer_after_the_wall_clock_is_set_back(monkeypatch):
    """Each read of the wall clock an hour before the last: the actors are still given at most the timeout."""
    wall = iter(range(10**9, 0, -3600))
    monkeypatch.setattr(time, "time", lambda: float(next(wall)))
    processes = [_Process(), _Process()]
    shared = SimpleNamespace(stop=np.zeros(1, dtype=np.int64))
    actors.stop_actors(processes, shared, timeout=10.0)
    assert shared.stop[0] == 1
    timeouts = [timeout for process in processes for timeout in process.timeouts]
    assert len(timeouts) == 2 and all(0.0 <= timeout <= 10.0 for timeout in timeouts), timeouts


# A sitecustomize that sets the wall clock back an hour at each read, from the interpreter's start: no interval that
# the wall clock measures ever reaches a second.
SET_BACK = """
import time
_real, _reads = time.time, [0]


def _set_back():
    _reads[0] += 1
    return _real() - 3600.0 * _reads[0]


time.time = _set_back
"""

# the actors step SlowCounter-v0 (2 ms a step): 1,500 steps last at least 3 s of the learner's loop
SMALL = ["--env-id", "tests.envs:SlowCounter-v0", "--env-mode", "sync", "--num-actors", "1", "--num-envs", "2"]
SMALL += ["--seed", "1", "--total-timesteps", "1500"]
CASES = {
    "apex_dqn_atari.py": (
        [*SMALL, "--hidden-size", "16", "--batch-size", "8", "--buffer-size", "1000", "--learning-starts", "100"]
        + ["--replay-ratio", "1"],
        "losses/td_loss",
    ),
    "r2d2_async.py": (
        [*SMALL, "--batch-size", "4", "--buffer-size", "500", "--learning-starts", "200", "--replay-ratio", "1"]
        + ["--lstm-size", "16", "--hidden-size", "16", "--burn-in", "2", "--learn-length", "4"],
        "losses/td_loss",
    ),
    "impala_atari.py": ([*SMALL, "--unroll-length", "8", "--batch-size", "2"], "losses/policy_loss"),
}


@pytest.mark.parametrize("script", sorted(CASES))
def test_an_async_learner_logs_its_metrics_while_the_wall_clock_goes_back(script, tmp_path):
    """The learner's one-second logging throttle: with every read of the wall clock an hour before the last, the
    losses and SPS are still logged once a second (a throttle on ``time.time()`` logged none)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SET_BACK)
    flags, tag = CASES[script]
    env = {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    run_script(script, *flags, cwd=tmp_path, env=env, timeout=300)
    logged = scalars(run_dir(tmp_path))
    assert logged.get(tag) and logged.get("charts/SPS"), sorted(logged)

"""Helpers shared by the tests: run a script in a subprocess and read its TensorBoard events."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_script(script: str, *flags: str, cwd: Path, timeout: float = 600, env: dict | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python cleanrl/<script> <flags>`` with ``cwd`` as working directory (runs/ goes there)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    environ.pop("WANDB_API_KEY", None)
    result = subprocess.run([sys.executable, str(ROOT / "cleanrl" / script), *flags], cwd=cwd, env=environ,
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{script} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def run_dir(cwd: Path) -> Path:
    """The only run directory under ``cwd/runs``."""
    dirs = list((cwd / "runs").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


def scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of the TensorBoard events in ``directory``: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def assert_stops_with_one_line(script: str, flags: list[str], flag: str, message: str, cwd: Path) -> None:
    """Bad input: ``script`` exits 2 with one stderr line ``error: <flag>: ...`` containing
    ``message``, no traceback, and no run directory (it stopped before any work)."""
    result = run_script(script, *flags, cwd=cwd, check=False, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], result.stderr
    assert not (cwd / "runs").exists()


def returns_by_env_mode(script: str, *flags: str, cwd: Path) -> dict[str, list[float]]:
    """Run ``script`` with ``flags`` once with ``--env-mode sync`` and once with ``async`` (each in
    its own folder under ``cwd``); the episodic returns of each: ``{"sync": [...], "async": [...]}``."""
    returns = {}
    for mode in ("sync", "async"):
        (cwd / mode).mkdir()
        run_script(script, *flags, "--env-mode", mode, cwd=cwd / mode)
        returns[mode] = episodic_returns(run_dir(cwd / mode))
    return returns


def episodic_returns(directory: Path) -> list[float]:
    return [value for _, value in scalars(directory).get("charts/episodic_return", [])]


@pytest.fixture
def tmp_cwd(tmp_path: Path) -> Path:
    return tmp_path

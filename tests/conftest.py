"""Helpers shared by the tests: run a script in a subprocess and read its TensorBoard events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The learning tests (minutes each) first, so that with two test processes (pyproject.toml's ``-n 2``) the
    suite does not end waiting on one long test started last. The ``long`` mark is set in each test file."""
    items.sort(key=lambda item: item.get_closest_marker("learning") is None)


def run_script(
    script: str, *flags: str, cwd: Path, timeout: float = 600, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run ``python cleanrl/<script> <flags>`` with ``cwd`` as working directory (runs/ goes there)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    environ.pop("WANDB_API_KEY", None)
    result = subprocess.run(
        [sys.executable, str(ROOT / "cleanrl" / script), *flags],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{script} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def enjoy(*flags: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run the evaluation tool, ``python -m cleanrl_utils.enjoy <flags>``, in ``cwd`` (exit 0 checked with ``check``)."""
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.enjoy", *flags],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if check:
        assert result.returncode == 0, result.stderr
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


SUBPROCESS_ONLY = {"ddp_ppo.py", "r2d2_async.py"}
"""Scripts whose bad-input tests run in a subprocess: they set up process groups or processes."""


def override(base: list[str], flags: list[str]) -> list[str]:
    """``base`` then ``flags``, with each flag that ``flags`` gives again (and its value) left out of ``base``: a
    flag given twice is used but said on stderr, which a one-line check would count."""
    given = {flag for flag in flags if flag.startswith("--")}
    kept, index = [], 0
    while index < len(base):
        if base[index] in given:
            index += 2 if index + 1 < len(base) and not base[index + 1].startswith("--") else 1
            continue
        kept.append(base[index])
        index += 1
    return kept + flags


def assert_stops_with_one_line(script: str, flags: list[str], flag: str, message: str, cwd: Path) -> None:
    """Bad input: ``script`` exits 2 with one stderr line ``error: <flag>: ...`` containing
    ``message``, no traceback, and no run directory (it stopped before any work).

    Runs the script as ``__main__`` in this process (its checks end it before any work, and
    importing torch once is much faster than once per case), or in a subprocess for the
    scripts of :data:`SUBPROCESS_ONLY`. ``script`` is a file of ``cleanrl/`` or a path.
    """
    if Path(script).name in SUBPROCESS_ONLY:
        result = run_script(script, *flags, cwd=cwd, check=False, timeout=120)
        code, stderr = result.returncode, result.stderr
    else:
        code, stderr = _run_in_process_until_exit(str(ROOT / "cleanrl" / script), flags, cwd)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], stderr
    assert not (cwd / "runs").exists()


def _run_in_process_until_exit(path: str, flags: list[str], cwd: Path) -> tuple[int | None, str]:
    """Run the script at ``path`` as ``__main__`` in this process, in ``cwd``, until it exits: (status, stderr)."""
    import contextlib
    import io
    import runpy

    stderr, previous = io.StringIO(), (os.getcwd(), sys.argv)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    os.chdir(cwd)
    sys.argv = [path, *flags]
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exit:
        return exit.code, stderr.getvalue()
    finally:
        os.chdir(previous[0])
        sys.argv = previous[1]
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return 0, stderr.getvalue()


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


def start_script(script: str, *flags: str, cwd: Path, session: bool = False) -> subprocess.Popen:
    """Start ``python cleanrl/<script> <flags>`` (or the script file ``script``) in ``cwd``, its output piped, as a
    terminal's foreground job: SIGINT and SIGHUP handled (a background job of a non-interactive shell inherits SIGINT
    ignored; a job under nohup, SIGHUP). ``session``: in a session (and process group) of its own."""
    path = Path(script) if Path(script).is_file() else ROOT / "cleanrl" / script
    return subprocess.Popen(
        [sys.executable, str(path), *flags],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=session,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGHUP)],
    )


def wait_until_idle(process: subprocess.Popen, seconds: float = 3.0, timeout: float = 300.0) -> None:
    """Wait until ``process`` has used no CPU time for ``seconds`` (it waits for something that never comes: a hung
    env), failing if it exits or ``timeout`` seconds pass first."""

    def cpu_ticks() -> int:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    deadline, last, still = time.monotonic() + timeout, -1, 0.0
    while still < seconds:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the process never went idle"
        ticks = cpu_ticks()
        still = still + 0.5 if ticks == last else 0.0
        last = ticks
        time.sleep(0.5)


def ctrl_c_twice(process: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C, which a run waiting on a hung env cannot act on (it is still running 2 s later), then Ctrl-C again:
    ``(stdout, stderr)`` once it has exited."""
    process.send_signal(signal.SIGINT)
    time.sleep(2.0)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


def assert_session_ends(session: int, timeout: float = 20.0) -> None:
    """Every process of ``session`` (env workers, forkserver, resource tracker) ends within ``timeout`` s
    (zombies waiting to be reaped do not count)."""
    deadline = time.monotonic() + timeout
    while True:
        listing = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(session)], capture_output=True, text=True)
        alive = [line for line in listing.stdout.splitlines() if not line.split()[1].startswith("Z")]
        if not alive:
            return
        assert time.monotonic() < deadline, f"processes left in the run's session: {alive}"
        time.sleep(0.2)


def sigterm_then_resume(
    script: str,
    flags: list[str],
    interval: int,
    total: int,
    cwd: Path,
    model_key: str | None = None,
    signum: int = signal.SIGTERM,
    group: bool = False,
) -> tuple[dict, dict]:
    """Run ``script`` uninterrupted, and again with ``--checkpoint-interval interval`` stopped by
    ``signum`` (to its whole process group with ``group``, as Slurm, ``timeout`` and a terminal's
    Ctrl-C send it) once its first checkpoint exists, then resumed with ``--resume RUN_DIR``.

    Checks that the interrupted run exits with 128 + ``signum`` after writing a checkpoint past
    ``interval`` and before ``total`` steps, without a traceback and with no process of its group
    left, and that the resumed run continues the same run directory.
    ``flags`` must include ``--save-model``. Returns ``(whole, resumed)``: for each run,
    ``{"model": the saved model's network ``model_key`` (a state dict; the first network of the
    file when None), "curves": its scalars without charts/SPS}``, for the caller to compare
    (exactly, or as far as the script can).
    """
    from cleanrl_utils.files import checkpoint_step, checkpoints

    def result(directory: Path) -> dict:
        import torch

        saved = torch.load(next(directory.glob("*.cleanrl_model")), weights_only=True)
        curves = {tag: values for tag, values in scalars(directory).items() if tag != "charts/SPS"}
        return {"model": saved[model_key or next(iter(saved["modules"]))], "curves": curves}

    (cwd / "whole").mkdir()
    run_script(script, *flags, cwd=cwd / "whole")
    whole = run_dir(cwd / "whole")

    (cwd / "cut").mkdir()
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cleanrl" / script), *flags, "--checkpoint-interval", str(interval)],
        cwd=cwd / "cut",
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
        # a terminal's foreground job: SIGINT and SIGHUP handled (a background job of a non-interactive shell
        # inherits SIGINT ignored; a job under nohup, SIGHUP)
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGHUP)],
    )
    while not list((cwd / "cut").glob("runs/*/checkpoints/step_*.pt")):  # training is under way
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signum and "Traceback" not in err, err
    if group:
        assert_session_ends(process.pid)
    cut = run_dir(cwd / "cut")
    step = checkpoint_step(checkpoints(cut)[-1])
    name = signal.Signals(signum).name
    assert interval <= step < total and f"{name}: checkpoint written" in out, (step, out)
    assert f"resume with: python {ROOT / 'cleanrl' / script} --resume runs/" in out, out
    assert not list(cut.glob("*.cleanrl_model"))  # it stopped before the end

    env_id = flags[flags.index("--env-id") + 1 :][:1] if "--env-id" in flags else []  # "tests.envs:..." is named again
    resumed = run_script(script, "--resume", str(cut), *(["--env-id", *env_id] if env_id else []), cwd=cwd / "cut")
    assert f"resumed at step {step}" in resumed.stdout
    assert run_dir(cwd / "cut") == cut  # the same run directory continues
    return result(whole), result(cut)


def resume_without_the_buffer(
    script: str, flags: list[str], total: int, loss_tag: str, cwd, model_key: str = "q_network"
) -> None:
    """An off-policy script resumed from a checkpoint without its replay buffer refills the buffer
    for --learning-starts steps, with the trained networks, before it updates them again.

    Runs ``script`` for ``total`` steps with --learning-starts total/4 and checkpoints at total/2
    and total, then resumes the one at total/2 with checkpoints every total/4: the checkpoint at
    3 total/4, the end of the refill, must hold the resumed parameters exactly (kept, and not
    updated while refilling), the one at the end other ones (updated again), and the loss curve
    ``loss_tag`` has no point during the refill. ``model_key``: the network compared, an entry of
    the checkpoint's state.
    """
    import torch

    half, quarter = total // 2, total // 4
    run_script(
        script,
        *flags,
        "--total-timesteps",
        str(total),
        "--learning-starts",
        str(quarter),
        "--checkpoint-interval",
        str(half),
        cwd=cwd,
    )
    run = run_dir(cwd)
    resumed_from = torch.load(run / "checkpoints" / f"step_{half}.pt", weights_only=True)["state"]
    assert "replay_buffer" not in resumed_from
    result = run_script(
        script, "--resume", str(run / "checkpoints" / f"step_{half}.pt"), "--checkpoint-interval", str(quarter), cwd=cwd
    )
    assert f"resumed at step {half}" in result.stdout
    assert f"refilling it until step {half + quarter} before updating" in result.stdout
    assert run_dir(cwd) == run
    refilled = torch.load(run / "checkpoints" / f"step_{half + quarter}.pt", weights_only=True)["state"][model_key]
    final = torch.load(run / "checkpoints" / f"step_{total}.pt", weights_only=True)["state"][model_key]
    for name, tensor in resumed_from[model_key].items():  # kept, not re-initialised; no update while refilling
        assert torch.equal(refilled[name], tensor), name
    assert any(not torch.equal(final[name], refilled[name]) for name in final)  # the updates resumed
    curves = scalars(run)
    assert not [step for step, _ in curves[loss_tag] if half < step <= half + quarter]
    assert any(step > half for step, _ in curves["charts/episodic_return"])  # the episodes went on


def run_in_process(script: str, monkeypatch, cwd: Path, *flags: str) -> dict:
    """Run ``cleanrl/<script>`` as ``__main__`` in this process; return its global variables.

    The SIGTERM and SIGINT handlers the script installs are removed afterwards, so that pytest
    still ends on SIGTERM and Ctrl-C."""
    import runpy

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", [script, *flags])
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return runpy.run_path(str(ROOT / "cleanrl" / script), run_name="__main__")
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def assert_buffered_resume_is_exact(script: str, flags: list[str], loss_tag: str, cwd: Path) -> None:
    """``sigterm_then_resume`` of an off-policy script with ``--checkpoint-buffer`` (checkpoint at
    a quarter of ``--total-timesteps``): the saved model and the curves equal the uninterrupted
    run's, and ``loss_tag`` has updates after half the run."""
    import torch

    total = int(flags[flags.index("--total-timesteps") + 1])
    whole, resumed = sigterm_then_resume(
        script, [*flags, "--checkpoint-buffer", "--save-model", "--eval-episodes", "1"], total // 4, total, cwd
    )
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert resumed["curves"] == whole["curves"]  # TensorBoard curves continue without a fold or a repeat
    assert any(step > total // 2 for step, _ in resumed["curves"][loss_tag])  # updates after the cut

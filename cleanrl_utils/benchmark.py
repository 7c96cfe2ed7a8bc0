"""Benchmark launcher: run one command over every environment x seed, on this machine or on Slurm.

Local mode runs the grid at most ``--workers`` runs at a time. The available cores
(``os.sched_getaffinity(0)``) are split into ``--workers`` disjoint sets; each run is pinned to
one set (``os.sched_setaffinity`` in the child before it starts) and gets ``OMP_NUM_THREADS`` /
``MKL_NUM_THREADS`` equal to the set's size (and ``--torch-threads K`` with
``--torch-threads-flag``). Each run's stdout and stderr go to
``{log_dir}/{env_id}__seed{seed}.log``. A line is printed as each run finishes
(``[3/6] ok CartPole-v1 seed 2 (41 s)``), and at the end every failed run is listed with its
exit status and the last lines of its log; the exit status is 1 if any run failed. Ctrl-C (or
SIGTERM) stops every running run's process group and exits with status 130.
``{log_dir}/summary.json`` records each run's command, log, outcome, duration and run directory
(``run_dir``: the absolute path of the ``run directory: ...`` line the run printed, null if
none), so that ``python -m cleanrl_utils.plot --summary`` can plot exactly this grid.

Slurm mode (``--slurm``) writes the same grid as one sbatch array job, array index i running
the i-th (env, seed) command of the grid, and submits it with ``sbatch`` when that is on PATH
(``--slurm-dry-run`` only writes it). A failed array task writes the tail of its log to the
task's Slurm output and exits with the run's status.

Run:
    python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 \\
        --command "python cleanrl/ppo.py" --num-seeds 3 --workers 2 -- --total-timesteps 50000

Bad input (no env ids, ``--num-seeds`` < 1, a script file that does not exist, more workers
than cores, a control character such as a newline in any value that reaches a file name or the
sbatch script, ...) stops before any run starts with one line ``error: <flag>: <message>`` on
stderr, exit status 2.

The log folder is data, not a path map: folders below ``runs/`` are made with
:func:`cleanrl_utils.cli.make_folder`, each log is a new file (never opened through a link or
over an existing file), and ``summary.json`` and the sbatch script are written whole through a
new file renamed over the old one; a link, folder or FIFO at one of those names stops the
launcher before any run starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Sequence

from cleanrl_utils.cli import (
    OneLineParser,
    check_name,
    check_text,
    fail,
    log_tail,
    make_folder,
    printed_run_dir,
    refuse_non_regular,
    safe_name,
)
from cleanrl_utils.writes import create_new, write_atomic

INTERRUPTED = 130
"""Exit status after Ctrl-C or SIGTERM (128 + SIGINT, as a shell reports it)."""
TAIL_LINES = 20
"""Lines of a failed run's log shown at the end."""


# ---------------------------------------------------------------------------------------------
# The grid: pure functions


@dataclasses.dataclass(frozen=True)
class Job:
    """One run of the grid.

    Attributes:
        index: position in the grid, 0-based (the Slurm array index).
        env_id: the environment id passed as ``--env-id``.
        seed: the seed passed as ``--seed``.
        argv: the full command, ``[*command, "--env-id", env_id, "--seed", str(seed), *extra]``.
        log_name: file name of its log, ``{safe env id}__seed{seed}.log``.
    """

    index: int
    env_id: str
    seed: int
    argv: tuple[str, ...]
    log_name: str


def make_jobs(command: Sequence[str], env_ids: Sequence[str], seeds: Sequence[int], extra: Sequence[str] = ()) -> list[Job]:
    """The grid of runs, seed-major: every env with the first seed, then every env with the next.

    Seed-major order means a partial grid (interrupted, or still running) already covers
    every environment.

    Args:
        command: the command as argv, e.g. ``["python", "cleanrl/ppo.py"]``.
        env_ids: environment ids, each passed as ``--env-id``.
        seeds: seeds, each passed as ``--seed``.
        extra: arguments appended after ``--env-id ... --seed ...`` in every run.

    Returns:
        ``len(seeds) * len(env_ids)`` jobs; job ``i`` has env ``env_ids[i % len(env_ids)]`` and
        seed ``seeds[i // len(env_ids)]``.
    """
    jobs = []
    for seed in seeds:
        for env_id in env_ids:
            argv = (*command, "--env-id", env_id, "--seed", str(seed), *extra)
            jobs.append(Job(len(jobs), env_id, seed, argv, f"{safe_name(env_id)}__seed{seed}.log"))
    return jobs


def partition_cores(cores: Sequence[int], workers: int) -> list[list[int]]:
    """Split ``cores`` into ``workers`` disjoint sets of consecutive cores, sizes differing by at most 1.

    ``partition_cores([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]``. Cores left over by an
    uneven split go to the first sets.

    Raises:
        ValueError: ``workers`` < 1 or more workers than cores.
    """
    cores = sorted(cores)
    if workers < 1:
        raise ValueError(f"workers must be positive, got {workers}")
    if workers > len(cores):
        raise ValueError(f"{workers} workers but only {len(cores)} cores")
    size, larger = divmod(len(cores), workers)
    sets, start = [], 0
    for worker in range(workers):
        end = start + size + (1 if worker < larger else 0)
        sets.append(cores[start:end])
        start = end
    return sets


def script_of(command: Sequence[str]) -> str | None:
    """The script file a command runs, if it names one: ``python -u cleanrl/ppo.py`` -> ``cleanrl/ppo.py``.

    For a python interpreter (``python``, ``python3.11``, a path ending in one) this is its first
    argument that is not an option; ``None`` for ``python -m module`` and ``python -c code``. For
    any other program, the program itself if it is a path (``./train.sh``), else ``None``.
    """
    program = command[0]
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(program)):
        return program if os.sep in program or program.endswith(".py") else None
    rest = iter(command[1:])
    for token in rest:
        if token in ("-m", "-c"):
            return None
        if token in ("-X", "-W", "-Q"):  # options that take a value
            next(rest, None)
        elif not token.startswith("-"):
            return token
    return None


def format_seconds(seconds: float) -> str:
    """``41 s``, ``3 min 05 s``, ``2 h 03 min``."""
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def plural(count: int, noun: str) -> str:
    """``1 env``, ``2 envs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def describe_status(returncode: int) -> str:
    """``exit 3`` for an exit status, ``killed by SIGKILL`` for a negative one (a signal)."""
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


# ---------------------------------------------------------------------------------------------
# Local mode


@dataclasses.dataclass
class Outcome:
    """What became of one job: ``status`` is ``ok``, ``failed``, ``interrupted`` or ``not started``."""

    job: Job
    log: Path
    status: str = "not started"
    returncode: int | None = None
    seconds: float | None = None
    cores: list[int] | None = None
    argv: list[str] | None = None
    """the command as run (the job's, plus ``--torch-threads K`` with ``--torch-threads-flag``)"""


def _child_setup(cores: list[int] | None):
    """preexec_fn for a run: pin it to ``cores`` (the child is also put in its own session)."""

    def setup() -> None:
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return setup


def run_local(
    jobs: Sequence[Job],
    core_sets: Sequence[list[int]],
    log_dir: Path,
    torch_threads_flag: bool,
    pin: bool = True,
    out=None,
    err=None,
    poll: float = 0.2,
) -> int:
    """Run ``jobs``, one per core set at a time, and report as described in the module docstring.

    Args:
        jobs: the grid, from :func:`make_jobs`.
        core_sets: one set of cores per worker, from :func:`partition_cores`.
        log_dir: folder for the runs' logs and ``summary.json`` (must exist).
        torch_threads_flag: append ``--torch-threads K`` (K = the set's size) to each command.
        pin: pin each run to its core set (False where ``os.sched_setaffinity`` is missing).
        out, err: streams for progress lines and for the failure report (stdout, stderr).
        poll: seconds between checks of the running children.

    Returns:
        The exit status for the launcher: 0 if every run succeeded, 1 if any failed, 130 if
        interrupted (every running run's process group is then terminated, killed after 5 s).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    outcomes = [Outcome(job, log_dir / job.log_name) for job in jobs]
    pending = deque(outcomes)
    free = deque(range(len(core_sets)))
    running: dict[int, tuple[subprocess.Popen, Outcome, float, int]] = {}  # pid -> (process, outcome, start, slot)
    finished = 0
    start_all = time.monotonic()

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt

    def not_started(outcome: Outcome, slot: int, why: str) -> None:
        """A run that could not start (exit status 127): counted as finished and failed, its slot freed."""
        nonlocal finished
        outcome.status, outcome.returncode, outcome.seconds = "failed", 127, 0.0
        finished += 1
        free.appendleft(slot)
        print(f"[{finished}/{len(jobs)}] FAILED ({why}) {outcome.job.env_id} seed {outcome.job.seed}", file=out, flush=True)

    previous_handlers = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_sigterm),
        # Ctrl-C even where SIGINT was ignored when the launcher started (`cmd &` in a script)
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    try:
        while pending or running:
            while pending and free:
                outcome, slot = pending.popleft(), free.popleft()
                cores = list(core_sets[slot])
                threads = str(len(cores))
                argv = list(outcome.job.argv) + (["--torch-threads", threads] if torch_threads_flag else [])
                env = {
                    **os.environ,
                    "OMP_NUM_THREADS": threads,
                    "MKL_NUM_THREADS": threads,
                    "OPENBLAS_NUM_THREADS": threads,
                    "PYTHONUNBUFFERED": "1",
                }
                try:  # a new file: never a link or a file planted at the log's name since the start
                    log = create_new(outcome.log, "w")
                except OSError as error:
                    not_started(outcome, slot, f"cannot write its log: {error}")
                    continue
                with log:
                    log.write(
                        f"# benchmark launcher: {shlex.join(argv)}\n"
                        f"# cores {cores if pin else 'not pinned'}, OMP_NUM_THREADS={threads}\n"
                    )
                    log.flush()
                    try:
                        process = subprocess.Popen(
                            argv,
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=env,
                            start_new_session=True,
                            preexec_fn=_child_setup(cores if pin else None),
                        )
                    except OSError as error:  # e.g. the program vanished after the checks
                        log.write(f"cannot start: {error}\n")
                        not_started(outcome, slot, f"cannot start: {error}")
                        continue
                outcome.cores, outcome.argv = cores, argv
                running[process.pid] = (process, outcome, time.monotonic(), slot)
            for pid, (process, outcome, started, slot) in list(running.items()):
                returncode = process.poll()
                if returncode is None:
                    continue
                del running[pid]
                free.append(slot)
                finished += 1
                outcome.returncode, outcome.seconds = returncode, time.monotonic() - started
                outcome.status = "ok" if returncode == 0 else "failed"
                verdict = "ok" if returncode == 0 else f"FAILED ({describe_status(returncode)})"
                print(
                    f"[{finished}/{len(jobs)}] {verdict} {outcome.job.env_id} seed {outcome.job.seed} "
                    f"({format_seconds(outcome.seconds)})",
                    file=out,
                    flush=True,
                )
            if running:
                time.sleep(poll)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the clean-up short
        _stop(running)
        for process, outcome, started, slot in running.values():
            outcome.status, outcome.returncode = "interrupted", process.returncode
            outcome.seconds = time.monotonic() - started
        save_summary(log_dir, outcomes, err)
        stopped = ", ".join(f"{o.job.env_id} seed {o.job.seed}" for _, o, _, _ in running.values()) or "none"
        print(
            f"interrupted after {format_seconds(time.monotonic() - start_all)}: {finished} of {len(jobs)} runs "
            f"finished, stopped {len(running)} ({stopped}), {len(pending)} not started; logs in {log_dir}",
            file=err,
            flush=True,
        )
        return INTERRUPTED
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
    saved = save_summary(log_dir, outcomes, err)
    status = report(outcomes, log_dir, time.monotonic() - start_all, out, err)
    return status if saved else max(status, 1)


def _stop(running: dict, grace: float = 5.0) -> None:
    """Terminate the process group of every running run; kill those still alive after ``grace`` s."""
    for process, *_ in running.values():
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for process, *_ in running.values():
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:  # the group may outlive its leader (vector-env workers): kill what is left
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def write_summary(log_dir: Path, outcomes: Sequence[Outcome], cwd: Path | None = None) -> None:
    """Write ``{log_dir}/summary.json``: one entry per run (env_id, seed, command, log, status,
    returncode, seconds, cores, run_dir).

    ``run_dir`` is the absolute run directory that the run printed into its log (``run
    directory: runs/...``, relative to ``cwd``, the runs' working directory, default the current
    one), or null when it printed none (not started, or failed before its start).
    """
    cwd = Path.cwd() if cwd is None else cwd
    run_dirs = [None if o.status == "not started" else printed_run_dir(o.log, cwd) for o in outcomes]
    entries = [
        {
            "env_id": o.job.env_id,
            "seed": o.job.seed,
            "command": shlex.join(o.argv or o.job.argv),
            "log": str(o.log),
            "status": o.status,
            "returncode": o.returncode,
            "seconds": None if o.seconds is None else round(o.seconds, 1),
            "cores": o.cores,
            "run_dir": None if run_dir is None else str(run_dir.resolve()),
        }
        for o, run_dir in zip(outcomes, run_dirs)
    ]
    write_atomic(log_dir / "summary.json", json.dumps(entries, indent=2) + "\n")


def save_summary(log_dir: Path, outcomes: Sequence[Outcome], err) -> bool:
    """:func:`write_summary`; a write that fails (a link or folder put at ``summary.json`` during the
    grid, a full disk) prints one line ``error: ...`` on ``err`` and returns False."""
    try:
        write_summary(log_dir, outcomes)
    except OSError as error:
        print(f"error: --log-dir: cannot write {log_dir / 'summary.json'}: {error}", file=err, flush=True)
        return False
    return True


def report(outcomes: Sequence[Outcome], log_dir: Path, seconds: float, out, err) -> int:
    """Print the overall summary and each failed run with its exit status and log tail.

    Returns:
        1 if any run failed, else 0.
    """
    failed = [o for o in outcomes if o.status != "ok"]
    print(
        f"{len(outcomes)} runs in {format_seconds(seconds)}: {len(outcomes) - len(failed)} ok, "
        f"{len(failed)} failed; logs in {log_dir}",
        file=out,
        flush=True,
    )
    for o in failed:
        status = describe_status(o.returncode) if o.returncode is not None else o.status
        print(
            f"\nFAILED {o.job.env_id} seed {o.job.seed} ({status}): {shlex.join(o.argv or o.job.argv)}\n"
            f"last {TAIL_LINES} lines of {o.log}:",
            file=err,
        )
        for line in log_tail(o.log, TAIL_LINES):
            print(f"    {line}", file=err)
    if failed:
        print(f"\n{len(failed)} of {len(outcomes)} runs failed", file=err, flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# Slurm mode

SLURM_SPECIAL = re.compile(r"[ !\"#$&'()*;<>?\[\\\]^`{|}~]")
"""ASCII characters that sbatch (in a ``#SBATCH`` line: quotes, ``\\``, ``#`` and blanks) or bash
(unquoted) would read as more than themselves."""


def slurm_word(value: str) -> str:
    """``value`` as one word of a ``#SBATCH`` line that reads the same to bash unquoted: every
    character of :data:`SLURM_SPECIAL` escaped with a backslash (sbatch and bash both read ``\\x``
    as ``x``), so that ``--job-name=my job #1`` cannot add an option or a comment.

    Raises:
        ValueError: ``value`` holds a control character (a newline would end the line).
    """
    if not str(value).isprintable():
        raise ValueError(f"{value!r} holds a control character (a newline, a tab, ...)")
    return SLURM_SPECIAL.sub(lambda match: "\\" + match.group(), str(value))


SLURM_TEMPLATE = """\
#!/usr/bin/env bash
# Written by python -m cleanrl_utils.benchmark: {{num_runs}} runs, array index i = run i below.
#SBATCH --job-name={{job_name}}
#SBATCH --array={{array}}
#SBATCH --cpus-per-task={{cpus_per_task}}
#SBATCH --time={{time}}
#SBATCH --output={{log_dir}}/slurm-%A_%a.out
{{optional_directives}}
set -uo pipefail
cd {{workdir}}
commands=(
{{commands}}
)
logs=(
{{logs}}
)
i="${SLURM_ARRAY_TASK_ID:?SLURM_ARRAY_TASK_ID is not set; submit this with sbatch}"
if (( i < 0 || i >= ${#commands[@]} )); then
  echo "array index $i outside 0-$(( ${#commands[@]} - 1 ))" >&2
  exit 2
fi
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-{{cpus_per_task}}}"
export MKL_NUM_THREADS="$OMP_NUM_THREADS" OPENBLAS_NUM_THREADS="$OMP_NUM_THREADS" PYTHONUNBUFFERED=1
echo "run $i: ${commands[$i]}  (log ${logs[$i]})"
# a new log: what is at its name (an earlier attempt's log, a planted link) is removed, never written through
rm -f -- "${logs[$i]}"
set -o noclobber
eval "${commands[$i]}" > "${logs[$i]}" 2>&1
status=$?
if (( status != 0 )); then
  echo "FAILED (exit $status): ${commands[$i]}; last {{tail_lines}} lines of ${logs[$i]}:" >&2
  tail -n {{tail_lines}} "${logs[$i]}" >&2
fi
exit "$status"
"""
"""The sbatch script; ``{{name}}`` placeholders are filled by :func:`slurm_script`."""


def slurm_script(
    jobs: Sequence[Job],
    log_dir: Path,
    workdir: Path,
    cpus_per_task: int,
    time_limit: str,
    partition: str | None = None,
    mem: str | None = None,
    max_parallel: int | None = None,
    job_name: str = "cleanrl-benchmark",
    torch_threads_flag: bool = False,
    template: str = SLURM_TEMPLATE,
) -> str:
    """The sbatch array script running ``jobs``: array index i runs ``jobs[i]``, log in ``log_dir``.

    Args:
        jobs: the grid, from :func:`make_jobs`.
        log_dir: where each run's log and the Slurm outputs go (absolute, so it is the same on
            the compute node).
        workdir: the directory the runs start in (``runs/`` is created there).
        cpus_per_task: ``#SBATCH --cpus-per-task``; also the runs' thread count.
        time_limit: ``#SBATCH --time``, e.g. ``"04:00:00"``.
        partition, mem: ``#SBATCH --partition`` / ``--mem`` (left out when None).
        max_parallel: at most this many array tasks at once (``--array=0-N%max_parallel``).
        job_name: ``#SBATCH --job-name``.
        torch_threads_flag: append ``--torch-threads {cpus_per_task}`` to each command.
        template: the script with ``{{name}}`` placeholders (see :data:`SLURM_TEMPLATE`).

    The values of ``#SBATCH`` lines (``job_name``, ``time``, ``log_dir``, partition, memory) are
    escaped by :func:`slurm_word` (``%`` in ``log_dir`` doubled: Slurm reads ``%A`` in a file
    name as the job id); the commands, logs and ``workdir`` are quoted for bash (``shlex.quote``).

    Raises:
        ValueError: the template names a placeholder this function does not fill, or a value
            holds a control character.
    """
    for value in (workdir, log_dir, *(job.log_name for job in jobs), *(token for job in jobs for token in job.argv)):
        if not str(value).isprintable():
            raise ValueError(f"{str(value)!r} holds a control character (a newline, a tab, ...)")
    extra = ["--torch-threads", str(cpus_per_task)] if torch_threads_flag else []
    directives = [f"#SBATCH --partition={slurm_word(partition)}"] if partition else []
    directives += [f"#SBATCH --mem={slurm_word(mem)}"] if mem else []
    values = {
        "num_runs": str(len(jobs)),
        "job_name": slurm_word(job_name),
        "array": f"0-{len(jobs) - 1}" + (f"%{max_parallel}" if max_parallel else ""),
        "cpus_per_task": str(cpus_per_task),
        "time": slurm_word(time_limit),
        "log_dir": slurm_word(str(log_dir).replace("%", "%%")),
        "optional_directives": "\n".join(directives),
        "workdir": shlex.quote(str(workdir)),
        "commands": "\n".join(f"  {shlex.quote(shlex.join([*job.argv, *extra]))}" for job in jobs),
        "logs": "\n".join(f"  {shlex.quote(str(log_dir / job.log_name))}" for job in jobs),
        "tail_lines": str(TAIL_LINES),
    }

    def fill(match: re.Match) -> str:
        if match.group(1) not in values:
            raise ValueError(
                f"unknown placeholder {{{{{match.group(1)}}}}} in the Slurm template; known: {', '.join(sorted(values))}"
            )
        return values[match.group(1)]

    return re.sub(r"\{\{(\w+)\}\}", fill, template)


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the launcher's flags; arguments after a ``--`` are passed to every run."""
    argv = list(argv)
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    parser = OneLineParser(
        prog="python -m cleanrl_utils.benchmark",
        description="Run a command over every environment x seed: locally, N at a time, each run pinned to\n"
        "its own cores; or as a Slurm array job. Arguments after -- are passed to every run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  python -m cleanrl_utils.benchmark --env-ids CartPole-v1 Acrobot-v1 \\\n"
        '      --command "python cleanrl/ppo.py" --num-seeds 3 --workers 2 -- --total-timesteps 50000\n'
        '  python -m cleanrl_utils.benchmark --env-ids Hopper-v5 --command "python cleanrl/sac_continuous.py" \\\n'
        "      --slurm --slurm-partition cpu --slurm-time 12:00:00 --torch-threads-flag",
    )
    parser.add_argument("--env-ids", nargs="*", default=[], metavar="ENV_ID", help="environment ids (--env-id of each run)")
    parser.add_argument(
        "--command",
        default="",
        help='the command, e.g. "python cleanrl/ppo.py"; each run appends --env-id ENV --seed SEED and the extra arguments',
    )
    parser.add_argument("--num-seeds", type=int, default=3, help="seeds per environment (default 3)")
    parser.add_argument("--start-seed", type=int, default=1, help="first seed (default 1); seeds are consecutive")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local: runs at a time, each on its own 1/N of the cores (default 1; 0: print the commands, run nothing, "
        "as CleanRL's launcher); Slurm: at most this many array tasks at once (default: no limit)",
    )
    parser.add_argument(
        "--extra",
        default="",
        help='arguments for every run, as one string: --extra="--total-timesteps 50000 --cuda" (or put them after --)',
    )
    parser.add_argument(
        "--torch-threads-flag",
        action="store_true",
        help="also pass --torch-threads K (K = cores of the run) to every run; only for scripts that have that flag",
    )
    parser.add_argument("--log-dir", default=None, help="where the runs' logs go (default runs/benchmark_logs/<time>/)")
    slurm = parser.add_argument_group("Slurm")
    slurm.add_argument("--slurm", action="store_true", help="write an sbatch array job for the grid and submit it")
    slurm.add_argument("--slurm-dry-run", action="store_true", help="with --slurm: write the script, do not submit it")
    slurm.add_argument("--slurm-script", default=None, help="where to write it (default {log_dir}/benchmark.sbatch)")
    slurm.add_argument(
        "--slurm-template",
        default=None,
        help="a template file with {{name}} placeholders (default: the built-in one, cleanrl_utils.benchmark.SLURM_TEMPLATE)",
    )
    slurm.add_argument("--slurm-cpus-per-task", type=int, default=1, help="cores of each run (default 1)")
    slurm.add_argument("--slurm-time", default="04:00:00", help="time limit of each run (default 04:00:00)")
    slurm.add_argument("--slurm-partition", default=None, help="partition (default: the cluster's default)")
    slurm.add_argument("--slurm-mem", default=None, help="memory of each run, e.g. 8G (default: the cluster's default)")
    slurm.add_argument("--slurm-job-name", default="cleanrl-benchmark", help="job name")
    args = parser.parse_args(argv)
    args.passthrough = passthrough
    return args


def check_args(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Check the flags before any run starts; return ``(command argv, extra argv)``.

    Raises:
        SystemExit: (status 2, one line on stderr) on bad input.
    """
    if not args.env_ids:
        fail("--env-ids", "give at least one environment id, e.g. --env-ids CartPole-v1")
    for env_id in args.env_ids:  # each names a log file and reaches the sbatch script or a job definition
        check_text(env_id, "--env-ids")
        check_name(f"{safe_name(env_id)}__seed{args.start_seed + args.num_seeds - 1}.log", "--env-ids")
    duplicates = sorted({e for e in args.env_ids if args.env_ids.count(e) > 1})
    if duplicates:
        fail("--env-ids", f"{', '.join(duplicates)} given more than once")
    names = [safe_name(e) for e in args.env_ids]
    if len(set(names)) != len(names):
        fail("--env-ids", "two ids map to the same log file name ('/' and ':' become '-')")
    if not 1 <= args.num_seeds <= 100_000:
        fail("--num-seeds", f"must be in [1, 100000], got {args.num_seeds}")
    if not 0 <= args.start_seed <= 2**31 - args.num_seeds:  # every seed a script takes: [0, 2**31)
        last = args.start_seed + args.num_seeds - 1
        fail("--start-seed", f"seeds {args.start_seed} to {last} must be in [0, 2**31), as the scripts' --seed")
    for flag, text in (("--command", args.command), ("--extra", args.extra)):
        try:
            shlex.split(text)
        except ValueError as error:
            fail(flag, f"cannot split {text!r} into arguments: {error}")
    command = shlex.split(args.command)
    extra = shlex.split(args.extra) + args.passthrough
    for flag, tokens in (("--command", command), ("--extra", extra)):
        for token in tokens:
            check_text(token, flag)
    if not command:
        fail("--command", 'give the command to run, e.g. --command "python cleanrl/ppo.py"')
    if shutil.which(command[0]) is None and not Path(command[0]).is_file():
        fail("--command", f"program {command[0]!r} not found")
    script = script_of(command)
    if script is not None and not Path(script).is_file():
        fail("--command", f"script {script!r} does not exist (relative to {os.getcwd()})")
    for flag in ("--env-id", "--seed"):
        for name, tokens in (("--command", command[1:]), ("--extra", extra)):
            if any(token == flag or token.startswith(flag + "=") for token in tokens):
                fail(name, f"{flag} is set by the launcher for each run; remove it")
    if args.workers is not None and (args.workers < 0 or (args.workers == 0 and args.slurm)):
        fail("--workers", f"must be at least {1 if args.slurm else 0}, got {args.workers}")
    if getattr(args, "log_dir", None) is not None:  # (submit_exp's grid has none)
        check_text(args.log_dir, "--log-dir")
    if args.slurm:
        if args.slurm_cpus_per_task < 1:
            fail("--slurm-cpus-per-task", f"must be at least 1, got {args.slurm_cpus_per_task}")
        if args.slurm_template is not None and not Path(args.slurm_template).is_file():
            fail("--slurm-template", f"{args.slurm_template!r} does not exist")
        for flag in ("--slurm-time", "--slurm-partition", "--slurm-mem", "--slurm-job-name", "--slurm-script"):
            value = getattr(args, flag[2:].replace("-", "_"))
            if value is not None:
                check_text(value, flag)
        if not os.getcwd().isprintable():
            fail("--slurm", f"the working directory {os.getcwd()!r} holds a control character; the sbatch script cds there")
    elif args.slurm_dry_run:
        fail("--slurm-dry-run", "only with --slurm")
    return command, extra


def available_cores() -> list[int]:
    """The cores this process may run on (``os.sched_getaffinity``; all cores where that is missing)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def make_log_dir(log_dir: str | None, jobs: Sequence[Job], keep: Sequence[str] = ("summary.json",)) -> Path:
    """Create the log folder (default ``runs/benchmark_logs/<YYYYmmdd-HHMMSS>``, a new one each time).

    A given ``--log-dir`` is used as given (it may be a link the user made); ``runs/`` likewise,
    but ``runs/benchmark_logs`` must be a real folder.

    Args:
        log_dir: the ``--log-dir`` flag, or None.
        jobs: the grid; none of its logs may be in the folder yet.
        keep: names of files the launcher rewrites in the folder (``summary.json``): a regular
            file there is replaced later, anything else (a link, a folder, a FIFO) refused.

    Raises:
        SystemExit: (status 2) a given ``--log-dir`` already holds a log of this grid (it is
            never overwritten), something other than a regular file at a name of ``keep``, or a
            folder that cannot be created.
    """
    if log_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path("runs") / "benchmark_logs"
        try:
            base.parent.mkdir(exist_ok=True)
            make_folder(base, base.parent)
        except OSError as error:
            fail("--log-dir", f"cannot create {base}: {error}")
        for suffix in [""] + [f"-{i}" for i in range(1, 1000)]:
            try:
                (base / (stamp + suffix)).mkdir()
                return (base / (stamp + suffix)).resolve()
            except FileExistsError:
                continue
        fail("--log-dir", f"cannot find a free folder name under {base}")
    path = Path(log_dir)
    clash = [job.log_name for job in jobs if os.path.lexists(path / job.log_name)]  # a dangling link too
    if clash:
        fail("--log-dir", f"{path} already holds logs of this grid ({clash[0]}, ...); choose another folder")
    for name in keep:
        refuse_non_regular(path / name, "--log-dir")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        fail("--log-dir", f"cannot create {path}: {error}")
    return path.resolve()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit status (see the module docstring)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command, extra = check_args(args)
    seeds = list(range(args.start_seed, args.start_seed + args.num_seeds))
    jobs = make_jobs(command, args.env_ids, seeds, extra)

    if args.slurm:
        template = SLURM_TEMPLATE
        if args.slurm_template:
            try:
                template = Path(args.slurm_template).read_text(encoding="utf-8")
            except (OSError, ValueError) as error:
                fail("--slurm-template", f"cannot read {args.slurm_template!r}: {error}")
        if args.slurm_script:
            refuse_non_regular(Path(args.slurm_script), "--slurm-script")
        log_dir = make_log_dir(args.log_dir, jobs, keep=() if args.slurm_script else ("benchmark.sbatch",))
        check_text(str(log_dir), "--log-dir")
        try:
            text = slurm_script(
                jobs,
                log_dir,
                Path.cwd(),
                args.slurm_cpus_per_task,
                args.slurm_time,
                args.slurm_partition,
                args.slurm_mem,
                args.workers,
                args.slurm_job_name,
                args.torch_threads_flag,
                template,
            )
        except ValueError as error:
            fail("--slurm-template", str(error))
        path = Path(args.slurm_script) if args.slurm_script else log_dir / "benchmark.sbatch"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text, permissions=0o755)
        except OSError as error:
            fail("--slurm-script", f"cannot write {path}: {error}")
        grid = f"{plural(len(args.env_ids), 'env')} x {plural(len(seeds), 'seed')}"
        print(f"{len(jobs)} runs ({grid}) as a Slurm array job: {path}")
        if args.slurm_dry_run or shutil.which("sbatch") is None:
            reason = "--slurm-dry-run" if args.slurm_dry_run else "sbatch is not on PATH"
            print(f"not submitted ({reason}); submit with: {shlex.join(['sbatch', str(path)])}")
            return 0
        result = subprocess.run(["sbatch", str(path)], capture_output=True, text=True)
        if result.returncode != 0:
            print(f"sbatch failed ({describe_status(result.returncode)}): {result.stderr.strip()}", file=sys.stderr)
            return 1
        print(result.stdout.strip())
        print(f"logs will be in {log_dir}")
        return 0

    if args.workers == 0:  # print-only: the grid's commands, one per line, as a shell reads them
        for job in jobs:
            print(shlex.join(job.argv))
        return 0
    cores = available_cores()
    workers = args.workers or 1
    if workers > len(cores):
        fail("--workers", f"{workers} workers but this process may use only {len(cores)} cores ({cores})")
    core_sets = partition_cores(cores, workers)
    pin = hasattr(os, "sched_setaffinity")
    log_dir = make_log_dir(args.log_dir, jobs)
    sizes = sorted({len(s) for s in core_sets})
    pinning = "" if pin else " (not pinned: no sched_setaffinity here)"
    print(
        f"{len(jobs)} runs ({plural(len(args.env_ids), 'env')} x {plural(len(seeds), 'seed')}), {workers} at a "
        f"time, {'/'.join(map(str, sizes))} core{'s' if sizes[-1] > 1 else ''} each{pinning}; "
        f"logs in {log_dir}",
        flush=True,
    )
    return run_local(jobs, core_sets, log_dir, args.torch_threads_flag, pin=pin)


if __name__ == "__main__":
    sys.exit(main())

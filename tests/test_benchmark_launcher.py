"""Tests of the benchmark launcher, cleanrl_utils/benchmark.py: the grid and core partition, a real
PPO grid, failure reports, Ctrl-C, bad input and the Slurm array script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cleanrl_utils import plot
from cleanrl_utils.benchmark import format_seconds, make_jobs, partition_cores, script_of, slurm_script
from cleanrl_utils.cli import printed_run_dir
from tests.conftest import ROOT, scalars

CORES = sorted(os.sched_getaffinity(0))


def launch(*flags: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m cleanrl_utils.benchmark <flags>`` in ``cwd``."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.benchmark", *flags],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def only_log_dir(cwd: Path) -> Path:
    dirs = list((cwd / "runs" / "benchmark_logs").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


# --- pure functions --------------------------------------------------------------------------


def test_make_jobs_is_seed_major_with_env_seed_and_extra_args():
    jobs = make_jobs(["python", "cleanrl/ppo.py"], ["CartPole-v1", "ALE/Pong-v5"], [1, 2], ["--total-timesteps", "9"])
    assert [(j.index, j.env_id, j.seed) for j in jobs] == [
        (0, "CartPole-v1", 1),
        (1, "ALE/Pong-v5", 1),
        (2, "CartPole-v1", 2),
        (3, "ALE/Pong-v5", 2),
    ]
    assert jobs[3].argv == ("python", "cleanrl/ppo.py", "--env-id", "ALE/Pong-v5", "--seed", "2", "--total-timesteps", "9")
    assert [j.log_name for j in jobs] == [
        "CartPole-v1__seed1.log",
        "ALE-Pong-v5__seed1.log",
        "CartPole-v1__seed2.log",
        "ALE-Pong-v5__seed2.log",
    ]


def test_partition_cores_by_hand():
    assert partition_cores([0, 1], 2) == [[0], [1]]
    assert partition_cores([0, 1], 1) == [[0, 1]]
    assert partition_cores([4, 0, 2, 1, 3], 2) == [[0, 1, 2], [3, 4]]
    assert partition_cores(range(8), 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert partition_cores([2, 5, 7], 3) == [[2], [5], [7]]
    with pytest.raises(ValueError, match="3 workers but only 2 cores"):
        partition_cores([0, 1], 3)
    with pytest.raises(ValueError):
        partition_cores([0, 1], 0)


def test_script_of_and_format_seconds():
    assert script_of(["python", "cleanrl/ppo.py"]) == "cleanrl/ppo.py"
    assert script_of(["/usr/bin/python3.11", "-u", "-X", "dev", "train.py", "--x"]) == "train.py"
    assert script_of(["python", "-m", "cleanrl_utils.benchmark"]) is None
    assert script_of(["./train.sh", "--x"]) == "./train.sh"
    assert script_of(["torchrun", "--nproc-per-node", "2"]) is None
    assert [format_seconds(s) for s in (41.4, 185, 7380)] == ["41 s", "3 min 05 s", "2 h 03 min"]


# --- local mode ------------------------------------------------------------------------------


def test_real_ppo_grid_two_workers(tmp_path):
    workers = str(min(2, len(CORES)))
    result = launch(
        "--env-ids",
        "CartPole-v1",
        "--command",
        f"{sys.executable} {ROOT / 'cleanrl' / 'ppo.py'}",
        "--num-seeds",
        "2",
        "--workers",
        workers,
        "--torch-threads-flag",
        "--",
        "--total-timesteps",
        "512",
        "--num-envs",
        "1",
        "--num-steps",
        "128",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[2/2] ok CartPole-v1 seed" in result.stdout and "2 runs in" in result.stdout and "2 ok, 0 failed" in result.stdout
    run_dirs = sorted(p for p in (tmp_path / "runs").iterdir() if p.name != "benchmark_logs")
    assert [p.name.split("__")[:3] for p in run_dirs] == [["CartPole-v1", "ppo", "1"], ["CartPole-v1", "ppo", "2"]]
    for seed, run_dir in enumerate(run_dirs, start=1):
        saved = json.loads((run_dir / "args.json").read_text())
        assert (saved["seed"], saved["total_timesteps"], saved["torch_threads"]) == (seed, 512, 1 if workers == "2" else 2)
        assert scalars(run_dir)["charts/SPS"][-1][0] == 512
    summary = json.loads((only_log_dir(tmp_path) / "summary.json").read_text())
    assert [(e["seed"], e["status"], e["returncode"]) for e in summary] == [(1, "ok", 0), (2, "ok", 0)]
    if workers == "2":
        assert sorted(c for e in summary for c in e["cores"]) == CORES[:2]  # the two runs on disjoint cores


PROBE = textwrap.dedent("""\
    import os, sys
    seed = int(sys.argv[sys.argv.index("--seed") + 1])
    print("affinity", sorted(os.sched_getaffinity(0)), "omp", os.environ["OMP_NUM_THREADS"], "argv", sys.argv[1:])
    if seed == 2:
        print("KNOWN LINE: seed 2 gives up", flush=True)
        sys.exit(3)
    """)


def test_failed_run_is_reported_with_status_and_log_tail(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    result = launch(
        "--env-ids",
        "Fake-v0",
        "--command",
        f"{sys.executable} probe.py",
        "--num-seeds",
        "3",
        "--workers",
        str(min(2, len(CORES))),
        "--extra",
        "--flag 'a b'",
        cwd=tmp_path,
        env={"OMP_NUM_THREADS": "7"},
    )  # replaced by each run's core count
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED (exit 3) Fake-v0 seed 2" in result.stdout
    assert "2 ok, 1 failed" in result.stdout
    assert "FAILED Fake-v0 seed 2 (exit 3)" in result.stderr and "KNOWN LINE: seed 2 gives up" in result.stderr
    assert "1 of 3 runs failed" in result.stderr
    assert "seed 1 (" not in result.stderr  # only the failed run is listed
    log_dir = only_log_dir(tmp_path)
    summary = {e["seed"]: e for e in json.loads((log_dir / "summary.json").read_text())}
    assert [summary[s]["status"] for s in (1, 2, 3)] == ["ok", "failed", "ok"] and summary[2]["returncode"] == 3
    for seed in (1, 3):  # each run is pinned to its set, with a thread count of the set's size
        log = (log_dir / f"Fake-v0__seed{seed}.log").read_text()
        cores = summary[seed]["cores"]
        assert f"affinity {cores} omp {len(cores)} argv ['--env-id', 'Fake-v0', '--seed', '{seed}', '--flag', 'a b']" in log


FAKE_SCRIPT = textwrap.dedent("""\
    # writes a run directory as cleanrl_utils.run does: args.json, episodic returns, the printed line
    import json, os, sys, time
    from torch.utils.tensorboard import SummaryWriter
    flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    env_id, seed, steps = flags["--env-id"], int(flags["--seed"]), int(flags["--total-timesteps"])
    if env_id == "Broken-v0":
        sys.exit("cannot make the environment")  # fails before a run directory exists
    exp_name = "fake"
    for stamp in range(int(time.time()), 2**31):
        directory = f"runs/{env_id}__{exp_name}__{seed}__{stamp}"
        try:
            os.makedirs(directory)
            break
        except FileExistsError:
            pass
    json.dump({"env_id": env_id, "exp_name": exp_name, "seed": seed}, open(f"{directory}/args.json", "w"))
    writer = SummaryWriter(directory)
    for step in range(steps // 10, steps + 1, steps // 10):
        writer.add_scalar("charts/episodic_return", steps + seed, step)  # the return tells the sweep
    writer.close()
    print(f"run directory: {directory}", flush=True)
    """)


def test_summary_records_run_dirs_and_selects_one_sweep_in_a_shared_runs_folder(tmp_path, capsys):
    (tmp_path / "fake.py").write_text(FAKE_SCRIPT)
    for name, steps in (("short", "30000"), ("long", "500000")):  # two sweeps into one runs/ folder
        result = launch(
            "--env-ids",
            "Fake-v0",
            *(["Broken-v0"] if name == "short" else []),
            "--command",
            f"{sys.executable} fake.py",
            "--num-seeds",
            "2",
            "--log-dir",
            f"logs_{name}",
            "--",
            "--total-timesteps",
            steps,
            cwd=tmp_path,
        )
        assert result.returncode == (1 if name == "short" else 0), result.stdout + result.stderr
    summary = json.loads((tmp_path / "logs_short" / "summary.json").read_text())
    assert [(e["env_id"], e["seed"], e["status"]) for e in summary] == [
        ("Fake-v0", 1, "ok"),
        ("Broken-v0", 1, "failed"),
        ("Fake-v0", 2, "ok"),
        ("Broken-v0", 2, "failed"),
    ]
    short_dirs = [Path(e["run_dir"]) for e in summary if e["status"] == "ok"]
    assert all(d.is_absolute() and d.parent == tmp_path / "runs" and (d / "args.json").is_file() for d in short_dirs)
    assert [e["run_dir"] for e in summary if e["status"] != "ok"] == [None, None]
    assert len(list((tmp_path / "runs").glob("Fake-v0__*"))) == 4

    out = tmp_path / "plots"
    plot.main(["--summary", str(tmp_path / "logs_short" / "summary.json"), "--out", str(out), "--reps", "20"])
    captured = capsys.readouterr()
    rows = [line for line in (out / "returns.md").read_text().splitlines() if line.startswith("| Fake-v0")]
    assert rows == ["| Fake-v0 | fake | 30001.50 ± 0.50 | 2 |"]  # exactly the short sweep's two seeds
    assert "mixes runs" not in captured.out
    skipped = captured.err.strip().splitlines()
    assert skipped == [
        f"warning: skipped {tmp_path / 'logs_short' / 'summary.json'}: Broken-v0 seed {s}: status 'failed'" for s in (1, 2)
    ]
    plot.main([str(tmp_path / "runs"), "--out", str(tmp_path / "all"), "--reps", "20"])  # the whole folder merges them
    assert "note: Fake-v0 fake mixes runs whose last steps differ by more than 2x" in capsys.readouterr().out
    assert (tmp_path / "all" / "returns.md").read_text().splitlines()[2].endswith("| 4 |")


def test_printed_run_dir(tmp_path):
    log = tmp_path / "log"
    log.write_text("run directory: runs/A__x__1__5\nstep 3\nrun directory: runs/A__x__1__5 (resumed at step 4096)\n")
    assert printed_run_dir(log, tmp_path) == tmp_path / "runs" / "A__x__1__5"
    log.write_text("Traceback ...\n")
    assert printed_run_dir(log, tmp_path) is None and printed_run_dir(tmp_path / "missing", tmp_path) is None


def test_ctrl_c_stops_running_process_groups(tmp_path):
    (tmp_path / "sleeper.py").write_text(
        textwrap.dedent("""\
        import subprocess, sys
        seed = sys.argv[sys.argv.index("--seed") + 1]
        child = subprocess.Popen(["sleep", "300"])  # a grandchild, like a vector env's worker
        open(f"pids{seed}", "w").write(f"{child.pid}\\n")
        child.wait()
        """)
    )
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cleanrl_utils.benchmark",
            "--env-ids",
            "Fake-v0",
            "--command",
            f"{sys.executable} sleeper.py",
            "--num-seeds",
            "3",
            "--workers",
            "1",
        ],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        (tmp_path / "pids1").exists() and (tmp_path / "pids1").read_text().endswith("\n")
    ):
        time.sleep(0.1)  # the file is written whole, newline last
    grandchild = int((tmp_path / "pids1").read_text())
    launcher.send_signal(signal.SIGINT)
    out, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 130, out + err
    assert "interrupted" in err and "stopped 1 (Fake-v0 seed 1), 2 not started" in err
    assert not alive(grandchild)
    assert not (tmp_path / "pids2").exists()
    summary = json.loads((only_log_dir(tmp_path) / "summary.json").read_text())
    assert [e["status"] for e in summary] == ["interrupted", "not started", "not started"]


def alive(pid: int, wait: float = 5.0) -> bool:
    """Whether process ``pid`` still runs after ``wait`` s (a zombie, killed but not yet reaped, is not)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


def test_workers_0_prints_the_commands_and_runs_nothing(tmp_path):
    """CleanRL's ``--workers 0``: the grid's commands, seed-major, one per line; no run, no log directory."""
    (tmp_path / "probe.py").write_text(PROBE)
    flags = ["--env-ids", "A", "B c", "--command", f"{sys.executable} probe.py", "--num-seeds", "2", "--workers", "0"]
    result = launch(*flags, "--", "--total-timesteps", "5", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    tail = "--total-timesteps 5"
    assert result.stdout.splitlines() == [
        f"{sys.executable} probe.py --env-id A --seed 1 {tail}",
        f"{sys.executable} probe.py --env-id 'B c' --seed 1 {tail}",
        f"{sys.executable} probe.py --env-id A --seed 2 {tail}",
        f"{sys.executable} probe.py --env-id 'B c' --seed 2 {tail}",
    ]
    assert not (tmp_path / "runs").exists()
    result = launch(*flags[:-2], "--workers", "-1", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == "error: --workers: must be at least 0, got -1"


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--command", f"{sys.executable} probe.py"], "--env-ids", "at least one environment id"),
        (
            ["--env-ids", "A", "--command", f"{sys.executable} probe.py", "--num-seeds", "0"],
            "--num-seeds",
            "must be in [1, 100000], got 0",
        ),
        (
            ["--env-ids", "A", "--command", f"{sys.executable} probe.py", "--num-seeds", str(10**9)],
            "--num-seeds",
            "must be in [1, 100000]",
        ),
        (["--env-ids", "A", "--command", f"{sys.executable} missing.py"], "--command", "'missing.py' does not exist"),
        (["--env-ids", "A", "--command", "no-such-program-xyz"], "--command", "not found"),
        (["--env-ids", "A"], "--command", "give the command"),
        (
            ["--env-ids", "A", "--command", f"{sys.executable} probe.py", "--workers", str(len(CORES) + 1)],
            "--workers",
            f"may use only {len(CORES)} cores",
        ),
        (["--env-ids", "A", "--command", f"{sys.executable} probe.py", "--", "--seed", "4"], "--extra", "set by the launcher"),
        (["--env-ids", "A", "A", "--command", f"{sys.executable} probe.py"], "--env-ids", "more than once"),
        (  # the second seed is past the scripts' --seed range: refused before the first runs (it ran, then failed)
            ["--env-ids", "A", "--command", f"{sys.executable} probe.py", "--start-seed", str(2**31 - 1), "--num-seeds", "2"],
            "--start-seed",
            f"seeds {2**31 - 1} to {2**31} must be in [0, 2**31)",
        ),
        (["--env-ids", "A", "--command", f"{sys.executable} probe.py", "--start-seed", "-1"], "--start-seed", "must be in"),
    ],
)
def test_bad_input_one_line_before_any_run(tmp_path, flags, flag, message):
    (tmp_path / "probe.py").write_text(PROBE)
    result = launch(*flags, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


# --- Slurm mode ------------------------------------------------------------------------------


def fake_program(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def test_slurm_script_maps_every_array_index_to_its_env_and_seed(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    bin_dir = tmp_path / "bin"  # a `python` that prints its arguments (and fails for seed 6)
    bin_dir.mkdir()
    fake_program(
        bin_dir,
        "python",
        'printf "%s\\n" "$@" "threads=$OMP_NUM_THREADS"\n'
        '[[ " $* " == *" --seed 6 "* ]] && { echo "KNOWN LINE"; exit 3; }\nexit 0\n',
    )
    path = f"{bin_dir}:{os.environ['PATH']}"
    result = launch(
        "--env-ids",
        "CartPole-v1",
        "ALE/Pong-v5",
        "--command",
        "python probe.py",
        "--num-seeds",
        "2",
        "--start-seed",
        "5",
        "--slurm",
        "--slurm-dry-run",
        "--slurm-cpus-per-task",
        "4",
        "--slurm-time",
        "01:30:00",
        "--slurm-partition",
        "cpu",
        "--slurm-mem",
        "8G",
        "--workers",
        "3",
        "--torch-threads-flag",
        "--log-dir",
        "logs",
        "--",
        "--note",
        "it's $HOME",
        cwd=tmp_path,
        env={"PATH": path},
    )
    assert result.returncode == 0, result.stderr
    script = tmp_path / "logs" / "benchmark.sbatch"
    assert f"as a Slurm array job: {script}" in result.stdout and "not submitted (--slurm-dry-run)" in result.stdout
    text = script.read_text()
    for directive in ("--array=0-3%3", "--cpus-per-task=4", "--time=01:30:00", "--partition=cpu", "--mem=8G"):
        assert f"#SBATCH {directive}\n" in text
    # run the script as Slurm would, from another directory, with the fake `python` first on PATH
    expected = [("CartPole-v1", 5), ("ALE/Pong-v5", 5), ("CartPole-v1", 6), ("ALE/Pong-v5", 6)]
    for index, (env_id, seed) in enumerate(expected):
        environ = {**os.environ, "PATH": path, "SLURM_ARRAY_TASK_ID": str(index), "SLURM_CPUS_PER_TASK": "4"}
        task = subprocess.run(["bash", str(script)], cwd="/", env=environ, capture_output=True, text=True, timeout=30)
        assert task.returncode == (3 if seed == 6 else 0), task.stderr
        log = tmp_path / "logs" / f"{env_id.replace('/', '-')}__seed{seed}.log"
        assert log.read_text().splitlines()[:10] == [
            "probe.py",
            "--env-id",
            env_id,
            "--seed",
            str(seed),
            "--note",
            "it's $HOME",
            "--torch-threads",
            "4",
            "threads=4",
        ]
        if seed == 6:
            assert "FAILED (exit 3)" in task.stderr and "KNOWN LINE" in task.stderr
    outside = subprocess.run(
        ["bash", str(script)], env={**os.environ, "SLURM_ARRAY_TASK_ID": "4"}, capture_output=True, text=True, timeout=30
    )
    assert outside.returncode == 2 and "outside 0-3" in outside.stderr


def test_slurm_submits_with_sbatch_when_on_path(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_program(bin_dir, "python", "exit 0\n")
    fake_program(bin_dir, "sbatch", 'echo "$@" > "$(dirname "$0")/submitted"\necho "Submitted batch job 42"\n')
    result = launch(
        "--env-ids",
        "A",
        "--command",
        f"{sys.executable} probe.py",
        "--num-seeds",
        "1",
        "--slurm",
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, result.stderr
    assert "Submitted batch job 42" in result.stdout
    script = Path((bin_dir / "submitted").read_text().strip())
    assert script.parent == only_log_dir(tmp_path) and "#SBATCH --array=0-0\n" in script.read_text()


def test_slurm_template_placeholders_are_checked():
    jobs = make_jobs(["python", "x.py"], ["A"], [1])
    assert slurm_script(jobs, Path("/l"), Path("/w"), 1, "1:00", template="#{{array}} {{cpus_per_task}}") == "#0-0 1"
    with pytest.raises(ValueError, match="unknown placeholder"):
        slurm_script(jobs, Path("/l"), Path("/w"), 1, "1:00", template="{{nope}}")


# --- hostile values and planted links --------------------------------------------------------


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--slurm-time", "01:00:00\ntouch pwned"], "--slurm-time"),
        (["--slurm-job-name", "x\ntouch pwned"], "--slurm-job-name"),
        (["--slurm-partition", "cpu\n#SBATCH --uid=0"], "--slurm-partition"),
        (["--slurm-mem", "8G\r"], "--slurm-mem"),
        (["--slurm-script", "job\n.sbatch"], "--slurm-script"),
        (["--log-dir", "logs\ntouch pwned"], "--log-dir"),
        (["--env-ids", "A-v0\ntouch pwned"], "--env-ids"),
        (["--extra", "--note 'a\ntouch pwned'"], "--extra"),
        (["--", "--note", "a\x1b[2J"], "--extra"),
    ],
)
def test_control_characters_in_slurm_values_are_refused_before_anything_is_written(tmp_path, flags, flag):
    (tmp_path / "probe.py").write_text(PROBE)
    base = ["--env-ids", "A-v0", "--command", f"{sys.executable} probe.py", "--slurm", "--slurm-dry-run"]
    if flags[0] == "--env-ids":
        base = base[2:]
    result = launch(*base, *flags, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and "control character" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.py"]  # no runs/, no log folder, no script


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--command", f"{sys.executable} 'probe.py\ntouch pwned'"], "--command", "control character"),
        (["--env-ids", "A" * 300], "--env-ids", "longer than 200 bytes"),
    ],
)
def test_bad_names_are_refused_in_local_mode(tmp_path, flags, flag, message):
    (tmp_path / "probe.py").write_text(PROBE)
    base = ["--env-ids", "A-v0", "--command", f"{sys.executable} probe.py"]
    result = launch(*(base[2:] if flags[0] == "--env-ids" else base[:2]), *flags, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], lines
    assert not (tmp_path / "runs").exists()


def sbatch_arguments(line: str) -> list[str]:
    """The arguments sbatch reads from a ``#SBATCH`` line (Slurm's src/sbatch/opt.c, _get_argument):
    blanks split them, quotes group, a backslash escapes the next character, an unquoted ``#`` starts
    a comment."""
    arguments, current, quote, escaped, started = [], "", None, False, False
    for char in line.removeprefix("#SBATCH"):
        if escaped:
            current, escaped = current + char, False
        elif char == "\\":
            escaped = started = True
        elif quote:
            current, quote = (current, None) if char == quote else (current + char, quote)
        elif char in "\"'":
            quote, started = char, True
        elif char == "#":
            break
        elif char.isspace():
            if started:
                arguments.append(current)
            current, started = "", False
        else:
            current, started = current + char, True
    return arguments + ([current] if started else [])


def test_slurm_directive_values_are_one_argument_each(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_program(bin_dir, "python", 'printf "%s\\n" "$@"\n')
    log_dir = tmp_path / "logs dir #1 %A $(touch pwned)"
    values = {
        "job-name": "my job #1 --uid=0",
        "time": "1:00 --wrap='touch pwned'",
        "partition": 'cpu "x" \\',
        "mem": "8G;touch pwned",
    }
    flags = [item for name, value in values.items() for item in (f"--slurm-{name}", value)]
    result = launch(
        *["--env-ids", "A-v0", "--command", "python probe.py", "--num-seeds", "1", "--slurm", "--slurm-dry-run"],
        *flags,
        "--log-dir",
        str(log_dir),
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, result.stderr
    text = (log_dir / "benchmark.sbatch").read_text()
    directives = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            (argument,) = sbatch_arguments(line)  # one argument: no option or comment added
            name, _, value = argument.removeprefix("--").partition("=")
            directives[name] = value
    assert {name: directives[name] for name in values} == values
    assert directives["output"] == str(log_dir).replace("%", "%%") + "/slurm-%A_%a.out"  # %% is Slurm's literal %
    task = subprocess.run(
        ["bash", str(log_dir / "benchmark.sbatch")],
        cwd="/",
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "0"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert task.returncode == 0, task.stderr
    assert (log_dir / "A-v0__seed1.log").read_text().splitlines()[:3] == ["probe.py", "--env-id", "A-v0"]
    assert not (tmp_path / "pwned").exists() and not Path("/pwned").exists()


def test_slurm_task_replaces_a_link_at_its_log_name(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_program(bin_dir, "python", 'echo "run output"\n')
    path = f"{bin_dir}:{os.environ['PATH']}"
    result = launch(
        *["--env-ids", "A-v0", "--command", "python probe.py", "--num-seeds", "1", "--slurm", "--slurm-dry-run"],
        *["--log-dir", "logs"],
        cwd=tmp_path,
        env={"PATH": path},
    )
    assert result.returncode == 0, result.stderr
    outside = tmp_path / "outside"
    outside.write_text("keep\n")
    (tmp_path / "logs" / "A-v0__seed1.log").symlink_to(outside)  # planted after the script was written
    task = subprocess.run(
        ["bash", str(tmp_path / "logs" / "benchmark.sbatch")],
        env={**os.environ, "PATH": path, "SLURM_ARRAY_TASK_ID": "0"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert task.returncode == 0, task.stderr
    assert outside.read_text() == "keep\n"
    log = tmp_path / "logs" / "A-v0__seed1.log"
    assert not log.is_symlink() and log.read_text() == "run output\n"


@pytest.mark.parametrize(
    "slurm, name",
    [(False, "log"), (False, "summary.json"), (False, "benchmark_logs"), (True, "benchmark.sbatch"), (True, "benchmark_logs")],
)
def test_links_planted_in_the_log_folder_stop_the_launcher(tmp_path, slurm, name):
    (tmp_path / "probe.py").write_text(PROBE)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("keep\n")
    flags = ["--env-ids", "A-v0", "--command", f"{sys.executable} probe.py", "--num-seeds", "1"]
    flags += ["--slurm", "--slurm-dry-run"] if slurm else []
    logs = tmp_path / "logs"
    logs.mkdir()
    if name == "benchmark_logs":  # the default log folder's parent, under runs/
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "benchmark_logs").symlink_to(outside)
        flag, message = "--log-dir", "not a folder this project made"
    else:
        flags += ["--log-dir", "logs"]
        planted = {"log": "A-v0__seed1.log"}.get(name, name)
        (logs / planted).symlink_to(outside / ("missing" if name == "log" else "file"))  # dangling for the log
        flag, message = "--log-dir", "already holds logs" if name == "log" else "is a symbolic link"
    result = launch(*flags, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], lines
    assert sorted(p.name for p in outside.iterdir()) == ["file"] and (outside / "file").read_text() == "keep\n"


def test_run_local_never_opens_a_log_through_a_link(tmp_path):
    """A link put at a log's name after the launcher's checks: that run fails, nothing is written through it."""
    from io import StringIO

    from cleanrl_utils.benchmark import run_local

    outside = tmp_path / "outside"
    outside.write_text("keep\n")
    (tmp_path / "logs").mkdir()
    (job,) = make_jobs([sys.executable, "-c", "print('ran')"], ["A-v0"], [1])
    (tmp_path / "logs" / job.log_name).symlink_to(outside)
    out, err = StringIO(), StringIO()
    status = run_local([job], [CORES[:1]], tmp_path / "logs", False, pin=False, out=out, err=err, poll=0.01)
    assert status == 1 and "FAILED (cannot write its log" in out.getvalue(), out.getvalue() + err.getvalue()
    assert outside.read_text() == "keep\n"
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert [(e["status"], e["returncode"]) for e in summary] == [("failed", 127)]


def test_slurm_template_that_is_not_text_is_one_line(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "template.sh").write_bytes(b"#!/bin/bash\n\xff\xfe {{array}}\n")
    result = launch(
        *["--env-ids", "A-v0", "--command", f"{sys.executable} probe.py", "--slurm", "--slurm-dry-run"],
        *["--slurm-template", "template.sh"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --slurm-template: cannot read 'template.sh'"), lines

"""How many lines of the shared runtime (cleanrl_utils) each script loads, beside its own and CleanRL's.

For every script ``cleanrl/*.py`` (not ``__init__.py``) three numbers:

(a) own lines: the script's physical lines (``wc -l``);
(b) runtime lines: the physical lines (``wc -l``) of every module of the package ``cleanrl_utils``
    that the run loads, on import and while it runs, with its file on disk, less the shared replay
    buffers (:data:`APART`: ``cleanrl_utils/buffers.py`` and ``cleanrl_utils/namedarraytuple.py``,
    listed apart); with the list of those modules and their lines;
(c) CleanRL's lines: the lines of its counterpart in a CleanRL checkout, paired by
    ``benchmark/scripts/script_lines.py``'s ``CLEANRL_EQUIVALENT`` (read from there, beside this file or one
    folder up), with ``--cleanrl PATH``. CleanRL's runtime column shows 0, by convention: CleanRL has
    no runtime of this kind, but its scripts do import a little of its own ``cleanrl_utils`` (its
    replay buffer, which is apart as ours is; ``atari_wrappers.py`` in some Atari scripts; and after
    ``--save-model`` an ``evals/<algo>_eval.py`` of 56-69 lines and ``evals/__init__.py``). This tool
    does not run CleanRL, so those are not counted.

How (b) is measured: each script is run for real, ``python cleanrl/<script> <SHORT_RUN flags>
--save-model --eval-episodes 1`` (:data:`SHORT_RUN`: a few seconds of training that reaches the end
of the run, the saved model and its one-episode evaluation), in a temporary working directory (its
``runs/`` is deleted with it), on the CPU (``CUDA_VISIBLE_DEVICES=""``, one OpenMP thread). So a
module imported inside a function (the evaluation after ``--save-model`` included) counts, and a
module the script imports but does not reach with these flags (a resume, ``--track``, ``--capture-video``,
another env family) does not. The tool puts a ``sitecustomize.py`` of its own (:data:`SITECUSTOMIZE`)
first on ``PYTHONPATH``; every Python interpreter of the run runs it at start-up (the script's, and each
child interpreter: multiprocessing's spawn and forkserver processes, torchrun's ranks), and it records,
per process id, in the folder named by ``RUNTIME_LINES_DIR``:

- ``<pid>.exit.json``: the ``cleanrl_utils`` modules of ``sys.modules`` with their files, written at
  the process's end: by an ``atexit`` hook (a normal end, ``sys.exit``, an uncaught exception) and by a
  wrapper of ``os._exit`` (which skips ``atexit``: ddp_ppo.py ends with it, and so do forked
  multiprocessing children);
- ``<pid>.imports``: each ``cleanrl_utils`` module name as the interpreter first loads it (an ``import``
  audit hook, appended at once), so that a process that never reaches its end (killed by a signal,
  as a hung actor or env worker is) still counts.

The count is the union over all the processes of the run: the modules named in any ``.exit.json`` or
``.imports`` whose file exists (a name from ``.imports`` alone is resolved to
``cleanrl_utils/<a>/<b>.py`` or ``.../__init__.py`` under this repository). A forked child (no new
interpreter) carries its parent's hooks and modules, so it adds only what it imports itself. Not
counted: a process that is not a Python interpreter, one started with ``-S``/``-I`` (no
``sitecustomize``), and files read without import (data, ``exec`` of a path).

    python benchmark/scripts/runtime_lines.py                       # every script: the table on stdout
    python benchmark/scripts/runtime_lines.py --scripts ppo dqn --cleanrl /path/to/cleanrl
    python benchmark/scripts/runtime_lines.py --cleanrl /work/.mirror/vwxyzjn+cleanrl/repo \\
        --json benchmark/results/runtime/runtime_lines_before.json \\
        --markdown benchmark/results/runtime/runtime_lines_before.md --check-budget

``--cleanrl`` takes a CleanRL checkout (its ``cleanrl/`` folder is read) or a bare git repository
(read with ``git show HEAD:cleanrl/<file>``). ``--check-budget`` exits 1 where ppo.py, dqn.py or
sac_continuous.py load more than 1,500 runtime lines, or any script more than 2,000 (:data:`BUDGET`).
A script whose run fails (a non-zero exit, a timeout, no saved model, or no "evaluation over 1 episodes"
line in its output) is marked in the table and in the JSON;
then the tool exits 2 (unless the budget check already exits 1), its count being a lower bound.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository: ``benchmark/scripts/runtime_lines.py`` is two folders down."""
SCRIPTS_DIR = ROOT / "cleanrl"
RUNTIME = "cleanrl_utils"
"""The package whose modules are the runtime."""
APART = ("cleanrl_utils.buffers", "cleanrl_utils.namedarraytuple")
"""The shared replay buffers: loaded modules listed apart, not in the runtime lines."""
BUDGET = {"ppo": 1500, "dqn": 1500, "sac_continuous": 1500}
"""Runtime lines allowed for these scripts; any other script: :data:`BUDGET_ANY`."""
BUDGET_ANY = 2000
EVALUATED = ["--save-model", "--eval-episodes", "1"]
"""Added to every run: the model is saved and evaluated over one episode (the evaluation's imports count)."""

SHORT_RUN: dict[str, list[str]] = {
    # classic control (CartPole-v1, the default)
    "ppo": ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256"],
    "a2c": ["--num-envs", "2", "--num-steps", "5", "--total-timesteps", "200"],
    "pqn": ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256"],
    "ppo_lstm": ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128", "--update-epochs", "1"],
    "dqn": ["--total-timesteps", "600", "--learning-starts", "300", "--batch-size", "32"],
    "c51": ["--total-timesteps", "600", "--learning-starts", "300", "--batch-size", "32"],
    "qrdqn": ["--total-timesteps", "600", "--learning-starts", "300", "--batch-size", "32", "--n-quantiles", "32"],
    # structured observations (their defaults: MiniGrid DoorKey, the bundled CombinationLock)
    "ppo_structured": ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--total-timesteps", "256"],
    "dqn_structured": ["--total-timesteps", "600", "--learning-starts", "300", "--batch-size", "32"],
    "ppo_trxl": ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--total-timesteps", "256"],
    # MuJoCo (Hopper-v5, HalfCheetah-v5, the bundled InvertedPendulumNoVelocity: the defaults)
    "ppo_continuous": ["--num-steps", "128", "--num-minibatches", "2", "--total-timesteps", "256"],
    "rpo_continuous": ["--num-steps", "128", "--num-minibatches", "2", "--total-timesteps", "256"],
    "ppo_continuous_lstm": ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--total-timesteps", "256"],
    "ddpg_continuous": ["--total-timesteps", "400", "--learning-starts", "200", "--batch-size", "32", "--buffer-size", "1000"],
    "td3_continuous": ["--total-timesteps", "400", "--learning-starts", "200", "--batch-size", "32", "--buffer-size", "1000"],
    "sac_continuous": ["--total-timesteps", "400", "--learning-starts", "200", "--batch-size", "32", "--buffer-size", "1000"],
    # Atari through Gymnasium (BreakoutNoFrameskip-v4, the default), tiny buffers
    "ppo_atari": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "ppo_atari_lstm": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "ddp_ppo": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "dqn_atari": ["--total-timesteps", "300", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "4"],
    "c51_atari": ["--total-timesteps", "300", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "4"],
    "qrdqn_atari": ["--total-timesteps", "300", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "4"],
    "rainbow_atari": ["--total-timesteps", "300", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "4"],
    "sac_atari": ["--total-timesteps", "300", "--learning-starts", "200", "--buffer-size", "500", "--batch-size", "4"],
    # Atari with actor processes (spawned): one actor, sync envs
    "impala_atari": [
        *["--env-mode", "sync", "--num-actors", "1", "--num-envs", "2", "--unroll-length", "4", "--batch-size", "2"],
        *["--total-timesteps", "64"],
    ],
    "apex_dqn_atari": [
        *["--env-mode", "sync", "--num-actors", "1", "--num-envs", "2", "--hidden-size", "16", "--batch-size", "8"],
        *["--buffer-size", "1000", "--learning-starts", "40", "--target-network-frequency", "50", "--total-timesteps", "80"],
    ],
    "r2d2_async": [
        *["--env-mode", "sync", "--num-actors", "1", "--num-envs", "4", "--lstm-size", "16", "--hidden-size", "16"],
        *["--burn-in", "2", "--learn-length", "4", "--n-step", "2", "--batch-size", "8", "--buffer-size", "500"],
        *["--learning-starts", "200", "--target-network-frequency", "50", "--total-timesteps", "400"],
    ],
    # EnvPool Atari (their defaults: Breakout-v5, MontezumaRevenge-v5)
    "ppo_atari_envpool": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "pqn_atari_envpool": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "pqn_atari_envpool_lstm": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "ppo_rnd_envpool": [
        *["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--num-iterations-obs-norm-init", "1"],
        *["--total-timesteps", "32"],
    ],
    # Procgen (starpilot, the default)
    "ppo_procgen": ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "64"],
    "ppg_procgen": [
        *["--num-envs", "2", "--num-steps", "16", "--n-iteration", "2", "--num-minibatches", "2", "--e-auxiliary", "1"],
        *["--num-aux-rollouts", "2", "--total-timesteps", "64"],
    ],
    # PettingZoo: the bundled MinefieldRace, its cheapest task (the default, pong_v3, needs Atari frames)
    "ppo_pettingzoo": [
        *["--env-id", "cleanrl_utils.envs:MinefieldRace", "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2"],
        *["--total-timesteps", "128"],
    ],
}
"""Per script (``cleanrl/<name>.py``): the flags of its short run, before :data:`EVALUATED`."""

LAUNCHER: dict[str, list[str]] = {}
"""Per script, a launcher other than ``python <script>`` (none needed: ddp_ppo.py runs as one rank without torchrun)."""

SITECUSTOMIZE = '''\
"""Written by benchmark/scripts/runtime_lines.py: record the cleanrl_utils modules this interpreter loads.

Inert unless RUNTIME_LINES_DIR is set. Writes <pid>.imports (each cleanrl_utils module as it is first loaded:
an import audit hook) and <pid>.exit.json (those of sys.modules with their files, at exit: atexit and os._exit)."""

import os
import sys

_DIR = os.environ.get("RUNTIME_LINES_DIR")
_PREFIX = "cleanrl_utils"


def _ours(name):
    return isinstance(name, str) and (name == _PREFIX or name.startswith(_PREFIX + "."))


def _audit(event, args):
    if event == "import" and _ours(args[0]):
        try:
            with open(os.path.join(_DIR, f"{os.getpid()}.imports"), "a") as file:
                file.write(args[0] + "\\n")
        except OSError:
            pass


def _dump(how):
    import json

    modules = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if _ours(name) else None
        if path:
            modules[name] = os.path.abspath(path)
    record = {"pid": os.getpid(), "ppid": os.getppid(), "argv": list(sys.argv), "how": how, "modules": modules}
    target = os.path.join(_DIR, f"{os.getpid()}.exit.json")
    try:
        with open(target + ".tmp", "w") as file:
            json.dump(record, file)
        os.replace(target + ".tmp", target)
    except (OSError, TypeError, ValueError):
        pass


if _DIR:
    import atexit

    _real_exit = os._exit

    def _exit(status):
        _dump("os._exit")
        _real_exit(status)

    os._exit = _exit
    atexit.register(_dump, "atexit")
    sys.addaudithook(_audit)
'''
"""The ``sitecustomize.py`` the tool puts first on the runs' ``PYTHONPATH``."""


def wc_lines(data: bytes) -> int:
    """Physical lines as ``wc -l`` counts them: the newline characters of ``data``."""
    return data.count(b"\n")


def scripts(names: list[str] | None = None) -> list[str]:
    """The script names (``ppo``, not ``ppo.py``) to measure: ``names``, or every ``cleanrl/*.py`` but ``__init__``."""
    every = sorted(path.stem for path in SCRIPTS_DIR.glob("*.py") if path.name != "__init__.py")
    if not names:
        return every
    chosen = [name.removesuffix(".py").removeprefix("cleanrl/") for name in names]
    unknown = [name for name in chosen if name not in every]
    if unknown:
        raise SystemExit(f"--scripts: no cleanrl/{unknown[0]}.py (scripts: {', '.join(every)})")
    return chosen


def cleanrl_mapping() -> dict[str, str | None]:
    """``CLEANRL_EQUIVALENT`` of ``script_lines.py`` (beside this file, or one folder up): our script -> CleanRL's file."""
    here = Path(__file__).resolve().parent
    for path in (here / "script_lines.py", here.parent / "script_lines.py"):
        if path.is_file():
            spec = importlib.util.spec_from_file_location("_script_lines", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return dict(module.CLEANRL_EQUIVALENT)
    raise SystemExit(f"script_lines.py not found in {here} nor in {here.parent}: it holds the pairing with CleanRL")


class CleanRL:
    """A CleanRL checkout (a folder with ``cleanrl/``) or a bare git repository (files read from ``HEAD``)."""

    def __init__(self, path: Path):
        self.path = path
        self.bare = not (path / "cleanrl").is_dir()
        if self.bare:
            probe = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
            if probe.returncode != 0:
                raise SystemExit(f"--cleanrl {path}: neither a folder with cleanrl/ nor a git repository")
        self.commit = self._commit()

    def _commit(self) -> str | None:
        probe = subprocess.run(["git", "-C", str(self.path), "rev-parse", "HEAD"], capture_output=True, text=True)
        return probe.stdout.strip() if probe.returncode == 0 else None

    def lines(self, relative: str) -> int | None:
        """``wc -l`` of ``relative`` (``cleanrl/ppo.py``) in the checkout, or None if it has no such file."""
        if not self.bare:
            path = self.path / relative
            return wc_lines(path.read_bytes()) if path.is_file() else None
        shown = subprocess.run(["git", "-C", str(self.path), "show", f"HEAD:{relative}"], capture_output=True)
        return wc_lines(shown.stdout) if shown.returncode == 0 else None


def sitecustomize_dir(parent: Path) -> Path:
    """A folder under ``parent`` holding :data:`SITECUSTOMIZE` as ``sitecustomize.py``."""
    folder = parent / "site"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def _module_file(name: str) -> Path | None:
    """Where the module ``name`` of this repository's ``cleanrl_utils`` lives, if it is a file here."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def collect(records: Path) -> tuple[dict[str, Path], list[dict]]:
    """The union of the modules recorded in ``records`` by every process: ``{name: file}`` (files that exist),
    and per process ``{"pid", "ended", "how", "modules"}`` (``ended``: whether it wrote its exit record)."""
    found: dict[str, Path] = {}
    processes: dict[int, dict] = {}
    for path in sorted(records.glob("*.exit.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        pid = int(record["pid"])
        processes[pid] = {"pid": pid, "ended": True, "how": record["how"], "argv": record["argv"][:1], "modules": 0}
        for name, file in record["modules"].items():
            if Path(file).is_file():
                found.setdefault(name, Path(file))
        processes[pid]["modules"] = len(record["modules"])
    for path in sorted(records.glob("*.imports")):
        pid = int(path.name.split(".")[0])
        names = set(path.read_text().split())
        entry = processes.setdefault(pid, {"pid": pid, "ended": False, "how": None, "argv": None, "modules": 0})
        if not entry["ended"]:
            entry["modules"] = len(names)
        for name in names:
            if name not in found:
                file = _module_file(name)
                if file is not None:
                    found[name] = file
    return found, sorted(processes.values(), key=lambda entry: entry["pid"])


def resumed_lines(name: str, workdir: Path, site: Path, timeout: float) -> dict | None:
    """The runtime lines of a run that is resumed: ``cleanrl/<name>.py`` with its :data:`SHORT_RUN` flags and
    ``--checkpoint-interval`` half its ``--total-timesteps``, then ``--resume`` of its run directory with
    ``--save-model --eval-episodes 1`` (the resumed run restores its last checkpoint, saves and evaluates); the
    union of the modules the two processes loaded. None where the flags name no ``--total-timesteps``."""
    flags = SHORT_RUN.get(name, [])
    if "--total-timesteps" not in flags or name in LAUNCHER:
        return None
    total = int(flags[flags.index("--total-timesteps") + 1])
    first = measure(name, workdir / "first", site, timeout, [*flags, "--checkpoint-interval", str(max(total // 2, 1))])
    runs = list((workdir / "first" / "cwd").glob("runs/*"))
    if not runs:
        return {"runtime_lines": first["runtime_lines"], "failure": first.get("failure", "no run directory")}
    resume = ["--resume", str(runs[0]), *EVALUATED]
    second = measure(name, workdir / "first", site, timeout, resume, keep=True)
    modules = {**first["modules"], **second["modules"]}
    row = {"runtime_lines": sum(modules.values()), "modules": dict(sorted(modules.items(), key=lambda kv: (-kv[1], kv[0])))}
    failure = first.get("failure") if first.get("failure") not in (None, "no saved model", "no evaluation") else None
    return {**row, **({"failure": failure or second["failure"]} if failure or second.get("failure") else {})}


def measure(name: str, workdir: Path, site: Path, timeout: float, flags: list[str] | None = None, keep: bool = False) -> dict:
    """Run ``cleanrl/<name>.py`` with ``flags`` (default its :data:`SHORT_RUN` flags and :data:`EVALUATED`) in
    ``workdir`` (with ``keep``, in the working directory a first run left there); count the runtime it loaded.
    Returns the script's row (lines, modules, processes, exit status, seconds)."""
    records = workdir / ("records2" if keep else "records")
    cwd = workdir / "cwd"
    records.mkdir(parents=True)
    cwd.mkdir(exist_ok=keep)
    script = SCRIPTS_DIR / f"{name}.py"
    flags = [*SHORT_RUN.get(name, []), *EVALUATED] if flags is None else flags
    command = [*LAUNCHER.get(name, [sys.executable]), str(script), *flags]
    python_path = os.pathsep.join(filter(None, [str(site), str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "RUNTIME_LINES_DIR": str(records)}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")
    env.pop("WANDB_API_KEY", None)
    started = time.monotonic()
    # its own session: on a timeout the whole process group (actors, env workers) is killed, not the script alone
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = None
    seconds = time.monotonic() - started
    found, processes = collect(records)
    modules = {module: wc_lines(file.read_bytes()) for module, file in sorted(found.items())}
    runtime = {module: lines for module, lines in modules.items() if module not in APART}
    model_saved = bool(list(cwd.glob(f"runs/*/{name}.cleanrl_model")))
    evaluated = "evaluation over 1 episodes" in output
    row = {
        "script": f"{name}.py",
        "own_lines": wc_lines(script.read_bytes()),
        "runtime_lines": sum(runtime.values()),
        "modules": dict(sorted(runtime.items(), key=lambda item: (-item[1], item[0]))),
        "apart": {module: lines for module, lines in modules.items() if module in APART},
        "command": ["python", f"cleanrl/{name}.py", *flags] if name not in LAUNCHER else command,
        "returncode": returncode,
        "model_saved": model_saved,
        "evaluated": evaluated,
        "seconds": round(seconds, 1),
        "processes": processes,
    }
    failure = "timed out" if returncode is None else f"exit {returncode}" if returncode else None
    failure = failure or (None if model_saved else "no saved model") or (None if evaluated else "no evaluation")
    if failure:
        row["failure"] = failure
        row["output_tail"] = output.strip().splitlines()[-5:]
    return row


def over_budget(rows: list[dict]) -> list[str]:
    """One line per script over its budget (:data:`BUDGET`, :data:`BUDGET_ANY`)."""
    lines = []
    for row in rows:
        name = row["script"].removesuffix(".py")
        limit = BUDGET.get(name, BUDGET_ANY)
        if row["runtime_lines"] > limit:
            lines.append(f"{row['script']} loads {row['runtime_lines']} runtime lines, over its budget of {limit}")
    return lines


def _short(module: str) -> str:
    """``cleanrl_utils.run`` -> ``run``; the package itself -> ``__init__``."""
    return "__init__" if module == RUNTIME else module.removeprefix(RUNTIME + ".")


def markdown(rows: list[dict]) -> str:
    """The table: script | own lines | runtime lines loaded | modules | CleanRL file | its lines | its runtime lines."""
    out = [
        "| script | own lines | runtime lines loaded | modules | CleanRL file | its lines | its runtime lines |",
        "|---|---:|---:|---|---|---:|---:|",
    ]
    if any("with_resume" in row for row in rows):
        out[0] = out[0].replace(" | modules |", " | with a resume | modules |")
        out[1] = "|---|---:|---:|---:|---|---|---:|---:|"
    for row in rows:
        modules = ", ".join(f"{_short(module)} {lines}" for module, lines in row["modules"].items())
        runtime = str(row["runtime_lines"])
        if row.get("failure"):
            runtime += f" (run failed: {row['failure']})"
        theirs = row.get("cleanrl_file")
        their_lines = row.get("cleanrl_lines")
        resumed = row.get("with_resume") or {}
        cells = [
            row["script"],
            str(row["own_lines"]),
            runtime,
            *(
                [str(resumed.get("runtime_lines", "—")) + (" (failed)" if resumed.get("failure") else "")]
                if "with_resume" in row
                else []
            ),
            modules,
            theirs or "—",
            "" if their_lines is None else str(their_lines),
            "" if their_lines is None else str(row["cleanrl_runtime_lines"]),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _git_head() -> str | None:
    probe = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return probe.stdout.strip() if probe.returncode == 0 else None


def _uncommitted() -> list[str]:
    """Uncommitted changes to the measured code (``cleanrl/``, ``cleanrl_utils/``), as ``git status --short`` lines."""
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--short", "--", "cleanrl", "cleanrl_utils"], capture_output=True, text=True
    )
    return probe.stdout.splitlines()


def _machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        lscpu = ""
    for line in lscpu.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    """Measure the scripts; print the table (or write ``--json``/``--markdown``); the exit status as documented."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scripts", nargs="+", help="script names to measure (ppo dqn ...; default: every cleanrl/*.py)")
    parser.add_argument("--cleanrl", type=Path, help="a CleanRL checkout or bare git repository, for column (c)")
    parser.add_argument("--json", type=Path, help="write the results (rows and how they were made) to this file")
    parser.add_argument("--markdown", type=Path, help="write the table to this file")
    parser.add_argument("--check-budget", action="store_true", help="exit 1 if a script loads more than its budget")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed to each run (default 600)")
    parser.add_argument("--with-resume", action="store_true", help="also count a run stopped and resumed (column d)")
    args = parser.parse_args(argv)
    names = scripts(args.scripts)
    missing = [name for name in names if name not in SHORT_RUN]
    if missing:
        print(f"no SHORT_RUN flags for {', '.join(missing)}: run with their defaults (may be long)", file=sys.stderr)
    mapping = cleanrl_mapping()
    cleanrl = CleanRL(args.cleanrl) if args.cleanrl else None
    rows = []
    temporary = Path(tempfile.mkdtemp(prefix="runtime_lines_"))
    try:
        site = sitecustomize_dir(temporary)
        for name in names:
            row = measure(name, temporary / name, site, args.timeout)
            if args.with_resume:
                row["with_resume"] = resumed_lines(name, temporary / name / "resumed", site, args.timeout)
            shutil.rmtree(temporary / name, ignore_errors=True)
            theirs = mapping.get(name)
            if cleanrl is not None and theirs:
                row["cleanrl_file"] = f"cleanrl/{theirs}.py"
                row["cleanrl_lines"] = cleanrl.lines(row["cleanrl_file"])
                row["cleanrl_runtime_lines"] = 0  # CleanRL has no runtime of this kind (see the module docstring)
            status = f"FAILED ({row['failure']})" if row.get("failure") else "ok"
            print(f"{row['script']}: {row['runtime_lines']} runtime lines, {row['seconds']} s, {status}", file=sys.stderr)
            if row.get("failure"):
                print("    " + "\n    ".join(row["output_tail"]), file=sys.stderr)
            rows.append(row)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    table = markdown(rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "what": "runtime lines loaded per script: benchmark/scripts/runtime_lines.py (its docstring says how)",
            "commit": _git_head(),
            "uncommitted_in_cleanrl_and_cleanrl_utils": _uncommitted(),
            "machine": _machine(),
            "python": platform.python_version(),
            "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *(argv if argv is not None else sys.argv[1:])]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "cleanrl": {"path": str(args.cleanrl), "commit": cleanrl.commit} if cleanrl else None,
            "apart": list(APART),
            "budget": {**{f"{name}.py": limit for name, limit in BUDGET.items()}, "any other": BUDGET_ANY},
            "rows": rows,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    print(table, end="")
    status = 0
    if args.check_budget:
        excess = over_budget(rows)
        for line in excess:
            print(f"over budget: {line}", file=sys.stderr)
        status = 1 if excess else 0
    failed = [row["script"] for row in rows if row.get("failure")]
    if failed:
        print(f"runs that failed (their counts are lower bounds): {', '.join(failed)}", file=sys.stderr)
        status = status or 2
    return status


if __name__ == "__main__":
    sys.exit(main())

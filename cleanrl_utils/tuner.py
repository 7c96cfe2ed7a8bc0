"""Hyperparameter tuning of any script with Optuna.

Each trial runs the script once per environment and seed, as a subprocess, with the flags
the sampler suggests, reads the objective from that run's TensorBoard events, normalises it
per environment and aggregates it across environments. Bad trials are pruned as the trial
proceeds; the study lives in a storage (SQLite by default), so rerunning the same command
resumes it.

Objective of a trial:

1. For each environment, in the order given, and each seed ``1 .. num_seeds``: run
   ``python <script> <suggested flags> <fixed flags> --env-id <env> --seed <seed>`` with the
   trial's own folder as working directory (the run directory goes under its ``runs/``).
2. Score of a run: the mean of the last ``metric_last_n`` values of the TensorBoard tag
   ``metric`` (default ``charts/episodic_return``) in its run directory.
3. Score of an environment: the mean over its seeds, min-max normalised with the env's
   target scores ``[low, high]``: ``(score - low) / (high - low)`` (0 at low, 1 at high;
   ``None`` keeps the raw score, allowed when tuning on one environment).
4. After each run, the aggregation (``average``, ``median``, ``min`` or ``max``) over the
   environments scored so far is reported to ``trial.report`` at step ``k`` (the number of
   runs finished, minus one); while runs remain, ``trial.should_prune()`` may stop the
   trial (pruned). The trial's value is the aggregation over all environments.

A run that exits non-zero, or whose events lack the metric, fails its trial (state FAIL,
the end of its log printed) and the study goes on with the next trial.

Files: ``{runs_dir}/{study_name}/trial_{number:04d}/`` holds each run's log
``{env}__{seed}.log`` and its run directory under ``runs/``. The study's name (``/`` and ``:``
read as ``-``) must be one folder name, never ``..``; the study and trial folders are real
folders (a link there is refused) and each log a new file (a link at its name is refused, never
written through). Each trial records
``flags`` (of its runs, less ``--env-id`` and ``--seed``), ``scores`` (raw, per env),
``normalized_scores`` and ``run_dirs`` as Optuna user attributes.

Search-space syntax of the command line (``--search``, repeatable):

- ``NAME=float:LOW:HIGH`` or ``NAME=float:LOW:HIGH:log``: a float in [LOW, HIGH]
  (log-uniform with ``:log``);
- ``NAME=int:LOW:HIGH`` or ``NAME=int:LOW:HIGH:log``: an integer in [LOW, HIGH];
- ``NAME=categorical:A,B,C``: one of the values; ``true``/``false`` are booleans (flag
  ``--NAME`` / ``--no-NAME``), numbers are numbers, anything else a string.

``NAME`` is the script's flag without the leading ``--`` (``learning-rate``; underscores are
read as dashes). ``--fixed NAME=VALUE`` (repeatable) passes the same value to every run.

Run:
    python -m cleanrl_utils.tuner --script cleanrl/ppo.py --env-ids CartPole-v1 \\
        --search learning-rate=float:1e-4:1e-2:log --search num-minibatches=categorical:1,2,4 \\
        --fixed total-timesteps=20000 --num-trials 10 --storage sqlite:///tuner.db \\
        --study-name ppo-cartpole
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import numbers
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from cleanrl_utils.cli import (
    OneLineParser,
    check_name,
    check_text,
    fail,
    log_tail,
    make_folder,
    printed_run_dir,
    require,
    safe_name,
)
from cleanrl_utils.writes import create_new

AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "average": lambda values: float(np.mean(values)),
    "median": lambda values: float(np.median(values)),
    "min": lambda values: float(np.min(values)),
    "max": lambda values: float(np.max(values)),
}
"""How the normalised scores of several environments become one value."""

RESERVED_FLAGS = ("env-id", "seed")
"""Flags the tuner sets itself on every run."""

LOG_TAIL_LINES = 20
"""Lines of a failed run's log printed with its failure."""


class RunFailed(Exception):
    """A run of a trial exited non-zero, or its events lack the metric: the trial fails."""


# ---------------------------------------------------------------------------------------
# search space


@dataclasses.dataclass(frozen=True)
class Param:
    """One dimension of the search space, parsed from ``NAME=KIND:...``.

    Attributes:
        name: the flag without ``--`` (``learning-rate``); also the Optuna parameter name.
        kind: ``"float"``, ``"int"`` or ``"categorical"``.
        low, high: bounds, inclusive (float and int).
        log: sample on a log scale (float and int; needs ``low > 0``).
        choices: the values of a categorical.
    """

    name: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    choices: tuple = ()

    def suggest(self, trial: Any) -> Any:
        """The value ``trial`` (an ``optuna.Trial``) suggests for this parameter."""
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, log=self.log)
        return trial.suggest_categorical(self.name, list(self.choices))


def flag_key(name: str) -> str:
    """A flag name as the tuner keys it: ``--learning_rate`` -> ``learning-rate``."""
    return name.strip().removeprefix("--").replace("_", "-")


def parse_value(text: str) -> bool | int | float | str:
    """A value of the command line: ``true``/``false`` -> bool, ``4`` -> int, ``1e-3`` ->
    float, anything else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_search(text: str) -> Param:
    """Parse one ``--search`` entry (syntax in the module docstring).

    Raises:
        ValueError: the entry does not follow the syntax; the message says what would.
    """
    name, equals, spec = text.partition("=")
    name = flag_key(name)
    if not equals or not name:
        raise ValueError(f"{text!r} is not NAME=KIND:...; e.g. learning-rate=float:1e-4:1e-2:log")
    if name in RESERVED_FLAGS:
        raise ValueError(f"{name!r} is set by the tuner (--env-ids, --num-seeds); it cannot be searched")
    kind, _, rest = spec.partition(":")
    if kind == "categorical":
        choices = tuple(parse_value(value) for value in rest.split(",")) if rest else ()
        if not choices or any(value == "" for value in choices):
            raise ValueError(f"{text!r}: categorical needs values A,B,...; e.g. {name}=categorical:1,2,4")
        if len(set(choices)) != len(choices):
            raise ValueError(f"{text!r}: categorical values repeat")
        return Param(name, "categorical", choices=choices)
    if kind not in ("float", "int"):
        raise ValueError(f"{text!r}: kind {kind!r} is not float, int or categorical")
    parts = rest.split(":")
    log = len(parts) == 3 and parts[2] == "log"
    if len(parts) != 2 and not log:
        raise ValueError(f"{text!r}: {kind} needs LOW:HIGH or LOW:HIGH:log; e.g. {name}={kind}:1:10")
    number = float if kind == "float" else int
    try:
        low, high = number(parts[0]), number(parts[1])
    except ValueError:
        raise ValueError(f"{text!r}: bounds {parts[0]!r}, {parts[1]!r} are not {kind}s") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"{text!r}: needs finite bounds with LOW <= HIGH")
    if log and low <= 0:
        raise ValueError(f"{text!r}: a log scale needs LOW > 0")
    return Param(name, kind, low, high, log)


def parse_fixed(text: str) -> tuple[str, Any]:
    """Parse one ``--fixed NAME=VALUE`` entry into ``(name, value)``.

    Raises:
        ValueError: no ``=``, an empty name, or a flag the tuner sets itself.
    """
    name, equals, value = text.partition("=")
    name = flag_key(name)
    if not equals or not name:
        raise ValueError(f"{text!r} is not NAME=VALUE; e.g. total-timesteps=50000")
    if name in RESERVED_FLAGS:
        raise ValueError(f"{name!r} is set by the tuner (--env-ids, --num-seeds)")
    return name, parse_value(value)


def to_flags(values: Mapping[str, Any]) -> list[str]:
    """Command-line flags for ``{name: value}``: ``["--learning-rate", "0.001"]``; a bool
    gives ``--name`` (True) or ``--no-name`` (False), tyro's convention."""
    flags: list[str] = []
    for name, value in values.items():
        name = flag_key(name)
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no-{name}")
        else:
            flags += [f"--{name}", str(value)]
    return flags


# ---------------------------------------------------------------------------------------
# scores


def read_metric(run_dir: str | os.PathLike, metric: str, last_n: int) -> float:
    """Mean of the last ``last_n`` values of the scalar ``metric`` in ``run_dir``'s events.

    Raises:
        RunFailed: the events hold no value of ``metric``.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    if metric not in accumulator.Tags()["scalars"]:
        raise RunFailed(f"no {metric!r} in the TensorBoard events of {run_dir}")
    values = [event.value for event in accumulator.Scalars(metric)]
    return float(np.mean(values[-last_n:]))


def normalize(score: float, target: Sequence[float] | None) -> float:
    """Min-max normalised ``score``: ``(score - low) / (high - low)`` for ``target = [low,
    high]`` (0 at low, 1 at high, outside [0, 1] beyond them); the raw score for None."""
    if target is None:
        return float(score)
    low, high = target
    return (float(score) - low) / (high - low)


def aggregate(normalized: Sequence[float], aggregation: str) -> float:
    """One value from the normalised scores of several environments.

    Raises:
        ValueError: an unknown ``aggregation`` (see :data:`AGGREGATIONS`).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    return AGGREGATIONS[aggregation](list(normalized))


# ---------------------------------------------------------------------------------------
# the tuner


def default_study_name(script: str | os.PathLike, env_ids: Sequence[str]) -> str:
    """``<script stem>__<env ids>``: ``ppo__CartPole-v1_Acrobot-v1``."""
    return f"{Path(script).stem}__{'_'.join(safe_name(e) for e in env_ids)}"


def study_folder(study_name: str) -> str:
    """The folder name of a study: ``study_name`` with ``/`` and ``:`` as ``-``.

    Raises:
        ValueError: it is not one folder name (empty, ``.``, ``..``, a control character, over 200 bytes).
    """
    folder = safe_name(study_name)
    if folder in ("", ".", "..") or not folder.isprintable() or len(folder.encode("utf-8", "surrogateescape")) > 200:
        raise ValueError(f"study name {study_name!r} is not a folder name (empty, '.', '..', a control character, long)")
    return folder


def new_log(path: Path) -> Any:
    """Open a run's log ``path`` as a new text file. A regular file there (a log an earlier study
    with this name and runs folder left) is removed first; a link, folder or FIFO is refused.

    Raises:
        UnsafePath: something other than a regular file is at ``path``.
    """
    if os.path.isfile(path) and not os.path.islink(path):
        os.unlink(path)
    return create_new(path, "w")


def _one_name(name: str, value: Any, cleanrl_name: str, cleanrl_value: Any, default: Any) -> Any:
    """The value of a keyword that CleanRL's Tuner names otherwise: given under one name, or ``default``.

    Raises:
        TypeError: given under both names.
    """
    if value is not None and cleanrl_value is not None:
        raise TypeError(f"Tuner got both {name} and {cleanrl_name} (CleanRL's name of {name}); give one")
    return next((v for v in (value, cleanrl_value) if v is not None), default)


class Tuner:
    """An Optuna study over the flags of ``script`` on one or more environments.

    Args:
        script: path of the script to tune (run as ``python <script> ...``); it must take
            ``--env-id`` and ``--seed`` and write TensorBoard events into a run directory
            under ``runs/`` of its working directory (every script of ``cleanrl/`` does).
        metric: TensorBoard scalar tag that is the objective.
        target_scores: ``{env_id: [low, high]}`` in tuning order; ``low``/``high`` are the
            scores normalised to 0/1. ``None`` instead of a pair keeps raw scores (one env only).
        params_fn: ``trial -> {flag: value}``, the search space (``trial.suggest_*`` calls);
            flag names without ``--``. Bools become ``--flag`` / ``--no-flag``.
        fixed: ``{flag: value}`` passed unchanged to every run.
        direction: ``"maximize"`` or ``"minimize"`` the aggregated value.
        aggregation: ``"average"`` (None: the default), ``"median"``, ``"min"`` or ``"max"`` across environments.
        metric_last_n: values of ``metric`` averaged at the end of a run (None: the default, 20).
        pruner: an ``optuna.pruners`` object; default ``MedianPruner(n_startup_trials=5)``.
        sampler: an ``optuna.samplers`` object; default Optuna's (TPE).
        storage: Optuna storage URL; ``sqlite:///tuner.db`` is the file ``tuner.db``.
        study_name: the study's name in the storage; default ``<script stem>__<env ids>``.
            A study of that name already in the storage is resumed.
        runs_dir: folder of the trials' folders (``{runs_dir}/{study_name}/trial_NNNN``).
        max_consecutive_failures: stop :meth:`tune` after this many failed trials in a row
            (a broken script fails them all); None never stops.
        python: the interpreter that runs the script (default: this one).
        stream: where progress lines go (default stdout).
        aggregation_type, metric_last_n_average_window: CleanRL's names of ``aggregation`` and
            ``metric_last_n``, with the same meaning (CleanRL's default window is 50, this one's 20).

    Raises:
        TypeError: a keyword given under both its names (``aggregation`` and ``aggregation_type``, or
            ``metric_last_n`` and ``metric_last_n_average_window``).
        ValueError: an empty ``target_scores``, a target with ``low >= high``, raw scores on
            several environments, an unknown direction or aggregation, a ``metric_last_n`` (or
            ``metric_last_n_average_window``) that is not an int of at least 1 (2.5, nan, True), or
            a study name that is not a folder name (:func:`study_folder`).
        FileNotFoundError: ``script`` is not a file.
    """

    def __init__(
        self,
        script: str | os.PathLike,
        metric: str = "charts/episodic_return",
        target_scores: Mapping[str, Sequence[float] | None] | None = None,
        params_fn: Callable[[Any], Mapping[str, Any]] | None = None,
        fixed: Mapping[str, Any] | None = None,
        direction: str = "maximize",
        aggregation: str | None = None,
        metric_last_n: int | None = None,
        pruner: Any = None,
        sampler: Any = None,
        storage: str = "sqlite:///tuner.db",
        study_name: str | None = None,
        runs_dir: str | os.PathLike = "tuner_runs",
        max_consecutive_failures: int | None = 3,
        python: str = sys.executable,
        stream: Any = None,
        *,
        aggregation_type: str | None = None,
        metric_last_n_average_window: int | None = None,
    ):
        aggregation = _one_name("aggregation", aggregation, "aggregation_type", aggregation_type, "average")
        metric_last_n = _one_name(
            "metric_last_n", metric_last_n, "metric_last_n_average_window", metric_last_n_average_window, 20
        )
        self.script = Path(script)
        if not self.script.is_file():
            raise FileNotFoundError(f"no script {str(script)!r}")
        if not target_scores:
            raise ValueError("target_scores must name at least one environment")
        for env_id, target in target_scores.items():
            if target is None:
                if len(target_scores) > 1:
                    raise ValueError(
                        f"{env_id}: raw scores (target None) cannot be aggregated with other envs; give every env [low, high]"
                    )
            elif len(target) != 2 or not target[0] < target[1]:
                raise ValueError(f"{env_id}: target scores must be [low, high] with low < high, got {target!r}")
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
        window = "metric_last_n_average_window" if metric_last_n_average_window is not None else "metric_last_n"
        if not isinstance(metric_last_n, numbers.Integral) or isinstance(metric_last_n, bool) or metric_last_n < 1:
            raise ValueError(f"{window} must be a whole number of values, at least 1, got {metric_last_n!r}")
        self.metric = metric
        self.target_scores = dict(target_scores)
        self.params_fn = params_fn or (lambda trial: {})
        self.fixed = {flag_key(name): value for name, value in (fixed or {}).items()}
        self.direction = direction
        self.aggregation = aggregation
        self.metric_last_n = metric_last_n
        self.pruner = pruner
        self.sampler = sampler
        self.storage = storage
        self.study_name = study_name or default_study_name(self.script, self.target_scores)
        self.runs_dir = Path(runs_dir)
        self.study_dir = self.runs_dir / study_folder(self.study_name)
        self.max_consecutive_failures = max_consecutive_failures
        self.python = python
        self.stream = stream if stream is not None else sys.stdout

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def create_study(self) -> Any:
        """Create the study in the storage, or load it if one of that name is there."""
        import optuna

        if self.pruner is None:
            self.pruner = optuna.pruners.MedianPruner(n_startup_trials=5)
        return optuna.create_study(
            storage=self.storage,
            study_name=self.study_name,
            direction=self.direction,
            sampler=self.sampler,
            pruner=self.pruner,
            load_if_exists=True,
        )

    def run_once(self, trial_dir: Path, flags: list[str], env_id: str, seed: int) -> tuple[float, Path]:
        """Run the script once in ``trial_dir``; return its metric score and run directory.

        The subprocess's stdout and stderr go to ``trial_dir/{env}__{seed}.log`` (:func:`new_log`).
        The run directory is the one the script prints (``run directory: ...``), else the only
        new folder under ``trial_dir/runs``.

        Raises:
            RunFailed: a non-zero exit status, no run directory, or no metric in it.
            UnsafePath: a folder below ``runs_dir`` is a link, or something other than a regular
                file is at the log's name.
        """
        self.runs_dir.mkdir(parents=True, exist_ok=True)  # as given: it may be a link the user made
        make_folder(trial_dir, self.runs_dir)
        runs = trial_dir / "runs"
        before = set(runs.iterdir()) if runs.is_dir() else set()
        log = trial_dir / f"{safe_name(env_id)}__{seed}.log"
        command = [self.python, str(self.script.resolve()), *flags, "--env-id", env_id, "--seed", str(seed)]
        # the script imports the same cleanrl_utils as the tuner, and modules of the caller's folder
        # (custom "package.module:Env-v0" ids) although its working directory is the trial's
        paths = [str(Path(__file__).resolve().parent.parent), os.getcwd(), os.environ.get("PYTHONPATH", "")]
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        with new_log(log) as output:
            output.write("$ " + " ".join(command) + "\n")
            output.flush()
            status = subprocess.run(
                command, cwd=trial_dir, env=environ, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            ).returncode
        if status != 0:
            raise RunFailed(
                f"{env_id} seed {seed} exited with status {status}; log {log}:\n{chr(10).join(log_tail(log, LOG_TAIL_LINES))}"
            )
        run_dir = printed_run_dir(log, trial_dir)
        if run_dir is None:
            new = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
            if len(new) != 1:
                raise RunFailed(
                    f"{env_id} seed {seed}: cannot tell its run directory under {runs} ({len(new)} new folders); log {log}"
                )
            run_dir = new[0]
        return read_metric(run_dir, self.metric, self.metric_last_n), run_dir

    def objective(self, trial: Any, num_seeds: int) -> float:
        """Run a trial (see the module docstring); return its aggregated value.

        Raises:
            optuna.TrialPruned: the pruner stopped the trial after one of its runs.
            RunFailed: a run failed.
        """
        import optuna

        values = {flag_key(name): value for name, value in self.params_fn(trial).items()}
        flags = to_flags({**self.fixed, **values})
        trial_dir = self.study_dir / f"trial_{trial.number:04d}"
        envs = list(self.target_scores)
        scores: dict[str, list[float]] = {}
        normalized: dict[str, float] = {}
        run_dirs: list[str] = []
        total_runs = len(envs) * num_seeds
        step = 0
        trial.set_user_attr("flags", flags)
        self._print(f"trial {trial.number}: {shlex.join(flags)}")
        for env_id in envs:
            for seed in range(1, num_seeds + 1):
                start = time.perf_counter()
                score, run_dir = self.run_once(trial_dir, flags, env_id, seed)
                scores.setdefault(env_id, []).append(score)
                run_dirs.append(str(run_dir))
                normalized[env_id] = normalize(float(np.mean(scores[env_id])), self.target_scores[env_id])
                value = aggregate(list(normalized.values()), self.aggregation)
                trial.set_user_attr("scores", {e: float(np.mean(s)) for e, s in scores.items()})
                trial.set_user_attr("normalized_scores", normalized)
                trial.set_user_attr("run_dirs", run_dirs)
                self._print(
                    f"trial {trial.number}: {env_id} seed {seed}: {self.metric} {score:.4g}"
                    + (f" (normalised {normalize(score, target):.4g})" if (target := self.target_scores[env_id]) else "")
                    + f", {self.aggregation} so far {value:.4g} [{time.perf_counter() - start:.0f} s]"
                )
                trial.report(value, step)
                step += 1
                if step < total_runs and trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at step {step - 1} with value {value:.4g}")
        return aggregate(list(normalized.values()), self.aggregation)

    def tune(self, num_trials: int, num_seeds: int = 1) -> Any:
        """Run trials until the study holds ``num_trials`` finished ones; return the study.

        Finished trials (complete, pruned or failed) already in the storage count, so
        calling this again with the same storage and study name resumes the study, and
        with a larger ``num_trials`` extends it. Trials left running by an interrupted
        process are ignored. A failed trial prints why (with its log's end) and the study
        goes on, up to ``max_consecutive_failures`` failures in a row.

        Args:
            num_trials: total trials the study should hold.
            num_seeds: runs per environment in each trial (seeds 1 .. num_seeds).

        Raises:
            ValueError: ``num_trials`` or ``num_seeds`` below 1.
            RuntimeError: ``max_consecutive_failures`` trials failed in a row.
            OSError: a log or trial folder cannot be written (``UnsafePath``: a link in the way).
        """
        import optuna
        from optuna.trial import TrialState

        if num_trials < 1 or num_seeds < 1:
            raise ValueError(f"num_trials and num_seeds must be at least 1, got {num_trials}, {num_seeds}")
        study = self.create_study()
        finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        done = len(study.get_trials(deepcopy=False, states=finished))
        self._print(
            f"study {self.study_name!r} in {self.storage}: {done} finished trials, running {max(num_trials - done, 0)} more"
        )
        failures = 0
        for _ in range(num_trials - done):
            trial = study.ask()
            try:
                value = self.objective(trial, num_seeds)
            except optuna.TrialPruned as pruned:
                study.tell(trial, state=TrialState.PRUNED)
                self._print(f"trial {trial.number}: {pruned}")
                failures = 0
                continue
            except RunFailed as error:
                study.tell(trial, state=TrialState.FAIL)
                self._print(f"trial {trial.number} failed: {error}")
                failures += 1
                if self.max_consecutive_failures is not None and failures >= self.max_consecutive_failures:
                    raise RuntimeError(
                        f"{failures} trials failed in a row; stopping the study (the logs are in {self.study_dir})"
                    ) from None
                continue
            except BaseException:  # Ctrl-C or a bug: the trial is not left running in the storage
                study.tell(trial, state=TrialState.FAIL)
                raise
            study.tell(trial, value)
            self._print(f"trial {trial.number}: value {value:.4g}")
            failures = 0
        return study


# ---------------------------------------------------------------------------------------
# command line


def script_flags(python: str, script: Path) -> set[str]:
    """The flags (``learning-rate``, ...) that ``script --help`` lists.

    Raises:
        SystemExit: (status 2, one line) the help does not run.
    """
    environ = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    paths = [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
    environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    result = subprocess.run(
        [python, str(script), "--help"], capture_output=True, text=True, env=environ, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fail("--script", f"`{script} --help` exited with status {result.returncode}: {last}")
    return set(re.findall(r"(?<![\w-])--([A-Za-z0-9][\w-]*)", result.stdout))


def best_summary(study: Any, script: str, fixed: Mapping[str, Any]) -> str:
    """Lines naming the study's best trial: number, value, parameters, and its command."""
    trial = study.best_trial
    lines = [f"best trial {trial.number}: value {trial.value:.6g}"]
    lines += [f"  {name} = {value!r}" for name, value in trial.params.items()]
    if trial.user_attrs.get("scores"):
        lines.append("  scores: " + ", ".join(f"{e} {s:.4g}" for e, s in trial.user_attrs["scores"].items()))
    flags = trial.user_attrs.get("flags") or to_flags({**fixed, **trial.params})
    for env_id in trial.user_attrs.get("scores") or [None]:  # the trial's command on each env it was scored on
        where = f" on {env_id}" if env_id else ""
        lines.append(f"  command{where}: " + shlex.join(["python", script, *flags, *(["--env-id", env_id] if env_id else [])]))
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    """The command line's parser (``python -m cleanrl_utils.tuner --help``)."""
    parser = OneLineParser(
        prog="python -m cleanrl_utils.tuner",
        description="Tune a script's flags with Optuna: each trial runs the script per env and seed, "
        "reads a TensorBoard metric, normalises it per env and aggregates across envs; "
        "bad trials are pruned; rerunning the same command resumes the study.",
        epilog="search syntax: NAME=float:LOW:HIGH[:log] | NAME=int:LOW:HIGH[:log] | NAME=categorical:A,B,C "
        "(true/false are booleans: --NAME / --no-NAME). Example: --search learning-rate=float:1e-4:1e-2:log",
    )
    parser.add_argument("--script", required=True, help="the script to tune, e.g. cleanrl/ppo.py")
    parser.add_argument("--env-ids", nargs="+", required=True, help="environments, tuned in this order")
    parser.add_argument(
        "--target-scores",
        action="append",
        default=[],
        metavar="ENV=LOW:HIGH",
        help="scores normalised to 0 and 1 on ENV (repeatable); needed for every env when "
        "there are several, optional for one (raw scores)",
    )
    parser.add_argument(
        "--search",
        action="append",
        default=[],
        metavar="NAME=KIND:...",
        help="a dimension of the search space (repeatable), syntax below",
    )
    parser.add_argument(
        "--fixed", action="append", default=[], metavar="NAME=VALUE", help="a flag passed unchanged to every run (repeatable)"
    )
    parser.add_argument("--metric", default="charts/episodic_return", help="TensorBoard tag of the objective")
    parser.add_argument("--metric-last-n", type=int, default=20, help="last values of the metric averaged per run")
    parser.add_argument("--direction", choices=("maximize", "minimize"), default="maximize")
    parser.add_argument(
        "--aggregation",
        choices=tuple(AGGREGATIONS),
        default="average",
        help="how the normalised scores of the envs become one value",
    )
    parser.add_argument(
        "--num-trials", type=int, default=10, help="total trials of the study, counting finished ones already in the storage"
    )
    parser.add_argument("--num-seeds", type=int, default=1, help="runs per env in each trial (seeds 1..N)")
    parser.add_argument("--storage", default="sqlite:///tuner.db", help="Optuna storage URL")
    parser.add_argument(
        "--study-name",
        default=None,
        help="name of the study in the storage (default <script>__<envs>); an existing one is resumed",
    )
    parser.add_argument("--sampler", choices=("tpe", "random"), default="tpe")
    parser.add_argument("--sampler-seed", type=int, default=None, help="seed of the sampler")
    parser.add_argument("--pruner", choices=("median", "none"), default="median")
    parser.add_argument(
        "--pruner-startup-trials", type=int, default=5, help="trials that finish before the median pruner prunes any"
    )
    parser.add_argument("--runs-dir", default="tuner_runs", help="folder of the trials' logs and run directories")
    parser.add_argument(
        "--max-failures", type=int, default=3, help="stop after this many failed trials in a row (0: never stop)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: check every input (one-line errors, exit 2), tune, print the best."""
    args = make_parser().parse_args(argv)
    try:
        import optuna
    except ImportError:
        fail("--script", "the tuner needs optuna: pip install -e '.[tune]'")
    script = Path(args.script)
    require(script.is_file(), "--script", f"no file {args.script!r}")
    require(len(set(args.env_ids)) == len(args.env_ids), "--env-ids", "an env is given twice")
    for env_id in args.env_ids:  # each names its runs' logs
        check_text(env_id, "--env-ids")
        check_name(f"{safe_name(env_id)}__{args.num_seeds}.log", "--env-ids")
    check_name(safe_name(args.study_name or default_study_name(script, args.env_ids)), "--study-name")
    check_text(args.runs_dir, "--runs-dir")
    for flag, entries in (("--search", args.search), ("--fixed", args.fixed)):
        for text in entries:  # each reaches the runs' command lines and the printed best command
            check_text(text, flag)
    for name in ("num_trials", "num_seeds", "metric_last_n"):
        value = getattr(args, name)
        require(value >= 1, "--" + name.replace("_", "-"), f"must be at least 1, got {value}")
    require(args.pruner_startup_trials >= 0, "--pruner-startup-trials", "must be >= 0")
    require(args.max_failures >= 0, "--max-failures", "must be >= 0")
    targets: dict[str, tuple[float, float] | None] = {env_id: None for env_id in args.env_ids}
    for text in args.target_scores:
        env_id, _, bounds = text.rpartition("=")
        parts = bounds.split(":")
        try:
            low, high = (float(part) for part in parts) if len(parts) == 2 else (None, None)
        except ValueError:
            low = high = None
        require(
            low is not None and low < high and math.isfinite(low) and math.isfinite(high),
            "--target-scores",
            f"{text!r} is not ENV=LOW:HIGH with finite LOW < HIGH; e.g. CartPole-v1=0:500",
        )
        require(env_id in targets, "--target-scores", f"{env_id!r} is not one of --env-ids {' '.join(args.env_ids)}")
        targets[env_id] = (low, high)
    missing = [env_id for env_id, target in targets.items() if target is None]
    require(
        len(targets) == 1 or not missing,
        "--target-scores",
        f"needed for every env when tuning on several; missing {', '.join(missing)}",
    )
    params, fixed = [], {}
    for text in args.search:
        try:
            params.append(parse_search(text))
        except ValueError as error:
            fail("--search", str(error))
    for text in args.fixed:
        try:
            name, value = parse_fixed(text)
        except ValueError as error:
            fail("--fixed", str(error))
        fixed[name] = value
    names = [param.name for param in params]
    repeated = sorted({name for name in names if names.count(name) > 1} | (set(names) & set(fixed)))
    require(not repeated, "--search", f"{', '.join(repeated)} given more than once (in --search or --fixed)")
    seed = args.sampler_seed
    require(seed is None or 0 <= seed < 2**32, "--sampler-seed", f"must be in [0, 2**32), got {seed}")
    known = script_flags(sys.executable, script)
    for option, given in (("--search", names), ("--fixed", list(fixed))):
        for name in given:
            bare = name.removeprefix("no-")
            if name not in known and bare not in known:
                close = difflib.get_close_matches(name, sorted(known), n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                fail(option, f"{args.script} has no flag --{name}{hint}")
    if args.storage.startswith("sqlite:///"):
        database = Path(args.storage.removeprefix("sqlite:///"))
        require(database.parent.is_dir(), "--storage", f"no folder {str(database.parent)!r} for the database")
    if args.pruner == "median":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=args.pruner_startup_trials)
    else:
        pruner = optuna.pruners.NopPruner()
    if args.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=args.sampler_seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=args.sampler_seed)
    tuner = Tuner(
        script=script,
        metric=args.metric,
        target_scores=targets,
        params_fn=lambda trial: {param.name: param.suggest(trial) for param in params},
        fixed=fixed,
        direction=args.direction,
        aggregation=args.aggregation,
        metric_last_n=args.metric_last_n,
        pruner=pruner,
        sampler=sampler,
        storage=args.storage,
        study_name=args.study_name,
        runs_dir=args.runs_dir,
        max_consecutive_failures=args.max_failures or None,
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the tuner prints its own lines
    try:
        tuner.create_study()
    except Exception as error:  # a storage that cannot be opened, a stored study of the other direction
        fail(
            "--storage",
            f"cannot open study {tuner.study_name!r} in {args.storage}: "
            f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}",
        )
    try:
        tuner.runs_dir.mkdir(parents=True, exist_ok=True)
        make_folder(tuner.study_dir, tuner.runs_dir)
        study = tuner.tune(num_trials=args.num_trials, num_seeds=args.num_seeds)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1)
    except OSError as error:  # a link planted in the study folder, a full disk: one line, no traceback
        fail("--runs-dir", f"cannot write the trials' files: {error}")
    states = [trial.state.name for trial in study.trials]
    print(f"study {tuner.study_name!r}: " + ", ".join(f"{states.count(s)} {s.lower()}" for s in sorted(set(states))))
    try:
        print(best_summary(study, args.script, fixed))
    except ValueError:  # no completed trial
        print("no trial completed; no best trial yet", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()

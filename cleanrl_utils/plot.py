"""Learning curves, final-return tables and aggregate metrics of runs, from their TensorBoard events.

No Weights & Biases account is needed: everything is read from the run directories that the
scripts write (``runs/{env_id}__{exp_name}__{seed}__{unix_time}/``, see
``cleanrl_utils/run.py``). Runs are grouped by ``(env_id, exp_name)`` as read from each run's
``args.json``; the runs of a group are its seeds.

    python -m cleanrl_utils.plot runs/ --out plots
    python -m cleanrl_utils.plot --summary runs/benchmark_logs/20250101-120000/summary.json --out plots
    python -m cleanrl_utils.plot runs/CartPole-v1__* runs/Acrobot-v1__* --scores scores.json \\
        --x wall_time --smooth 10 --band std --legend ppo=PPO --format pdf --out plots

Which runs: the run directories given (or found below the folders given), plus, with
``--summary``, exactly the runs that a benchmark launcher grid lists in its ``summary.json``
with status ``ok`` and a ``run_dir`` (other entries are skipped with a warning). A ``runs/``
folder shared by several sweeps mixes them; ``--summary`` selects one. A run without the tag
(crashed before an episode ended), without event files, without a readable ``args.json``, or
unfinished (its last event before 90% of its ``total_timesteps``: killed, crashed or still
running; ``--keep-unfinished`` draws it), and a folder given without runs in it, are skipped
with a line ``warning: skipped <dir>: <why>`` on stderr; a group whose runs' last steps differ
by more than 2x, or that has two runs of one seed, and runs with fewer episodes than
``--last-episodes``, get a note.

Writes, into ``--out``:

- ``curves.<format>`` (``--format``, default png and svg; pdf too): one subplot per
  environment (3 per row), one line per ``exp_name``: the mean over seeds of the tag
  (``--tag``), each run smoothed (a trailing mean over ``--smooth`` episodes, default 20; 1 for
  none) and interpolated onto a common grid of environment steps (or of wall-clock minutes
  since the run started), with a band: a 95% bootstrap confidence interval of the mean over
  seeds, ± one standard deviation, or the range; a group of fewer than 3 seeds gets no band,
  and the figure's title and a note in ``returns.md`` say so; ``--reference`` points (published
  results) as markers with ± std error bars; one legend below the subplots. Default size:
  3.3 x 2.5 inches per subplot plus the legend (one paper column for one environment), saved
  at that size (``--figsize`` sets the whole figure's); step ticks read ``200k``, ``1M``;
  colours tab10 up to 10 exp_names, tab20 up to 20. :func:`curves_figure` returns the figure
  without saving it;
- ``returns.md`` (also printed): ``| env | exp_name | mean ± std | seeds |``, the final return
  of a run being the mean of its last ``--last-episodes`` episodes (or last
  ``--last-fraction`` of them), the mean and standard deviation (ddof 0) taken over seeds; with
  ``--reference``, a column ``published`` with the env's points;
- with ``--scores``, ``aggregate.<format>`` and ``aggregate.md``: the IQM, median, mean and
  optimality gap of the normalised final returns of each ``exp_name`` across environments,
  with 95% stratified bootstrap confidence intervals. An ``exp_name`` without runs on some
  environment is left out of the aggregate (a note names it and those environments).

Aggregate metrics follow Agarwal, Schwarzer, Castro, Courville, Bellemare (2021), "Deep
Reinforcement Learning at the Edge of the Statistical Precipice", arXiv:2108.13264: the
point estimates are rliable's (``rliable.metrics``) and the plot is rliable's
``plot_utils.plot_interval_estimates``, and the confidence intervals are rliable's stratified
bootstrap (``rliable.library.get_interval_estimates``: runs resampled with replacement within
each environment, percentile interval). rliable 1.2 needs ``arch<8``, which does not import
with pandas 3: the ``plot`` extra pins ``pandas<3``.

Names read from files (env ids, exp names, reference labels) and the tag are drawn and written
literally: ``$`` is escaped for matplotlib (no math text) and Markdown, ``|`` and other Markdown
syntax for the tables, and control characters appear as escapes (``\\n``). The texts of
``--title``, ``--xlabel``, ``--ylabel`` and ``--legend`` are drawn as given (``$\\alpha$`` is
math text); one that matplotlib cannot draw is refused. Every file is written whole through a new
file renamed over the old one, never through a link: a link, folder or FIFO at an output name
(``curves.png``, ``returns.md`` ...) stops the tool before anything is written.

Bad input (no run directory, no run left to plot, a summary, scores or reference file that
does not fit, a bad option value, no exp_name with runs on every environment for the
aggregate) stops before anything is written, with one line ``error: <flag>: ...`` and exit
status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import io
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from cleanrl_utils.cli import OneLineParser, fail, refuse_non_regular, require
from cleanrl_utils.writes import write_atomic

METRICS = ("IQM", "median", "mean", "optimality gap")
"""Names of the aggregate metrics, in the order of :func:`aggregate_metrics`' output."""


def visible(text: str) -> str:
    """``text`` with each character that is not printable (a newline, an escape, a lone surrogate)
    written as its Python escape: ``"a\\nb"`` -> ``a\\nb``, so that a name stays one line and every
    font can draw it."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def plain_text(text: str) -> str:
    """``text`` as matplotlib draws it literally: :func:`visible`, every ``$`` escaped (``\\$``), so
    that ``a$x^2$b`` or ``$\\foo$`` is never read as math text."""
    return visible(text).replace("$", r"\$")


MARKDOWN_SPECIAL = re.compile(r"[\\`*$|<>\[\]~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
"""Characters Markdown (and GitHub's math) would read as syntax in a table cell; ``_`` only where it
could start or end emphasis (``ppo_continuous`` stays as it is)."""


def markdown_text(text: str) -> str:
    """``text`` as a literal Markdown table cell: :func:`visible`, each of :data:`MARKDOWN_SPECIAL`
    escaped with a backslash (``a|b`` -> ``a\\|b``)."""
    return MARKDOWN_SPECIAL.sub(lambda match: "\\" + match.group(), visible(text))


def check_math(text: str, flag: str) -> None:
    """Fail (one line naming ``flag``) when matplotlib cannot draw ``text``: math text (between
    ``$`` signs) that does not parse, or a character that is not printable."""
    from matplotlib import cbook
    from matplotlib.mathtext import MathTextParser

    require(text.isprintable(), flag, f"{text!r} holds a control character (a newline, a tab, ...)")
    if cbook.is_math_text(text):
        try:
            MathTextParser("path").parse(text, dpi=72)
        except ValueError as error:
            reason = [line.strip() for line in str(error).splitlines() if line.strip()][-1]
            fail(flag, f"cannot draw {text!r} as math text: {reason} (write \\$ for a literal $)")


@dataclasses.dataclass
class RunData:
    """The scalars of one tag in one run directory.

    Attributes:
        directory: the run directory.
        env_id, exp_name, seed: from its ``args.json``.
        steps: environment steps of the events, int64 ``[n]``.
        values: the scalar values (episodic returns by default), float64 ``[n]``.
        minutes: wall-clock minutes of each event since the run's first event (the writer's
            start; a resumed run's pause counts too), float64 ``[n]``.
    """

    directory: Path
    env_id: str
    exp_name: str
    seed: int
    steps: np.ndarray
    values: np.ndarray
    minutes: np.ndarray


def find_runs(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """The run directories in ``paths``: each path that holds an ``args.json``, else every folder
    below it that does (``runs/`` finds all runs in it).

    Returns:
        ``(directories, warnings)``: the directories, sorted, without duplicates; a line
        ``warning: skipped <path>: no run directory ...`` per path without one (the launcher's
        ``runs/benchmark_logs`` in ``runs/*``).

    Raises:
        SystemExit: (status 2, flag ``runs``) a path is not a directory, or none holds a run.
    """
    found: set[Path] = set()
    empty = []
    for path in map(Path, paths):
        require(path.is_dir(), "runs", f"{str(path)!r} is not a directory")
        if (path / "args.json").is_file():
            found.add(path)
            continue
        inside = {p.parent for p in path.rglob("args.json")}
        empty += [] if inside else [path]
        found |= inside
    none = "no run directory (a folder with args.json)"
    require(bool(found), "runs", f"{none} in {', '.join(repr(str(p)) for p in empty)}")
    return sorted(found), [f"warning: skipped {p}: {none} in it" for p in empty]


class RunSkipped(Exception):
    """A run directory that cannot be plotted (no readable ``args.json``, no event files, no
    scalar of the tag: a crashed or unfinished run); the message says why."""


UNFINISHED = 0.9
"""A run whose last event (of any scalar) is before this fraction of its ``total_timesteps``
is unfinished (killed, crashed, or still running): the scripts log up to their last update,
within a rollout or a logging interval of the end."""


def read_run(directory: Path, tag: str = "charts/episodic_return", keep_unfinished: bool = False) -> RunData:
    """Read ``args.json`` and the scalars ``tag`` of one run directory (all its event files).

    Raises:
        RunSkipped: ``args.json`` unreadable or without ``env_id``/``exp_name``/``seed``, no
            event files, no scalar ``tag``, or (unless ``keep_unfinished``) an unfinished run:
            its last event before :data:`UNFINISHED` of the ``total_timesteps`` in ``args.json``.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not (directory / "args.json").is_file():  # a FIFO there would block the read
        raise RunSkipped("args.json is not a file")
    try:
        config = json.loads((directory / "args.json").read_text())
        env_id, exp_name, seed = config["env_id"], config["exp_name"], int(config["seed"])
        if not (isinstance(env_id, str) and isinstance(exp_name, str)):
            raise TypeError(f"env_id and exp_name must be strings, got {env_id!r} and {exp_name!r}")
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as error:
        message = visible(f"{type(error).__name__}: {error}")[:300]
        raise RunSkipped(f"args.json: cannot read env_id, exp_name and seed ({message})") from None
    env_id, exp_name = visible(env_id), visible(exp_name)  # names stay one line in notes, tables and figures
    if not any(directory.glob("events.out.tfevents.*")):
        raise RunSkipped("no TensorBoard event files")
    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    if tag not in tags:
        raise RunSkipped(f"no scalar {tag!r} (crashed or unfinished?); it has {', '.join(sorted(tags)) or 'no scalars'}")
    events = accumulator.Scalars(tag)
    total, rollouts = config.get("total_timesteps"), [config.get(key) for key in ("num_iterations", "batch_size")]
    if all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in rollouts):  # rounded down to whole rollouts
        total = rollouts[0] * rollouts[1]
    if not keep_unfinished and isinstance(total, int) and total > 0:
        last = max(event.step for name in tags for event in accumulator.Scalars(name))
        if last < UNFINISHED * total:
            raise RunSkipped(f"unfinished: its last event is at step {last:,} of {total:,} (--keep-unfinished draws it)")
    start = accumulator.FirstEventTimestamp()
    return RunData(
        directory=directory,
        env_id=env_id,
        exp_name=exp_name,
        seed=seed,
        steps=np.array([e.step for e in events], dtype=np.int64),
        values=np.array([e.value for e in events], dtype=np.float64),
        minutes=(np.array([e.wall_time for e in events], dtype=np.float64) - start) / 60.0,
    )


def read_runs(
    directories: Sequence[Path], tag: str = "charts/episodic_return", keep_unfinished: bool = False
) -> tuple[list[RunData], list[str]]:
    """Read every run directory (:func:`read_run`), skipping those that cannot be plotted.

    Returns:
        ``(runs, warnings)``: the runs read, and one line ``warning: skipped <dir>: <why>`` per
        skipped directory.

    Raises:
        SystemExit: (status 2) no run is left: flag ``--tag`` when every run lacked the tag,
            else ``runs``.
    """
    runs, warnings, reasons = [], [], []
    for directory in directories:
        try:
            runs.append(read_run(directory, tag, keep_unfinished))
        except RunSkipped as skipped:
            warnings.append(f"warning: skipped {directory}: {skipped}")
            reasons.append(str(skipped))
    if not runs:
        flag = "--tag" if reasons and all(r.startswith(f"no scalar {tag!r}") for r in reasons) else "runs"
        fail(flag, f"no run left to plot: all {len(reasons)} skipped; {directories[0]}: {reasons[0]}")
    return runs, warnings


def summary_runs(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """The run directories listed in launcher summaries (``{log_dir}/summary.json`` of
    ``python -m cleanrl_utils.benchmark``): the ``run_dir`` of every entry with status ``ok``.

    Returns:
        ``(directories, warnings)``: the directories (sorted, without duplicates), and one line
        ``warning: ...`` per entry left out (status not ``ok``, no ``run_dir``, or a ``run_dir``
        that is no longer a directory).

    Raises:
        SystemExit: (status 2, flag ``--summary``) a file is unreadable or not a JSON list of
            objects with ``env_id`` and ``seed``.
    """
    found: set[Path] = set()
    warnings = []
    for path in map(Path, paths):
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as error:
            fail("--summary", f"cannot read {str(path)!r}: {visible(error)}")
        require(
            isinstance(entries, list) and all(isinstance(e, dict) and {"env_id", "seed"} <= e.keys() for e in entries),
            "--summary",
            f"{str(path)!r} is not a launcher summary (a JSON list of runs with env_id, seed, status, run_dir)",
        )
        for entry in entries:
            where = visible(f"{path}: {entry['env_id']} seed {entry['seed']}")
            run_dir = entry.get("run_dir")
            if entry.get("status") != "ok":
                warnings.append(f"warning: skipped {where}: status {entry.get('status')!r}")
            elif not run_dir:
                warnings.append(f"warning: skipped {where}: no run_dir (a summary of an older launcher?)")
            elif not isinstance(run_dir, str) or "\0" in run_dir:
                warnings.append(f"warning: skipped {where}: run_dir {run_dir!r} is not a path")
            elif not Path(run_dir).is_dir():
                warnings.append(f"warning: skipped {where}: run_dir {run_dir} is not a directory")
            else:
                found.add(Path(run_dir))
    return sorted(found), warnings


def group_runs(runs: Sequence[RunData]) -> dict[tuple[str, str], list[RunData]]:
    """Runs grouped by ``(env_id, exp_name)``, groups sorted by key, runs by seed."""
    groups: dict[tuple[str, str], list[RunData]] = {}
    for run in runs:
        groups.setdefault((run.env_id, run.exp_name), []).append(run)
    return {key: sorted(groups[key], key=lambda r: (r.seed, str(r.directory))) for key in sorted(groups)}


def group_notes(groups: Mapping[tuple[str, str], Sequence[RunData]]) -> list[str]:
    """Notes on groups that look like mixed sweeps: several runs with one seed, or runs whose
    last steps differ by more than a factor 2 (e.g. a 500k-step run among 30k-step ones)."""
    notes = []
    for (env_id, exp_name), members in groups.items():
        repeated = sorted(seed for seed, n in Counter(r.seed for r in members).items() if n > 1)
        if repeated:
            notes.append(
                f"note: {env_id} {exp_name} has several runs of seed {', '.join(map(str, repeated))}; each counts as a run"
            )
        last = [int(r.steps[-1]) for r in members if len(r.steps)]
        if last and max(last) > 2 * min(last):
            ends = ", ".join(f"{r.directory} ({int(r.steps[-1])})" for r in members if len(r.steps))
            notes.append(
                f"note: {env_id} {exp_name} mixes runs whose last steps differ by more than 2x: {ends}; "
                "the curves are cut to the shortest (plot one sweep: --summary or its run folders)"
            )
    return notes


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` episodes; the first ones average what exists.

    ``smooth([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]``; ``window`` 1 returns the values.
    """
    values = np.asarray(values, dtype=np.float64)
    if window <= 1 or len(values) == 0:
        return values
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def final_return(run: RunData, last_episodes: int = 20, last_fraction: float | None = None) -> float:
    """Mean of the last ``last_episodes`` values of ``run`` (all of them if it has fewer), or,
    with ``last_fraction``, of the last ``ceil(last_fraction * n)`` values. Nan without values."""
    n = len(run.values)
    if n == 0:
        return float("nan")
    count = math.ceil(last_fraction * n) if last_fraction is not None else last_episodes
    return float(np.mean(run.values[-max(1, min(count, n)) :]))


def curve_matrix(
    runs: Sequence[RunData], x: str = "steps", window: int = 1, points: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """The runs' (smoothed) values interpolated linearly onto a common grid.

    The grid has ``points`` evenly spaced x values over the range that every run covers (from
    the latest first event to the earliest last event), so no run is extrapolated.

    Args:
        runs: runs of one group.
        x: ``"steps"`` (environment steps) or ``"wall_time"`` (minutes since the run started).
        window: smoothing window in episodes (:func:`smooth`).
        points: grid size.

    Returns:
        ``(grid [m], values [len(runs), m])``, ``m`` being ``points``, 1 when the runs' ranges
        meet in one point, or 0 when they do not overlap or a run has no events.
    """
    xs = [(r.steps.astype(np.float64) if x == "steps" else r.minutes) for r in runs]
    if any(len(v) == 0 for v in xs):
        return np.zeros(0), np.zeros((len(runs), 0))
    low, high = max(v[0] for v in xs), min(v[-1] for v in xs)
    if low > high:
        return np.zeros(0), np.zeros((len(runs), 0))
    grid = np.linspace(low, high, points) if high > low else np.array([low])
    return grid, np.stack([np.interp(grid, v, smooth(r.values, window)) for v, r in zip(xs, runs)])


BANDS = {"ci": "95% bootstrap CI", "std": "± one std", "range": "band: lowest to highest seed"}
"""The bands of :func:`band` (``--band``), each with how the figure's default title names it."""

BAND_SEEDS = 3
"""The fewest seeds a group's curve gets a band with: over 1 or 2 seeds a confidence interval (or a std, or a
range) says next to nothing about the spread of another seed, so the curve is drawn alone, with a note."""

SMOOTH = 20
"""``--smooth``'s default: a trailing mean over 20 episodes, the episodes the final return (``--last-episodes``)
and a run's progress line average; ``--smooth 1`` draws the raw episodic values."""


def band_notes(groups: Mapping[tuple[str, str], Sequence[RunData]]) -> list[str]:
    """A note for each group with fewer than :data:`BAND_SEEDS` runs: its curve has no band (:func:`curves_figure`);
    Markdown, names written literally (:func:`markdown_text`), for ``returns.md``."""
    return [
        f"note: {markdown_text(env_id)} {markdown_text(exp_name)} has {_seeds([len(runs)])}: "
        f"its curve has no band (a band needs {BAND_SEEDS} seeds)"
        for (env_id, exp_name), runs in groups.items()
        if len(runs) < BAND_SEEDS
    ]


def band(
    matrix: np.ndarray, kind: str = "ci", reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and a band, for a ``[seeds, points]`` matrix.

    ``kind`` ``"ci"``: at each point, the percentile bootstrap confidence interval of the mean
    (``reps`` resamples of the seeds with replacement, by :func:`stratified_bootstrap`); ``"std"``: mean ±
    standard deviation (ddof 0); ``"range"``: the lowest and highest seed. With 3 seeds a 95%
    bootstrap interval is the range (the all-lowest resample has probability 1/27 > 2.5%), and a
    std band can leave the returns' range; ``"range"`` says what the band is.
    One seed gives a band of zero width.

    Returns:
        ``(mean, lower, upper)``, each ``[points]``.
    """
    mean = matrix.mean(axis=0)
    if kind == "std":
        std = matrix.std(axis=0)
        return mean, mean - std, mean + std
    if kind == "range":
        return mean, matrix.min(axis=0), matrix.max(axis=0)
    if kind != "ci":
        raise ValueError(f"band kind must be one of {', '.join(BANDS)}, got {kind!r}")
    if len(matrix) == 1:
        return mean, mean.copy(), mean.copy()
    _, (lower, upper) = stratified_bootstrap(matrix, lambda m: m.mean(axis=0), reps, seed, confidence)
    return mean, lower, upper


def returns_table(
    groups: Mapping[tuple[str, str], Sequence[RunData]],
    last_episodes: int = 20,
    last_fraction: float | None = None,
    references: Mapping[str, Sequence[Reference]] | None = None,
) -> str:
    """Markdown table ``| env | exp_name | mean ± std | seeds |`` of the final returns
    (:func:`final_return`), mean and standard deviation (ddof 0) over the group's runs; with
    ``references`` (env_id -> points, :func:`load_references`) a last column ``published``
    gives the env's points, ``<label>: <mean> ± <std> at <step>`` (``-`` for none). Names are
    written literally (:func:`markdown_text`)."""
    what = f"last {last_fraction:.0%} of episodes" if last_fraction is not None else f"last {last_episodes} episodes"
    columns = ["env", "exp_name", f"mean ± std ({what})", "seeds"] + ["published"] * (references is not None)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for (env_id, exp_name), runs in groups.items():
        finals = np.array([final_return(r, last_episodes, last_fraction) for r in runs])
        names = f"{markdown_text(env_id)} | {markdown_text(exp_name)}"
        line = f"| {names} | {finals.mean():.2f} ± {finals.std():.2f} | {len(runs)} |"
        if references is not None:
            points = references.get(env_id, ())
            cell = "; ".join(f"{markdown_text(p.label)}: {p.mean:g} ± {p.std:g} at {p.step:,.0f}" for p in points)
            line += " " + (cell or "-") + " |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def load_scores(path: Path, env_ids: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Read ``{"<env_id>": {"random": r, "reference": s}, ...}``; return env -> ``(r, s)`` for
    ``env_ids``. The normalised score of a return x is ``(x - r) / (s - r)``.

    Raises:
        SystemExit: (status 2, flag ``--scores``) unreadable file, an env of ``env_ids``
            missing, a value that is not a number, or ``reference == random``.
    """
    try:
        content = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as error:
        fail("--scores", f"cannot read {str(path)!r}: {visible(error)}")
    require(
        isinstance(content, dict),
        "--scores",
        f'{str(path)!r} must hold a JSON object env_id -> {{"random": ..., "reference": ...}}',
    )
    scores = {}
    for env_id in env_ids:
        entry = content.get(env_id)
        require(
            isinstance(entry, dict), "--scores", f'{str(path)!r} has no entry {{"random": ..., "reference": ...}} for {env_id}'
        )
        try:
            random, reference = float(entry["random"]), float(entry["reference"])
        except (KeyError, TypeError, ValueError, OverflowError):
            fail("--scores", visible(f"{env_id}: needs numbers 'random' and 'reference', got {entry}")[:300])
        require(
            math.isfinite(random) and math.isfinite(reference) and random != reference,
            "--scores",
            f"{env_id}: 'random' and 'reference' must be finite and differ, got {random} and {reference}",
        )
        scores[env_id] = (random, reference)
    return scores


def score_matrices(
    groups: Mapping[tuple[str, str], Sequence[RunData]],
    scores: Mapping[str, tuple[float, float]],
    last_episodes: int = 20,
    last_fraction: float | None = None,
) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """Normalised final returns per ``exp_name``: ``[runs, envs]`` matrices for rliable.

    The environments are all those of ``groups``; an ``exp_name`` without runs on some of them
    is left out of the aggregate (a note names it and the missing environments). An
    ``exp_name`` with unequal numbers of runs across environments keeps its ``k`` lowest seeds
    on each (``k`` the smallest number); a note says so.

    Returns:
        ``(matrices, env_ids, notes)``: ``exp_name`` -> float64 ``[k, len(env_ids)]`` with
        column ``j`` for ``env_ids[j]`` (sorted), and notes to print.

    Raises:
        SystemExit: (status 2, flag ``runs``) no exp_name has runs on every environment.
    """
    envs_of: dict[str, set[str]] = {}
    for env_id, exp_name in groups:
        envs_of.setdefault(exp_name, set()).add(env_id)
    env_ids = sorted(set().union(*envs_of.values()))
    missing = {name: sorted(set(env_ids) - envs) for name, envs in sorted(envs_of.items()) if envs != set(env_ids)}
    require(
        len(missing) < len(envs_of),
        "runs",
        f"the aggregate needs an exp_name with runs on every environment ({', '.join(env_ids)}); "
        + "; ".join(f"{name} has none on {', '.join(envs)}" for name, envs in missing.items()),
    )
    notes = [
        f"note: {name} is left out of the aggregate: no runs on {', '.join(envs)} (its curves and returns are kept)"
        for name, envs in missing.items()
    ]
    matrices = {}
    for exp_name in sorted(set(envs_of) - set(missing)):
        counts = [len(groups[(env_id, exp_name)]) for env_id in env_ids]
        k = min(counts)
        if len(set(counts)) > 1:
            notes.append(
                f"note: {exp_name} has {', '.join(map(str, counts))} runs on {', '.join(env_ids)}; "
                f"the aggregate uses the {k} lowest seeds on each"
            )
        columns = []
        for env_id in env_ids:
            random, reference = scores[env_id]
            finals = np.array([final_return(r, last_episodes, last_fraction) for r in groups[(env_id, exp_name)][:k]])
            columns.append((finals - random) / (reference - random))
        matrices[exp_name] = np.stack(columns, axis=1)
    return matrices, env_ids, notes


def aggregate_metrics(scores: np.ndarray) -> np.ndarray:
    """IQM, median, mean and optimality gap (threshold 1) of a ``[runs, envs]`` matrix of
    normalised scores, by ``rliable.metrics``; float64 ``[4]`` in the order of :data:`METRICS`."""
    from rliable import metrics

    return np.array(
        [
            metrics.aggregate_iqm(scores),
            metrics.aggregate_median(scores),
            metrics.aggregate_mean(scores),
            metrics.aggregate_optimality_gap(scores),
        ]
    )


def stratified_bootstrap(
    scores: np.ndarray, func: Callable[[np.ndarray], np.ndarray], reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Point estimate and stratified bootstrap confidence interval of ``func(scores)``.

    rliable's ``get_interval_estimates`` (``StratifiedBootstrap``, percentile method): each
    resample draws, for every environment (column) independently, as many runs as it has with
    replacement from that column's runs.

    Args:
        scores: ``[runs, envs]``.
        func: maps a ``[runs, envs]`` matrix to a 1-D array of metrics.
        reps: number of resamples.
        seed: seed of the resampling (a numpy ``RandomState``, as rliable takes).
        confidence: coverage of the interval.

    Returns:
        ``(point [k], interval [2, k])``: row 0 lower bounds, row 1 upper bounds.
    """
    import warnings

    from rliable import library

    with warnings.catch_warnings():  # arch 7 deprecates the random_state that rliable 1.2 passes
        warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
        points, intervals = library.get_interval_estimates(
            {"scores": scores}, func, reps=reps, confidence_interval_size=confidence, random_state=np.random.RandomState(seed)
        )
    return points["scores"], intervals["scores"]


def aggregate_table(
    points: Mapping[str, np.ndarray], intervals: Mapping[str, np.ndarray], matrices: Mapping[str, np.ndarray]
) -> str:
    """Markdown table of the aggregate metrics: ``point [lower, upper]`` per metric."""
    lines = ["| exp_name | runs × envs | " + " | ".join(METRICS) + " |", "|---|---|" + "---|" * len(METRICS)]
    for name, point in points.items():
        cells = [f"{p:.3f} [{lo:.3f}, {hi:.3f}]" for p, lo, hi in zip(point, *intervals[name])]
        runs, envs = matrices[name].shape
        lines.append(f"| {markdown_text(name)} | {runs} × {envs} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


FORMATS = ("png", "pdf", "svg")
"""Image formats of ``--format``."""
FONT_SIZE = 8
"""Font size of the curves' labels in points (tick labels and legend one less), for a paper column."""
PANEL_SIZE = (3.3, 2.5)
"""Default size of one panel of the curves in inches (width, height): one paper column."""
READABLE_TAGS = {"charts/episodic_return": "episodic return"}
"""Default y labels of some tags; other tags label the y axis as they are."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str, formats: Sequence[str] = ("png", "svg"), tight: bool = True) -> list[Path]:
    """Save ``fig`` as ``out/name.<format>`` for each of ``formats``, without a date in the file
    (the same input gives the same svg and pdf), PDF fonts embedded as TrueType; ``tight``: crop
    to the drawn content. Each file is written whole (:func:`cleanrl_utils.writes.write_atomic`)."""
    import matplotlib

    metadata = {"png": None, "pdf": {"CreationDate": None}, "svg": {"Date": None}}
    paths = [out / f"{name}.{fmt}" for fmt in formats]
    with matplotlib.rc_context({"pdf.fonttype": 42}):  # TrueType, not Type 3: what IEEE and ACM ask for
        for path, fmt in zip(paths, formats):
            image = io.BytesIO()
            fig.savefig(image, format=fmt, dpi=200, bbox_inches="tight" if tight else None, metadata=metadata[fmt])
            write_atomic(path, image.getvalue())  # a link at path is replaced, never written through
    return paths


def group_colors(names: Sequence[str]) -> dict[str, tuple]:
    """A distinct colour per name: tab10 for up to 10 names, tab20 (its 10 dark shades, then its
    10 light ones) for up to 20, evenly spaced colours of the ``turbo`` colormap beyond.

    Returns:
        name -> RGB(A) tuple of floats in [0, 1].
    """
    from matplotlib import colormaps

    if len(names) <= 10:
        colors = list(colormaps["tab10"].colors)
    elif len(names) <= 20:
        colors = list(colormaps["tab20"].colors[::2] + colormaps["tab20"].colors[1::2])
    else:
        colors = [tuple(c) for c in colormaps["turbo"](np.linspace(0, 1, len(names)))]
    return dict(zip(names, colors))


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published result drawn as a point with an error bar: ``mean`` ± ``std`` at ``step``."""

    label: str
    step: float
    mean: float
    std: float = 0.0


def load_references(path: Path) -> dict[str, list[Reference]]:
    """Read ``{"<env_id>": [{"label": ..., "step": ..., "mean": ..., "std": ...}, ...], ...}``
    (``std`` optional, default 0).

    Returns:
        env_id -> its reference points.

    Raises:
        SystemExit: (status 2, flag ``--reference``) unreadable file, another structure, a
            value that is not a finite number, or a negative ``std``.
    """
    try:
        content = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as error:
        fail("--reference", f"cannot read {str(path)!r}: {visible(error)}")
    form = '{"<env_id>": [{"label": ..., "step": ..., "mean": ..., "std": ...}]}'
    require(isinstance(content, dict), "--reference", f"{str(path)!r} must hold a JSON object {form}")
    references = {}
    for env_id, entries in content.items():
        require(isinstance(entries, list), "--reference", visible(f"{env_id}: needs a list of points {form}"))
        references[env_id] = []
        for entry in entries:
            try:
                point = Reference(str(entry["label"]), float(entry["step"]), float(entry["mean"]), float(entry.get("std", 0)))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                fail("--reference", visible(f"{env_id}: a point needs label, step, mean (and std), got {entry}")[:300])
            require(
                all(math.isfinite(v) for v in (point.step, point.mean, point.std)) and point.std >= 0,
                "--reference",
                visible(f"{env_id}: step, mean and std must be finite and std >= 0, got {entry}")[:300],
            )
            references[env_id].append(point)
    return references


def _seeds(counts: Sequence[int]) -> str:
    """``3 seeds``, ``1 seed``, ``2-3 seeds``."""
    low, high = min(counts), max(counts)
    return f"{low} seed" if high == low == 1 else f"{low} seeds" if high == low else f"{low}-{high} seeds"


def _legend_columns(labels: Sequence[str], width: float) -> int:
    """The most legend columns (at most one per label) whose widest entries fit ``width`` inches:
    each entry is its handle, its gap and its text at the legend's font size, measured with
    matplotlib's Agg renderer."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    if not labels:
        return 1
    size = FONT_SIZE - 1
    renderer, font = RendererAgg(100, 100, 72), FontProperties(size=size)  # 72 dpi: pixels are points
    texts = sorted((renderer.get_text_width_height_descent(t, font, ismath=False)[0] for t in labels), reverse=True)
    # handlelength 2, handletextpad 0.8 and columnspacing 2.0 em (matplotlib's defaults), borders 1 em
    entry = (2.0 + 0.8 + 2.0) * size
    for columns in range(len(labels), 1, -1):
        if sum(texts[:columns]) + columns * entry + size <= width * 72:
            return columns
    return 1


def curves_figure(
    groups: Mapping[tuple[str, str], Sequence[RunData]],
    x: str = "steps",
    window: int = 1,
    points: int = 100,
    band_kind: str = "ci",
    reps: int = 2000,
    seed: int = 0,
    tag: str = "charts/episodic_return",
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    legend: Mapping[str, str] | None = None,
    figsize: tuple[float, float] | None = None,
    references: Mapping[str, Sequence[Reference]] | None = None,
):
    """The learning curves as a matplotlib ``Figure`` (not saved; :func:`plot_curves` saves it).

    A subplot per env (3 columns at most), titled by the env id; in each, a line per exp_name
    (mean over seeds, :func:`curve_matrix`) with its band (:func:`band`), and the env's
    reference points as error bars (``ax.containers``). One legend for the figure, below the
    subplots, in as many columns as fit the figure's width: an entry per exp_name (``<exp_name>
    (<n> seeds)``, or its ``legend`` label as given), then one per reference label. Env ids,
    exp_names, reference labels and the tag are drawn literally (:func:`plain_text`); ``xlabel``,
    ``ylabel``, ``title`` and ``legend`` labels as given (math text between ``$`` signs).

    Args:
        groups: runs by ``(env_id, exp_name)``, from :func:`group_runs`.
        x, window, points: as :func:`curve_matrix`.
        band_kind, reps, seed: as :func:`band`.
        tag: the tag plotted, for the default y label (:data:`READABLE_TAGS`).
        xlabel, ylabel: axis labels (default: ``environment steps`` or ``wall-clock minutes``;
            the readable tag, ``(mean of N)`` added when smoothed); on the bottom row / left
            column.
        title: the figure's title (default: what the line and band are, ``mean over seeds, 95%
            bootstrap CI``, with a line ``(no band for fewer than 3 seeds)`` when a group has fewer than
            :data:`BAND_SEEDS` runs, whose curve is drawn without a band; ``""``: none).
        legend: exp_name -> its legend label, used as given (the others read ``<exp_name> (<n>
            seeds)``).
        figsize: the whole figure's (width, height) in inches (default :data:`PANEL_SIZE` per
            subplot plus room for the legend and title).
        references: env_id -> points drawn at their step (``x`` must be ``"steps"``); envs
            without runs are ignored.

    Returns:
        The ``matplotlib.figure.Figure`` (constrained layout, no pyplot state).
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter, MaxNLocator

    legend = legend or {}
    references = references or {}
    env_ids = sorted({env_id for env_id, _ in groups})
    names = sorted({name for _, name in groups})
    colors = group_colors(names)
    reference_labels = sorted({p.label for env_id in env_ids for p in references.get(env_id, ())})
    markers = dict(zip(reference_labels, "osD^vP*Xph<>" * (len(reference_labels) // 12 + 1)))
    cols = min(3, len(env_ids))
    rows = math.ceil(len(env_ids) / cols)
    seeds = {name: _seeds([len(runs) for (_, n), runs in groups.items() if n == name]) for name in names}
    labels = {name: legend[name] if name in legend else f"{plain_text(name)} ({seeds[name]})" for name in names}
    labels |= {f"reference {label}": plain_text(label) for label in reference_labels}
    width = figsize[0] if figsize is not None else PANEL_SIZE[0] * cols
    legend_cols = _legend_columns(list(labels.values()), width)
    if title is None:
        banded = [len(runs) >= BAND_SEEDS for runs in groups.values()]
        title = "mean over seeds" + (", " + BANDS[band_kind]) * any(banded)
        title += "" if all(banded) else f"\n(no band for fewer than {BAND_SEEDS} seeds)"
    if figsize is None:
        lines = math.ceil(len(labels) / legend_cols) + title.count("\n")  # of the legend, and the title's second
        figsize = (width, PANEL_SIZE[1] * rows + 0.17 * lines + 0.3)
    fig = Figure(figsize=figsize, layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    if xlabel is None:
        xlabel = "environment steps" if x == "steps" else "wall-clock minutes"
    if ylabel is None:
        ylabel = READABLE_TAGS.get(tag, plain_text(tag)) + (f" (mean of {window})" if window > 1 else "")
    handles: dict[str, object] = {}
    for index, (ax, env_id) in enumerate(zip(axes, env_ids)):
        for name in names:
            runs = groups.get((env_id, name))
            if not runs:
                continue
            grid, matrix = curve_matrix(runs, x, window, points)
            if grid.size == 0:
                continue
            banded = len(runs) >= BAND_SEEDS  # fewer: no band (:func:`band_notes`)
            mean, lower, upper = band(matrix, band_kind, reps, seed) if banded else (matrix.mean(axis=0), None, None)
            (handles[name],) = ax.plot(grid, mean, color=colors[name], linewidth=1.2, label=labels[name])
            if banded:
                ax.fill_between(grid, lower, upper, color=colors[name], alpha=0.25, linewidth=0)
        for point in references.get(env_id, ()):
            handles["reference " + point.label] = ax.errorbar(
                [point.step],
                [point.mean],
                yerr=[point.std],
                fmt=markers[point.label],
                color="black",
                markersize=4,
                capsize=2.5,
                elinewidth=0.8,
                label=plain_text(point.label),
            )
        ax.set_title(plain_text(env_id), fontsize=FONT_SIZE + 1)
        if index + cols >= len(env_ids):
            ax.set_xlabel(xlabel, fontsize=FONT_SIZE)
        if index % cols == 0:
            ax.set_ylabel(ylabel, fontsize=FONT_SIZE)
        if x == "steps":
            ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))  # 500k: a tick at the end
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, 1M
        ax.tick_params(labelsize=FONT_SIZE - 1)
        ax.yaxis.get_offset_text().set_fontsize(FONT_SIZE - 1)
        ax.grid(alpha=0.25)
    for ax in axes[len(env_ids) :]:
        ax.set_visible(False)
    labels = {key: label for key, label in labels.items() if key in handles}
    if labels:
        fig.legend(
            [handles[key] for key in labels],
            list(labels.values()),
            loc="outside lower center",
            ncols=legend_cols,
            fontsize=FONT_SIZE - 1,
            frameon=False,
        )
    if title:
        fig.suptitle(title, fontsize=FONT_SIZE + 1)
    return fig


def plot_curves(
    groups: Mapping[tuple[str, str], Sequence[RunData]],
    out: Path,
    formats: Sequence[str] = ("png", "svg"),
    *args,
    **options,
) -> list[Path]:
    """Write :func:`curves_figure` ``(groups, *args, **options)`` as ``out/curves.<format>``
    for each of ``formats`` (of :data:`FORMATS`), at its figure size; return the paths written."""
    return _save(curves_figure(groups, *args, **options), out, "curves", formats, tight=False)


def plot_aggregate(
    points: Mapping[str, np.ndarray],
    intervals: Mapping[str, np.ndarray],
    out: Path,
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """Write ``aggregate.<format>`` into ``out`` for each of ``formats`` with rliable's
    ``plot_interval_estimates`` (a bar per exp_name: the interval, a tick at the point); return
    the paths written."""
    plt = _pyplot()
    from rliable import plot_utils

    shown = {plain_text(name): name for name in points}  # exp_names drawn literally
    names = list(shown)
    height = max(0.37 * len(names), 1.5)  # inches
    fig, _ = plot_utils.plot_interval_estimates(
        {label: points[name] for label, name in shown.items()},
        {label: intervals[name] for label, name in shown.items()},
        metric_names=list(METRICS),
        algorithms=names,
        xlabel="normalised score",
        row_height=height / len(names),
        max_ticks=3,
        xlabel_y_coordinate=-0.5 / height,
        wspace=0.2,
    )
    paths = _save(fig, out, "aggregate", formats)
    plt.close(fig)
    return paths


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default unless it is None or empty (those help texts say what happens)."""

    def _get_help_string(self, action):
        return action.help if action.default in (None, []) else super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; see ``python -m cleanrl_utils.plot --help``.

    Raises:
        SystemExit: (status 2, one line ``error: <flag>: ...``) bad values.
    """
    parser = OneLineParser(
        prog="python -m cleanrl_utils.plot",
        formatter_class=_Help,
        description="Learning curves, a table of final returns and (with --scores) rliable aggregate metrics "
        "from the TensorBoard events of run directories. Runs without the tag (crashed, unfinished) or without "
        "events are skipped with a warning.",
    )
    parser.add_argument(
        "runs", nargs="*", help="run directories, or folders holding them (runs/); optional with --summary, else added to it"
    )
    parser.add_argument(
        "--summary",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="PATH",
        help="summary.json files of benchmark launcher grids (one or more; the flag repeatable): "
        "plot exactly the runs they list with status ok",
    )
    parser.add_argument("--out", type=Path, default=Path("plots"), help="output folder (created)")
    parser.add_argument("--tag", default="charts/episodic_return", help="scalar tag to read")
    parser.add_argument(
        "--x",
        choices=("steps", "wall_time"),
        default="steps",
        help="x axis of the curves: environment steps or wall-clock minutes since the run started",
    )
    parser.add_argument(
        "--smooth",
        type=int,
        default=SMOOTH,
        help="trailing moving-average window of the curves, in episodes (as the final return's; 1: raw values)",
    )
    parser.add_argument("--points", type=int, default=100, help="points of the common x grid of the curves")
    parser.add_argument(
        "--band",
        choices=tuple(BANDS),
        default="ci",
        help="band around the mean over seeds: 95%% bootstrap CI, ± one std, or the range (lowest to highest seed); "
        f"none for fewer than {BAND_SEEDS} seeds (a note says so)",
    )
    style = parser.add_argument_group("curves figure")
    style.add_argument("--xlabel", default=None, help="x label (default: environment steps / wall-clock minutes)")
    style.add_argument(
        "--ylabel", default=None, help="y label (default: 'episodic return' for charts/episodic_return, else the tag)"
    )
    style.add_argument(
        "--title",
        default=None,
        help='figure title (default: what the band is: "mean over seeds, 95%% bootstrap CI", "... ± one std" or '
        f'"... band: lowest to highest seed", and a line "(no band for fewer than {BAND_SEEDS} seeds)"; "" for none)',
    )
    style.add_argument(
        "--legend",
        action="append",
        default=[],
        metavar="EXP_NAME=LABEL",
        help="legend label of an exp_name, as given (default: '<exp_name> (<n> seeds)') (repeatable)",
    )
    style.add_argument(
        "--figsize",
        type=float,
        nargs=2,
        default=None,
        metavar=("W", "H"),
        help=f"size of the whole figure in inches (default: {PANEL_SIZE[0]} x {PANEL_SIZE[1]} per subplot, "
        "3 per row, plus the legend: one paper column for one environment)",
    )
    style.add_argument(
        "--reference",
        type=Path,
        default=None,
        metavar="FILE",
        help='published results to draw as points with ± std error bars: JSON {"<env_id>": '
        '[{"label": ..., "step": ..., "mean": ..., "std": ...}]} (needs --x steps)',
    )
    style.add_argument(
        "--format", nargs="+", choices=FORMATS, default=["png", "svg"], help="image formats of the curves and the aggregate"
    )
    parser.add_argument(
        "--keep-unfinished",
        action="store_true",
        help=f"also draw runs whose last event is before {UNFINISHED * 100:.0f}%% of their total_timesteps (else skipped)",
    )
    last = parser.add_mutually_exclusive_group()
    last.add_argument("--last-episodes", type=int, default=20, help="final return: mean of this many last episodes")
    last.add_argument(
        "--last-fraction",
        type=float,
        default=None,
        help="final return: mean of this fraction (0, 1] of the last episodes instead",
    )
    parser.add_argument(
        "--scores",
        type=Path,
        default=None,
        help='JSON {"<env_id>": {"random": r, "reference": s}} for normalised scores; '
        "without it the aggregate metrics are skipped",
    )
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (bands and aggregate CIs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    args = parser.parse_args(argv)
    require(bool(args.runs or args.summary), "runs", "give run directories (e.g. runs/) or --summary PATH")
    for name in ("smooth", "reps", "last_episodes"):
        require(getattr(args, name) > 0, f"--{name.replace('_', '-')}", f"must be positive, got {getattr(args, name)}")
    require(args.points >= 2, "--points", f"must be at least 2, got {args.points}")
    require(
        args.last_fraction is None or 0 < args.last_fraction <= 1,
        "--last-fraction",
        f"must be in (0, 1], got {args.last_fraction}",
    )
    require(
        args.figsize is None or all(0 < v < math.inf for v in args.figsize),
        "--figsize",
        f"width and height must be positive inches, got {args.figsize}",
    )
    require(args.reference is None or args.x == "steps", "--reference", "reference points are at steps; use --x steps")
    for entry in args.legend:
        require("=" in entry and not entry.startswith("="), "--legend", f"expected EXP_NAME=LABEL, got {entry!r}")
    args.legend = dict(entry.split("=", 1) for entry in args.legend)
    for flag, text in [("--title", args.title), ("--xlabel", args.xlabel), ("--ylabel", args.ylabel)] + [
        ("--legend", label) for label in args.legend.values()
    ]:
        if text:
            check_math(text, flag)
    args.format = list(dict.fromkeys(args.format))
    require(not args.out.exists() or args.out.is_dir(), "--out", f"{str(args.out)!r} exists and is not a directory")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Read the runs, check everything, then write the curves, the tables and the aggregate.

    Raises:
        SystemExit: (status 2, one line ``error: <flag>: ...`` on stderr, nothing written) bad
            input, or no run left to plot.
    """
    args = parse_args(argv)
    require(importlib.util.find_spec("matplotlib") is not None, "--out", "needs the plot extra: pip install -e '.[plot]'")
    directories, warnings = summary_runs(args.summary)
    require(bool(directories or args.runs), "--summary", "no run with status ok and a run_dir in the summaries")
    if args.runs:
        found, empty = find_runs(args.runs)
        directories, warnings = sorted(set(directories) | set(found)), warnings + empty
    runs, skipped = read_runs(directories, args.tag, args.keep_unfinished)
    warnings += skipped
    groups = group_runs(runs)
    names = sorted({name for _, name in groups})
    unknown = sorted(set(args.legend) - set(names))
    require(not unknown, "--legend", f"no runs of exp_name {', '.join(unknown)}; the exp_names are {', '.join(names)}")
    notes = group_notes(groups)
    short = [r for r in runs if len(r.values) < args.last_episodes] if args.last_fraction is None else []
    if short:
        notes.append(
            f"note: {len(short)} runs have fewer than {args.last_episodes} episodes; their final return is the mean of all "
            "of them: " + ", ".join(f"{r.directory} ({len(r.values)})" for r in short)
        )
    references = load_references(args.reference) if args.reference is not None else None
    for env_id in sorted(set(references or ()) - {env_id for env_id, _ in groups}):
        notes.append(f"note: {args.reference} has points for {env_id}, which has no runs here; they are not drawn")
    matrices = None
    if args.scores is not None:
        scores = load_scores(args.scores, sorted({env_id for env_id, _ in groups}))
        matrices, env_ids, more = score_matrices(groups, scores, args.last_episodes, args.last_fraction)
        notes += more
    outputs = [f"curves.{fmt}" for fmt in args.format] + ["returns.md"]
    if matrices is not None:
        outputs += [f"aggregate.{fmt}" for fmt in args.format] + ["aggregate.md"]
    for name in outputs:
        refuse_non_regular(args.out / name, "--out")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        fail("--out", f"cannot create {str(args.out)!r}: {error}")

    for warning in warnings:
        print(warning, file=sys.stderr)
    for note in notes:
        print(note)
    curve_args = (args.x, args.smooth, args.points, args.band, args.reps, args.seed, args.tag)
    try:  # each file written whole, never through a link; a failure (a link put there meanwhile, a full disk): one line
        written = plot_curves(
            groups,
            args.out,
            args.format,
            *curve_args,
            xlabel=args.xlabel,
            ylabel=args.ylabel,
            title=args.title,
            legend=args.legend,
            figsize=tuple(args.figsize) if args.figsize else None,
            references=references,
        )
        table = returns_table(groups, args.last_episodes, args.last_fraction, references)
        table += "".join(f"\n{note}\n" for note in band_notes(groups))
        written.append(write_atomic(args.out / "returns.md", table))
        print(table)
        if matrices is None:
            print(
                "note: no --scores file, so no aggregate metrics (they need normalised scores: "
                '--scores scores.json with {"<env_id>": {"random": r, "reference": s}})'
            )
        else:
            points, intervals = {}, {}
            for name, matrix in matrices.items():
                points[name], intervals[name] = stratified_bootstrap(matrix, aggregate_metrics, args.reps, args.seed)
            written += plot_aggregate(points, intervals, args.out, args.format)
            aggregate = aggregate_table(points, intervals, matrices)
            header = (
                f"Normalised final returns over {', '.join(map(markdown_text, env_ids))}; "
                f"95% stratified bootstrap CIs ({args.reps} resamples).\n\n"
            )
            written.append(write_atomic(args.out / "aggregate.md", header + aggregate))
            print(header + aggregate)
    except OSError as error:
        fail("--out", f"cannot write: {error}")
    print("wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    main(sys.argv[1:])

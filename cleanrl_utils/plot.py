"""Learning curves, final-return tables and aggregate metrics of runs, from their TensorBoard events.

No Weights & Biases account is needed: everything is read from the run directories that the
scripts write (``runs/{env_id}__{exp_name}__{seed}__{unix_time}/``, see
``cleanrl_utils/run.py``). Runs are grouped by ``(env_id, exp_name)`` as read from each run's
``args.json``; the runs of a group are its seeds.

    python -m cleanrl_utils.plot runs/ --out plots
    python -m cleanrl_utils.plot runs/CartPole-v1__* runs/Acrobot-v1__* --scores scores.json \\
        --x wall_time --smooth 10 --band std --out plots

Writes, into ``--out``:

- ``curves.png``, ``curves.svg``: one subplot per environment, one line per ``exp_name``:
  the mean over seeds of the episodic return (tag ``--tag``), each run interpolated onto a
  common grid of environment steps (or of wall-clock minutes since the run started), with a
  band: a 95% bootstrap confidence interval of the mean over seeds, or ± one standard
  deviation;
- ``returns.md`` (also printed): ``| env | exp_name | mean ± std | seeds |``, the final return
  of a run being the mean of its last ``--last-episodes`` episodes (or last
  ``--last-fraction`` of them), the mean and standard deviation (ddof 0) taken over seeds;
- with ``--scores``, ``aggregate.png``, ``aggregate.svg`` and ``aggregate.md``: the IQM,
  median, mean and optimality gap of the normalised final returns of each ``exp_name``
  across environments, with 95% stratified bootstrap confidence intervals.

Aggregate metrics follow Agarwal, Schwarzer, Castro, Courville, Bellemare (2021), "Deep
Reinforcement Learning at the Edge of the Statistical Precipice", arXiv:2108.13264: the
point estimates are rliable's (``rliable.metrics``) and the plot is rliable's
``plot_utils.plot_interval_estimates``, and the confidence intervals are rliable's stratified
bootstrap (``rliable.library.get_interval_estimates``: runs resampled with replacement within
each environment, percentile interval). rliable 1.2 needs ``arch<8``, which does not import
with pandas 3: the ``plot`` extra pins ``pandas<3``.

Bad input (no run directory, a run without events, a missing tag, a scores file that does
not fit) stops before anything is written, with one line ``error: <flag>: ...`` and exit
status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from cleanrl_utils.run import fail, require

METRICS = ("IQM", "median", "mean", "optimality gap")
"""Names of the aggregate metrics, in the order of :func:`aggregate_metrics`' output."""


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


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """The run directories in ``paths``: each path that holds an ``args.json``, else every folder
    below it that does (``runs/`` finds all runs in it). Sorted, without duplicates.

    Raises:
        SystemExit: (status 2) a path does not exist, or no run directory is found.
    """
    found: set[Path] = set()
    for path in map(Path, paths):
        require(path.is_dir(), "runs", f"{str(path)!r} is not a directory")
        if (path / "args.json").is_file():
            found.add(path)
            continue
        inside = {p.parent for p in path.rglob("args.json")}
        require(bool(inside), "runs", f"no run directory (a folder with args.json) in {str(path)!r}")
        found |= inside
    return sorted(found)


def read_run(directory: Path, tag: str = "charts/episodic_return") -> RunData:
    """Read ``args.json`` and the scalars ``tag`` of one run directory (all its event files).

    Raises:
        SystemExit: (status 2) ``args.json`` unreadable or without ``env_id``/``exp_name``/
            ``seed`` (flag ``runs``), no event files (``runs``), no scalar ``tag`` (``--tag``).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    try:
        config = json.loads((directory / "args.json").read_text())
        env_id, exp_name, seed = config["env_id"], config["exp_name"], int(config["seed"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        fail("runs", f"{directory}/args.json: cannot read env_id, exp_name and seed ({type(error).__name__}: {error})")
    require(any(directory.glob("events.out.tfevents.*")), "runs", f"{directory} has no TensorBoard event files")
    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    require(tag in tags, "--tag", f"{directory} has no scalar {tag!r}; it has {', '.join(sorted(tags)) or 'no scalars'}")
    events = accumulator.Scalars(tag)
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


def group_runs(runs: Sequence[RunData]) -> dict[tuple[str, str], list[RunData]]:
    """Runs grouped by ``(env_id, exp_name)``, groups sorted by key, runs by seed."""
    groups: dict[tuple[str, str], list[RunData]] = {}
    for run in runs:
        groups.setdefault((run.env_id, run.exp_name), []).append(run)
    return {key: sorted(groups[key], key=lambda r: (r.seed, str(r.directory))) for key in sorted(groups)}


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


def band(
    matrix: np.ndarray, kind: str = "ci", reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and a band, for a ``[seeds, points]`` matrix.

    ``kind`` ``"ci"``: at each point, the percentile bootstrap confidence interval of the mean
    (``reps`` resamples of the seeds with replacement, by :func:`stratified_bootstrap`); ``"std"``: mean ±
    standard deviation (ddof 0).
    One seed gives a band of zero width.

    Returns:
        ``(mean, lower, upper)``, each ``[points]``.
    """
    mean = matrix.mean(axis=0)
    if kind == "std":
        std = matrix.std(axis=0)
        return mean, mean - std, mean + std
    if kind != "ci":
        raise ValueError(f"band kind must be 'ci' or 'std', got {kind!r}")
    if len(matrix) == 1:
        return mean, mean.copy(), mean.copy()
    _, (lower, upper) = stratified_bootstrap(matrix, lambda m: m.mean(axis=0), reps, seed, confidence)
    return mean, lower, upper


def returns_table(
    groups: Mapping[tuple[str, str], Sequence[RunData]], last_episodes: int = 20, last_fraction: float | None = None
) -> str:
    """Markdown table ``| env | exp_name | mean ± std | seeds |`` of the final returns
    (:func:`final_return`), mean and standard deviation (ddof 0) over the group's runs."""
    what = f"last {last_fraction:.0%} of episodes" if last_fraction is not None else f"last {last_episodes} episodes"
    lines = [f"| env | exp_name | mean ± std ({what}) | seeds |", "|---|---|---|---|"]
    for (env_id, exp_name), runs in groups.items():
        finals = np.array([final_return(r, last_episodes, last_fraction) for r in runs])
        lines.append(f"| {env_id} | {exp_name} | {finals.mean():.2f} ± {finals.std():.2f} | {len(runs)} |")
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
    except (OSError, ValueError) as error:
        fail("--scores", f"cannot read {str(path)!r}: {error}")
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
        except (KeyError, TypeError, ValueError):
            fail("--scores", f"{env_id}: needs numbers 'random' and 'reference', got {entry}")
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

    An ``exp_name`` with unequal numbers of runs across environments keeps its ``k`` lowest
    seeds on each (``k`` the smallest number); a note says so.

    Returns:
        ``(matrices, env_ids, notes)``: ``exp_name`` -> float64 ``[k, len(env_ids)]`` with
        column ``j`` for ``env_ids[j]`` (sorted), and notes to print.

    Raises:
        SystemExit: (status 2, flag ``runs``) the exp_names do not all have runs on the same
            environments.
    """
    envs_of: dict[str, set[str]] = {}
    for env_id, exp_name in groups:
        envs_of.setdefault(exp_name, set()).add(env_id)
    env_ids = sorted(set().union(*envs_of.values()))
    differing = {name: envs for name, envs in envs_of.items() if envs != set(env_ids)}
    require(
        not differing,
        "runs",
        "the aggregate needs runs of every exp_name on the same environments; "
        + "; ".join(f"{name} has none on {', '.join(sorted(set(env_ids) - envs))}" for name, envs in differing.items()),
    )
    matrices, notes = {}, []
    for exp_name in sorted(envs_of):
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
        lines.append(f"| {name} | {runs} × {envs} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> list[Path]:
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=120, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})  # same file for the same input
    return paths


def plot_curves(
    groups: Mapping[tuple[str, str], Sequence[RunData]],
    out: Path,
    x: str = "steps",
    window: int = 1,
    points: int = 100,
    band_kind: str = "ci",
    reps: int = 2000,
    seed: int = 0,
    tag: str = "charts/episodic_return",
) -> list[Path]:
    """Write ``curves.png`` and ``curves.svg`` into ``out``: a subplot per env, a line per
    exp_name (mean over seeds, :func:`curve_matrix`) with its band (:func:`band`)."""
    plt = _pyplot()
    env_ids = sorted({env_id for env_id, _ in groups})
    names = sorted({name for _, name in groups})
    colors = dict(zip(names, plt.rcParams["axes.prop_cycle"].by_key()["color"] * (len(names) // 10 + 1)))
    cols = min(3, len(env_ids))
    rows = math.ceil(len(env_ids) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, env_id in zip(axes.flat, env_ids):
        for name in names:
            runs = groups.get((env_id, name))
            if not runs:
                continue
            grid, matrix = curve_matrix(runs, x, window, points)
            if grid.size == 0:
                continue
            mean, lower, upper = band(matrix, band_kind, reps, seed)
            ax.plot(grid, mean, color=colors[name], label=f"{name} ({len(runs)} seed{'s' if len(runs) != 1 else ''})")
            ax.fill_between(grid, lower, upper, color=colors[name], alpha=0.25, linewidth=0)
        ax.set_title(env_id)
        ax.set_xlabel("environment steps" if x == "steps" else "wall-clock minutes")
        ax.set_ylabel(tag if window <= 1 else f"{tag} (mean of {window})")
        ax.grid(alpha=0.25)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(env_ids) :]:
        ax.set_visible(False)
    what = "95% bootstrap CI of the mean" if band_kind == "ci" else "± one std"
    fig.suptitle(f"mean over seeds, band: {what}", fontsize="medium")
    fig.tight_layout()
    paths = _save(fig, out, "curves")
    plt.close(fig)
    return paths


def plot_aggregate(points: Mapping[str, np.ndarray], intervals: Mapping[str, np.ndarray], out: Path) -> list[Path]:
    """Write ``aggregate.png`` and ``aggregate.svg`` into ``out`` with rliable's
    ``plot_interval_estimates`` (a bar per exp_name: the interval, a tick at the point)."""
    plt = _pyplot()
    from rliable import plot_utils

    names = list(points)
    height = max(0.37 * len(names), 1.5)  # inches
    fig, _ = plot_utils.plot_interval_estimates(
        points,
        intervals,
        metric_names=list(METRICS),
        algorithms=names,
        xlabel="normalised score",
        row_height=height / len(names),
        max_ticks=3,
        xlabel_y_coordinate=-0.5 / height,
        wspace=0.2,
    )
    paths = _save(fig, out, "aggregate")
    plt.close(fig)
    return paths


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; see ``python -m cleanrl_utils.plot --help``."""
    parser = argparse.ArgumentParser(
        prog="python -m cleanrl_utils.plot",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Learning curves, a table of final returns and (with --scores) rliable aggregate metrics "
        "from the TensorBoard events of run directories.",
    )
    parser.add_argument("runs", nargs="+", help="run directories, or folders holding them (runs/)")
    parser.add_argument("--out", type=Path, default=Path("plots"), help="output folder (created)")
    parser.add_argument("--tag", default="charts/episodic_return", help="scalar tag to read")
    parser.add_argument(
        "--x",
        choices=("steps", "wall_time"),
        default="steps",
        help="x axis of the curves: environment steps or wall-clock minutes since the run started",
    )
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window in episodes (1: none)")
    parser.add_argument("--points", type=int, default=100, help="points of the common x grid of the curves")
    parser.add_argument(
        "--band", choices=("ci", "std"), default="ci", help="band around the mean over seeds: 95%% bootstrap CI, or ± one std"
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
    for name in ("smooth", "reps", "last_episodes"):
        require(getattr(args, name) > 0, f"--{name.replace('_', '-')}", f"must be positive, got {getattr(args, name)}")
    require(args.points >= 2, "--points", f"must be at least 2, got {args.points}")
    require(
        args.last_fraction is None or 0 < args.last_fraction <= 1,
        "--last-fraction",
        f"must be in (0, 1], got {args.last_fraction}",
    )
    require(not args.out.exists() or args.out.is_dir(), "--out", f"{str(args.out)!r} exists and is not a directory")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Read the runs, check everything, then write the curves, the tables and the aggregate."""
    args = parse_args(argv)
    runs = [read_run(directory, args.tag) for directory in find_runs(args.runs)]
    groups = group_runs(runs)
    notes = []
    for (env_id, exp_name), members in groups.items():
        repeated = sorted(seed for seed, n in Counter(r.seed for r in members).items() if n > 1)
        if repeated:
            notes.append(
                f"note: {env_id} {exp_name} has several runs of seed {', '.join(map(str, repeated))}; each counts as a run"
            )
    matrices = None
    if args.scores is not None:
        scores = load_scores(args.scores, sorted({env_id for env_id, _ in groups}))
        matrices, env_ids, more = score_matrices(groups, scores, args.last_episodes, args.last_fraction)
        notes += more
    args.out.mkdir(parents=True, exist_ok=True)

    for note in notes:
        print(note)
    written = plot_curves(groups, args.out, args.x, args.smooth, args.points, args.band, args.reps, args.seed, args.tag)
    table = returns_table(groups, args.last_episodes, args.last_fraction)
    (args.out / "returns.md").write_text(table)
    written.append(args.out / "returns.md")
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
        written += plot_aggregate(points, intervals, args.out)
        aggregate = aggregate_table(points, intervals, matrices)
        header = (
            f"Normalised final returns over {', '.join(env_ids)}; 95% stratified bootstrap CIs ({args.reps} resamples).\n\n"
        )
        (args.out / "aggregate.md").write_text(header + aggregate)
        written.append(args.out / "aggregate.md")
        print(header + aggregate)
    print("wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    main(sys.argv[1:])

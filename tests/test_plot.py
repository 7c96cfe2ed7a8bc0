"""Tests of cleanrl_utils/plot.py on real TensorBoard event files: fake runs with known returns
(2 environments x 2 exp_names x 3 seeds) and one short real ppo.py run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from matplotlib.colors import to_rgb

from cleanrl_utils import plot
from tests.conftest import ROOT, episodic_returns, run_dir, run_script

ENVS = {"CartPole-v1": {"ppo": 100.0, "dqn": 40.0}, "Acrobot-v1": {"ppo": -150.0, "dqn": -300.0}}
SEEDS = (1, 2, 3)
EPISODES = 30
SCORES = {"CartPole-v1": {"random": 20.0, "reference": 500.0}, "Acrobot-v1": {"random": -500.0, "reference": -60.0}}


def known_returns(env_id: str, exp_name: str, seed: int) -> list[float]:
    """Episode i of a fake run returns base + 7 seed + i + (i mod 3): seeds and episodes differ."""
    return [ENVS[env_id][exp_name] + 7.0 * seed + i + i % 3 for i in range(EPISODES)]


def write_run(
    root: Path, env_id: str, exp_name: str, seed: int, values: list[float], tag="charts/episodic_return", total=None
):
    """A run directory whose episode i ends at step 100 (i + 1); ``total``: its args.json's total_timesteps."""
    from torch.utils.tensorboard import SummaryWriter

    directory = root / f"{env_id}__{exp_name}__{seed}__1000"
    directory.mkdir(parents=True)
    config = {"env_id": env_id, "exp_name": exp_name, "seed": seed} | ({"total_timesteps": total} if total else {})
    (directory / "args.json").write_text(json.dumps(config))
    writer = SummaryWriter(str(directory))
    for i, value in enumerate(values):
        writer.add_scalar(tag, value, 100 * (i + 1))  # episode i ends at step 100 (i + 1)
    writer.close()
    return directory


@pytest.fixture(scope="module")
def fake_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fake") / "runs"
    for env_id, names in ENVS.items():
        for exp_name in names:
            for seed in SEEDS:
                write_run(root, env_id, exp_name, seed, known_returns(env_id, exp_name, seed))
    return root


def check_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0.05  # not a blank canvas


def check_svg(path: Path, *texts: str) -> None:
    """A well-formed SVG with drawings, holding ``texts`` (matplotlib writes each text as a comment)."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    content = path.read_text()
    assert content.count("<path") > 10
    for text in texts:
        assert f"<!-- {text} -->" in content, text


def table_rows(markdown: str) -> dict[tuple[str, str], tuple[float, float, int]]:
    rows = {}
    for line in markdown.strip().splitlines()[2:]:
        if not line.startswith("|"):  # a note below the table
            continue
        env_id, exp_name, cell, seeds = [c.strip() for c in line.strip("|").split("|")]
        mean, std = cell.split(" ± ")
        rows[(env_id, exp_name)] = (float(mean), float(std), int(seeds))
    return rows


def test_curves_returns_table_and_aggregate(fake_runs, tmp_path, capsys):
    out = tmp_path / "out"
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps(SCORES))
    plot.main([str(fake_runs), "--out", str(out), "--scores", str(scores), "--reps", "300", "--smooth", "3"])
    printed = capsys.readouterr().out

    for name in ("curves", "aggregate"):
        check_png(out / f"{name}.png")
    check_svg(out / "curves.svg", "CartPole-v1", "Acrobot-v1", "ppo (3 seeds)", "dqn (3 seeds)", "environment steps")
    check_svg(out / "aggregate.svg", "IQM", "optimality gap", "ppo", "dqn")

    # final return: mean of the last 20 episodes; mean and std (ddof 0) over the 3 seeds, by hand
    rows = table_rows((out / "returns.md").read_text())
    assert set(rows) == {(e, n) for e in ENVS for n in ENVS[e]}
    finals = {}
    for (env_id, exp_name), (mean, std, seeds) in rows.items():
        per_seed = [sum(known_returns(env_id, exp_name, s)[-20:]) / 20 for s in SEEDS]
        finals[(env_id, exp_name)] = per_seed
        hand_mean = sum(per_seed) / 3
        hand_std = (sum((x - hand_mean) ** 2 for x in per_seed) / 3) ** 0.5
        assert (mean, std, seeds) == (round(hand_mean, 2), round(hand_std, 2), 3)
    assert (out / "returns.md").read_text() in printed

    # aggregate: normalised finals, IQM = 25% trimmed mean over all runs and envs
    aggregate = (out / "aggregate.md").read_text()
    assert aggregate in printed
    lines = {line.split("|")[1].strip(): line for line in aggregate.splitlines() if line.startswith("| ")}
    for exp_name in ("ppo", "dqn"):
        normalised = np.array(
            [
                [
                    (finals[(e, exp_name)][i] - SCORES[e]["random"]) / (SCORES[e]["reference"] - SCORES[e]["random"])
                    for e in sorted(ENVS)
                ]
                for i in range(3)
            ]
        )
        cells = [c.strip() for c in lines[exp_name].strip("|").split("|")]
        assert cells[1] == "3 × 2"
        iqm, low, high = (float(v) for v in cells[2].replace("[", "").replace("]", "").replace(",", "").split())
        assert iqm == round(scipy.stats.trim_mean(normalised.ravel(), 0.25), 3)
        assert low <= iqm <= high
        mean = float(cells[4].split()[0])
        assert mean == round(normalised.mean(), 3)
        gap = float(cells[5].split()[0])
        assert gap == round(1 - np.minimum(normalised, 1).mean(), 3)


def test_aggregate_metrics_by_hand():
    scores = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 100.0]])
    iqm, median, mean, gap = plot.aggregate_metrics(scores)
    assert iqm == pytest.approx((2 + 3 + 4 + 5) / 4)  # the middle half of the 8 sorted scores
    assert iqm == pytest.approx(scipy.stats.trim_mean(scores, 0.25, axis=None))
    task_means = [3.0, 27.25]
    assert median == pytest.approx(np.median(task_means)) and mean == pytest.approx(np.mean(task_means))
    assert gap == pytest.approx(1 - (0 + 1 + 6 * 1) / 8)


def test_stratified_bootstrap_resamples_within_each_env():
    scores = np.array([[0.0, 10.0], [1.0, 11.0], [0.0, 11.0], [1.0, 10.0]])

    def column_means(m):
        return m.mean(axis=0)

    point, interval = plot.stratified_bootstrap(scores, column_means, reps=500, seed=3)
    assert point.tolist() == [0.5, 10.5]
    assert 0 <= interval[0, 0] < 0.5 < interval[1, 0] <= 1  # env 0's runs only, never env 1's
    assert 10 <= interval[0, 1] < 10.5 < interval[1, 1] <= 11
    again = plot.stratified_bootstrap(scores, column_means, reps=500, seed=3)[1]
    assert np.array_equal(interval, again)
    constant = plot.stratified_bootstrap(np.ones((3, 2)), plot.aggregate_metrics, reps=50)[1]
    assert np.allclose(constant, [[1, 1, 1, 0]] * 2)


def test_smooth_interpolate_and_band(tmp_path):
    assert plot.smooth(np.array([1.0, 2, 3, 4]), 2).tolist() == [1, 1.5, 2.5, 3.5]
    runs = [
        plot.read_run(write_run(tmp_path, "CartPole-v1", "ppo", seed, [seed * 1.0 + i for i in range(10)])) for seed in (1, 2)
    ]
    assert runs[0].minutes[0] >= 0 and np.all(np.diff(runs[0].minutes) >= 0)
    grid, matrix = plot.curve_matrix(runs, "steps", 1, points=5)
    assert grid.tolist() == [100, 325, 550, 775, 1000]
    assert np.allclose(matrix[1] - matrix[0], 1) and np.allclose(matrix[0], grid / 100)  # value = seed + step/100 - 1
    mean, lower, upper = plot.band(matrix, "std")
    assert np.allclose(mean, grid / 100 + 0.5) and np.allclose(upper - lower, 1.0)
    mean, lower, upper = plot.band(matrix, "ci", reps=200)
    assert np.all(lower >= matrix[0] - 1e-9) and np.all(upper <= matrix[1] + 1e-9)
    three = np.array([[0.0, 1.0], [2.0, 5.0], [10.0, 3.0]])  # 3 seeds, 2 points
    mean, lower, upper = plot.band(three, "range")
    assert mean.tolist() == [4.0, 3.0] and lower.tolist() == [0.0, 1.0] and upper.tolist() == [10.0, 5.0]
    _, ci_lower, ci_upper = plot.band(three, "ci", reps=2000)
    assert np.allclose(ci_lower, lower) and np.allclose(ci_upper, upper)  # with 3 seeds the 95% interval is the range


def test_real_ppo_run(tmp_path, capsys):
    run_script("ppo.py", "--total-timesteps", "2048", "--num-envs", "1", "--torch-threads", "1", cwd=tmp_path)
    returns = episodic_returns(run_dir(tmp_path))
    out = tmp_path / "out"
    plot.main([str(tmp_path / "runs"), "--out", str(out), "--x", "wall_time", "--band", "std", "--reps", "100"])
    printed = capsys.readouterr().out
    assert "no --scores file, so no aggregate metrics" in printed
    check_png(out / "curves.png")
    check_svg(out / "curves.svg", "CartPole-v1", "ppo (1 seed)", "wall-clock minutes")
    assert not (out / "aggregate.md").exists()
    mean, std, seeds = table_rows((out / "returns.md").read_text())[("CartPole-v1", "ppo")]
    assert (mean, std, seeds) == (round(float(np.mean(returns[-20:])), 2), 0.0, 1)


def stops(argv: list[str], flag: str, message: str, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        plot.main(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], lines


def test_bad_input(fake_runs, tmp_path, capsys):
    out = str(tmp_path / "out")
    stops([str(tmp_path / "nowhere"), "--out", out], "runs", "is not a directory", capsys)
    (tmp_path / "empty").mkdir()
    stops([str(tmp_path / "empty"), "--out", out], "runs", "no run directory", capsys)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "args.json").write_text(json.dumps({"env_id": "CartPole-v1", "exp_name": "ppo", "seed": 1}))
    stops(
        [str(bare), "--out", out],
        "runs",
        "no run left to plot: all 1 skipped; " + f"{bare}: no TensorBoard event files",
        capsys,
    )
    stops([str(fake_runs), "--out", out, "--tag", "charts/nothing"], "--tag", "no scalar 'charts/nothing'", capsys)
    stops([str(fake_runs), "--out", out, "--smooth", "0"], "--smooth", "must be positive", capsys)
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"CartPole-v1": SCORES["CartPole-v1"]}))
    stops([str(fake_runs), "--out", out, "--scores", str(scores)], "--scores", "no entry", capsys)
    scores.write_text(json.dumps({**SCORES, "Acrobot-v1": {"random": 1, "reference": 1}}))
    stops([str(fake_runs), "--out", out, "--scores", str(scores)], "--scores", "must be finite and differ", capsys)
    scores.write_text(json.dumps(SCORES))
    crossed = [
        str(d)
        for d in sorted(fake_runs.iterdir())
        if d.name.split("__")[:2] in (["CartPole-v1", "dqn"], ["Acrobot-v1", "ppo"])
    ]
    stops(
        [*crossed, "--out", out, "--scores", str(scores)],
        "runs",
        "dqn has none on Acrobot-v1; ppo has none on CartPole-v1",
        capsys,
    )
    stops(["--out", out], "runs", "give run directories", capsys)
    stops([str(fake_runs), "--out", out, "--legend", "ppo"], "--legend", "expected EXP_NAME=LABEL", capsys)
    stops([str(fake_runs), "--out", out, "--legend", "sac=SAC"], "--legend", "no runs of exp_name sac", capsys)
    stops([str(fake_runs), "--out", out, "--figsize", "0", "2"], "--figsize", "must be positive", capsys)
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"CartPole-v1": [{"label": "x", "step": 1000, "mean": "high"}]}))
    stops([str(fake_runs), "--out", out, "--reference", str(reference)], "--reference", "needs label, step, mean", capsys)
    stops(
        [str(fake_runs), "--out", out, "--reference", str(reference), "--x", "wall_time"], "--reference", "--x steps", capsys
    )
    stops(["--summary", str(scores), "--out", out], "--summary", "is not a launcher summary", capsys)
    stops([str(fake_runs), "--out", out, "--title", "$\\foo$"], "--title", "cannot draw '$\\\\foo$' as math text", capsys)
    stops([str(fake_runs), "--out", out, "--legend", "ppo=a$x^$"], "--legend", "cannot draw", capsys)
    stops([str(fake_runs), "--out", out, "--ylabel", "a\nb"], "--ylabel", "control character", capsys)
    huge = "1" + "0" * 400  # a JSON integer too large for a float
    scores.write_text(json.dumps({**SCORES, "CartPole-v1": {"random": 0}})[:-2] + f', "reference": {huge}}}}}')
    stops([str(fake_runs), "--out", out, "--scores", str(scores)], "--scores", "needs numbers", capsys)
    reference.write_text("[" * 100_000)  # nested deeper than the JSON reader recurses
    stops([str(fake_runs), "--out", out, "--reference", str(reference)], "--reference", "cannot read", capsys)
    assert not Path(out).exists()  # every check comes before anything is written


def test_command_line(fake_runs, tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    help_text = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", "--help"],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert help_text.returncode == 0 and "--scores" in help_text.stdout and "--last-episodes" in help_text.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.plot", str(tmp_path / "nowhere")],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("error: runs: ")


def test_crashed_and_empty_runs_are_skipped_with_a_warning(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed in (1, 2):
        write_run(root, "CartPole-v1", "ppo", seed, known_returns("CartPole-v1", "ppo", seed))
    crashed = write_run(root, "CartPole-v1", "ppo", 3, [3000.0, 3100.0], tag="charts/SPS")  # died before an episode ended
    empty = root / "CartPole-v1__ppo__4__1000"
    empty.mkdir()
    (empty / "args.json").write_text(json.dumps({"env_id": "CartPole-v1", "exp_name": "ppo", "seed": 4}))
    out = tmp_path / "out"
    plot.main([str(root), "--out", str(out), "--reps", "50"])
    captured = capsys.readouterr()
    warnings = captured.err.strip().splitlines()
    assert warnings == [
        f"warning: skipped {crashed}: no scalar 'charts/episodic_return' (crashed or unfinished?); it has charts/SPS",
        f"warning: skipped {empty}: no TensorBoard event files",
    ]
    assert table_rows((out / "returns.md").read_text())[("CartPole-v1", "ppo")][2] == 2  # the two complete seeds
    check_png(out / "curves.png")
    check_svg(out / "curves.svg", "ppo (2 seeds)")


def test_unfinished_runs_and_folders_without_runs_are_skipped_with_a_warning(tmp_path, capsys):
    root = tmp_path / "runs"
    done = [write_run(root, "CartPole-v1", "ppo", seed, [1.0] * 10, total=1024) for seed in (1, 2)]  # last event 1000
    killed = write_run(root, "CartPole-v1", "ppo", 3, [1.0] * 5, total=1024)  # last event at 500: killed halfway
    (root / "benchmark_logs").mkdir()  # the launcher's logs, in runs/* beside the runs
    out = tmp_path / "out"
    plot.main([*map(str, sorted(root.iterdir())), "--out", str(out), "--reps", "20"])
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"warning: skipped {root / 'benchmark_logs'}: no run directory (a folder with args.json) in it",
        f"warning: skipped {killed}: unfinished: its last event is at step 500 of 1,024 (--keep-unfinished draws it)",
    ]
    assert table_rows((out / "returns.md").read_text())[("CartPole-v1", "ppo")][2] == 2
    short = ", ".join(f"{d} (10)" for d in done)
    assert f"note: 2 runs have fewer than 20 episodes; their final return is the mean of all of them: {short}" in captured.out
    plot.main([str(root), "--out", str(out), "--reps", "20", "--keep-unfinished", "--last-episodes", "5"])
    captured = capsys.readouterr()
    assert captured.err == "" and "fewer than" not in captured.out
    assert table_rows((out / "returns.md").read_text())[("CartPole-v1", "ppo")][2] == 3


def test_pdf_fonts_are_truetype(fake_runs, tmp_path, capsys):
    plot.main([str(fake_runs), "--out", str(tmp_path), "--reps", "20", "--format", "pdf"])
    pdf = (tmp_path / "curves.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf  # embedded TrueType; venues (IEEE, ACM) refuse Type 3 fonts


def test_scores_leave_out_an_exp_name_missing_an_env(fake_runs, tmp_path, capsys):
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps(SCORES))
    some = [str(d) for d in sorted(fake_runs.iterdir()) if not d.name.startswith("Acrobot-v1__dqn")]
    out = tmp_path / "out"
    plot.main([*some, "--out", str(out), "--scores", str(scores), "--reps", "50"])
    printed = capsys.readouterr().out
    assert "note: dqn is left out of the aggregate: no runs on Acrobot-v1 (its curves and returns are kept)" in printed
    rows = [line.split("|")[1].strip() for line in (out / "aggregate.md").read_text().splitlines() if line.startswith("| ")]
    assert rows == ["exp_name", "ppo"]
    assert set(table_rows((out / "returns.md").read_text())) == {
        ("CartPole-v1", "ppo"),
        ("CartPole-v1", "dqn"),
        ("Acrobot-v1", "ppo"),
    }
    check_svg(out / "curves.svg", "dqn (3 seeds)", "ppo (3 seeds)")


def test_mixed_sweep_note(tmp_path, capsys):
    root = tmp_path / "runs"
    short = write_run(root, "CartPole-v1", "ppo", 1, [1.0] * 3)  # ends at step 300
    long = write_run(root, "CartPole-v1", "ppo", 2, [1.0] * 7)  # ends at step 700: more than 2x
    plot.main([str(root), "--out", str(tmp_path / "out"), "--reps", "20"])
    printed = capsys.readouterr().out
    assert f"note: CartPole-v1 ppo mixes runs whose last steps differ by more than 2x: {short} (300), {long} (700)" in printed
    assert plot.group_notes(plot.group_runs([plot.read_run(short), plot.read_run(short)])) == [
        "note: CartPole-v1 ppo has several runs of seed 1; each counts as a run"
    ]  # no step note for equal lengths


def synthetic(env_id: str, exp_name: str, seed: int, last_step: int = 1_000_000, n: int = 50) -> plot.RunData:
    """A run without files: ``n`` episodes ending evenly up to ``last_step``, returns seed + episode^2 / n."""
    steps = np.linspace(last_step / n, last_step, n).astype(np.int64)
    values = seed + np.arange(n, dtype=np.float64) ** 2 / n
    return plot.RunData(Path(f"/runs/{env_id}__{exp_name}__{seed}"), env_id, exp_name, seed, steps, values, steps / 1e5)


def test_curves_figure_defaults():
    groups = plot.group_runs([synthetic("Hopper-v4", "ppo", s) for s in (1, 2)])
    fig = plot.curves_figure(groups, reps=20)
    (ax,) = fig.axes
    assert ax.get_title() == "Hopper-v4" and ax.get_ylabel() == "episodic return" and ax.get_xlabel() == "environment steps"
    assert fig._suptitle.get_text() == "mean over seeds\n(no band for fewer than 3 seeds)"
    assert not ax.collections  # 2 seeds: the curve without a band
    width, height = fig.get_size_inches()
    assert width == pytest.approx(3.3) and 2.5 < height < 3.5  # one paper column
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["ppo (2 seeds)"]
    (line,) = ax.get_lines()
    assert np.allclose(
        line.get_ydata(), 1.5 + np.interp(line.get_xdata(), groups[("Hopper-v4", "ppo")][0].steps, np.arange(50) ** 2 / 50)
    )
    assert (
        plot.curves_figure(groups, reps=20, tag="losses/value_loss", window=5).axes[0].get_ylabel()
        == "losses/value_loss (mean of 5)"
    )


def test_a_band_needs_three_seeds_and_curves_are_smoothed_by_default(tmp_path, capsys):
    three = [synthetic("Hopper-v4", "ppo", s) for s in (1, 2, 3)]
    fig = plot.curves_figure(plot.group_runs(three), reps=20)
    assert fig._suptitle.get_text() == "mean over seeds, 95% bootstrap CI" and len(fig.axes[0].collections) == 1
    mixed = plot.group_runs(three + [synthetic("Hopper-v4", "sac", s) for s in (1, 2)])
    fig = plot.curves_figure(mixed, reps=20, band_kind="std")
    assert fig._suptitle.get_text() == "mean over seeds, ± one std\n(no band for fewer than 3 seeds)"
    (ppo_band,) = fig.axes[0].collections  # ppo's band only
    assert ppo_band.get_facecolor()[0][:3] == pytest.approx(to_rgb(fig.axes[0].get_lines()[0].get_color()))
    assert plot.band_notes(mixed) == ["note: Hopper-v4 sac has 2 seeds: its curve has no band (a band needs 3 seeds)"]

    root = tmp_path / "runs"  # the tool: smoothed over 20 episodes, the note in returns.md
    for seed in (1, 2):
        write_run(root, "CartPole-v1", "ppo", seed, [float((i * 7919 + seed) % 50) for i in range(60)])
    plot.main([str(root), "--out", str(tmp_path / "out"), "--reps", "20"])
    returns = (tmp_path / "out" / "returns.md").read_text()
    assert returns.endswith("\nnote: CartPole-v1 ppo has 2 seeds: its curve has no band (a band needs 3 seeds)\n")
    assert "note: CartPole-v1 ppo has 2 seeds" in capsys.readouterr().out
    check_svg(tmp_path / "out" / "curves.svg", "episodic return (mean of 20)", "(no band for fewer than 3 seeds)")
    assert plot.parse_args(["runs"]).smooth == plot.SMOOTH == 20


def test_curves_figure_options_change_it():
    groups = plot.group_runs(
        [synthetic(env, name, s) for env in ("Hopper-v4", "Ant-v4") for name in ("ppo", "sac") for s in (1, 2)]
    )
    references = {"Hopper-v4": [plot.Reference("CleanRL ppo_continuous", 1_000_000, 2383, 272)]}
    fig = plot.curves_figure(
        groups,
        reps=20,
        xlabel="steps (M)",
        ylabel="return",
        title="MuJoCo",
        legend={"ppo": "PPO"},
        figsize=(7.0, 2.4),
        references=references,
    )
    ant, hopper = fig.axes[:2]
    assert (ant.get_title(), hopper.get_title()) == ("Ant-v4", "Hopper-v4")
    assert ant.get_xlabel() == "steps (M)" and ant.get_ylabel() == "return" and hopper.get_ylabel() == ""  # left column only
    assert fig._suptitle.get_text() == "MuJoCo"
    assert tuple(fig.get_size_inches()) == (7.0, 2.4)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["PPO", "sac (2 seeds)", "CleanRL ppo_continuous"]
    assert not ant.containers  # the reference is Hopper's only
    (bar,) = hopper.containers
    data, _, (segments,) = bar.lines[0], bar.lines[1], bar.lines[2]
    assert (data.get_xdata().tolist(), data.get_ydata().tolist()) == ([1_000_000], [2383])
    assert np.allclose(segments.get_segments()[0], [[1_000_000, 2383 - 272], [1_000_000, 2383 + 272]])
    assert plot.curves_figure(groups, reps=20, title="")._suptitle is None
    # smoothing changes the line data; the colours stay those of the exp_names
    plain = plot.curves_figure(groups, reps=20).axes[0].get_lines()[0]
    smoothed = plot.curves_figure(groups, reps=20, window=10).axes[0].get_lines()[0]
    assert np.array_equal(plain.get_xdata(), smoothed.get_xdata()) and not np.allclose(plain.get_ydata(), smoothed.get_ydata())
    assert smoothed.get_ydata()[-1] < plain.get_ydata()[-1]  # the trailing mean of a rising curve lags behind it
    assert plain.get_color() == smoothed.get_color()


def test_curves_figure_many_groups_get_distinct_colours():
    names = [f"algo{i:02d}" for i in range(12)]
    fig = plot.curves_figure(plot.group_runs([synthetic("Hopper-v4", name, 1) for name in names]), reps=20)
    colors = [matplotlib_rgba(line.get_color()) for line in fig.axes[0].get_lines()]
    assert len(colors) == 12 and len(set(colors)) == 12
    assert len(set(map(matplotlib_rgba, plot.group_colors([str(i) for i in range(20)]).values()))) == 20
    assert len(set(map(matplotlib_rgba, plot.group_colors([str(i) for i in range(25)]).values()))) == 25
    assert len(fig.legends[0].get_texts()) == 12


def matplotlib_rgba(color) -> tuple[float, ...]:
    import matplotlib.colors

    return tuple(round(c, 4) for c in matplotlib.colors.to_rgba(color))


@pytest.mark.parametrize(
    "last_step, expected",
    [
        (1_000_000, {"0", "400k", "1M"}),
        (500_000, {"0", "100k", "500k"}),
        (200_000, {"0", "100k", "200k"}),
        (30_000, {"10k", "20k", "30k"}),
    ],
)
def test_step_ticks_are_readable_and_do_not_collide(last_step, expected):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    groups = plot.group_runs([synthetic(env, "ppo", 1, last_step) for env in ("Ant-v4", "Hopper-v4", "Walker2d-v4")])
    fig = plot.curves_figure(groups, reps=20)
    FigureCanvasAgg(fig).draw()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        labels = [t for t, x in zip(ax.get_xticklabels(), ax.get_xticks()) if low <= x <= high]
        assert expected <= {t.get_text() for t in labels}, [t.get_text() for t in labels]
        assert all(re.fullmatch(r"0|\d+(\.\d+)?[kM]", t.get_text()) for t in labels), [t.get_text() for t in labels]
        boxes = [t.get_window_extent() for t in labels]
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), boxes  # left to right, no overlap


def test_formats_are_written(fake_runs, tmp_path, capsys):
    out = tmp_path / "out"
    reference = tmp_path / "reference.json"
    points = {"CartPole-v1": [{"label": "published ppo", "step": 3000, "mean": 150, "std": 9}], "Pong-v5": []}
    reference.write_text(json.dumps(points))
    argv = ["--reps", "20", "--format", "pdf", "svg", "png", "--figsize", "6", "3", "--reference", str(reference)]
    plot.main([str(fake_runs), "--out", str(out), *argv])
    assert f"note: {reference} has points for Pong-v5, which has no runs here; they are not drawn" in capsys.readouterr().out
    check_svg(out / "curves.svg", "published ppo")
    rows = (out / "returns.md").read_text().splitlines()
    assert rows[0] == "| env | exp_name | mean ± std (last 20 episodes) | seeds | published |"
    assert [r.rsplit("|", 2)[1].strip() for r in rows[2:]] == [
        "published ppo: 150 ± 9 at 3,000" if "CartPole-v1" in r else "-" for r in rows[2:]
    ]
    assert (out / "curves.pdf").read_bytes()[:5] == b"%PDF-"
    check_svg(out / "curves.svg", "CartPole-v1")
    check_png(out / "curves.png")
    import matplotlib.image

    assert matplotlib.image.imread(out / "curves.png").shape[:2] == (600, 1200)  # 6 x 3 in at 200 dpi, not cropped
    plot.main([str(fake_runs), "--out", str(tmp_path / "default"), "--reps", "20"])
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == ["curves.png", "curves.svg", "returns.md"]


@pytest.mark.parametrize("panels", [1, 3])
def test_legend_fits_inside_the_figure(panels):
    """Long labels take fewer legend columns, so that no entry is cut at the figure's edge."""
    names = ["ppo_continuous.py", "ppo_continuous_with_a_long_name.py"]
    envs = ["Hopper-v4", "Walker2d-v4", "HalfCheetah-v4"][:panels]
    groups = plot.group_runs([synthetic(env, name, s) for env in envs for name in names for s in (1, 2)])
    references = {env: [plot.Reference("CleanRL ppo_continuous_action (3 seeds)", 1_000_000, 2383, 272)] for env in envs}
    fig = plot.curves_figure(groups, reps=20, references=references)
    fig.canvas.draw()  # lays the figure out at its size
    (legend,) = fig.legends
    box, figure = legend.get_window_extent(), fig.bbox
    assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0, (box, figure)
    assert len(legend.get_texts()) == 3


MATH_NAMES = {"$\\bar$|v0": ["a$x^2$b", "$\\foo$", "c|d*_e_", "new\nline"], "CartPole-v1": ["a$x^2$b", "$\\foo$"]}


def markdown_cells(line: str) -> list[str]:
    """The cells of a Markdown table row, backslash escapes undone."""
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [re.sub(r"\\(.)", r"\1", cell.strip()) for cell in cells]


def test_run_names_with_math_text_are_drawn_literally(tmp_path, capsys):
    """exp names and env ids with $...$, |, * or a newline (read from args.json) are drawn and tabled as they are."""
    root = tmp_path / "runs"
    for env_id, names in MATH_NAMES.items():
        for exp_name in names:
            for seed in (1, 2):
                write_run(root, env_id, exp_name, seed, [10.0 * seed + i for i in range(5)])
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({env_id: {"random": 0, "reference": 100} for env_id in MATH_NAMES}))
    out = tmp_path / "out"
    plot.main([str(root), "--out", str(out), "--scores", str(scores), "--reps", "20"])
    printed = capsys.readouterr().out
    shown = {name: name.replace("\n", "\\n") for names in MATH_NAMES.values() for name in names}
    check_svg(out / "curves.svg", "$\\bar$|v0", "CartPole-v1", *(f"{shown[n]} (2 seeds)" for n in MATH_NAMES["$\\bar$|v0"]))
    check_svg(out / "aggregate.svg", "a$x^2$b", "$\\foo$")  # the two exp_names with runs on both envs
    check_png(out / "curves.png")
    rows = [markdown_cells(line) for line in (out / "returns.md").read_text().splitlines()[2:] if line.startswith("|")]
    assert sorted(tuple(row[:2]) for row in rows) == sorted(
        (env_id, shown[name]) for env_id, names in MATH_NAMES.items() for name in names
    )
    assert all(row[3] == "2" for row in rows)
    aggregate = (out / "aggregate.md").read_text()
    assert sorted(markdown_cells(line)[0] for line in aggregate.splitlines()[4:]) == ["$\\foo$", "a$x^2$b"]
    assert "Normalised final returns over \\$\\\\bar\\$\\|v0, CartPole-v1;" in aggregate and aggregate in printed


def test_odd_args_json_values_skip_the_run(tmp_path, capsys):
    root = tmp_path / "runs"
    write_run(root, "CartPole-v1", "ppo", 1, [1.0] * 5)
    odd = {
        "number": '{"env_id": "CartPole-v1", "exp_name": 5, "seed": 2}',
        "infinite": '{"env_id": "CartPole-v1", "exp_name": "ppo", "seed": Infinity}',
        "list": '{"env_id": ["CartPole-v1"], "exp_name": "ppo", "seed": 4}',
    }
    for seed, (kind, text) in enumerate(odd.items(), start=2):
        directory = write_run(root / kind, "CartPole-v1", "ppo", seed, [1.0] * 5)
        (directory / "args.json").write_text(text)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps([{"env_id": "CartPole-v1", "seed": 9, "status": "ok", "run_dir": 5}]))
    plot.main([str(root), "--summary", str(summary), "--out", str(tmp_path / "out"), "--reps", "20"])
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings[0] == f"warning: skipped {summary}: CartPole-v1 seed 9: run_dir 5 is not a path"
    assert len(warnings) == 4 and all("args.json: cannot read env_id, exp_name and seed" in w for w in warnings[1:])
    assert table_rows((tmp_path / "out" / "returns.md").read_text()) == {("CartPole-v1", "ppo"): (1.0, 0.0, 1)}


@pytest.mark.parametrize("name", ["curves.png", "curves.svg", "returns.md", "dangling"])
def test_links_at_output_names_stop_the_tool(fake_runs, tmp_path, capsys, name):
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("keep\n")
    link = out / ("returns.md" if name == "dangling" else name)
    link.symlink_to(tmp_path / "missing" if name == "dangling" else outside)
    stops([str(fake_runs), "--out", str(out), "--reps", "20"], "--out", f"{link} is a symbolic link", capsys)
    assert outside.read_text() == "keep\n" and not (tmp_path / "missing").exists()
    assert [p.name for p in out.iterdir()] == [link.name]  # nothing written


def test_a_folder_at_an_output_name_stops_the_tool_before_anything_is_written(fake_runs, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "returns.md").mkdir(parents=True)
    stops([str(fake_runs), "--out", str(out), "--reps", "20"], "--out", "returns.md is a folder", capsys)
    assert [p.name for p in out.iterdir()] == ["returns.md"]


def test_outputs_replace_regular_files_whole(fake_runs, tmp_path, capsys):
    """A rerun into the same folder replaces its files (a hard link to another file is not written through)."""
    out = tmp_path / "out"
    out.mkdir()
    other = tmp_path / "other.md"
    other.write_text("keep\n")
    os.link(other, out / "returns.md")
    plot.main([str(fake_runs), "--out", str(out), "--reps", "20"])
    assert other.read_text() == "keep\n" and (out / "returns.md").read_text().startswith("| env | exp_name |")


def test_a_run_rounded_down_to_whole_rollouts_is_finished(tmp_path, capsys):
    """ppo.py --total-timesteps 2000 trains 3 rollouts of 512 (it says so): its last event at step 1,536 ends it, by
    args.json's num_iterations x batch_size; the same last event in a run asked for 2,000 steps of one env is not."""
    root = tmp_path / "runs"
    rounded = write_run(root, "CartPole-v1", "ppo", 1, [1.0] * 15, total=2000)  # last event at 1,500
    config = json.loads((rounded / "args.json").read_text())
    (rounded / "args.json").write_text(json.dumps(config | {"num_iterations": 3, "batch_size": 500}))
    cut = write_run(root, "CartPole-v1", "ppo", 2, [1.0] * 15, total=2000)
    plot.main([str(root), "--out", str(tmp_path / "out"), "--reps", "20"])
    assert capsys.readouterr().err.strip().splitlines() == [
        f"warning: skipped {cut}: unfinished: its last event is at step 1,500 of 2,000 (--keep-unfinished draws it)"
    ]

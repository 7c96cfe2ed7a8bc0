"""Tests of cleanrl_utils/plot.py on real TensorBoard event files: fake runs with known returns
(2 environments x 2 exp_names x 3 seeds) and one short real ppo.py run."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from cleanrl_utils import plot
from tests.conftest import ROOT, episodic_returns, run_dir, run_script

ENVS = {"CartPole-v1": {"ppo": 100.0, "dqn": 40.0}, "Acrobot-v1": {"ppo": -150.0, "dqn": -300.0}}
SEEDS = (1, 2, 3)
EPISODES = 30
SCORES = {"CartPole-v1": {"random": 20.0, "reference": 500.0}, "Acrobot-v1": {"random": -500.0, "reference": -60.0}}


def known_returns(env_id: str, exp_name: str, seed: int) -> list[float]:
    """Episode i of a fake run returns base + 7 seed + i + (i mod 3): seeds and episodes differ."""
    return [ENVS[env_id][exp_name] + 7.0 * seed + i + i % 3 for i in range(EPISODES)]


def write_run(root: Path, env_id: str, exp_name: str, seed: int, values: list[float], tag="charts/episodic_return"):
    from torch.utils.tensorboard import SummaryWriter

    directory = root / f"{env_id}__{exp_name}__{seed}__1000"
    directory.mkdir(parents=True)
    (directory / "args.json").write_text(json.dumps({"env_id": env_id, "exp_name": exp_name, "seed": seed}))
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
    stops([str(bare), "--out", out], "runs", "has no TensorBoard event files", capsys)
    stops([str(fake_runs), "--out", out, "--tag", "charts/nothing"], "--tag", "has no scalar 'charts/nothing'", capsys)
    stops([str(fake_runs), "--out", out, "--smooth", "0"], "--smooth", "must be positive", capsys)
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"CartPole-v1": SCORES["CartPole-v1"]}))
    stops([str(fake_runs), "--out", out, "--scores", str(scores)], "--scores", "no entry", capsys)
    scores.write_text(json.dumps({**SCORES, "Acrobot-v1": {"random": 1, "reference": 1}}))
    stops([str(fake_runs), "--out", out, "--scores", str(scores)], "--scores", "must be finite and differ", capsys)
    scores.write_text(json.dumps(SCORES))
    some = [str(d) for d in sorted(fake_runs.iterdir()) if not d.name.startswith("Acrobot-v1__dqn")]
    stops([*some, "--out", out, "--scores", str(scores)], "runs", "dqn has none on Acrobot-v1", capsys)
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

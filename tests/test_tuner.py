"""Tests of cleanrl_utils.tuner: the search-space syntax, normalisation and aggregation, a real
study of ppo.py resumed from its SQLite file, pruning and failed trials (with a stub script
that writes known TensorBoard values)."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from cleanrl_utils import tuner
from cleanrl_utils.tuner import Param, Tuner, aggregate, normalize, parse_fixed, parse_search, to_flags
from tests.conftest import ROOT, scalars

# A script that takes --env-id, --seed, --quality and --fail-on, writes charts/episodic_return
# = quality * 100 + i for i in 0..4 to a run directory under runs/, and appends its call to
# calls.txt; it exits 3 when --quality equals --fail-on.
STUB = textwrap.dedent("""
    import argparse, sys, time
    parser = argparse.ArgumentParser()
    parser.add_argument("--env-id", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--quality", type=float, default=0.0)
    parser.add_argument("--fail-on", type=float, default=None)
    args = parser.parse_args()
    with open(CALLS, "a") as calls:
        calls.write(f"{args.env_id} {args.seed} {args.quality}\\n")
    if args.quality == args.fail_on:
        print("boom: this quality is refused", file=sys.stderr)
        sys.exit(3)
    from torch.utils.tensorboard import SummaryWriter
    directory = f"runs/{args.env_id}__stub__{args.seed}__{time.time_ns()}"
    writer = SummaryWriter(directory)
    for i in range(5):
        writer.add_scalar("charts/episodic_return", args.quality * 100 + i, i)
    writer.close()
    print(f"run directory: {directory}")
""")


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "stub.py"
    path.write_text(f"CALLS = {str(tmp_path / 'calls.txt')!r}\n" + STUB)
    return path


def calls(tmp_path: Path) -> list[tuple[str, int, float]]:
    lines = (tmp_path / "calls.txt").read_text().splitlines()
    return [(env, int(seed), float(quality)) for env, seed, quality in (line.split() for line in lines)]


def test_parse_search():
    assert parse_search("learning-rate=float:1e-4:1e-2:log") == Param("learning-rate", "float", 1e-4, 1e-2, True)
    assert parse_search("--num_steps=int:16:256") == Param("num-steps", "int", 16, 256, False)
    assert parse_search("num-steps=int:16:256:log").log
    param = parse_search("num-minibatches=categorical:1,2,4")
    assert param.kind == "categorical" and param.choices == (1, 2, 4)
    assert parse_search("anneal-lr=categorical:true,false").choices == (True, False)
    assert parse_search("env-mode=categorical:sync,async").choices == ("sync", "async")
    assert parse_search("gamma=categorical:0.99,0.999").choices == (0.99, 0.999)
    for bad, message in [
        ("learning-rate", "is not NAME=KIND"),
        ("=float:0:1", "is not NAME=KIND"),
        ("x=uniform:0:1", "is not float, int or categorical"),
        ("x=float:0", "needs LOW:HIGH"),
        ("x=float:0:1:lin", "needs LOW:HIGH"),
        ("x=float:a:1", "are not floats"),
        ("x=int:1.5:4", "are not ints"),
        ("x=float:2:1", "LOW <= HIGH"),
        ("x=float:0:1:log", "LOW > 0"),
        ("x=categorical:", "categorical needs values"),
        ("x=categorical:1,,2", "categorical needs values"),
        ("x=categorical:1,1", "repeat"),
        ("seed=int:1:9", "set by the tuner"),
        ("env-id=categorical:a,b", "set by the tuner"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_search(bad)


def test_parse_fixed_and_flags():
    assert parse_fixed("total_timesteps=20000") == ("total-timesteps", 20000)
    assert parse_fixed("anneal-lr=false") == ("anneal-lr", False)
    assert parse_fixed("env-mode=async") == ("env-mode", "async")
    with pytest.raises(ValueError, match="is not NAME=VALUE"):
        parse_fixed("total-timesteps")
    with pytest.raises(ValueError, match="set by the tuner"):
        parse_fixed("seed=3")
    assert to_flags({"learning-rate": 0.001, "anneal_lr": False, "norm-adv": True, "env-mode": "async"}) == [
        "--learning-rate",
        "0.001",
        "--no-anneal-lr",
        "--norm-adv",
        "--env-mode",
        "async",
    ]


def test_normalize_and_aggregate():
    assert normalize(250, [0, 500]) == 0.5
    assert normalize(-100, [-500, 0]) == 0.8
    assert normalize(600, [0, 500]) == 1.2  # beyond the target: not clipped
    assert normalize(42.0, None) == 42.0
    scores = [0.5, 0.8, 0.2]
    assert aggregate(scores, "average") == pytest.approx(0.5)
    assert aggregate(scores, "median") == 0.5
    assert aggregate(scores, "min") == 0.2 and aggregate(scores, "max") == 0.8
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(scores, "mean")


def test_tuner_rejects_bad_arguments(stub: Path):
    with pytest.raises(ValueError, match="low < high"):
        Tuner(stub, target_scores={"A-v0": [1, 1]})
    with pytest.raises(ValueError, match="cannot be aggregated"):
        Tuner(stub, target_scores={"A-v0": None, "B-v0": [0, 1]})
    with pytest.raises(ValueError, match="target_scores"):
        Tuner(stub, target_scores={})
    with pytest.raises(FileNotFoundError):
        Tuner(stub.parent / "missing.py", target_scores={"A-v0": None})
    for name in ("..", ".", "a\nb", "x" * 201):  # the study's folder would not be one folder under runs_dir
        with pytest.raises(ValueError, match="not a folder name"):
            Tuner(stub, target_scores={"A-v0": None}, study_name=name)
    assert Tuner(stub, target_scores={"A-v0": None}, study_name="../a", runs_dir="r").study_dir == Path("r/..-a")


def test_tuner_takes_cleanrls_keyword_names(stub: Path):
    """CleanRL's Tuner names aggregation and metric_last_n aggregation_type and metric_last_n_average_window."""
    targets = {"A-v0": [0, 1], "B-v0": [0, 1]}
    theirs = Tuner(stub, target_scores=targets, aggregation_type="min", metric_last_n_average_window=50)
    ours = Tuner(stub, target_scores=targets, aggregation="min", metric_last_n=50)
    assert (theirs.aggregation, theirs.metric_last_n) == (ours.aggregation, ours.metric_last_n) == ("min", 50)
    default = Tuner(stub, target_scores=targets)
    assert (default.aggregation, default.metric_last_n) == ("average", 20)
    with pytest.raises(TypeError, match="got both aggregation and aggregation_type"):
        Tuner(stub, target_scores=targets, aggregation="min", aggregation_type="min")
    with pytest.raises(TypeError, match="got both metric_last_n and metric_last_n_average_window"):
        Tuner(stub, target_scores=targets, metric_last_n=5, metric_last_n_average_window=5)
    with pytest.raises(ValueError, match="aggregation must be one of"):  # checked as ours are
        Tuner(stub, target_scores=targets, aggregation_type="mean")
    with pytest.raises(ValueError, match="metric_last_n_average_window must be a whole number of values, at least 1"):
        Tuner(stub, target_scores=targets, metric_last_n_average_window=0)


@pytest.mark.parametrize("name", ["metric_last_n", "metric_last_n_average_window"])
@pytest.mark.parametrize("value", [2.5, float("nan"), True, 0, -3, "5", 5.0])
def test_the_averaging_window_is_checked_under_either_name_before_any_trial(name, value, tmp_path: Path, stub: Path):
    """A window that is not a whole number of at least 1 (2.5, nan, True ...) is one error naming the keyword given,
    raised by the constructor: no trial starts (CleanRL's name was accepted, then the first trial's end was a
    TypeError traceback)."""
    with pytest.raises(ValueError, match=f"^{name} must be a whole number of values, at least 1, got {value!r}$"):
        Tuner(stub, target_scores={"A-v0": None}, runs_dir=tmp_path / "tuner_runs", **{name: value})
    assert not (tmp_path / "calls.txt").exists() and not (tmp_path / "tuner_runs").exists()
    assert Tuner(stub, target_scores={"A-v0": None}, **{name: 3}).metric_last_n == 3


def stub_tuner(tmp_path: Path, stub: Path, pruner, **kwargs) -> Tuner:
    return Tuner(
        script=stub,
        target_scores={"A-v0": [0, 100], "B-v0": [-100, 100]},
        params_fn=lambda trial: {"quality": trial.suggest_float("quality", 0.0, 1.0)},
        metric_last_n=2,
        pruner=pruner,
        storage=f"sqlite:///{tmp_path / 'stub.db'}",
        study_name="stub",
        runs_dir=tmp_path / "tuner_runs",
        stream=io.StringIO(),
        **kwargs,
    )


def test_pruning_after_the_first_env(tmp_path: Path, stub: Path):
    study_tuner = stub_tuner(tmp_path, stub, optuna.pruners.MedianPruner(n_startup_trials=2))
    study = study_tuner.create_study()
    for quality in (0.9, 0.8, 0.1):  # two good trials, then a bad one
        study.enqueue_trial({"quality": quality})
    study = study_tuner.tune(num_trials=3)
    trials = study.trials
    assert [trial.state for trial in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    # score = mean of the last 2 values, quality * 100 + 3.5; A normalised by [0, 100], B by [-100, 100]
    a, b = 93.5, 93.5
    assert trials[0].value == pytest.approx(((a - 0) / 100 + (b + 100) / 200) / 2)
    assert trials[0].user_attrs["flags"] == ["--quality", "0.9"]
    assert trials[0].user_attrs["scores"] == pytest.approx({"A-v0": 93.5, "B-v0": 93.5})
    assert trials[0].intermediate_values == pytest.approx({0: 0.935, 1: trials[0].value})
    assert trials[2].intermediate_values == pytest.approx({0: 0.135})  # reported, then pruned
    # the bad trial ran on the first env only
    assert calls(tmp_path) == [("A-v0", 1, 0.9), ("B-v0", 1, 0.9), ("A-v0", 1, 0.8), ("B-v0", 1, 0.8), ("A-v0", 1, 0.1)]
    run_dirs = [Path(d) for d in trials[0].user_attrs["run_dirs"]]
    assert [d.parent.parent.name for d in run_dirs] == ["trial_0000", "trial_0000"]
    assert scalars(run_dirs[1])["charts/episodic_return"][-1] == (4, pytest.approx(94.0))


def test_failed_trial_does_not_stop_the_study(tmp_path: Path, stub: Path):
    study_tuner = stub_tuner(tmp_path, stub, optuna.pruners.NopPruner(), fixed={"fail-on": 0.5})
    study = study_tuner.create_study()
    for quality in (0.5, 0.9):  # a failing trial, then one that runs
        study.enqueue_trial({"quality": quality})
    study = study_tuner.tune(num_trials=2, num_seeds=2)
    assert [trial.state for trial in study.trials] == [TrialState.FAIL, TrialState.COMPLETE]
    output = study_tuner.stream.getvalue()
    assert "trial 0 failed: A-v0 seed 1 exited with status 3" in output
    assert "boom: this quality is refused" in output  # the end of its log
    assert study.best_trial.number == 1 and study.best_trial.value == pytest.approx((0.935 + 0.9675) / 2)
    assert [call[:2] for call in calls(tmp_path)] == [("A-v0", 1), ("A-v0", 1), ("A-v0", 2), ("B-v0", 1), ("B-v0", 2)]
    # failed trials count towards num_trials: a rerun has nothing left to do
    study_tuner.tune(num_trials=2)
    assert len(study_tuner.create_study().trials) == 2


def test_consecutive_failures_stop_the_study(tmp_path: Path, stub: Path):
    study_tuner = stub_tuner(tmp_path, stub, optuna.pruners.NopPruner(), fixed={"fail-on": 0.5}, max_consecutive_failures=2)
    study_tuner.params_fn = lambda trial: {"quality": 0.5}
    with pytest.raises(RuntimeError, match="2 trials failed in a row"):
        study_tuner.tune(num_trials=5)
    assert len(calls(tmp_path)) == 2


def run_cli(*flags: str, cwd: Path) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.tuner", *flags],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_real_study_resumes(tmp_path: Path):
    flags = [
        "--script",
        str(ROOT / "cleanrl" / "ppo.py"),
        "--env-ids",
        "CartPole-v1",
        "--target-scores",
        "CartPole-v1=0:500",
        "--search",
        "learning-rate=float:1e-4:1e-2:log",
        "--search",
        "update-epochs=categorical:1,2",
        "--fixed",
        "total-timesteps=1024",
        "--fixed",
        "num-envs=1",
        "--fixed",
        "num-steps=128",
        "--fixed",
        "num-minibatches=1",
        "--metric-last-n",
        "5",
        "--sampler",
        "random",
        "--sampler-seed",
        "0",
        "--storage",
        "sqlite:///study.db",
        "--study-name",
        "ppo-cartpole",
    ]
    first = run_cli(*flags, "--num-trials", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "0 finished trials, running 2 more" in first.stdout and "best trial" in first.stdout
    study = optuna.load_study(study_name="ppo-cartpole", storage=f"sqlite:///{tmp_path / 'study.db'}")
    earlier = [(trial.number, trial.params, trial.value) for trial in study.trials]
    assert [trial.state for trial in study.trials] == [TrialState.COMPLETE] * 2
    for trial in study.trials:  # the value is the run's last 5 episodic returns, normalised by [0, 500]
        (run_dir,) = trial.user_attrs["run_dirs"]
        returns = [value for _, value in scalars(tmp_path / run_dir)["charts/episodic_return"]]
        assert trial.value == pytest.approx(sum(returns[-5:]) / len(returns[-5:]) / 500)
        assert 0 < trial.value < 1
        assert set(trial.params) == {"learning-rate", "update-epochs"}
    second = run_cli(*flags, "--num-trials", "3", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "2 finished trials, running 1 more" in second.stdout
    study = optuna.load_study(study_name="ppo-cartpole", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len(study.trials) == 3 and study.trials[2].state == TrialState.COMPLETE
    assert [(trial.number, trial.params, trial.value) for trial in study.trials[:2]] == earlier
    best = study.best_trial
    assert f"best trial {best.number}: value {best.value:.6g}" in second.stdout
    assert f"--learning-rate {best.params['learning-rate']}" in second.stdout  # the best command
    assert sorted(p.name for p in (tmp_path / "tuner_runs" / "ppo-cartpole").iterdir()) == [
        "trial_0000",
        "trial_0001",
        "trial_0002",
    ]


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--env-ids", "A-v0", "--search", "quality=float:1:0"], "--search", "LOW <= HIGH"),
        (["--env-ids", "A-v0", "--search", "qualty=float:0:1"], "--search", "has no flag --qualty; did you mean quality"),
        (["--env-ids", "A-v0", "--fixed", "seed=2"], "--fixed", "set by the tuner"),
        (["--env-ids", "A-v0", "B-v0", "--target-scores", "A-v0=0:1"], "--target-scores", "missing B-v0"),
        (["--env-ids", "A-v0", "--target-scores", "A-v0=1:0"], "--target-scores", "LOW < HIGH"),
        (["--env-ids", "A-v0", "--target-scores", "C-v0=0:1"], "--target-scores", "is not one of --env-ids"),
        (["--env-ids", "A-v0", "--num-trials", "0"], "--num-trials", "must be at least 1"),
        (["--env-ids", "A-v0", "--search", "quality=float:0:1", "--fixed", "quality=1"], "--search", "given more than once"),
        (["--env-ids", "A-v0", "--storage", "sqlite:///missing/s.db"], "--storage", "no folder"),
        (["--env-ids", "A-v0", "--storage", "nosuchdb://x"], "--storage", "cannot open study"),
        (["--env-ids", "A-v0", "--study-name", ".."], "--study-name", "is not a file name"),
        (["--env-ids", "A-v0", "--study-name", "a\nb"], "--study-name", "control character"),
        (["--env-ids", "A-v0\ntouch pwned"], "--env-ids", "control character"),
        (["--env-ids", "A" * 250], "--env-ids", "longer than 200 bytes"),
        (["--env-ids", "A-v0", "--fixed", "quality=1\n2"], "--fixed", "control character"),
        (["--env-ids", "A-v0", "--search", "quality=categorical:1,\x1b[2J"], "--search", "control character"),
        (["--env-ids", "A-v0", "--target-scores", "A-v0=-inf:0"], "--target-scores", "finite LOW < HIGH"),
        (["--env-ids", "A-v0", "--sampler-seed", "-5"], "--sampler-seed", "must be in [0, 2**32)"),
    ],
)
def test_cli_bad_input(tmp_path: Path, stub: Path, capsys, flags, flag, message):
    with pytest.raises(SystemExit) as stop:
        tuner.main(["--script", str(stub), "--runs-dir", str(tmp_path / "runs"), *flags])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and message in lines[0], lines
    assert not (tmp_path / "calls.txt").exists() and not (tmp_path / "runs").exists()


def test_cli_help_and_argparse_errors(tmp_path: Path):
    result = run_cli("--help", cwd=tmp_path)
    assert result.returncode == 0 and "NAME=float:LOW:HIGH[:log]" in result.stdout
    result = run_cli("--env-ids", "CartPole-v1", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: the following arguments are required: --script (see --help)"
    ]


@pytest.mark.parametrize("planted", ["study", "trial", "log"])
def test_links_in_the_study_folder_are_never_followed(tmp_path: Path, stub: Path, capsys, planted):
    """A link where the tuner puts the study's folder, a trial's folder or a run's log stops it with
    one line; nothing is written through the link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("keep\n")
    study = tmp_path / "runs" / "stub"
    link = {"study": study, "trial": study / "trial_0000", "log": study / "trial_0000" / "A-v0__1.log"}[planted]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / "file" if planted == "log" else outside)
    argv = ["--script", str(stub), "--env-ids", "A-v0", "--search", "quality=float:0:1", "--num-trials", "1"]
    argv += ["--study-name", "stub", "--runs-dir", str(tmp_path / "runs"), "--storage", f"sqlite:///{tmp_path / 's.db'}"]
    with pytest.raises(SystemExit) as stop:
        tuner.main(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --runs-dir: ") and str(link) in lines[0], lines
    assert sorted(p.name for p in outside.iterdir()) == ["file"] and (outside / "file").read_text() == "keep\n"
    assert not (tmp_path / "calls.txt").exists()  # no run started


def test_best_command_is_quoted_for_the_shell():
    trial = types.SimpleNamespace(number=3, value=0.5, params={"note": "a b; touch pwned"}, user_attrs={})
    text = tuner.best_summary(types.SimpleNamespace(best_trial=trial), "my script.py", {"tag": "$(touch pwned)"})
    command = text.splitlines()[-1].removeprefix("  command: ")
    assert shlex.split(command) == ["python", "my script.py", "--tag", "$(touch pwned)", "--note", "a b; touch pwned"]


def test_best_command_names_each_env_it_was_scored_on():
    """Pasted, the best trial's command trains on the env it was scored on, not the script's default env (a CleanRL
    user's trial printed a command without --env-id that trained CartPole after a study on Acrobot)."""
    attrs = {"scores": {"Acrobot-v1": -90.0, "MountainCar-v0": -150.0}}
    trial = types.SimpleNamespace(number=0, value=0.5, params={"learning_rate": 0.001}, user_attrs=attrs)
    lines = tuner.best_summary(types.SimpleNamespace(best_trial=trial), "ppo.py", {}).splitlines()[-2:]
    for line, env_id in zip(lines, attrs["scores"], strict=True):
        command = line.removeprefix(f"  command on {env_id}: ")
        assert shlex.split(command) == ["python", "ppo.py", "--learning-rate", "0.001", "--env-id", env_id], line

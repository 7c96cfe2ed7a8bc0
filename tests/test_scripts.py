"""Smoke, bad-input and reproducibility tests of every script (short runs, minutes in all)."""

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import (
    ROOT,
    assert_stops_with_one_line,
    episodic_returns,
    resume_without_the_buffer,
    returns_by_env_mode,
    run_dir,
    run_script,
    scalars,
    start_script,
)

STANDARD_TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate"}
SHORT = {
    "ppo.py": ["--total-timesteps", "2048"],
    "dqn.py": ["--total-timesteps", "3000", "--learning-starts", "500", "--train-frequency", "2"],
    "c51.py": ["--total-timesteps", "3000", "--learning-starts", "500", "--train-frequency", "2"],
}
LOSS_TAGS = {
    "ppo.py": {"losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl"},
    "dqn.py": {"losses/td_loss", "losses/q_values"},
    "c51.py": {"losses/loss", "losses/q_values"},
}


@pytest.mark.parametrize("script", ["ppo.py", "dqn.py", "c51.py"])
def test_smoke_run_directory_video_model_and_tracking(script, tmp_path):
    result = run_script(
        script,
        *SHORT[script],
        "--capture-video",
        "--save-model",
        "--track",
        "--eval-episodes",
        "2",
        cwd=tmp_path,
        env={"WANDB_MODE": "offline"},
    )
    directory = run_dir(tmp_path)
    assert directory.name.startswith(f"CartPole-v1__{script[:-3]}__1__")
    tags = set(scalars(directory))
    assert STANDARD_TAGS | LOSS_TAGS[script] <= tags, tags
    assert "eval/episodic_return" in tags
    saved_args = json.loads((directory / "args.json").read_text())
    assert saved_args["env_id"] == "CartPole-v1" and saved_args["capture_video"] is True
    videos = sorted((directory / "videos").glob("*.mp4"))
    assert videos and all(v.stat().st_size > 1000 for v in videos)
    model = directory / f"{script[:-3]}.cleanrl_model"
    assert model.is_file()
    assert "evaluation over 2 episodes" in result.stdout
    eval_videos = sorted((directory / "videos-eval").glob("*.mp4"))
    assert len(eval_videos) == 2 and all(v.stat().st_size > 1000 for v in eval_videos)  # every eval episode
    # --track in offline mode: a W&B run with the synced scalars, kept outside the run
    # directory (W&B watches that one for TensorBoard events and must not copy into it)
    offline = list((tmp_path / "wandb").glob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb"))
    assert not list(directory.rglob("wandb"))
    # plain periodic progress lines when the output is not a terminal
    assert "SPS" in result.stdout and "return (last" in result.stdout


@pytest.mark.parametrize("script", ["ppo", "dqn", "c51"])
def test_evaluate_saved_model(script, tmp_path):
    import importlib

    module = importlib.import_module(f"cleanrl.{script}")
    run_script(f"{script}.py", *SHORT[f"{script}.py"], "--save-model", "--eval-episodes", "1", cwd=tmp_path)
    model = run_dir(tmp_path) / f"{script}.cleanrl_model"
    returns = module.evaluate(str(model), eval_episodes=3, capture_video=True, video_dir=str(tmp_path / "eval"))
    assert returns.shape == (3,) and np.all(returns >= 1)
    assert list((tmp_path / "eval").glob("*.mp4"))
    other = "dqn" if script == "ppo" else "ppo"
    with pytest.raises(ValueError, match=f"written by {script}.py, not by {other}.py"):
        importlib.import_module(f"cleanrl.{other}").evaluate(str(model), eval_episodes=1)


BAD_INPUT = [
    ("ppo.py", ["--env-id", "CartPole-v9"], "--env-id", "unknown environment"),
    ("ppo.py", ["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
    ("dqn.py", ["--env-id", "MountainCarContinuous-v0"], "--env-id", "supports Discrete only"),
    ("ppo.py", ["--env-id", "tests.envs:Image-v0"], "--env-id", "1-dimensional observations only"),
    ("dqn.py", ["--env-id", "tests.nosuchmodule:Env-v0"], "--env-id", "cannot import"),
    ("ppo.py", ["--num-minibatches", "3"], "--num-minibatches", "does not divide"),
    ("ppo.py", ["--num-envs", "1", "--num-steps", "4", "--num-minibatches", "4"], "--num-minibatches", "too small"),
    ("ppo.py", ["--num-envs", "0"], "--num-envs", "must be a positive finite number"),
    ("ppo.py", ["--update-epochs", "-1"], "--update-epochs", "must be a positive finite number"),
    ("ppo.py", ["--total-timesteps", "100"], "--total-timesteps", "less than one rollout"),
    ("dqn.py", ["--batch-size", "0"], "--batch-size", "must be a positive finite number"),
    ("dqn.py", ["--buffer-size", "8", "--batch-size", "2", "--num-envs", "4"], "--buffer-size", "needs at least 3"),
    ("dqn.py", ["--n-step", "0"], "--n-step", "must be a positive finite number"),
    ("dqn.py", ["--prioritized-replay-beta", "1.5"], "--prioritized-replay-beta", "must be in [0, 1]"),
    ("dqn.py", ["--buffer-size", "100000000000"], "--buffer-size", "lower the capacity"),
    ("dqn.py", ["--learning-starts", "600000"], "--learning-starts", "leaves no training"),
    ("dqn.py", ["--exploration-fraction", "0"], "--exploration-fraction", "must be in"),
    ("dqn.py", ["--start-e", "0.1", "--end-e", "0.5"], "--end-e", "is above --start-e"),
    ("dqn.py", ["--buffer-size", "64"], "--buffer-size", "smaller than --batch-size"),
    ("c51.py", ["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
    ("c51.py", ["--v-min", "10", "--v-max", "10"], "--v-max", "is not above --v-min"),
    ("c51.py", ["--n-atoms", "1"], "--n-atoms", "must be at least 2"),
    ("c51.py", ["--n-step", "0"], "--n-step", "must be a positive"),
    ("dqn_atari.py", ["--env-id", "CartPole-v1"], "--env-id", "is not an Atari game"),
    ("dqn_atari.py", ["--buffer-size", "100000000"], "--buffer-size", "lower the capacity"),
    ("c51_atari.py", ["--env-id", "CartPole-v1"], "--env-id", "is not an Atari game"),
    ("rainbow_atari.py", ["--env-id", "CartPole-v1"], "--env-id", "is not an Atari game"),
    ("rainbow_atari.py", ["--env-id", "ALE/Breakout-v5"], "--env-id", "skips frames itself"),
    ("dqn_atari.py", ["--env-id", "Breakout-v4"], "--env-id", "skips frames itself"),
    ("rainbow_atari.py", ["--noisy-sigma0", "-1"], "--noisy-sigma0", "must be >= 0"),
    ("rainbow_atari.py", ["--prioritized-replay-beta", "2"], "--prioritized-replay-beta", "must be in [0, 1]"),
    ("sac_atari.py", ["--env-id", "CartPole-v1"], "--env-id", "is not an Atari game"),
    ("sac_atari.py", ["--env-id", "ALE/Breakout-v5"], "--env-id", "skips frames itself"),
    ("sac_atari.py", ["--target-entropy-scale", "1.5"], "--target-entropy-scale", "must be in [0, 1]"),
    ("sac_atari.py", ["--update-frequency", "0"], "--update-frequency", "must be a positive finite number"),
    ("sac_atari.py", ["--buffer-size", "100", "--num-envs", "20"], "--buffer-size", "needs at least 6"),
    ("sac_atari.py", ["--buffer-size", "100000000"], "--buffer-size", "lower the capacity"),
    ("td3_continuous.py", ["--env-id", "CartPole-v1"], "--env-id", "supports Box only"),
    ("sac_continuous.py", ["--env-id", "tests.envs:UnboundedActions-v0"], "--env-id", "unbounded actions"),
    ("ddpg_continuous.py", ["--env-id", "NoSuchEnv-v0"], "--env-id", "unknown environment"),
    ("td3_continuous.py", ["--policy-noise", "-0.1"], "--policy-noise", "must be in [0, 1e6]"),
    ("ddpg_continuous.py", ["--exploration-noise", "-1"], "--exploration-noise", "must be in [0, 1e6]"),
    ("sac_continuous.py", ["--tau", "0"], "--tau", "must be in (0, 1]"),
    ("sac_continuous.py", ["--learning-starts", "2000000"], "--learning-starts", "leaves no training"),
    ("td3_continuous.py", ["--buffer-size", "100", "--batch-size", "256"], "--buffer-size", "smaller than --batch-size"),
    ("ddpg_continuous.py", ["--buffer-size", "10000000000"], "--buffer-size", "lower the capacity"),
    ("td3_continuous.py", ["--learning-starts", "2000000"], "--learning-starts", "leaves no training"),
    ("sac_continuous.py", ["--buffer-size", "10000000000"], "--buffer-size", "lower the capacity"),
    ("sac_continuous.py", ["--target-entropy-scale", "-1"], "--target-entropy-scale", "must be above -log 2 = -0.6931"),
    ("sac_continuous.py", ["--alpha", "0", "--no-autotune"], "--alpha", "must be > 0 (α is kept as log α), got 0.0"),
    ("ppo.py", ["--env-id", "ALE/NoSuchGame-v5"], "--env-id", "atari extra"),
    # an Atari id in a script that never imports ale-py: refused for its action space
    ("sac_continuous.py", ["--env-id", "BreakoutNoFrameskip-v4"], "--env-id", "supports Box only"),
]


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    import time

    from cleanrl.ppo import Args
    from cleanrl_utils.run import start_run

    monkeypatch.setattr(time, "time", lambda: 1_000_000.5)
    runs = [start_run(Args(exp_name="ppo", script="ppo"), runs_dir=tmp_path) for _ in range(3)]
    for run in runs:
        run.close()
    names = [run.directory.name for run in runs]
    assert names == [f"CartPole-v1__ppo__1__{stamp}" for stamp in (1000000, 1000001, 1000002)]
    assert all((run.directory / "args.json").is_file() for run in runs)


@pytest.mark.parametrize("script,flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(script, flags, flag, message, tmp_path):
    assert_stops_with_one_line(script, flags, flag, message, tmp_path)


@pytest.mark.parametrize(
    "script", ["ppo.py", pytest.param("dqn.py", marks=pytest.mark.long), pytest.param("c51.py", marks=pytest.mark.long)]
)
def test_same_seed_same_returns(script, tmp_path):
    flags = {
        "ppo.py": ["--total-timesteps", "6144"],
        "dqn.py": ["--total-timesteps", "4000", "--learning-starts", "1000", "--train-frequency", "1"],
        "c51.py": ["--total-timesteps", "4000", "--learning-starts", "1000", "--train-frequency", "1"],
    }[script]
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        run_script(script, *flags, "--seed", "7", cwd=tmp_path / name)
        runs.append(episodic_returns(run_dir(tmp_path / name)))
    assert len(runs[0]) > 10
    assert runs[0] == runs[1]
    (tmp_path / "c").mkdir()
    run_script(script, *flags, "--seed", "8", cwd=tmp_path / "c")
    assert episodic_returns(run_dir(tmp_path / "c")) != runs[0]


def test_dqn_all_options_run_and_evaluate(tmp_path):
    from cleanrl.dqn import evaluate

    run_script(
        "dqn.py",
        *SHORT["dqn.py"],
        "--double-q",
        "--dueling",
        "--n-step",
        "3",
        "--prioritized-replay",
        "--save-model",
        "--eval-episodes",
        "1",
        cwd=tmp_path,
    )
    directory = run_dir(tmp_path)
    assert {"losses/td_loss", "losses/q_values"} <= set(scalars(directory))
    assert evaluate(str(directory / "dqn.cleanrl_model"), eval_episodes=2).shape == (2,)


@pytest.mark.parametrize("script", ["ppo.py", "dqn.py"])
def test_async_env_mode_matches_sync(script, tmp_path):
    """Subprocess envs give the same observations, hence the same returns, as serial ones."""
    flags = {
        "ppo.py": ["--total-timesteps", "2048", "--num-envs", "2"],
        "dqn.py": ["--total-timesteps", "2000", "--num-envs", "2", "--learning-starts", "500"],
    }[script]
    returns = returns_by_env_mode(script, *flags, cwd=tmp_path)
    assert returns["sync"] and returns["sync"] == returns["async"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_custom_env_module_in_the_current_directory_is_found(mode, tmp_path):
    """``--env-id mymodule:Env-v0`` with mymodule.py where the command runs: found without PYTHONPATH naming the
    directory (``python cleanrl/ppo.py`` puts cleanrl/ on the path, not the current directory), in the main process
    and in the env workers; a module that is nowhere says where it was looked for."""
    (tmp_path / "my_tasks.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('ShortCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv', max_episode_steps=20)\n"
    )
    flags = ["--env-id", "my_tasks:ShortCartPole-v0", "--env-mode", mode, "--num-envs", "2", "--num-steps", "64"]
    run_script("ppo.py", *flags, "--total-timesteps", "256", cwd=tmp_path)
    lengths = [length for _, length in scalars(run_dir(tmp_path))["charts/episodic_length"]]
    assert lengths and max(lengths) <= 20  # the module's task, with its 20-step limit
    (tmp_path / "elsewhere").mkdir()
    message = "cannot import 'my_tasks' to register 'ShortCartPole-v0' (looked in "
    assert_stops_with_one_line("ppo.py", flags, "--env-id", message, tmp_path / "elsewhere")
    where = f", {(tmp_path / 'elsewhere').resolve()} (the working directory)): No module named 'my_tasks'"
    assert_stops_with_one_line("ppo.py", flags, "--env-id", where, tmp_path / "elsewhere")


REGISTERS_MY_ENV = "import gymnasium as gym\ngym.register('MyEnv-v0', 'gymnasium.envs.classic_control:CartPoleEnv')\n"
STANDARD_TEST = importlib.util.find_spec("test")


@pytest.mark.skipif(STANDARD_TEST is None, reason="this Python has no standard library 'test' package")
@pytest.mark.parametrize("module", ["test", "c51"])
def test_an_env_module_that_another_module_of_its_name_shadows_is_named_with_the_one_imported(module, tmp_path):
    """``--env-id test:MyEnv-v0`` with ./test.py imports the standard library's ``test``; ``--env-id c51:MyEnv-v0`` run
    by ``python cleanrl/c51.py`` with ./c51.py imports cleanrl/c51.py (the script's folder comes first). The working
    directory stays last on the path; the refusal names the file imported and the one of the working directory that
    was not (before: only "unknown environment"). In a subprocess: the path is the command's."""
    (tmp_path / f"{module}.py").write_text(REGISTERS_MY_ENV)
    script = "ppo.py" if module == "test" else "c51.py"
    result = run_script(script, "--env-id", f"{module}:MyEnv-v0", cwd=tmp_path, check=False, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    imported = Path(STANDARD_TEST.origin) if module == "test" else ROOT / "cleanrl" / "c51.py"
    shadow = f"{module}.py in the working directory {tmp_path.resolve()} was not: rename it)"
    assert lines[0] == (
        f"error: --env-id: unknown environment '{module}:MyEnv-v0' ('{module}' was imported from {imported.resolve()}, "
        f"earlier on the path; {shadow}"
    )
    assert not (tmp_path / "runs").exists()


def test_total_timesteps_rounded_to_whole_rollouts_is_announced(tmp_path):
    result = run_script("ppo.py", "--total-timesteps", "1000", cwd=tmp_path)
    assert "training 512 steps: --total-timesteps rounded down to whole rollouts of 512" in result.stdout
    progress = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert progress[-1].startswith("step 512/512 (100%)")


def test_a_run_that_ends_says_what_it_reached_where_its_files_are_and_how_to_plot_them(tmp_path):
    flags = ["--total-timesteps", "1024", "--checkpoint-interval", "512", "--save-model", "--eval-episodes", "1"]
    lines = run_script("ppo.py", *flags, cwd=tmp_path).stdout.strip().splitlines()
    run = f"runs/{run_dir(tmp_path).name}"
    finished = r"run finished at step 1024: mean return of its last 20 episodes [\d.]+; wall time 0:00:\d\d"
    assert re.fullmatch(finished, lines[-4]), lines[-4]
    assert lines[-3] == f"{run} holds TensorBoard events, checkpoints step_512.pt, step_1024.pt, the model ppo.cleanrl_model"
    assert lines[-2] == f"plot it: python -m cleanrl_utils.plot {run} --out plots"
    assert lines[-1] == f"evaluate it again: python -m cleanrl_utils.enjoy {run} --eval-episodes 10"
    (tmp_path / "other").mkdir()  # without a model or checkpoints
    lines = run_script("ppo.py", "--total-timesteps", "512", cwd=tmp_path / "other").stdout.strip().splitlines()
    assert lines[-2] == f"runs/{run_dir(tmp_path / 'other').name} holds TensorBoard events"
    assert lines[-1].startswith("plot it: ")


@pytest.mark.parametrize(
    "seconds, resumed, said",
    [
        (0.2, None, "wall time 0:00:00"),
        (42.4, None, "wall time 0:00:42"),
        (185.0, None, "wall time 0:03:05"),
        (90061.0, None, "wall time 25:01:01"),
        (61.0, {"global_step": 512, "path": "x"}, "wall time 0:01:01 since the resume at step 512"),
    ],
)
def test_the_closing_summary_gives_the_wall_time_on_a_monotonic_clock(seconds, resumed, said, tmp_path, monkeypatch):
    """The wall time since the run started (since its resume, for a resumed run), read on the monotonic clock: the
    wall clock set back a day meanwhile changes nothing."""
    from types import SimpleNamespace

    from cleanrl_utils import run as run_module

    clock = [1000.0]
    monkeypatch.setattr(run_module.time, "monotonic", lambda: clock[0])
    args = SimpleNamespace(checkpoint_interval=0, total_timesteps=1024, exp_name="ppo")
    run = run_module.Run(args, tmp_path, run_module.torch.device("cpu"), resumed)
    clock[0] += seconds
    monkeypatch.setattr(run_module.time, "time", lambda: 0.0)  # the wall clock set back to 1970
    first = run.summary().splitlines()[0]
    assert first.endswith(f"; {said}"), first
    run._unlock()


def test_a_run_in_which_no_episode_ended_says_so_and_nothing_else(tmp_path):
    flags = ["--env-id", "Acrobot-v1", "--num-envs", "1", "--num-steps", "128", "--total-timesteps", "128"]
    result = run_script("ppo.py", *flags, cwd=tmp_path)  # Acrobot's episodes last up to 500 steps
    assert "run finished at step 128: no episode ended" in result.stdout
    assert result.stderr == "", result.stderr


@pytest.mark.parametrize(
    "name, copy_folder",
    [
        ("x$(touch PWNED)y", None),  # cleanrl/ppo.py
        ("a;touch PWNED;b", "my copies;touch PWNED"),  # a copy, named to the evaluation tool with --script
        ("my run", "my copies $(touch PWNED) `touch PWNED`"),
    ],
)
def test_the_commands_a_run_prints_are_pasteable_whatever_its_exp_name(name, copy_folder, tmp_path):
    """Every command a run prints for pasting is shell-quoted: the resume command of a stopped run, the closing
    summary's plot and evaluate commands, and the evaluate command of the refusal to resume a finished run. With a
    command substitution, a ';' or a space in --exp-name (hence in the run directory's name) or in the folder of a
    copy (its --script), each pasted into bash works, keeps each path one argument, and runs nothing else."""
    script = ROOT / "cleanrl" / "ppo.py"
    if copy_folder:
        (tmp_path / copy_folder).mkdir()
        script = Path(shutil.copy(script, tmp_path / copy_folder / "my_ppo.py"))
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "1024", "--checkpoint-interval", "256"]
    process = start_script(str(script), *flags, "--exp-name", name, "--save-model", "--eval-episodes", "1", cwd=tmp_path)
    while not list(tmp_path.glob("runs/*/checkpoints/step_*.pt")):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    run = run_dir(tmp_path)
    assert run.name.startswith(f"CartPole-v1__{name}__1__")
    relative = f"runs/{run.name}"
    copy = ["--script", str(script)] if copy_folder else []  # a copy is named to the evaluation tool

    def paste(command: str, words: list[str], status: int = 0) -> subprocess.CompletedProcess:
        """Run ``command``, once checked to split into ``words``, as a shell would (python: the one running the tests)."""
        assert shlex.split(command) == words, command
        pasted = subprocess.run(
            ["bash", "-c", shlex.quote(sys.executable) + command.removeprefix("python")],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert pasted.returncode == status, pasted.stderr[-2000:]
        return pasted

    resume = next(line for line in out.splitlines() if "; resume with: " in line).split("; resume with: ", 1)[1]
    resumed = paste(resume, ["python", str(script), "--resume", relative]).stdout
    assert f"run directory: {relative} (resumed at step " in resumed and run_dir(tmp_path) == run
    summary = resumed.strip().splitlines()
    assert summary[-2].startswith("plot it: ") and summary[-1].startswith("evaluate it again: "), summary
    paste(summary[-2].removeprefix("plot it: "), ["python", "-m", "cleanrl_utils.plot", relative, "--out", "plots"])
    assert (tmp_path / "plots").is_dir()
    enjoy = ["python", "-m", "cleanrl_utils.enjoy", relative]
    scored = paste(summary[-1].removeprefix("evaluate it again: "), [*enjoy, "--eval-episodes", "10", *copy]).stdout
    assert scored.startswith(f"{script.name}, {relative}/{name}.cleanrl_model: 10 episodes, return "), scored
    # the same resume command again: the run has finished, and the refusal says how to evaluate it
    refused = paste(resume, ["python", str(script), "--resume", relative], status=2).stderr
    said = f"error: --resume: {relative} has finished at step 1024 (add --total-timesteps above it to train longer): "
    assert refused.startswith(said) and len(refused.strip().splitlines()) == 1, refused
    scored = paste(refused.strip().removeprefix(said), [*enjoy, *copy]).stdout
    assert scored.startswith(f"{script.name}, {relative}/{name}.cleanrl_model: 10 episodes, return "), scored
    assert not list(tmp_path.rglob("PWNED")) and not (ROOT / "PWNED").exists()


@pytest.mark.parametrize("script", ["dqn_atari", "c51_atari", "qrdqn_atari"])
def test_atari_replay_scripts_end_without_leak_warnings(script, tmp_path):
    """A run ends with its envs let go: no nanobind "leaked instances" lines at exit (d3f1fc6's forked vector env
    printed 5 to 17 of them after every dqn_atari.py, c51_atari.py and qrdqn_atari.py run)."""
    flags = ("--total-timesteps", "300", "--learning-starts", "100", "--buffer-size", "1000", "--batch-size", "8")
    result = run_script(f"{script}.py", *flags, cwd=tmp_path)
    assert "nanobind" not in result.stderr and "leaked" not in result.stderr, result.stderr[-1000:]


@pytest.mark.parametrize(
    "script", ["dqn_atari", "c51_atari", "qrdqn_atari", "rainbow_atari", "sac_atari", "ppo_atari", "ppo_atari_lstm"]
)
def test_atari_scripts_log_whole_games(script):
    """The episode statistics of an Atari training env are the game's (recorded below episodic life and reward
    clipping): the one episode reported by a random Breakout game comes after its 5 lost lives, each a termination
    for training, and counts every frame of the game. (Training, saving and evaluating: tests/test_contracts.py.)"""
    import importlib

    import gymnasium as gym

    from cleanrl_utils.wrappers import SAME_STEP

    make_env = importlib.import_module(f"cleanrl.{script}").make_env
    envs = gym.vector.SyncVectorEnv([make_env("BreakoutNoFrameskip-v4", 0, False, "")], autoreset_mode=SAME_STEP)
    envs.reset(seed=1)
    rng, lives_lost, steps = np.random.default_rng(1), 0, 0
    while True:
        _, _, terminations, _, infos = envs.step(rng.integers(4, size=1))
        lives_lost, steps = lives_lost + int(terminations[0]), steps + 1
        if "_episode" in infos.get("final_info", {}):
            break
    envs.close()
    assert lives_lost == 5 and infos["final_info"]["episode"]["l"][0] >= 4 * steps  # frames, 4 per agent step


@pytest.mark.long
def test_sac_atari_with_a_fixed_temperature_and_its_evaluation_options(tmp_path):
    """--no-autotune: α stays at --alpha and there is no temperature loss (one update, at step 801, logged); the
    saved model is evaluated greedily, sampled from π, and with random actions. (The tuned run, saved and evaluated
    at the defaults: tests/test_contracts.py.)"""
    from cleanrl.dqn import evaluate as dqn_evaluate
    from cleanrl.sac_atari import evaluate

    flags = ["--total-timesteps", "804", "--learning-starts", "800", "--buffer-size", "2000", "--no-autotune"]
    run_script("sac_atari.py", *flags, "--alpha", "0.05", "--save-model", "--eval-episodes", "1", cwd=tmp_path, timeout=600)
    directory = run_dir(tmp_path)
    tags = scalars(directory)
    assert [v for _, v in tags["losses/alpha"]] == [pytest.approx(0.05)] and "losses/alpha_loss" not in tags
    assert min(v for _, v in tags["charts/episodic_length"]) > 100  # whole games, not lives
    model = str(directory / "sac_atari.cleanrl_model")
    assert evaluate(model, eval_episodes=1, deterministic=False, epsilon=0.05).shape == (1,)
    with pytest.raises(ValueError, match="written by sac_atari.py, not by dqn.py"):
        dqn_evaluate(model, eval_episodes=1)


@pytest.mark.parametrize(
    "script,flag",
    [
        ("ppo.py", "--batch-size"),
        ("a2c.py", "--num-iterations"),
        ("ppo_lstm.py", "--minibatch-size"),
        ("ppo_trxl.py", "--minibatch-size"),
        ("ppo_continuous_lstm.py", "--minibatch-size"),
        ("ppo_atari.py", "--batch-size"),
        ("ppo_atari_lstm.py", "--minibatch-size"),
        ("ppo_atari_envpool.py", "--num-iterations"),
        ("ppo_rnd_envpool.py", "--minibatch-size"),
        ("ppo_procgen.py", "--batch-size"),
        ("ppg_procgen.py", "--num-phases"),
        ("ppg_procgen.py", "--aux-batch-rollouts"),
        ("ppo_pettingzoo.py", "--num-agents"),
    ],
)
def test_computed_fields_are_not_flags(script, flag, tmp_path):
    """Fields computed from other flags (batch size, minibatch size, iterations) cannot be set:
    tyro refuses them (exit status 2) rather than the script silently overriding them."""
    result = run_script(script, flag, "64", cwd=tmp_path, check=False, timeout=120)
    assert result.returncode == 2 and "Unrecognized options" in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


# ---- the off-policy scripts resumed without their replay buffer (with it: tests/test_contracts.py)


@pytest.mark.parametrize(
    "script,flags,total",
    [
        ("dqn.py", ["--buffer-size", "1000", "--batch-size", "32", "--train-frequency", "2"], 2000),
        pytest.param(
            "dqn_atari.py",
            ["--buffer-size", "1000", "--batch-size", "4", "--target-network-frequency", "100", "--n-step", "3"],
            800,
            marks=pytest.mark.long,
        ),
    ],
)
def test_dqn_resume_without_the_buffer_refills_it_then_updates(script, flags, total, tmp_path):
    resume_without_the_buffer(script, flags, total, "losses/td_loss", tmp_path)

"""What every script keeps, one test each, parametrized over the scripts: a short run that trains, saves and
evaluates its model (and a checkpoint) with the evaluation tool; bad input refused in one line before any run
directory exists; SIGTERM, then ``--resume``, ends where an uninterrupted run ends (model and curves identical);
another script's checkpoint refused.

A script joins by an entry of :data:`SCRIPTS`; its own tests (targets, options, learning) stay in its file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cleanrl_utils.files import checkpoint_path, checkpoint_step, checkpoints, write_file
from tests.conftest import (
    assert_buffered_resume_is_exact,
    assert_stops_with_one_line,
    enjoy,
    run_dir,
    run_script,
    scalars,
    sigterm_then_resume,
)


@dataclasses.dataclass
class Script:
    """How a script is run here.

    Attributes:
        run: flags of a short run (seconds) that reaches training updates.
        resume: flags of the SIGTERM-then-resume run (a checkpoint at a quarter of ``--total-timesteps``), which must
            hold ``--total-timesteps``; off-policy scripts (``buffer``) checkpoint their replay buffer.
        buffer: an off-policy script, resumed with ``--checkpoint-buffer``.
        loss: a loss tag the script logs.
        long: the resume comparison takes minutes: marked ``long`` (CI's second step).
        exact_resume: False for an asynchronous script (actor processes: not reproducible) and for one whose envs are a
            library's own vector env a checkpoint cannot hold (EnvPool, Procgen: a resumed run continues with new
            envs): no resume comparison (``resume`` empty); its own tests check that SIGTERM writes a checkpoint and
            ``--resume`` continues.
    """

    run: list[str]
    resume: list[str]
    loss: str
    buffer: bool = False
    long: bool = False
    exact_resume: bool = True


OFF_POLICY_CONTINUOUS = ["--env-id", "Pendulum-v1", "--learning-starts", "100", "--batch-size", "32"]
PENDULUM_NO_VELOCITY = ["--env-id", "cleanrl_utils.envs:PendulumNoVelocity-v1", "--num-envs", "2", "--num-steps", "64",
                        "--num-minibatches", "2", "--lstm-size", "16"]  # fmt: skip
PPO_CONTINUOUS = ["--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2",
                  "--update-epochs", "2"]  # fmt: skip
ATARI_REPLAY = ["--total-timesteps", "600", "--learning-starts", "400", "--buffer-size", "1000", "--batch-size", "4"]
SCRIPTS = {
    "ppo.py": Script(
        run=["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "1024"],
        resume=["--num-envs", "2", "--num-steps", "128", "--total-timesteps", "4096"],
        loss="losses/value_loss",
    ),
    "dqn.py": Script(
        run=["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2"],
        resume=["--total-timesteps", "2000", "--learning-starts", "500", "--buffer-size", "1000", "--batch-size", "32",
                "--train-frequency", "4", "--target-network-frequency", "100"],
        loss="losses/td_loss",
        buffer=True,
    ),
    "sac_continuous.py": Script(
        run=[*OFF_POLICY_CONTINUOUS, "--total-timesteps", "400"],
        resume=[*OFF_POLICY_CONTINUOUS, "--total-timesteps", "1200", "--buffer-size", "2000"],
        loss="losses/qf_loss",
        buffer=True,
    ),
    "ppo_lstm.py": Script(
        run=["--total-timesteps", "1024", "--num-envs", "4", "--num-minibatches", "2", "--update-epochs", "2"],
        resume=["--num-envs", "2", "--num-steps", "32", "--update-epochs", "2", "--lstm-size", "16",
                "--total-timesteps", "1280"],
        loss="losses/value_loss",
    ),
    "ppo_continuous_lstm.py": Script(
        run=[*PENDULUM_NO_VELOCITY, "--update-epochs", "1", "--total-timesteps", "512"],
        resume=[*PENDULUM_NO_VELOCITY, "--update-epochs", "2", "--total-timesteps", "1280"],
        loss="losses/value_loss",
        long=True,
    ),
    "ppo_trxl.py": Script(
        run=["--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "64", "--update-epochs", "2"],
        resume=["--num-envs", "2", "--num-steps", "32", "--update-epochs", "2", "--trxl-dim", "16",
                "--total-timesteps", "1280"],
        loss="losses/value_loss",
    ),
    "dqn_structured.py": Script(
        run=["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2"],
        resume=["--env-id", "cleanrl_utils.envs:CombinationLock-v0", "--total-timesteps", "4000", "--learning-starts", "500",
                "--buffer-size", "2000"],
        loss="losses/td_loss",
        buffer=True,
        long=True,
    ),
    "ppo_structured.py": Script(
        run=["--env-id", "cleanrl_utils.envs:CombinationLock-v0", "--num-envs", "2", "--num-steps", "64",
             "--total-timesteps", "1024"],
        resume=["--env-id", "MiniGrid-DoorKey-5x5-v0", "--num-envs", "4", "--num-steps", "64", "--total-timesteps", "4096"],
        loss="losses/value_loss",
        long=True,
    ),
    "a2c.py": Script(
        run=["--total-timesteps", "2000", "--log-interval", "10"],
        resume=["--total-timesteps", "6000", "--log-interval", "5", "--anneal-lr"],
        loss="losses/value_loss",
    ),
    "c51.py": Script(
        run=["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2"],
        resume=["--total-timesteps", "2000", "--learning-starts", "500", "--buffer-size", "1000", "--batch-size", "32",
                "--train-frequency", "4", "--target-network-frequency", "100", "--n-step", "3"],
        loss="losses/loss",
        buffer=True,
    ),
    "qrdqn.py": Script(
        run=["--total-timesteps", "1500", "--learning-starts", "500", "--train-frequency", "2", "--n-quantiles", "32",
             "--batch-size", "32", "--buffer-size", "2000"],
        resume=["--total-timesteps", "2000", "--learning-starts", "500", "--buffer-size", "1000", "--batch-size", "32",
                "--train-frequency", "4", "--target-network-frequency", "100", "--double-q", "--n-step", "3"],
        loss="losses/quantile_loss",
        buffer=True,
    ),
    "pqn.py": Script(
        run=["--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "128"],
        resume=["--total-timesteps", "15360"],
        loss="losses/td_loss",
        long=True,
    ),
    "ddpg_continuous.py": Script(
        run=[*OFF_POLICY_CONTINUOUS, "--total-timesteps", "400"],
        resume=[*OFF_POLICY_CONTINUOUS, "--num-envs", "2", "--total-timesteps", "1200", "--buffer-size", "800"],
        loss="losses/qf1_loss",
        buffer=True,
    ),
    "td3_continuous.py": Script(
        run=[*OFF_POLICY_CONTINUOUS, "--total-timesteps", "400"],
        resume=[*OFF_POLICY_CONTINUOUS, "--num-envs", "2", "--total-timesteps", "1200", "--buffer-size", "800"],
        loss="losses/qf1_loss",
        buffer=True,
    ),
    "ppo_continuous.py": Script(
        run=[*PPO_CONTINUOUS, "--total-timesteps", "512"],
        resume=[*PPO_CONTINUOUS, "--total-timesteps", "1920"],
        loss="losses/value_loss",
    ),
    "rpo_continuous.py": Script(
        run=[*PPO_CONTINUOUS, "--total-timesteps", "512"],
        resume=[*PPO_CONTINUOUS, "--total-timesteps", "1920"],
        loss="losses/value_loss",
        long=True,
    ),
    "ddp_ppo.py": Script(  # one rank, plain python (two ranks under torchrun: tests/test_ddp_ppo.py)
        run=["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "1024"],
        resume=["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "128", "--total-timesteps", "4096"],
        loss="losses/value_loss",
    ),
    "impala_atari.py": Script(
        run=["--env-id", "CartPole-v1", "--env-mode", "sync", "--num-actors", "1", "--num-envs", "2", "--unroll-length", "8",
             "--batch-size", "2", "--total-timesteps", "2000"],
        resume=[],
        loss="losses/policy_loss",
        exact_resume=False,
    ),
    "apex_dqn_atari.py": Script(
        run=["--env-id", "CartPole-v1", "--env-mode", "sync", "--num-actors", "1", "--num-envs", "2", "--hidden-size", "16",
             "--batch-size", "8", "--buffer-size", "1000", "--learning-starts", "100", "--replay-ratio", "2",
             "--torch-threads", "1", "--total-timesteps", "1000"],
        resume=[],
        loss="losses/td_loss",
        exact_resume=False,
    ),
    "r2d2_async.py": Script(
        run=["--env-id", "CartPole-v1", "--env-mode", "sync", "--num-actors", "1", "--num-envs", "4", "--lstm-size", "16",
             "--hidden-size", "16", "--burn-in", "2", "--learn-length", "4", "--n-step", "2", "--batch-size", "8",
             "--buffer-size", "500", "--learning-starts", "200", "--total-timesteps", "1200"],
        resume=[],
        loss="losses/td_loss",
        exact_resume=False,
    ),
    "ppo_atari_envpool.py": Script(
        run=["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "512", "--num-threads", "1"],
        resume=[],
        loss="losses/value_loss",
        exact_resume=False,
    ),
    "pqn_atari_envpool.py": Script(
        run=["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "1024", "--num-minibatches", "1",
             "--update-epochs", "1", "--num-threads", "1"],
        resume=[],
        loss="losses/td_loss",
        exact_resume=False,
    ),
    "pqn_atari_envpool_lstm.py": Script(
        run=["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "1024", "--num-minibatches", "1",
             "--update-epochs", "1", "--num-threads", "1"],
        resume=[],
        loss="losses/td_loss",
        exact_resume=False,
    ),
    "ppo_rnd_envpool.py": Script(
        run=["--env-id", "Breakout-v5", "--num-envs", "4", "--num-steps", "32", "--num-iterations-obs-norm-init", "1",
             "--num-threads", "1", "--total-timesteps", "1024"],  # Breakout: games end in a short run
        resume=[],
        loss="losses/rnd_loss",
        exact_resume=False,
    ),
    "ppo_procgen.py": Script(
        run=["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "256"],
        resume=[],
        loss="losses/value_loss",
        exact_resume=False,
    ),
    "ppg_procgen.py": Script(
        run=["--num-envs", "2", "--num-steps", "32", "--n-iteration", "2", "--num-minibatches", "2",
             "--e-auxiliary", "1", "--num-aux-rollouts", "2", "--total-timesteps", "256"],
        resume=[],
        loss="losses/aux/kl_loss",
        exact_resume=False,
    ),
    "ppo_pettingzoo.py": Script(
        run=["--env-id", "cleanrl_utils.envs:MinefieldRace", "--num-envs", "2", "--num-steps", "32",
             "--total-timesteps", "512"],
        resume=["--env-id", "cleanrl_utils.envs:MinefieldRace", "--num-envs", "2", "--num-steps", "32",
                "--total-timesteps", "3072"],
        loss="losses/value_loss",
    ),
    # the Atari scripts (Breakout): tiny replays, few updates (an Atari update costs tens of ms on one core)
    "dqn_atari.py": Script(
        run=[*ATARI_REPLAY, "--double-q", "--dueling", "--n-step", "3", "--prioritized-replay"],
        resume=["--total-timesteps", "800", "--learning-starts", "200", "--buffer-size", "1000", "--batch-size", "4",
                "--target-network-frequency", "100", "--double-q", "--dueling", "--n-step", "3", "--prioritized-replay"],
        loss="losses/td_loss",
        buffer=True,
        long=True,
    ),
    "c51_atari.py": Script(
        run=[*ATARI_REPLAY, "--n-step", "3"],
        resume=["--total-timesteps", "800", "--learning-starts", "200", "--buffer-size", "1000", "--batch-size", "4",
                "--target-network-frequency", "100", "--n-step", "3"],
        loss="losses/loss",
        buffer=True,
        long=True,
    ),
    "qrdqn_atari.py": Script(
        run=[*ATARI_REPLAY, "--double-q", "--n-step", "3"],
        resume=["--total-timesteps", "800", "--learning-starts", "200", "--buffer-size", "1000", "--batch-size", "4",
                "--train-frequency", "4", "--target-network-frequency", "100", "--double-q", "--n-step", "3"],
        loss="losses/quantile_loss",
        buffer=True,
        long=True,
    ),
    # learning from step 101: the checkpoint (step 150) holds the noise the first updates drew
    "rainbow_atari.py": Script(
        run=[*ATARI_REPLAY, "--target-network-frequency", "100"],
        resume=["--total-timesteps", "600", "--learning-starts", "100", "--buffer-size", "1000", "--batch-size", "4",
                "--train-frequency", "4", "--target-network-frequency", "100"],
        loss="losses/loss",
        buffer=True,
        long=True,
    ),
    # the frame-stacked replay (600 transitions) wraps around; the target critics are copied every 48 steps; the
    # losses are logged every 100 updates (every 800th step): once, at step 801
    "sac_atari.py": Script(
        run=ATARI_REPLAY,
        resume=["--total-timesteps", "808", "--learning-starts", "400", "--buffer-size", "600", "--batch-size", "16",
                "--update-frequency", "8", "--target-network-frequency", "48"],
        loss="losses/qf_loss",
        buffer=True,
        long=True,
    ),
    "ppo_atari.py": Script(
        run=["--num-envs", "2", "--num-steps", "128", "--total-timesteps", "512"],
        resume=["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                "--total-timesteps", "192"],
        loss="losses/value_loss",
    ),
    "ppo_atari_lstm.py": Script(
        run=["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--total-timesteps", "512"],
        resume=["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                "--total-timesteps", "192"],
        loss="losses/value_loss",
        long=True,
    ),
}  # fmt: skip


def resume_cases() -> list:
    cases = [(name, script) for name, script in SCRIPTS.items() if script.exact_resume]
    return [pytest.param(name, marks=[pytest.mark.long] if script.long else []) for name, script in cases]


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_short_run_trains_saves_and_its_model_and_checkpoint_evaluate(name, tmp_path):
    script = SCRIPTS[name]
    total = int(script.run[script.run.index("--total-timesteps") + 1])
    flags = [*script.run, "--save-model", "--eval-episodes", "1", "--checkpoint-interval", str(total // 2)]
    result = run_script(name, *flags, cwd=tmp_path)
    directory = run_dir(tmp_path)
    assert json.loads((directory / "args.json").read_text())["script"] == name[:-3]
    tags = set(scalars(directory))
    assert {"charts/episodic_return", "charts/SPS", script.loss, "eval/episodic_return"} <= tags, tags
    assert "evaluation over 1 episodes" in result.stdout and (directory / f"{name[:-3]}.cleanrl_model").is_file()
    assert "evaluate it again: python -m cleanrl_utils.enjoy" in result.stdout
    scored = enjoy(str(directory), "--eval-episodes", "1", cwd=tmp_path)
    assert "episodes" in scored.stdout
    saved = checkpoints(directory)
    assert saved, list(directory.iterdir())
    model = torch.load(directory / f"{name[:-3]}.cleanrl_model", weights_only=True)
    assert checkpoint_step(saved[-1]) == model["global_step"], saved  # a run with checkpoints ends with one
    exported = tmp_path / "exported.cleanrl_model"  # the last checkpoint, evaluated and exported as a model file
    enjoy(str(saved[-1]), "--eval-episodes", "1", "--export", str(exported), cwd=tmp_path)
    assert_export_is_the_model(exported, directory / f"{name[:-3]}.cleanrl_model")


def assert_export_is_the_model(exported: Path, model: Path) -> None:
    """A checkpoint's export is the model ``--save-model`` writes, entry for entry: the same keys and header, the same
    tensors where the checkpoint was written at the model's step (an asynchronous learner may update after its last
    checkpoint: then the same names, shapes and dtypes)."""
    export, saved = (torch.load(path, map_location="cpu", weights_only=True) for path in (exported, model))
    assert sorted(export) == sorted(saved), f"export only: {set(export) - set(saved)}, model only: {set(saved) - set(export)}"
    same_step = export["global_step"] == saved["global_step"]
    for key, value in saved.items():
        if key == "global_step":
            continue
        if not isinstance(value, (dict, torch.Tensor)) or key in ("args", "modules"):
            assert export[key] == value, key
            continue
        pairs = value.items() if isinstance(value, dict) else [("", value)]
        assert not isinstance(value, dict) or export[key].keys() == value.keys(), key
        for name, tensor in pairs:
            theirs = export[key][name] if name else export[key]
            if not isinstance(tensor, torch.Tensor):
                assert theirs == tensor, f"{key}.{name}"
                continue
            assert (theirs.shape, theirs.dtype) == (tensor.shape, tensor.dtype), f"{key}.{name}"
            assert not same_step or torch.equal(theirs, tensor), f"{key}.{name} differs at the same step"


@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize(
    "flags,flag,message",
    [
        (["--seed", "-1"], "--seed", "must be in [0, 2**31)"),
        (["--exp-name", "a/b"], "--exp-name", "without '/'"),
        (["--total-timesteps", "0"], "--total-timesteps", ""),
        (["--no-such-flag", "1"], "--no-such-flag", "see --help"),
        (["--env-id", "NoSuchEnv-v0"], "--env-id", "NoSuchEnv-v0"),
    ],
)
def test_bad_input_stops_in_one_line_before_any_run_directory(name, flags, flag, message, tmp_path):
    assert_stops_with_one_line(name, flags, flag, message, tmp_path)


@pytest.mark.parametrize("name", resume_cases())
def test_sigterm_then_resume_equals_an_uninterrupted_run(name, tmp_path):
    script = SCRIPTS[name]
    if script.buffer:
        assert_buffered_resume_is_exact(name, script.resume, script.loss, tmp_path)
        return
    total = int(script.resume[script.resume.index("--total-timesteps") + 1])
    flags = [*script.resume, "--save-model", "--eval-episodes", "1"]
    whole, resumed = sigterm_then_resume(name, flags, total // 4, total, tmp_path)
    assert whole["model"].keys() == resumed["model"].keys()
    for key, tensor in whole["model"].items():
        assert tensor.equal(resumed["model"][key]), key
    assert resumed["curves"] == whole["curves"]


@dataclasses.dataclass
class _OtherArgs:
    env_id: str = "CartPole-v1"
    exp_name: str = "other"
    seed: int = 1
    total_timesteps: int = 1000
    script: str = "other"


@pytest.mark.parametrize("name", SCRIPTS)
def test_another_scripts_checkpoint_is_refused_in_one_line(name, tmp_path):
    run = tmp_path / "run"
    path = write_file(checkpoint_path(run, 100), "checkpoint", _OtherArgs(), {"global_step": 100, "state": {}})
    (run / "args.json").write_text(json.dumps(dataclasses.asdict(_OtherArgs())))
    message = f"written by other.py, not by {name}"
    assert_stops_with_one_line(name, ["--resume", str(path)], "--resume", message, tmp_path)

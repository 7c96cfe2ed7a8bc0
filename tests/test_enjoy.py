"""cleanrl_utils.enjoy: a saved model scores as it scored at the end of training; clear errors."""

from __future__ import annotations

import re

import pytest
import torch

from tests.conftest import enjoy, run_dir, run_script, scalars


@pytest.mark.parametrize(
    "script,flags",
    [
        ("ppo", ["--total-timesteps", "4096", "--num-envs", "2"]),
        ("dqn", ["--total-timesteps", "3000", "--learning-starts", "500", "--buffer-size", "3000"]),
    ],
)
def test_enjoy_scores_a_saved_model_as_training_evaluated_it(script, flags, tmp_path):
    run_script(f"{script}.py", "--env-id", "CartPole-v1", *flags, "--save-model", "--eval-episodes", "4", cwd=tmp_path)
    run = run_dir(tmp_path)
    trained = scalars(run)["eval/episodic_return"][-1][1]
    out = enjoy(str(run), "--eval-episodes", "4", cwd=tmp_path).stdout
    assert out.startswith(f"{script}.py, ")
    mean = float(out.split("return ")[1].split(" ±")[0])
    assert mean == pytest.approx(trained, abs=0.005)  # same episodes, same seed, same policy
    assert (
        "return"
        in enjoy(
            str(run),
            "--eval-episodes",
            "2",
            "--seed",
            "5",
            "--capture-video",
            "--video-dir",
            str(tmp_path / "vid"),
            cwd=tmp_path,
        ).stdout
    )
    assert list((tmp_path / "vid").glob("*.mp4"))


def test_enjoy_passes_script_options_and_refuses_unknown_ones(tmp_path):
    run_script(
        "dqn.py",
        "--env-id",
        "CartPole-v1",
        "--total-timesteps",
        "1000",
        "--learning-starts",
        "500",
        "--save-model",
        "--eval-episodes",
        "1",
        "--checkpoint-interval",
        "500",
        cwd=tmp_path,
    )
    run = run_dir(tmp_path)
    assert "return" in enjoy(str(run), "--eval-episodes", "1", "--option", "epsilon=1.0", cwd=tmp_path).stdout
    result = enjoy(str(run), "--option", "deterministic=True", cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --option: this script's evaluate takes no option 'deterministic'; it takes: epsilon"
    )
    checkpoint = enjoy(
        str(next(run.glob("checkpoints/*.pt"))), "--eval-episodes", "1", "--option", "epsilon=1.0", cwd=tmp_path
    )
    assert "return" in checkpoint.stdout  # a checkpoint is evaluated too, with the same options


@pytest.mark.parametrize(
    "script,flags",
    [
        ("ppo", ["--env-id", "CartPole-v1", "--total-timesteps", "4096", "--num-envs", "2", "--checkpoint-interval", "2048"]),
        (
            "dqn",
            ["--env-id", "CartPole-v1", "--total-timesteps", "3000", "--learning-starts", "500", "--buffer-size", "3000"]
            + ["--checkpoint-interval", "1500"],
        ),
        # its model's observation statistics are part of the checkpoint's normalisation
        (
            "ppo_continuous",
            ["--env-id", "Pendulum-v1", "--total-timesteps", "4096", "--num-envs", "1"] + ["--checkpoint-interval", "2048"],
        ),
    ],
)
def test_enjoy_evaluates_a_checkpoint_with_the_scripts_networks(script, flags, tmp_path):
    run_script(f"{script}.py", *flags, "--save-model", "--eval-episodes", "4", cwd=tmp_path)
    run = run_dir(tmp_path)
    trained = scalars(run)["eval/episodic_return"][-1][1]
    first, last = sorted((run / "checkpoints").glob("step_*.pt"), key=lambda path: int(path.stem[5:]))
    mean = lambda out: float(out.split("return ")[1].split(" ±")[0])  # noqa: E731

    out = enjoy(str(last), "--eval-episodes", "4", cwd=tmp_path).stdout  # written at the last step: the model's weights
    assert out.startswith(f"{script}.py, {last}: 4 episodes, return ")
    assert mean(out) == pytest.approx(trained, abs=0.005)

    exported = tmp_path / "export" / f"step_{first.stem}.cleanrl_model"
    out = enjoy(str(first), "--eval-episodes", "4", "--export", str(exported), cwd=tmp_path).stdout
    assert out.startswith(f"model written to {exported}\n{script}.py, {first}: ")
    model = torch.load(exported, weights_only=True)
    assert model["kind"] == "model" and model["script"] == script and model["global_step"] == int(first.stem[5:])
    assert "optimizer" not in model and "envs" not in model  # the networks, not the training state
    again = enjoy(str(exported), "--eval-episodes", "4", cwd=tmp_path).stdout
    assert mean(again) == mean(out.splitlines()[1])

    refused = enjoy(str(first), "--export", str(exported), cwd=tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr == f"error: --export: {exported} exists; give a new file\n"
    refused = enjoy(str(run), "--export", str(tmp_path / "new.cleanrl_model"), cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "is a model file already; --export takes a checkpoint" in refused.stderr
    (run / f"{script}.cleanrl_model").unlink()  # a run directory without a model points to its checkpoints
    refused = enjoy(str(run), cwd=tmp_path, check=False)
    assert refused.returncode == 2 and f"give a checkpoint: {last}" in refused.stderr


def test_a_checkpoint_without_networks_is_refused(tmp_path):
    from cleanrl_utils.enjoy import model_of_checkpoint

    with pytest.raises(ValueError, match="holds no network to evaluate"):
        model_of_checkpoint({"path": "step_5.pt", "state": {"agent": {}}, "modules": {}})
    model = model_of_checkpoint(
        {
            "path": "p",
            "script": "x",
            "state": {"agent": {}, "kind": torch.ones(1), "normalization": {}},
            "modules": {"agent": "A"},
        }
    )
    assert model["kind"] == "model" and model["obs_norm"] == {} and model["modules"] == {"agent": "A"} and "path" not in model


def test_a_checkpoint_that_holds_its_model_gives_that_model_alone():
    """Not the target network, the generator or the whole normalisation of its state: the model the script gives."""
    from cleanrl_utils.enjoy import model_of_checkpoint

    weights, statistics = {"w": torch.ones(2)}, {"obs_rms.mean": torch.zeros(3)}
    checkpoint = {
        **{"path": "p", "format": 2, "script": "x", "env_id": "E", "args": {"seed": 1}, "global_step": 7},
        "state": {"q": weights, "q_target": weights, "rng": torch.ones(1), "normalization": statistics},
        "modules": {"q": "Q", "q_target": "Q"},
        "model": {"entries": {"q": weights, "obs_norm": statistics}, "modules": {"q": "Q"}},
    }
    header = {"format": 2, "script": "x", "env_id": "E", "args": {"seed": 1}, "global_step": 7, "kind": "model"}
    assert model_of_checkpoint(checkpoint) == {**header, "q": weights, "obs_norm": statistics, "modules": {"q": "Q"}}
    for model in ({"entries": {"q": weights}}, {"entries": [], "modules": {}}, {"entries": {}, "modules": {"q": "Q"}}, 3):
        with pytest.raises(ValueError, match="p is damaged or forged: its model is not entries and their networks"):
            model_of_checkpoint({**checkpoint, "model": model})
    with pytest.raises(ValueError, match="p holds no network to evaluate"):
        model_of_checkpoint({**checkpoint, "model": {"entries": {"alpha": torch.ones(1)}, "modules": {}}})


def _junk(path):
    path.write_text("not a model")
    return path


class _Code:
    def __reduce__(self):
        return (print, ("unpickling ran code",))


def _pickle(path):
    import torch

    torch.save({"format": 2, "kind": "model", "obj": _Code()}, path)
    return path


def _model_of(tmp, script):
    """A well-formed model file whose recorded script name is a path: it must never choose the code that runs."""
    from dataclasses import dataclass

    from cleanrl_utils.files import write_file

    @dataclass
    class Args:
        env_id: str = "CartPole-v1"
        script: str = ""

    return write_file(tmp / "named.cleanrl_model", "model", Args(script=script), {})


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda tmp: tmp / "missing.cleanrl_model", "no such file or directory"),
        (lambda tmp: tmp, "holds no .cleanrl_model file"),
        (lambda tmp: _junk(tmp / "junk.cleanrl_model"), "cannot be read as a cleanrl file"),
        (lambda tmp: _pickle(tmp / "hostile.cleanrl_model"), "cannot be read as a cleanrl file (UnpicklingError"),
        (lambda tmp: _model_of(tmp, "../../../tmp/elsewhere"), "which is not a script in"),
    ],
)
def test_bad_model_paths_stop_with_one_line(make, message, tmp_path):
    result = enjoy(str(make(tmp_path)), cwd=tmp_path, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert "unpickling ran code" not in result.stdout


def test_options_are_read_as_the_type_of_their_default():
    from cleanrl_utils.enjoy import parse_options

    def evaluate(model_path, eval_episodes, deterministic: bool = True, epsilon: float = 0.0, **options):
        return None

    assert parse_options(["deterministic=false", "epsilon=0.05"], evaluate) == {"deterministic": False, "epsilon": 0.05}
    assert parse_options(["deterministic=YES"], evaluate) == {"deterministic": True}
    for bad, message in [
        ("deterministic=maybe", "takes true or false"),
        ("epsilon=abc", "takes a number"),
        ("epsilon=5", "a probability in [0, 1]"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_options([bad], evaluate)

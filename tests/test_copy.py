"""A copy of a script is a script: it trains, resumes and evaluates with its own code, anywhere.

As a researcher prototypes an idea: copy ppo.py (on-policy) and dqn.py (off-policy) out of the
repository, change their networks' widths and activations, train with checkpoints, stop the run
with SIGTERM, resume it, and evaluate the saved model with the evaluation tool. The copy's
networks must be the ones used everywhere (training, checkpoints, the saved model, evaluation);
the original script refuses the copy's files in one line, and the evaluation tool runs no code
that a model file names.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, assert_stops_with_one_line, enjoy, run_dir, run_script, scalars, sigterm_then_resume

EDITS = {  # script: [(old, new, expected count)] turning it into a variant with other networks
    "ppo.py": [("nn.Tanh()", "nn.GELU()", 4), ("nn.Linear(64", "nn.Linear(48", 4), (", 64)", ", 48)", 4)],
    "dqn.py": [("nn.ReLU()", "nn.GELU()", 2), ("120", "96", 2)],
}
FLAGS = {
    "ppo.py": ["--num-envs", "2", "--num-steps", "128", "--total-timesteps", "8192", "--env-mode", "async"],
    "dqn.py": [
        "--total-timesteps",
        "4000",
        "--learning-starts",
        "500",
        "--buffer-size",
        "1000",
        "--train-frequency",
        "2",
        "--checkpoint-buffer",
    ],
}


def copy_with_edits(script: str, directory: Path, name: str) -> Path:
    """``cleanrl/<script>`` copied to ``directory/<name>`` with :data:`EDITS` applied (each checked to apply)."""
    source = (ROOT / "cleanrl" / script).read_text()
    network_start = source.index("\nclass ", source.index("def make_env"))  # the networks, not the hyperparameters
    head, body = source[:network_start], source[network_start:]
    for old, new, count in EDITS[script]:
        assert body.count(old) >= count, (script, old, body.count(old))
        body = body.replace(old, new)
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / name
    copy.write_text(head + body)
    return copy


@pytest.mark.parametrize("script", ["ppo.py", "dqn.py"])
def test_a_modified_copy_trains_resumes_and_evaluates_with_its_own_networks(script, tmp_path):
    name = f"my_{script}"
    copy = copy_with_edits(script, tmp_path / "elsewhere", name)
    flags = [*FLAGS[script], "--env-id", "CartPole-v1", "--save-model", "--eval-episodes", "3"]
    total = int(flags[flags.index("--total-timesteps") + 1])

    # trained uninterrupted, and stopped by SIGTERM then resumed: the same final weights and curves
    (tmp_path / "runs").mkdir()
    (tmp_path / "original").mkdir()
    whole, resumed = sigterm_then_resume(str(copy), flags, total // 4, total, tmp_path / "runs")
    for key, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][key]), key
    assert resumed["curves"] == whole["curves"]

    run = run_dir(tmp_path / "runs" / "cut")
    assert run.name.startswith(f"CartPole-v1__my_{script[:-3]}__1__")  # its name is its file's
    model = torch.load(run / f"my_{script[:-3]}.cleanrl_model", weights_only=True)
    checkpoint = torch.load(next((run / "checkpoints").glob("*.pt")), weights_only=True)
    for content in (model, checkpoint):  # the copy's networks: the wider ones, with GELU
        assert content["script"] == f"my_{script[:-3]}"
        networks = "".join(content["modules"].values())
        assert "GELU" in networks and "Tanh" not in networks and "ReLU" not in networks
        assert ("out_features=48" if script == "ppo.py" else "out_features=96") in networks

    # the evaluation tool, given the copy, scores the model as the end of training did
    trained = scalars(run)["eval/episodic_return"][-1][1]
    result = enjoy(str(run), "--script", str(copy), "--eval-episodes", "3", cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{name}, ")
    assert float(result.stdout.split("return ")[1].split(" ±")[0]) == pytest.approx(trained, abs=0.005)

    # and its checkpoint too, with the copy's networks
    checkpoint = next((run / "checkpoints").glob("*.pt"))
    result = enjoy(str(checkpoint), "--script", str(copy), "--eval-episodes", "1", cwd=tmp_path, check=False)
    assert result.returncode == 0 and result.stdout.startswith(f"{name}, {checkpoint}: 1 episodes"), result.stderr

    # without --script it refuses: the name the file records is no script of cleanrl/, and is no path
    result = enjoy(str(run), cwd=tmp_path, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"saved by 'my_{script[:-3]}', which is not a script in" in result.stderr
    # the original script refuses the copy's checkpoint and model, in one line each
    assert_stops_with_one_line(
        script,
        ["--resume", str(run)],
        "--resume",
        f"was written by my_{script[:-3]}.py, not by {script}",
        tmp_path / "original",
    )
    result = enjoy(str(run), "--script", str(ROOT / "cleanrl" / script), cwd=tmp_path, check=False)
    assert result.returncode != 0 and f"was written by my_{script[:-3]}.py, not by {script}" in result.stderr


def test_a_copys_closing_summary_evaluates_it_with_its_own_file(tmp_path):
    """The run's last line is a command that works: enjoy is told the copy's file (it is not in cleanrl/); so is the
    command in the refusal to resume the run once it has finished."""
    copy = tmp_path / "elsewhere" / "my_ppo.py"
    copy.parent.mkdir()
    shutil.copy(ROOT / "cleanrl" / "ppo.py", copy)
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    flags = ["--total-timesteps", "512", "--save-model", "--eval-episodes", "1", "--checkpoint-interval", "512"]
    result = subprocess.run([sys.executable, str(copy), *flags], cwd=tmp_path, env=environ, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    run = f"runs/{run_dir(tmp_path).name}"
    command = f"python -m cleanrl_utils.enjoy {run} --eval-episodes 10 --script {copy}"
    assert result.stdout.strip().splitlines()[-1] == f"evaluate it again: {command}"
    assert enjoy(run, "--script", str(copy), "--eval-episodes", "1", cwd=tmp_path, check=False).returncode == 0
    # resumed once finished: refused, with an evaluate command that names the copy too (it named none, and failed)
    again = subprocess.run(
        [sys.executable, str(copy), "--resume", run], cwd=tmp_path, env=environ, capture_output=True, text=True
    )
    command = f"python -m cleanrl_utils.enjoy {run} --script {copy}"
    finished = f"{run} has finished at step 512 (add --total-timesteps above it to train longer)"
    assert (again.returncode, again.stderr) == (2, f"error: --resume: {finished}: {command}\n")


def test_a_same_named_copy_with_another_network_is_refused_by_the_original(tmp_path):
    """A modified copy that keeps the name ppo.py: the original refuses its checkpoint by its networks."""
    copy = copy_with_edits("ppo.py", tmp_path / "fork", "ppo.py")
    (tmp_path / "original").mkdir()
    run_script(str(copy), "--total-timesteps", "512", "--num-envs", "1", "--checkpoint-interval", "256", cwd=tmp_path / "fork")
    run = run_dir(tmp_path / "fork")
    longer = ["--resume", str(run), "--total-timesteps", "1024"]  # the copy's run finished at 512: trained on
    assert_stops_with_one_line("ppo.py", longer, "--resume", "its agent differs from this script's", tmp_path / "original")


def test_the_original_script_refuses_a_copys_model_in_one_line_in_the_evaluation_tool(tmp_path):
    from cleanrl_utils.files import write_file

    @dataclasses.dataclass
    class CopyArgs:
        env_id: str = "CartPole-v1"
        seed: int = 1
        script: str = "my_ppo"

    model = write_file(tmp_path / "my_ppo.cleanrl_model", "model", CopyArgs(), {})
    result = enjoy(str(model), "--script", str(ROOT / "cleanrl" / "ppo.py"), cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == f"error: model: {model} was written by my_ppo.py, not by ppo.py\n", result.stderr


def test_the_evaluation_tool_finds_copies_inside_cleanrl_by_name_only(tmp_path):
    from cleanrl_utils.enjoy import script_file

    (tmp_path / "my_ppo.py").write_text("")
    assert script_file("my_ppo", None, scripts_dir=tmp_path) == tmp_path / "my_ppo.py"
    for recorded in ("../my_ppo", "/etc/passwd", "my_ppo.py", "", "other"):
        with pytest.raises(FileNotFoundError, match="not a script in"):
            script_file(recorded, None, scripts_dir=tmp_path)

"""Training a run longer: ``--resume RUN --total-timesteps MORE``, on a finished run or one stopped on the way (issue 48,
item 12; d3f1fc6 refused both, and ended a run with checkpoints without one at its last step).

A run with ``--checkpoint-interval`` ends with a checkpoint at its last step. Resumed with a larger total, it goes on
from there, and every schedule that depends on the total takes, from the resumed step on, its value for the new
total. Where none does, a run trained longer is the run trained that long from the start.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import torch

from cleanrl_utils.files import checkpoint_step, checkpoints
from tests.conftest import assert_stops_with_one_line, run_dir, run_script, scalars, start_script

PPO = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "2", "--save-model",
       "--eval-episodes", "1", "--checkpoint-interval", "100000"]  # fmt: skip
DQN = ["--learning-starts", "200", "--buffer-size", "2000", "--batch-size", "32", "--target-network-frequency", "100",
       "--start-e", "0.2", "--end-e", "0.2", "--save-model", "--eval-episodes", "1", "--checkpoint-buffer"]  # fmt: skip


def trained(directory: Path, key: str) -> tuple[dict, dict]:
    """The saved model's network ``key`` and the run's curves, but for its speed and evaluations (a run trained longer
    was evaluated at both of its ends)."""
    model = torch.load(next(directory.glob("*.cleanrl_model")), weights_only=True)[key]
    curves = {tag: values for tag, values in scalars(directory).items() if tag != "charts/SPS" and "eval/" not in tag}
    return model, curves


def assert_same(first: tuple[dict, dict], second: tuple[dict, dict]) -> None:
    assert first[0].keys() == second[0].keys()
    for name, tensor in first[0].items():
        assert torch.equal(tensor, second[0][name]), name
    assert first[1] == second[1]


def test_a_finished_run_trained_longer_is_the_run_trained_that_long(tmp_path):
    """ppo.py without learning-rate annealing (nothing depends on the total): 256 steps, finished with a checkpoint at
    step 256 and its model, then trained to 512 from that checkpoint, equals a 512-step run, networks and curves."""
    for name in ("whole", "longer"):
        (tmp_path / name).mkdir()
    run_script("ppo.py", *PPO, "--no-anneal-lr", "--total-timesteps", "512", cwd=tmp_path / "whole")
    run_script("ppo.py", *PPO, "--no-anneal-lr", "--total-timesteps", "256", cwd=tmp_path / "longer")
    run = run_dir(tmp_path / "longer")
    assert [checkpoint_step(path) for path in checkpoints(run)] == [256]  # the last step, not a multiple of the interval
    first = (run / "ppo.cleanrl_model").read_bytes()
    # 300 steps are 2 rollouts of 128, as the run has trained: refused, nothing changed
    refused = run_script("ppo.py", "--resume", str(run), "--total-timesteps", "300", cwd=tmp_path / "longer", check=False)
    said = f"error: --total-timesteps: 300 trains 256 steps (whole rollouts or vector steps), not above step 256, where {run}"
    assert refused.returncode == 2 and refused.stderr.startswith(said), refused.stderr
    assert (run / "ppo.cleanrl_model").read_bytes() == first and not (run / "earlier_models").exists()
    result = run_script("ppo.py", "--resume", str(run), "--total-timesteps", "512", cwd=tmp_path / "longer")
    assert "(resumed at step 256)" in result.stdout and "run finished at step 512" in result.stdout, result.stdout
    kept = run / "earlier_models" / "ppo.step_256.cleanrl_model"  # the model of the old end, kept aside, unchanged
    assert f"the model of step 256 is kept as {kept}" in result.stdout and kept.read_bytes() == first
    assert [checkpoint_step(path) for path in checkpoints(run)] == [256, 512]
    assert torch.load(run / "ppo.cleanrl_model", weights_only=True)["global_step"] == 512
    assert_same(trained(run, "agent"), trained(run_dir(tmp_path / "whole"), "agent"))


def test_a_schedule_that_depends_on_the_total_takes_the_new_totals_values(tmp_path):
    """ppo.py's annealed learning rate, 1 - (i - 1) / n of 2.5e-4 in rollout i of n: 3 rollouts of 128 steps (1, 2/3,
    1/3), then trained to 6 rollouts, the 4th to 6th have 3/6, 2/6 and 1/6, as a 6-rollout run has from its 4th on."""
    run_script("ppo.py", *PPO, "--total-timesteps", "384", cwd=tmp_path)
    run = run_dir(tmp_path)
    run_script("ppo.py", "--resume", str(run), "--total-timesteps", "768", cwd=tmp_path)
    rates = dict(scalars(run)["charts/learning_rate"])
    expected = {128 * i: 2.5e-4 * (1 - (i - 1) / (3 if i <= 3 else 6)) for i in range(1, 7)}
    assert rates.keys() == expected.keys() and all(abs(rates[step] - value) < 1e-9 for step, value in expected.items()), rates


def test_a_run_stopped_while_trained_longer_resumes_to_its_new_total(tmp_path):
    """dqn.py with its replay in the checkpoints and a constant ε (nothing depends on the total): 1,000 steps, then
    trained to 3,000, stopped by SIGTERM on the way, then resumed without --total-timesteps (the checkpoint holds it):
    the same networks and curves as a 3,000-step run."""
    for name in ("whole", "longer"):
        (tmp_path / name).mkdir()
    run_script("dqn.py", *DQN, "--total-timesteps", "3000", cwd=tmp_path / "whole")
    run_script("dqn.py", *DQN, "--total-timesteps", "1000", "--checkpoint-interval", "100000", cwd=tmp_path / "longer")
    run = run_dir(tmp_path / "longer")
    flags = ["--resume", str(run), "--total-timesteps", "3000", "--checkpoint-interval", "100"]
    process = start_script("dqn.py", *flags, cwd=tmp_path / "longer")
    while [checkpoint_step(path) for path in checkpoints(run)][-1] < 1100:  # training longer is under way
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143 and "SIGTERM: checkpoint written" in out, (out, err)
    assert 1100 <= checkpoint_step(checkpoints(run)[-1]) < 3000
    result = run_script("dqn.py", "--resume", str(run), cwd=tmp_path / "longer")  # the model at step 1000 is older
    assert "run finished at step 3000" in result.stdout, result.stdout
    assert_same(trained(run, "q_network"), trained(run_dir(tmp_path / "whole"), "q_network"))


def test_a_run_without_checkpoints_cannot_be_trained_longer_and_says_why(tmp_path):
    (tmp_path / "first").mkdir()
    run_script("ppo.py", "--num-envs", "1", "--num-steps", "128", "--total-timesteps", "128", cwd=tmp_path / "first")
    run = run_dir(tmp_path / "first")
    flags = ["--resume", str(run), "--total-timesteps", "256"]
    assert_stops_with_one_line("ppo.py", flags, "--resume", "has no checkpoints", tmp_path)
    assert_stops_with_one_line("ppo.py", flags, "--resume", "a run keeps them with --checkpoint-interval", tmp_path)


def test_a_finished_run_without_its_model_is_finished_too(tmp_path):
    """A run without --save-model whose newest checkpoint is at its end: --resume alone is refused with the command that
    evaluates that checkpoint (55d2d59 resumed it, trained nothing and wrote another events file)."""
    (tmp_path / "first").mkdir()
    run_script("ppo.py", *PPO[:-5], "--checkpoint-interval", "100000", "--total-timesteps", "256", cwd=tmp_path / "first")
    run = run_dir(tmp_path / "first")
    evaluate = f"python -m cleanrl_utils.enjoy {run / 'checkpoints' / 'step_256.pt'}"
    message = f"{run} has finished at step 256 (add --total-timesteps above it to train longer): {evaluate}"
    assert_stops_with_one_line("ppo.py", ["--resume", str(run)], "--resume", message, tmp_path)

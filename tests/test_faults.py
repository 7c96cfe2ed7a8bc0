"""Faults, hostile files and bad numbers: a run stops in one line, keeps its last good checkpoint, runs nothing a file names.

The environments that misbehave on purpose are ``tests.envs:Faulty*-v0`` (NaN rewards or
observations, a worker that dies or hangs, an env that reuses its observation array).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl_utils.legacy import checkpoint, faults, files
from cleanrl_utils.legacy.vector import SAME_STEP, real_next_obs, vector_env
from tests.conftest import ROOT, assert_stops_with_one_line, run_dir, run_script, sigterm_then_resume
from tests.envs import FaultyEnv

SMALL = {
    "ppo.py": ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "2048"],
    "dqn.py": ["--learning-starts", "100", "--train-frequency", "1", "--total-timesteps", "1500"],
    "sac_continuous.py": ["--learning-starts", "100", "--batch-size", "32", "--total-timesteps", "700"],
}
BOX = {"sac_continuous.py"}
PPO_RUN = ["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "128", "--total-timesteps", "10240"]
PPO_RUN += ["--save-model", "--eval-episodes", "1"]


def fault_line(result: subprocess.CompletedProcess, script: str) -> str:
    """The run's one line about the fault: the last stderr line, which names the script; no traceback."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{script}: "), result.stderr[-3000:]
    return line


def no_non_finite_files(cwd: Path) -> None:
    """Every model and checkpoint under ``cwd/runs`` holds finite floating tensors only."""
    for path in [*cwd.glob("runs/*/checkpoints/*.pt"), *cwd.glob("runs/*/*.cleanrl_model")]:
        content = torch.load(path, weights_only=True)
        stack = [content]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, torch.Tensor) and item.is_floating_point():
                assert torch.isfinite(item).all(), path


# ---- non-finite numbers stop the run where they appear


@pytest.mark.parametrize("script", ["ppo.py", "dqn.py", "sac_continuous.py"])
@pytest.mark.parametrize("fault,message", [("NanReward", "returned a non-finite reward (nan)"), ("NanObs", "non-finite")])
def test_nan_from_the_env_stops_the_run_naming_the_env(script, fault, message, tmp_path):
    env_id = f"tests.envs:Faulty{fault}{'Box' if script in BOX else ''}-v0"
    flags = [*SMALL[script], "--env-id", env_id, "--save-model", "--checkpoint-interval", "100"]
    line = fault_line(run_script(script, *flags, cwd=tmp_path, check=False), script)
    assert "env 0" in line and message in line and "vector step" in line, line
    assert "last checkpoint: runs/" in line, line  # the checkpoint before the fault is kept
    assert not list(tmp_path.glob("runs/*/*.cleanrl_model"))  # no model after a fault
    no_non_finite_files(tmp_path)


@pytest.mark.parametrize(
    "script,flags",
    [
        ("ppo.py", ["--learning-rate", "1e30", "--env-id", "CartPole-v1"]),
        ("dqn.py", ["--learning-rate", "1e30", "--env-id", "CartPole-v1"]),
        ("sac_continuous.py", ["--q-lr", "1e30", "--policy-lr", "1e30", "--env-id", "Pendulum-v1"]),
    ],
)
def test_an_exploding_learning_rate_stops_at_the_update(script, flags, tmp_path):
    result = run_script(script, *SMALL[script], *flags, "--save-model", cwd=tmp_path, check=False)
    line = fault_line(result, script)
    assert "non-finite" in line and ("update" in line or "epoch" in line) and "global step" in line, line
    assert not list(tmp_path.glob("runs/*/*.cleanrl_model"))
    no_non_finite_files(tmp_path)


def test_a_reward_beyond_float32_is_named_where_it_appears():
    """A float64 reward of 1e300 is finite, but not once stored as float32 (the buffers' type)."""
    obs = np.zeros((2, 4), np.float32)
    faults.check_env_step(np.array([1.0, -3e38]), obs, {}, 7)
    with pytest.raises(faults.EnvFault, match=r"env 1 returned a reward \(1e\+300\) beyond float32's range at vector step 7"):
        faults.check_env_step(np.array([1.0, 1e300]), obs, {}, 7)


def test_check_finite_and_check_parameters_name_the_quantity():
    faults.check_finite(3, 96, loss=torch.tensor(1.0), grad_norm=2.0)
    with pytest.raises(faults.NonFinite, match=r"non-finite grad_norm \(inf\) at update 3, global step 96"):
        faults.check_finite(3, 96, loss=torch.tensor(1.0), grad_norm=torch.tensor(float("inf")))
    with pytest.raises(faults.NonFinite, match="at iteration 2, epoch 1"):
        faults.check_finite("iteration 2, epoch 1", 96, loss=torch.tensor(float("nan")))
    net = torch.nn.Linear(2, 2)
    faults.check_parameters({"qf": net}, "the model")
    with torch.no_grad():
        net.weight[0, 0] = float("nan")
    with pytest.raises(faults.NonFinite, match="qf.weight holds non-finite values: the model not written"):
        faults.check_parameters({"qf": net}, "the model")


@pytest.mark.parametrize("flag", ["--learning-rate", "--ent-coef", "--vf-coef", "--max-grad-norm"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_flags_are_refused(flag, value, tmp_path):
    assert_stops_with_one_line("ppo.py", [flag, value], flag, "", tmp_path)


@pytest.mark.parametrize("seed", ["-1", str(2**40)])
def test_seeds_numpy_and_torch_refuse_are_refused(seed, tmp_path):
    assert_stops_with_one_line("dqn.py", ["--seed", seed], "--seed", "must be in [0, 2**31)", tmp_path)


# ---- env workers that die or hang; envs that reuse their arrays


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hung_env_is_stopped_after_env_timeout(mode, tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", "tests.envs:FaultyHang-v0", "--env-mode", mode, "--env-timeout", "2"]
    started = time.monotonic()
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120), "ppo.py")
    assert "env 0: no answer within --env-timeout 2 s" in line, line
    assert time.monotonic() - started < 60


def test_an_env_that_hangs_when_made_is_stopped_after_env_timeout(tmp_path):
    flags = ["--env-id", "tests.envs:FaultyHangInit-v0", "--env-timeout", "2"]
    assert_stops_with_one_line("ppo.py", flags, "--env-id", "no answer within --env-timeout 2 s", tmp_path)


def test_a_dead_worker_is_named_with_its_exit_code(tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", "tests.envs:FaultyDie-v0", "--env-mode", "async", "--checkpoint-interval", "128"]
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120), "ppo.py")
    assert "its worker process" in line and "died: exit code 3" in line, line
    assert "last checkpoint: runs/" in line and line.rsplit(" ", 1)[-1].endswith(".pt"), line
    checkpoint.load_checkpoint(str(tmp_path / line.rsplit(" ", 1)[-1]), "ppo")  # whole and resumable
    # its env id imports tests.envs: the checkpoint does not choose that, the user does
    message = "imports the module 'tests.envs'; name it yourself"
    assert_stops_with_one_line("ppo.py", ["--resume", str(run_dir(tmp_path))], "--env-id", message, tmp_path / "runs")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_that_mutates_its_arrays_stores_the_same_transitions(mode):
    def transitions(fault: str) -> list[np.ndarray]:
        def make(index):
            return lambda: gym.wrappers.TimeLimit(FaultyEnv(fault=fault), 7)

        envs = vector_env([make(i) for i in range(2)], mode, SAME_STEP, timeout=60)
        obs, _ = envs.reset(seed=5)
        stored = [obs]
        for _ in range(30):
            next_obs, _, _, _, infos = envs.step(np.zeros(2, dtype=np.int64))
            stored += [real_next_obs(next_obs, infos), next_obs]
        envs.close()
        return stored

    mutating, honest = transitions("mutate"), transitions("none")
    for a, b in zip(mutating, honest):
        np.testing.assert_array_equal(a, b)


# ---- files are data: every load failure is one line, exit 2


def _checkpoint_run(tmp_path: Path) -> Path:
    run_script(
        "ppo.py", "--num-envs", "1", "--num-steps", "128", "--total-timesteps", "512", "--checkpoint-interval", "256",
        cwd=tmp_path,
    )  # fmt: skip
    return run_dir(tmp_path)


def test_damaged_empty_truncated_and_misplaced_checkpoints_are_refused_in_one_line(tmp_path):
    run = _checkpoint_run(tmp_path)
    latest = run / "checkpoints" / "step_512.pt"
    data = bytearray(latest.read_bytes())
    other = tmp_path / "other"
    other.mkdir()
    cases = {
        "corrupted": lambda b: (
            b[: len(b) // 2] + bytes(np.random.default_rng(0).integers(0, 256, 64, dtype=np.uint8)) + b[len(b) // 2 + 64 :]
        ),
        "empty": lambda b: b"",
        "truncated": lambda b: b[: len(b) // 3],
    }
    messages = {"corrupted": "is corrupted: the checksum", "empty": "is empty", "truncated": "not a complete torch file"}
    for name, damage in cases.items():
        latest.write_bytes(bytes(damage(bytearray(data))))
        assert_stops_with_one_line("ppo.py", ["--resume", str(latest)], "--resume", messages[name], other)
    # a damaged newest checkpoint in a run directory: the one before it resumes, and that is said
    resumed = run_script("ppo.py", "--resume", str(run), "--total-timesteps", "512", cwd=other, check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "--resume: " in resumed.stderr and "resuming from step_256.pt instead" in resumed.stderr, resumed.stderr
    assert "resumed at step 256" in resumed.stdout
    checkpoint.load_checkpoint(str(latest), "ppo")  # rewritten by the resumed run

    class Code:  # unpickling this would run code: weights_only refuses it
        def __reduce__(self):
            return (print, ("unpickling ran code",))

    torch.save({"format": files.FORMAT, "kind": "checkpoint", "script": "ppo", "obj": Code()}, latest)
    assert_stops_with_one_line("ppo.py", ["--resume", str(latest)], "--resume", "UnpicklingError", other)
    os.mkfifo(tmp_path / "fifo.pt")
    assert_stops_with_one_line("ppo.py", ["--resume", str(tmp_path / "fifo.pt")], "--resume", "is not a regular file", other)
    latest.write_bytes(bytes(data))
    copied = tmp_path / "step_512.pt"
    copied.write_bytes(bytes(data))
    assert_stops_with_one_line("ppo.py", ["--resume", str(copied)], "--resume", "is not in a run directory", other)
    result = subprocess.run(  # evaluated anywhere: evaluation writes nothing into a run directory
        [sys.executable, "-m", "cleanrl_utils.enjoy", str(copied), "--eval-episodes", "1"], cwd=other, capture_output=True,
        text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith(f"ppo.py, {copied}: 1 episodes"), result.stderr


def test_a_write_that_fails_names_the_path_and_the_space_left_and_keeps_the_previous_file(tmp_path, monkeypatch):
    from dataclasses import dataclass

    @dataclass
    class Args:
        seed: int = 1

    path = files.write_file(tmp_path / "run" / "checkpoints" / "step_1.pt", "checkpoint", "ppo", Args(), {"w": torch.ones(3)})
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(faults.WriteFailed) as raised:
        files.write_file(path, "checkpoint", "ppo", Args(), {"w": torch.zeros(3)})
    message = str(raised.value)
    assert str(path) in message and "No space left on device" in message and "free" in message, message
    assert "\n" not in message
    assert path.read_bytes() == before and not list(path.parent.glob("*.tmp"))


# ---- signals to the whole process group


@pytest.mark.parametrize(
    "signum,mode",
    # SIGHUP: the terminal or ssh session closed
    [(s, m) for s in (signal.SIGTERM, signal.SIGINT) for m in ("sync", "async")] + [(signal.SIGHUP, "async")],
)
def test_a_signal_to_the_process_group_leaves_a_checkpoint_the_run_resumes_exactly_from(signum, mode, tmp_path):
    flags = [*PPO_RUN, "--env-mode", mode]
    whole, resumed = sigterm_then_resume("ppo.py", flags, 2048, 10240, tmp_path, signum=signum, group=True)
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert resumed["curves"] == whole["curves"]


def test_a_full_disk_stops_the_run_in_one_line_and_keeps_the_previous_checkpoint(tmp_path):
    """A real full disk where the machine lets us mount a small tmpfs (root); else skipped (the
    simulated ENOSPC test above still runs)."""
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "1024", "--checkpoint-interval", "512"]
    run_script("ppo.py", *flags, cwd=tmp_path)
    run = run_dir(tmp_path)
    (run / "checkpoints" / "step_1024.pt").unlink()
    shutil.move(run / "checkpoints" / "step_512.pt", tmp_path / "step_512.pt")
    disk = run / "checkpoints"  # a small disk mounted as the run's checkpoints folder
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copy(tmp_path / "step_512.pt", disk / "step_512.pt")
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * (free - 4096))  # leaves 4 KiB: too little for a checkpoint
        result = run_script("ppo.py", "--resume", str(run / "checkpoints" / "step_512.pt"), cwd=tmp_path, check=False)
        line = fault_line(result, "ppo.py")
        assert "cannot write" in line and "step_1024.pt" in line and "the disk is full" in line, line
        assert line.endswith("step_512.pt"), line  # the last good checkpoint
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "step_512.pt"]  # no partial file
        checkpoint.load_checkpoint(str(run / "checkpoints" / "step_512.pt"), "ppo")  # intact
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_forged_headers_non_finite_weights_and_module_env_ids_are_refused(tmp_path):
    """From a hostile helper's attack: a checkpoint whose header has the wrong types, a model with
    NaN weights, and a model whose recorded env id names a module to import."""
    from dataclasses import dataclass

    from cleanrl.ppo import evaluate

    @dataclass
    class Args:
        env_id: str = "CartPole-v1"
        seed: int = 1

    forged = files.write_file(tmp_path / "run" / "checkpoints" / "step_1.pt", "checkpoint", "ppo", Args(), {"state": {}})
    original = {**torch.load(forged, weights_only=True), "global_step": 1}
    for key, value in [("global_step", "1"), ("global_step", -5), ("state", [1]), ("rng", "x")]:
        torch.save({**original, key: value}, forged)
        with pytest.raises(files.FileRefused, match=f"damaged or forged: its '{key}'|its global_step is -5"):
            files.read_file(forged, "checkpoint", "ppo")
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.fill_(float("nan"))
    model = files.write_file(tmp_path / "m.cleanrl_model", "model", "ppo", Args(), {"agent": net.state_dict()})
    with pytest.raises(files.FileRefused, match="agent.weight holds non-finite values"):
        files.check_module(torch.nn.Linear(4, 2), "agent", files.read_file(model, "model", "ppo"))
    named = files.write_file(tmp_path / "n.cleanrl_model", "model", "ppo", Args(env_id="this:CartPole-v1"), {})
    with pytest.raises(files.FileRefused, match="which imports the module 'this'"):
        evaluate(str(named), 1)


def test_an_async_env_that_raises_is_one_line(tmp_path):
    result = run_script(
        "ppo.py", *SMALL["ppo.py"], "--env-id", "tests.envs:CrashingCounter-v0", "--env-mode", "async",
        cwd=tmp_path, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("ppo.py: env ") and "raised RuntimeError: CrashingCounter-v0" in line, result.stderr[-2000:]


def test_a_signal_during_the_final_evaluation_ends_it_and_keeps_the_model(tmp_path):
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "256", "--save-model", "--eval-episodes", "100000"]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cleanrl" / "ppo.py"), *flags],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    for line in process.stdout:  # the evaluation starts once the model is saved
        if line.startswith("model saved to"):
            break
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("SIGTERM: evaluation stopped; the model is saved at runs/"), err
    files.read_file(next(tmp_path.glob("runs/*/*.cleanrl_model")), "model", "ppo")


SECOND_CTRL_C = """
import atexit, dataclasses, os, signal, sys, time
from cleanrl_utils.legacy.run import RunArgs, start_run

@dataclasses.dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    total_timesteps: int = 100

args = Args(script="demo")
run = start_run(args, record=False)
signal.signal(signal.SIGINT, run.stop)
from cleanrl_utils.legacy.faults import being_written
open("step_9.pt.tmp", "wb").close()
being_written.add("step_9.pt.tmp")  # as if a checkpoint were being written
atexit.register(lambda: (print("in exit handlers", flush=True), time.sleep(30)))
os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: a checkpoint would be due
assert run.stop_signal == signal.SIGINT
sys.exit(0)
"""


def test_a_second_ctrl_c_stops_at_once_even_in_exit_handlers(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-c", SECOND_CTRL_C], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout.readline().strip() == "in exit handlers"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=20)
    assert process.returncode == 130, err
    assert err.strip().splitlines() == ["demo.py: stopped at once by a second Ctrl-C"], err
    assert not (tmp_path / "step_9.pt.tmp").exists()  # no partial file stays


AFTER_THE_END = """
import dataclasses, os, signal
from cleanrl_utils.legacy.run import RunArgs, start_run

@dataclasses.dataclass
class Args(RunArgs):
    env_id: str = "CartPole-v1"
    total_timesteps: int = 100

run = start_run(Args(script="demo"), record=False)
signal.signal(signal.SIGTERM, run.stop)
os.kill(os.getpid(), signal.SIGTERM)  # after the loop's last check
run.close()
os.kill(os.getpid(), signal.SIGTERM)  # while the finished process exits: ignored
"""


def test_a_signal_after_training_ended_is_said_and_the_run_exits_0(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", AFTER_THE_END], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "SIGTERM arrived after training had ended: the run is complete" in result.stdout


def test_the_vector_step_count_continues_across_a_resume():
    """A fault's "vector step N" counts the run's vector steps, not the resumed process's."""
    from cleanrl.ppo import make_env
    from cleanrl_utils.legacy.vector import envs_state, restore_envs

    envs = vector_env([make_env("CartPole-v1", i, False, "") for i in range(2)], "sync", SAME_STEP)
    envs.reset(seed=1)
    for _ in range(7):
        envs.step(np.zeros(2, dtype=np.int64))
    state = envs_state(envs)
    envs.close()
    resumed = vector_env([make_env("CartPole-v1", i, False, "") for i in range(2)], "sync", SAME_STEP)
    restore_envs(resumed, state)
    assert resumed.unwrapped.steps == 7
    resumed.close()


def test_events_that_cannot_be_written_stop_the_run_in_one_line(tmp_path):
    """The TensorBoard events file replaced by a folder mid-run (as a full disk or a lost mount would fail it)."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cleanrl" / "ppo.py"), "--num-envs", "1", "--total-timesteps", "10000000"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for line in process.stdout:  # set-up ends (its first events are flushed) before this line is printed
            if line.startswith("run directory: "):
                break
        else:
            raise AssertionError(process.communicate())
        events = next(tmp_path.glob("runs/*/events*"))
        events.unlink()
        events.mkdir()
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1 and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("ppo.py: cannot write the TensorBoard events (") and "Is a directory" in line, err[-3000:]


# ---- from the second hostile attack


@pytest.mark.parametrize(
    "fault,mode,message",
    [
        ("Assert", "async", ": its env raised AssertionError: at "),  # a bare assert: where, and its line of code
        ("Unpicklable", "async", "its env raised EnvError: LocalError: from a local class"),
        ("Exit", "sync", "env 0 raised SystemExit(0) in step"),
    ],
)
def test_envs_that_raise_oddly_stop_in_one_line(fault, mode, message, tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", f"tests.envs:Faulty{fault}-v0", "--env-mode", mode, "--env-timeout", "20"]
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120), "ppo.py")
    assert message in line, line


def test_a_sync_observation_beyond_float32_names_the_env():
    envs = vector_env([lambda: gym.wrappers.TimeLimit(FaultyEnv(fault="huge_obs", after=3), 20)], "sync", SAME_STEP)
    envs.reset(seed=1)
    with pytest.raises(faults.EnvFault, match="env 0 returned a non-finite observation at vector step 3"):
        for _ in range(3):
            envs.step(np.zeros(1, dtype=np.int64))
    envs.close()


@pytest.mark.parametrize(
    "flags,flag,message",
    [
        (["--exp-name", "x" * 200], "--exp-name", "must be at most 150 bytes"),
        (["--exp-name", "a\nb"], "--exp-name", "printable"),
        (["--env-id", ".envs:Counter-v0"], "--env-id", "cannot import '.envs'"),
        (["--total-timesteps", "1e6"], "--total-timesteps", "invalid literal for int()"),
        (["--learning-rte", "3"], "--learning-rte", "did you mean --learning-rate?"),
    ],
)
def test_odd_names_ids_and_numbers_are_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("ppo.py", flags, flag, message, tmp_path)


def test_a_run_directory_takes_one_process_and_its_own_checkpoints(tmp_path):
    """A second --resume of a run that is going is refused; a checkpoint linked in from another run is refused."""
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "1000000", "--checkpoint-interval", "256"]
    flags += ["--seed", "2"]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cleanrl" / "ppo.py"), *flags], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        while not list(tmp_path.glob("runs/*/checkpoints/step_*.pt")):
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        running = run_dir(tmp_path)
        result = run_script("ppo.py", "--resume", str(running), cwd=tmp_path, check=False)
        assert result.returncode == 2 and "is in use by another process (pid " in result.stderr, result.stderr
    finally:
        process.kill()
        process.communicate()
    (tmp_path / "other").mkdir()
    other = _checkpoint_run(tmp_path / "other")  # seed 1
    os.symlink(next((running / "checkpoints").glob("step_*.pt")), other / "checkpoints" / "step_999999.pt")
    (tmp_path / "x").mkdir()
    assert_stops_with_one_line("ppo.py", ["--resume", str(other)], "--resume", "(its seed differ", tmp_path / "x")
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.enjoy", str(other), "--seed", "-5"], cwd=tmp_path / "x",
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.startswith("error: --seed: must be in [0, 2**31)"), result.stderr


def test_a_read_only_working_directory_is_one_line(tmp_path):
    disk = tmp_path / "ro"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        result = run_script("ppo.py", "--total-timesteps", "512", cwd=disk, check=False)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "error: runs: cannot create a run directory" in result.stderr and "Read-only file system" in result.stderr
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_output_piped_into_a_reader_that_stops_does_not_stop_the_run(tmp_path):
    command = f"{sys.executable} {ROOT / 'cleanrl' / 'ppo.py'} --num-envs 1 --total-timesteps 5000 | head -1"
    result = subprocess.run(
        ["bash", "-c", command + "; exit ${PIPESTATUS[0]}"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert list(tmp_path.glob("runs/*/events*"))


# ---- the alternating sampler: two groups of async envs, one stepping while the policy acts for the other


def _fault_at(index: int, fault: str, after: int = 5):
    """Env thunks for 4 envs, env ``index`` faulty (``fault`` after ``after`` steps), the others honest (env i's
    episodes truncated after 7 + i steps)."""

    def make(i):
        faulty = FaultyEnv(fault=fault, after=after) if i == index else FaultyEnv(after=100 + i)
        return lambda: gym.wrappers.RecordEpisodeStatistics(gym.wrappers.TimeLimit(faulty, 7 + i))

    return [make(i) for i in range(4)]


def test_the_alternating_sampler_steps_as_the_sync_envs_do():
    """Group by group (send / receive) or all at once (step), the alternating sampler returns the sync envs'
    observations, rewards, flags, final observations and episode statistics, in the same columns."""
    sync, alternating = (vector_env(_fault_at(-1, "none"), mode, SAME_STEP, timeout=60) for mode in ("sync", "alternating"))
    assert alternating.groups == [slice(0, 2), slice(2, 4)] and sync.groups == [slice(0, 4)]
    obs_sync, _ = sync.reset(seed=5)
    obs_alt, _ = alternating.reset(seed=5)
    np.testing.assert_array_equal(obs_sync, obs_alt)
    episodes = 0
    for step in range(30):
        actions = np.array([step % 2, 1, 0, (step // 3) % 2])
        expected = sync.step(actions)
        if step % 2:
            got = alternating.step(actions)
        else:
            for g, cols in enumerate(alternating.groups):
                alternating.send(g, actions[cols])
            parts = [alternating.receive(g) for g in (0, 1)]
            for (obs, rewards, *_, infos), cols in zip(parts, alternating.groups):
                np.testing.assert_array_equal(expected[0][cols], obs)
                np.testing.assert_array_equal(expected[1][cols], rewards)
                np.testing.assert_array_equal(real_next_obs(expected[0], expected[4])[cols], real_next_obs(obs, infos))
            continue
        for a, b in zip(expected[:4], got[:4]):
            np.testing.assert_array_equal(a, b)
        assert expected[4].keys() == got[4].keys()
        if "final_info" in expected[4]:
            episodes += 1
            np.testing.assert_array_equal(real_next_obs(expected[0], expected[4]), real_next_obs(got[0], got[4]))
            for key in ("r", "l"):
                np.testing.assert_array_equal(expected[4]["final_info"]["episode"][key], got[4]["final_info"]["episode"][key])
    assert episodes >= 2 and alternating.steps == 30
    assert alternating.get_attr("after") == (100, 101, 102, 103)  # every env, in order
    sync.close()
    alternating.close()


@pytest.mark.parametrize(
    "fault, message",
    [("nan_reward", "env 3 returned a non-finite reward"), ("die", "env 3: its worker process")],
)
def test_a_fault_in_the_alternating_samplers_second_group_names_its_env(fault, message):
    envs = vector_env(_fault_at(3, fault), "alternating", SAME_STEP, timeout=60)
    envs.reset(seed=1)
    with pytest.raises(faults.EnvFault, match=message):
        for _ in range(10):
            for g, cols in enumerate(envs.groups):
                envs.send(g, np.zeros(cols.stop - cols.start, dtype=np.int64))
                envs.receive(g)
    envs.close(terminate=True)

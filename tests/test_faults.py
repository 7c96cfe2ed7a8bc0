"""Faults, hostile files and bad numbers: a run stops in one line, keeps its last good checkpoint, runs nothing a file names.

The environments that misbehave on purpose are ``tests.envs:Faulty*-v0`` (NaN rewards or
observations, a worker that dies or hangs, an env that reuses its observation array).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl_utils import faults, files, resume, writes
from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, real_next_obs
from tests.conftest import (
    ROOT,
    assert_stops_with_one_line,
    ctrl_c_twice,
    enjoy,
    run_dir,
    run_script,
    scalars,
    sigterm_then_resume,
    start_script,
    wait_until_idle,
)
from tests.envs import FaultyEnv

SMALL = {
    "ppo.py": ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "2048"],
    "dqn.py": ["--learning-starts", "100", "--train-frequency", "1", "--total-timesteps", "1500"],
    "sac_continuous.py": ["--learning-starts", "100", "--batch-size", "32", "--total-timesteps", "700"],
}
BOX = {"sac_continuous.py"}
PPO_RUN = ["--env-id", "CartPole-v1", "--num-envs", "2", "--num-steps", "128", "--total-timesteps", "10240"]
PPO_RUN += ["--save-model", "--eval-episodes", "1"]


@dataclasses.dataclass
class PpoFileArgs:
    """The header arguments of a hand-written file of ppo.py."""

    env_id: str = "CartPole-v1"
    seed: int = 1
    script: str = "ppo"


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
@pytest.mark.parametrize(
    "fault,message",
    [("NanReward", "returned a non-finite reward (nan)"), ("NanObs", "returned a non-finite observation")],
)
def test_nan_from_the_env_stops_the_run_naming_the_env(script, fault, message, tmp_path):
    env_id = f"tests.envs:Faulty{fault}{'Box' if script in BOX else ''}-v0"
    flags = [*SMALL[script], "--env-id", env_id, "--save-model", "--checkpoint-interval", "100"]
    line = fault_line(run_script(script, *flags, cwd=tmp_path, check=False), script)
    assert f"env 0 {message} at its step 300;" in line, line  # the env's own step: its 300th
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


class _HugeEnv(gym.Env):
    """One step in two returns ``value`` as its reward (``"reward"``) or as its observation (``"obs"``), a float64
    that is finite but beyond float32's range (the type the rollouts and buffers store)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, where: str, value: float = 1e300):
        self.where, self.value, self.t = where, value, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        huge = self.t % 2 == 0
        obs = np.full(2, self.value) if huge and self.where == "obs" else np.zeros(2, np.float32)
        return obs, self.value if huge and self.where == "reward" else 1.0, False, False, {}


def _huge_envs(where: str, value: float = 1e300) -> gym.vector.SyncVectorEnv:
    thunks = [lambda: CheckedEnv(_HugeEnv(where, value), 0), lambda: CheckedEnv(_HugeEnv("none"), 1)]
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)


def test_a_reward_beyond_float32_is_named_where_it_appears():
    """A float64 reward of 1e300 is finite, but not once stored as float32 (the buffers' type); -3e38 fits."""
    envs = _huge_envs("reward", -3e38)
    envs.reset(seed=1)
    for _ in range(4):
        envs.step(np.zeros(2, dtype=np.int64))
    envs = _huge_envs("reward")
    envs.reset(seed=1)
    envs.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(faults.EnvFault, match=r"^env 0 returned a reward beyond float32's range \(1e\+300\) at its step 2$"):
        envs.step(np.zeros(2, dtype=np.int64))


def test_an_observation_beyond_float32_is_named_where_it_appears():
    envs = _huge_envs("obs")
    envs.reset(seed=1)
    envs.step(np.zeros(2, dtype=np.int64))
    beyond = r"env 0 returned an observation beyond float32's range \(1e\+300\) at its step 2"
    with pytest.raises(faults.EnvFault, match=beyond):
        next_obs, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert np.isfinite(next_obs).all(), next_obs  # what the script would store


class _Float64Env(gym.Env):
    """A float64 observation space, as MuJoCo's; its second reset (the autoreset after its one-step episode) returns
    1e300, finite in float64 but not once stored as float32."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)
    resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        return np.full(2, 1e300 if self.resets == 2 else 0.0), {}

    def step(self, action):
        return np.zeros(2), 1.0, True, False, {}


def test_a_reset_observation_beyond_float32_is_named_in_a_float64_space():
    envs = gym.vector.SyncVectorEnv([lambda: CheckedEnv(_Float64Env(), 0)], autoreset_mode=SAME_STEP)
    envs.reset(seed=1)
    beyond = r"^env 0 returned an observation beyond float32's range \(1e\+300\) in a reset after its step 1$"
    with pytest.raises(faults.EnvFault, match=beyond):
        envs.step(np.zeros(1, dtype=np.int64))


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


def test_a_seed_numpy_and_torch_refuse_is_refused(tmp_path):
    assert_stops_with_one_line("dqn.py", ["--seed", str(2**40)], "--seed", "must be in [0, 2**31)", tmp_path)


# ---- env workers that die or hang; envs that reuse their arrays


def test_a_hung_sync_env_is_stopped_by_a_second_ctrl_c_naming_the_last_checkpoint(tmp_path):
    """A sync env is not timed: the first Ctrl-C waits for the step that never ends, the second stops the run at once."""
    flags = [*SMALL["ppo.py"], "--env-id", "tests.envs:FaultyHang-v0", "--checkpoint-interval", "128"]
    process = start_script("ppo.py", *flags, cwd=tmp_path)
    wait_until_idle(process)  # each env hangs at its 300th step, global step 600: after the checkpoint at 512
    _, err = ctrl_c_twice(process)
    assert process.returncode == 130, err
    checkpoint = f"runs/{run_dir(tmp_path).name}/checkpoints/step_512.pt"
    assert err.strip().splitlines() == [f"ppo.py: stopped at once by a second Ctrl-C; last checkpoint: {checkpoint}"], err
    resume.load(str(tmp_path / checkpoint), "ppo")  # whole


def test_a_hung_async_env_is_stopped_after_env_timeout(tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", "tests.envs:FaultyHang-v0", "--env-mode", "async", "--env-timeout", "2"]
    started = time.monotonic()
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120), "ppo.py")
    assert re.fullmatch(r"ppo\.py: env [01]: no answer within --env-timeout 2 s; last checkpoint: none", line), line
    assert time.monotonic() - started < 90


def test_a_dead_worker_is_named_with_its_exit_code(tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", "tests.envs:FaultyDie-v0", "--env-mode", "async", "--checkpoint-interval", "128"]
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120), "ppo.py")
    assert re.search(r"env [01]: its worker process \(pid \d+\) died: exit code 3; last checkpoint: runs/", line), line
    checkpoint = line.rsplit(" ", 1)[-1]
    assert checkpoint.endswith("/checkpoints/step_512.pt"), line  # the last one before the fault at global step 600
    resume.load(str(tmp_path / checkpoint), "ppo")  # whole and resumable
    # its env id imports tests.envs: the checkpoint does not choose that, the user does
    message = "imports the module 'tests.envs'; name it yourself"
    assert_stops_with_one_line("ppo.py", ["--resume", str(run_dir(tmp_path))], "--env-id", message, tmp_path / "runs")
    flags = ["--resume", str(run_dir(tmp_path)), "--env-id", "tests.envs:FaultyDie-v0"]
    resumed = run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120)  # its new workers die at their 300th
    assert "(resumed at step 512)" in resumed.stdout and "died: exit code 3" in fault_line(resumed, "ppo.py")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_that_mutates_its_arrays_stores_the_same_transitions(mode):
    """An env that returns one array every step, overwritten in place (Gymnasium#1132): the observations and the
    final observations a script stores are those of an honest env."""

    def transitions(fault: str) -> list[np.ndarray]:
        def make(index):
            return lambda: CheckedEnv(gym.wrappers.RecordEpisodeStatistics(gym.wrappers.TimeLimit(FaultyEnv(fault), 7)), index)

        thunks = [make(i) for i in range(2)]
        if mode == "sync":
            envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
        else:
            envs = gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver")
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
    unreadable = "cannot be read as a cleanrl file (empty, truncated, or another format)"
    messages = {"corrupted": "is corrupted: the checksum of its record", "empty": unreadable, "truncated": unreadable}
    for name, damage in cases.items():
        latest.write_bytes(bytes(damage(bytearray(data))))
        assert_stops_with_one_line("ppo.py", ["--resume", str(latest)], "--resume", f"{latest} {messages[name]}", other)
        # given its run directory, the damaged newest checkpoint is refused, named (the one before it is not taken)
        assert_stops_with_one_line("ppo.py", ["--resume", str(run)], "--resume", f"{latest} {messages[name]}", other)

    class Code:  # unpickling this would run code: weights_only refuses it
        def __reduce__(self):
            return (print, ("unpickling ran code",))

    torch.save({"format": files.FORMAT, "kind": "checkpoint", "script": "ppo", "obj": Code()}, latest)
    message = f"{latest} cannot be read as a cleanrl file (UnpicklingError"
    assert_stops_with_one_line("ppo.py", ["--resume", str(latest)], "--resume", message, other)
    os.mkfifo(tmp_path / "fifo.pt")
    assert_stops_with_one_line("ppo.py", ["--resume", str(tmp_path / "fifo.pt")], "--resume", "is not a regular file", other)
    latest.write_bytes(bytes(data))
    copied = tmp_path / "step_512.pt"
    copied.write_bytes(bytes(data))
    assert_stops_with_one_line("ppo.py", ["--resume", str(copied)], "--resume", "is not in a run directory", other)
    result = enjoy(str(copied), "--eval-episodes", "1", cwd=other)  # evaluated anywhere: it writes into no run directory
    assert result.stdout.startswith(f"ppo.py, {copied}: 1 episodes"), result.stdout


def test_a_write_that_fails_names_the_path_and_the_space_left_and_keeps_the_previous_file(tmp_path, monkeypatch):
    path = files.write_file(tmp_path / "run" / "checkpoints" / "step_1.pt", "checkpoint", PpoFileArgs(), {"w": torch.ones(3)})
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writes.os, "fsync", disk_full)
    with pytest.raises(faults.WriteFailed) as raised:
        files.write_file(path, "checkpoint", PpoFileArgs(), {"w": torch.zeros(3)})
    message = str(raised.value)
    assert str(path) in message and "No space left on device" in message and "free on its disk" in message, message
    assert "\n" not in message
    assert path.read_bytes() == before and not list(path.parent.glob("*.tmp"))


# ---- signals to the whole process group


@pytest.mark.parametrize(
    "signum,mode",
    [
        (signal.SIGINT, "sync"),  # Ctrl-C in a terminal
        pytest.param(signal.SIGTERM, "async", marks=pytest.mark.long),  # Slurm, timeout
        pytest.param(signal.SIGINT, "async", marks=pytest.mark.long),
        pytest.param(signal.SIGHUP, "async", marks=pytest.mark.long),  # the terminal or ssh session closed
    ],
)
def test_a_signal_to_the_process_group_leaves_a_checkpoint_the_run_resumes_exactly_from(signum, mode, tmp_path):
    """The env workers ignore the signal; the main process checkpoints with them alive, then ends them."""
    flags = [*PPO_RUN, "--env-mode", mode]
    whole, resumed = sigterm_then_resume("ppo.py", flags, 2048, 10240, tmp_path, signum=signum, group=True)
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert resumed["curves"] == whole["curves"]


@pytest.fixture(scope="module")
def sigterm_in_the_final_evaluation(tmp_path_factory) -> dict:
    """A ppo.py run sent SIGTERM while it evaluates its saved model (500 episodes): what it printed and left."""
    cwd = tmp_path_factory.mktemp("evaluation")
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "256", "--save-model", "--eval-episodes", "500"]
    process = start_script("ppo.py", *flags, cwd=cwd)
    printed = []
    for line in process.stdout:  # the evaluation starts once the model is saved
        printed.append(line)
        if line.startswith("model saved to"):
            break
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    evaluating = process.poll() is None
    out, err = process.communicate(timeout=600)
    return {"code": process.returncode, "out": "".join(printed) + out, "err": err, "evaluating": evaluating, "cwd": cwd}


def test_a_sigterm_during_the_final_evaluation_lets_it_finish(sigterm_in_the_final_evaluation):
    result = sigterm_in_the_final_evaluation
    assert result["evaluating"], result  # the signal came during the evaluation
    assert result["code"] == 0 and result["err"] == "", result["err"]
    assert "evaluation over 500 episodes: " in result["out"], result["out"]
    run = run_dir(result["cwd"])
    files.read_file(run / "ppo.cleanrl_model", "model", "ppo")
    assert "eval/episodic_return" in scalars(run)


def test_a_run_whose_final_evaluation_got_sigterm_still_prints_its_summary(sigterm_in_the_final_evaluation):
    result = sigterm_in_the_final_evaluation
    assert "run finished at step 256" in result["out"] and "evaluate it again: " in result["out"], result["out"]


def test_a_second_ctrl_c_during_the_final_evaluation_stops_it_at_once(tmp_path):
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "256", "--save-model", "--eval-episodes", "100000"]
    process = start_script("ppo.py", *flags, cwd=tmp_path)
    for line in process.stdout:
        if line.startswith("model saved to"):
            break
    time.sleep(1.0)
    _, err = ctrl_c_twice(process)
    assert process.returncode == 130, err
    assert err.strip().splitlines() == ["ppo.py: stopped at once by a second Ctrl-C; last checkpoint: none"], err
    files.read_file(next(tmp_path.glob("runs/*/ppo.cleanrl_model")), "model", "ppo")  # saved before, whole


def _mount_tmpfs(folder: Path, size: str) -> None:
    """A small tmpfs mounted at ``folder`` (root only; the test is skipped elsewhere)."""
    folder.mkdir(exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")


def test_a_full_disk_stops_the_run_in_one_line_and_keeps_the_previous_checkpoint(tmp_path):
    """A real full disk: a small tmpfs mounted as the run's checkpoints folder."""
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "1024", "--checkpoint-interval", "512"]
    run_script("ppo.py", *flags, cwd=tmp_path)
    run = run_dir(tmp_path)
    (run / "checkpoints" / "step_1024.pt").unlink()
    shutil.move(run / "checkpoints" / "step_512.pt", tmp_path / "step_512.pt")
    disk = run / "checkpoints"
    _mount_tmpfs(disk, "2m")
    try:
        shutil.copy(tmp_path / "step_512.pt", disk / "step_512.pt")
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * (free - 4096))  # leaves 4 KiB: too little for a checkpoint
        result = run_script("ppo.py", "--resume", str(run / "checkpoints" / "step_512.pt"), cwd=tmp_path, check=False)
        line = fault_line(result, "ppo.py")
        assert "cannot write" in line and "step_1024.pt" in line and "the disk is full" in line, line
        assert line.endswith("step_512.pt"), line  # the last good checkpoint
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "step_512.pt"]  # no partial file
        resume.load(str(run / "checkpoints" / "step_512.pt"), "ppo")  # intact
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_a_full_disk_under_the_tensorboard_events_stops_the_run(tmp_path):
    """The disk fills while the run writes its TensorBoard events: the run stops, exit 1, saying ENOSPC.

    What a user sees (measured): two tracebacks, TensorBoard's writer thread's ("Exception in thread Thread-1") and
    the script's, from the ``writer.add_scalar`` that found it, both ending ``OSError: [Errno 28] No space left on
    device``; no line naming the last checkpoint (the old runtime said it in one line)."""
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "2m")
    process = start_script("ppo.py", "--num-envs", "1", "--total-timesteps", "10000000", cwd=disk)
    try:
        for line in process.stdout:  # set-up ends (its first events are flushed) before this line is printed
            if line.startswith("run directory: "):
                break
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
            filler.write(b"\0" * (shutil.disk_usage(disk).free + 4096))
        assert shutil.disk_usage(disk).free < 4096
        _, err = process.communicate(timeout=300)
        assert process.returncode == 1, err[-3000:]
        assert err.strip().splitlines()[-1] == "OSError: [Errno 28] No space left on device", err[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_forged_headers_non_finite_weights_and_module_env_ids_are_refused(tmp_path):
    """From a hostile helper's attack: a checkpoint whose header has the wrong types, a model with
    NaN weights, and a model whose recorded env id names a module to import."""
    from cleanrl.ppo import evaluate

    forged = files.write_file(tmp_path / "run" / "checkpoints" / "step_1.pt", "checkpoint", PpoFileArgs(), {"state": {}})
    original = {**torch.load(forged, weights_only=True), "global_step": 1}
    for key, value in [("global_step", "1"), ("global_step", -5), ("state", [1]), ("rng", "x"), ("args", [])]:
        torch.save({**original, key: value}, forged)
        with pytest.raises(files.FileRefused, match=f"damaged or forged: its '{key}'|its global_step is -5"):
            files.read_file(forged, "checkpoint", "ppo")
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.fill_(float("nan"))
    model = files.write_file(tmp_path / "m.cleanrl_model", "model", PpoFileArgs(), {"agent": net.state_dict()}, {"agent": net})
    with pytest.raises(files.FileRefused, match="its agent.weight holds non-finite values"):
        files.load_module(torch.nn.Linear(4, 2), "agent", files.read_file(model, "model", "ppo"))
    named = files.write_file(tmp_path / "n.cleanrl_model", "model", PpoFileArgs(env_id="this:CartPole-v1"), {})
    with pytest.raises(files.FileRefused, match="records the env id 'this:CartPole-v1', which imports a module; name it"):
        evaluate(str(named), 1)


# ---- envs that raise


def test_an_async_env_that_raises_is_one_line_naming_the_env_the_exception_where_and_the_step(tmp_path):
    result = run_script(
        "ppo.py", *SMALL["ppo.py"], "--env-id", "tests.envs:CrashingCounter-v0", "--env-mode", "async",
        cwd=tmp_path, check=False, timeout=120,
    )  # fmt: skip
    line = fault_line(result, "ppo.py")
    where = re.escape(f"({ROOT / 'tests' / 'envs.py'}:")
    raised = r"raised RuntimeError: CrashingCounter-v0: deliberate failure for the crash test "
    assert re.fullmatch(rf"ppo\.py: env [01] {raised}{where}\d+\) in step, at its step 200; last checkpoint: none", line), line


@pytest.mark.parametrize(
    "fault,mode,message",
    [
        ("Assert", "async", r"raised AssertionError: +\(.*tests/envs\.py:\d+\) in step, at its step 300"),  # bare assert
        ("Unpicklable", "async", r"raised LocalError: from a local class \(.*tests/envs\.py:\d+\) in step"),
        ("Exit", "async", r"env [01] raised SystemExit: 0 \(.*tests/envs\.py:\d+\) in step, at its step 300;"),  # quit
    ],
)
def test_async_envs_that_raise_oddly_stop_in_one_line(fault, mode, message, tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", f"tests.envs:Faulty{fault}-v0", "--env-mode", mode, "--env-timeout", "20"]
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120), "ppo.py")
    assert re.search(message, line), line


def test_a_sync_env_that_raises_system_exit_is_not_a_silent_success(tmp_path):
    flags = [*SMALL["ppo.py"], "--env-id", "tests.envs:FaultyExit-v0", "--save-model", "--eval-episodes", "1"]
    result = run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=120)
    assert result.returncode != 0 and "env 0" in result.stderr, (result.returncode, result.stdout, result.stderr)


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
    flags = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "1000000", "--checkpoint-interval", "5120"]
    flags += ["--seed", "2"]  # checkpoints seconds apart: the second process reads the directory between two writes
    process = start_script("ppo.py", *flags, cwd=tmp_path)
    try:
        while not list(tmp_path.glob("runs/*/checkpoints/step_*.pt")):
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        running = run_dir(tmp_path)
        result = run_script("ppo.py", "--resume", str(running), cwd=tmp_path, check=False)
        message = f"error: --resume: {running} is in use by another process (pid {process.pid})"
        assert result.returncode == 2 and result.stderr.strip() == message, result.stderr
    finally:
        process.kill()
        process.communicate()
    (tmp_path / "other").mkdir()
    other = _checkpoint_run(tmp_path / "other")  # seed 1
    os.symlink(next((running / "checkpoints").glob("step_*.pt")), other / "checkpoints" / "step_999999.pt")
    (tmp_path / "x").mkdir()
    assert_stops_with_one_line("ppo.py", ["--resume", str(other)], "--resume", "(its seed differ)", tmp_path / "x")
    result = enjoy(str(other), "--seed", "-5", cwd=tmp_path / "x", check=False)
    assert result.returncode == 2 and result.stderr.startswith("error: --seed: must be in [0, 2**31)"), result.stderr


def test_a_read_only_working_directory_is_one_line(tmp_path):
    disk = tmp_path / "ro"
    _mount_tmpfs(disk, "1m,ro")
    try:
        result = run_script("ppo.py", "--total-timesteps", "512", cwd=disk, check=False)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "error: runs: cannot write in runs: " in result.stderr and "Read-only file system" in result.stderr
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)

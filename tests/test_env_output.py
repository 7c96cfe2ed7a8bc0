"""What envs return is checked where it enters the plumbing, and a run whose main process fails always exits.

From the third hostile review (issue 29): wrong-typed env output (a reward that is None, a string or
an array; a string or wrong-shape observation; gym's old 4-tuple; info keys the vector env or the
episode statistics write) gave tracebacks from numpy or gymnasium that named neither the env nor
the step, and under ``--env-mode async`` an error in the main process left the run waiting forever
for its env workers. Each env's first reset and step are checked against the API and its spaces;
every step's types cheaply; an error names the env, the step and the value, in both modes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

from cleanrl_utils.legacy import faults
from cleanrl_utils.legacy.run import _ended_episodes
from cleanrl_utils.legacy.vector import SAME_STEP, space_problem, vector_env
from tests.conftest import ROOT, assert_stops_with_one_line, run_script

SMALL = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "1024", "--env-timeout", "30"]


def fault_line(result: subprocess.CompletedProcess) -> str:
    """The run's last stderr line, after exit 1 without a traceback."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def step_once(env_id: str, mode: str) -> None:
    """Reset and step one vector env of two ``env_id`` envs (as the scripts make them) once."""

    def make():
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))

    envs = vector_env([make, make], mode, SAME_STEP, timeout=30)
    try:
        envs.reset(seed=1)
        envs.step(np.zeros(2, dtype=np.int64))
    finally:
        envs.close()


FIRST_STEP = [
    ("NoneReward", "returned a reward of None, not a real number at its first step"),
    ("StrReward", "returned a reward of '1.0' (str), not a real number at its first step"),
    ("ArrayReward", "returned a reward of an array of shape (2,) (float64), not a real number"),
    ("StrObs", "returned an observation 'up' (str), not an array of Box(-10.0, 10.0, (4,), float32)"),
    ("ShapeObs", "returned an observation of shape (5,) where Box(-10.0, 10.0, (4,), float32) has shape (4,)"),
    ("OldApi", "returned 4 values from step (gym's old API: obs, reward, done, info)"),
    ("BoolTerminated", "returned terminated = 'no' (str), not a bool at its first step"),
    ("InfoCollision", "returned an info with the key 'episode', which the episode statistics write"),
]


@pytest.mark.parametrize("fault,message", FIRST_STEP)
def test_the_first_step_is_checked_against_the_api_and_the_spaces(fault, message):
    with pytest.raises(faults.EnvFault, match="^env 0 ") as raised:
        step_once(f"tests.envs:Faulty{fault}First-v0", "sync")
    assert message in str(raised.value)


@pytest.mark.parametrize("fault,message", [FIRST_STEP[0], FIRST_STEP[4], FIRST_STEP[5]])
def test_the_first_step_is_checked_in_async_workers_too(fault, message):
    with pytest.raises(faults.EnvFault, match="^env [01] ") as raised:
        step_once(f"tests.envs:Faulty{fault}First-v0", "async")
    assert message in str(raised.value)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    "fault,message",
    [
        ("ArrayReward", "returned a reward of an array of shape (2,) (float64), not a real number"),
        ("ShapeObs", "returned a final observation of shape (5,) where Box(-10.0, 10.0, (4,), float32) has shape (4,)"),
        ("BoolTerminated", "returned terminated = 'no' (str), not a bool"),
    ],
)
def test_a_later_step_of_the_wrong_type_is_one_line_naming_the_env_the_step_and_the_value(fault, mode, message, tmp_path):
    """The fault comes at each env's 300th step (an episode's end for ShapeObs): in async mode an array reward
    used to leave the run waiting for its workers forever after the traceback (it now exits)."""
    flags = [*SMALL, "--env-id", f"tests.envs:Faulty{fault}-v0", "--env-mode", mode]
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=180))
    assert line.startswith("ppo.py: env ") and message in line and "vector step 300" in line, line


def test_an_env_exception_in_sync_mode_keeps_its_traceback_and_names_the_env_and_step(tmp_path):
    """A None reward at step 300 breaks gymnasium's RecordEpisodeStatistics (env code): its traceback, with a note."""
    flags = [*SMALL, "--env-id", "tests.envs:FaultyNoneReward-v0"]
    result = run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=180)
    assert result.returncode == 1 and "Traceback" in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().endswith("(raised by env 0 at vector step 300)"), result.stderr[-3000:]


def test_a_bare_assert_in_an_async_env_says_where(tmp_path):
    flags = [*SMALL, "--env-id", "tests.envs:FaultyInfoCollision-v0", "--env-mode", "async"]
    line = fault_line(run_script("ppo.py", *flags, cwd=tmp_path, check=False, timeout=180))
    assert "raised AssertionError: at " in line and "assert self._stats_key not in info" in line, line
    assert "(at vector step 300)" in line, line


def test_episode_statistics_of_the_wrong_types_are_one_line():
    ended = np.array([False, True])
    broken = {"final_info": {"_episode": ended, "episode": {"r": np.array(["high", "x"], dtype=object), "l": ended}}}
    with pytest.raises(faults.EnvFault, match="env 1's episode statistics .* are not the numbers"):
        _ended_episodes(broken)
    with pytest.raises(faults.EnvFault, match="env 1's episode statistics"):
        _ended_episodes({"_episode": ended, "episode": "over"})
    good = {"final_info": {"_episode": ended, "episode": {"r": np.array([0.0, 3.0]), "l": np.array([0, 3])}}}
    assert _ended_episodes(good) == [([3.0], [3])]


def test_space_problem_reads_structure_shape_and_dtype():
    box = gym.spaces.Box(0, 1, (2,), np.float32)
    assert space_problem(box, np.zeros(2, np.float64)) is None  # a wider float: fine
    assert space_problem(box, [0, 1]) is None
    assert "shape (3,)" in space_problem(box, np.zeros(3))
    assert "dtype does not fit" in space_problem(gym.spaces.Box(0, 255, (2,), np.uint8), np.zeros(2))
    assert space_problem(gym.spaces.Discrete(3), np.int64(2)) is None
    assert "dtype does not fit" in space_problem(gym.spaces.Discrete(3), 1.5)
    space = gym.spaces.Dict({"a": box, "b": gym.spaces.Tuple([gym.spaces.Discrete(2)])})
    assert space_problem(space, {"a": np.zeros(2), "b": (1,)}) is None
    assert "observation['b'][0]" in space_problem(space, {"a": np.zeros(2), "b": ("x",)})
    assert "with keys ['a']" in space_problem(space, {"a": np.zeros(2)})


@pytest.mark.parametrize(
    "script,env_id",
    [
        ("ppo.py", "tests.envs:StartsAtOne-v0"),
        ("dqn.py", "tests.envs:StartsAtOne-v0"),
        ("a2c.py", "tests.envs:StartsAtOne-v0"),
        ("ppo_structured.py", "tests.envs:StartsAtOne-v0"),
        ("dqn_structured.py", "tests.envs:StartsAtOne-v0"),
    ],
)
def test_discrete_actions_that_do_not_start_at_0_are_refused(script, env_id, tmp_path):
    """Discrete(2, start=1): the scripts' actions are 0..n-1; action 0 was sent to the env."""
    assert_stops_with_one_line(script, ["--env-id", env_id], "--env-id", "whose actions start at 1;", tmp_path)


# ---- every exit path ends

HANG = """
import sys
import gymnasium as gym
from cleanrl_utils.legacy.vector import vector_env

def make():
    return gym.make("CartPole-v1")

if __name__ == "__main__":
    if sys.argv[1] == "hook":
        from cleanrl_utils.legacy.faults import one_line_faults
        one_line_faults("hang", None, lambda: None)
    envs = vector_env([make, make], "async")
    envs.reset(seed=1)
    raise ValueError("an error in the main process")
"""


@pytest.mark.parametrize("hook", ["plain", "hook"])
def test_an_error_in_the_main_process_ends_an_async_run(hook, tmp_path):
    """The workers ignore SIGTERM; multiprocessing's exit handler used to wait for them forever."""
    script = tmp_path / "main_error.py"
    script.write_text(HANG)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, str(script), hook], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 1 and "ValueError: an error in the main process" in result.stderr, result.stderr[-2000:]
    assert time.perf_counter() - start < 60


def test_sigterm_while_many_async_workers_start_is_a_stop_not_a_traceback(tmp_path):
    """SIGTERM to the process group while 32 workers start: the forkserver and the workers ignore it (the
    resource tracker's start unblocked it, they died of it and the run ended with a traceback, exit 1); the run
    stops and exits 143."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cleanrl" / "ppo.py"), "--env-mode", "async", "--num-envs", "32", "--num-steps", "8",
         "--total-timesteps", "100000"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.perf_counter() + 120
        while len(list(tmp_path.glob("runs/*/run.lock"))) == 0:  # the run directory exists: workers start next
            assert process.poll() is None and time.perf_counter() < deadline, process.communicate()
            time.sleep(0.05)
        time.sleep(1.0)  # the forkserver and the first workers are starting
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143 and "Traceback" not in err, err[-3000:]
    assert "SIGTERM" in out + err, (out + err)[-2000:]

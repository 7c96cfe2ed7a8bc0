"""Ape-X DQN (cleanrl/apex_dqn_atari.py): actor processes on an ε ladder, a shared prioritized replay, one learner.

Unit tests: the double-Q n-step TD error against hand-computed numbers; the actors' initial priorities equal the
learner's |δ| under the same network; the replay-ratio throttle's two rules. Subprocess runs: classic control with
two actors, their tags and periodic evaluations, and Atari with its model and evaluation; the measured replay ratio
holds with slow actors and with a slow learner; bad input one-liners; an env raising inside an actor; Ctrl-C to the
process group leaves no process and no shared memory; SIGTERM writes a checkpoint and --resume continues; an actor or
the learner SIGKILLed inside the replay's lock ends the run in one line, no orphan left; a short run's replay is capped
at what it can fill; a replay beyond the cgroup's memory limit is refused before the run directory exists. Learning
(marked ``learning``): CartPole-v1. The short run with its model and checkpoint evaluated, the generic bad input and
another script's checkpoint: tests/test_contracts.py.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import tests.envs  # noqa: F401  (registers Counter-v0, CrashingCounter-v0, SlowCounter-v0)
from cleanrl import apex_dqn_atari
from cleanrl_utils import buffers
from cleanrl_utils.actors import actors_may_step, learner_may_update
from cleanrl_utils.buffers import PrioritizedReplayBuffer, ReplaySamples
from tests.conftest import ROOT, assert_stops_with_one_line, override, run_dir, run_script, scalars
from tests.processes import (
    an_actor_killed_in_the_lock_stops_the_run,
    assert_gone,
    ctrl_c_leaves_nothing,
    sigterm_after_a_checkpoint,
    stops_within,
)

SMALL = ["--env-mode", "sync", "--num-actors", "1", "--num-envs", "2", "--hidden-size", "16", "--batch-size", "8"]
SMALL += ["--buffer-size", "1000", "--learning-starts", "100", "--target-network-frequency", "50"]


class Table(torch.nn.Module):
    """Q(s, ·) read from a table: observation ``[B, 1]`` holds the state index."""

    def __init__(self, q: list[list[float]]):
        super().__init__()
        self.q = torch.tensor(q)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q[obs[:, 0].long()]


# ---- the TD error, the actors' priorities, the throttle


def test_td_errors_double_q_n_step_hand_computed():
    """γ = 0.5, n = 2. Row 0: r = (1, 2), s' two steps on; the online network picks a' = 1 in s' (Q 3 > 2), the target
    network values it 10: y = 1 + 0.5 x 2 + 0.25 x 10 = 4.5, Q(s, a=0) = 1, δ = 3.5. Row 1: terminated at its first
    step: y = r = 1, Q(s, a=1) = 4, δ = -3. Row 2: truncated at its first step: y = 1 + 0.5 x 10 = 6, Q(s, a=0) = 1."""
    online, target = Table([[1.0, 4.0], [2.0, 3.0]]), Table([[0.0, 0.0], [20.0, 10.0]])
    data = ReplaySamples(
        obs=torch.tensor([[0], [0], [0]]),
        actions=torch.tensor([0, 1, 0]),
        next_obs=torch.tensor([[1], [1], [1]]),
        rewards=torch.tensor([[1.0, 2.0], [1.0, 0.0], [1.0, 0.0]]),
        terminations=torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]),
        truncations=torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]]),
        next_obs_steps=torch.tensor([2, 1, 1]),
        indices=torch.tensor([0, 1, 2]),
        weights=None,
    )
    delta, q_taken = apex_dqn_atari.td_errors(online, target, data, 0.5)
    torch.testing.assert_close(delta, torch.tensor([3.5, -3.0, 5.0]))
    torch.testing.assert_close(q_taken, torch.tensor([1.0, 4.0, 1.0]))


def test_actor_priorities_are_the_learners_td_errors_under_the_same_network():
    """Two actors write their own columns of one buffer with initial priority 0, then set |δ| under their network; the
    learner's δ (online and target network the same) on those transitions gives the same priorities; a column
    another actor writes is untouched."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    network = apex_dqn_atari.DuelingQNetwork((3,), 2, 8)
    rb = PrioritizedReplayBuffer(50, 4, space, gym.spaces.Discrete(2), n_step=3, alpha=0.6, seed=0)
    rng = np.random.default_rng(0)
    obs = {0: rng.standard_normal((2, 3), np.float32), 1: rng.standard_normal((2, 3), np.float32)}
    ready = []
    for step in range(8):
        for actor, columns in ((0, [0, 1]), (1, [2, 3])):
            next_obs = rng.standard_normal((2, 3), np.float32)
            ended = np.array([step == 4 and actor == 0, False])
            slots = rb.add(obs[actor], rng.integers(2, size=2), rng.standard_normal(2), ended, [False, False], next_obs,
                           columns=columns, initial_priority=0.0)  # fmt: skip
            assert set(slots % 4) <= set(columns)
            if actor == 0 and len(slots):
                assert (rb.tree[slots] == 0).all()  # out of sampling until the actor sets its priority
                data, versions = rb.transitions(slots)
                with torch.no_grad():
                    delta, _ = apex_dqn_atari.td_errors(network, network, data, 0.99)
                rb.update_priorities(data.indices, delta.abs(), versions)
                ready.extend(slots)
            obs[actor] = next_obs
    assert len(ready) == 5 + 5  # column 1: steps 0-4 have their 3 next; column 0: its first episode's 5 steps
    data, _ = rb.transitions(np.array(ready))
    with torch.no_grad():
        delta, _ = apex_dqn_atari.td_errors(network, network, data, 0.99)
    np.testing.assert_allclose(rb.tree[np.array(ready)], (delta.abs().numpy() + rb.eps) ** 0.6, rtol=1e-5)
    others = [slot for slot in np.flatnonzero(rb.valid.reshape(-1)) if slot % 4 >= 2]
    assert others and np.allclose(rb.tree[np.array(others)], 0.0)  # actor 1 never set its own


def test_the_throttle_rules():
    """4 env steps per gradient step after 100 steps of warm-up: the learner makes step k + 1 once 100 + 4 (k + 1)
    steps are collected; actors step on while at most ``lead`` steps ahead of what the updates consumed."""
    assert not learner_may_update(0, 103, 4.0, 100) and learner_may_update(0, 104, 4.0, 100)
    assert not learner_may_update(5, 123, 4.0, 100) and learner_may_update(5, 124, 4.0, 100)
    assert actors_may_step(5, 120 + 10, 4.0, 100, 10.0) and not actors_may_step(5, 131, 4.0, 100, 10.0)
    assert actors_may_step(0, 50, 4.0, 100, 0.0)  # before the warm-up ends the actors never wait


# ---- whole runs


def test_two_actors_log_their_tags_and_periodic_evaluations_on_cartpole(tmp_path):
    """(The saved model and its evaluation: tests/test_contracts.py.)"""
    flags = ["--env-id", "CartPole-v1", *SMALL, "--num-actors", "2", "--total-timesteps", "2000", "--replay-ratio", "2"]
    flags += ["--eval-episodes", "2", "--eval-interval", "1000"]
    result = run_script("apex_dqn_atari.py", *flags, cwd=tmp_path, timeout=300)
    assert "replay: 1000 transitions in shared memory" in result.stdout
    assert re.search(r"^step 1\d{3}: evaluation over 2 episodes: ", result.stdout, re.M), result.stdout
    directory = run_dir(tmp_path)
    tags = scalars(directory)
    expected = {"charts/replay_ratio", "charts/learner_wait_fraction", "charts/updates", "charts/buffer_transitions"}
    expected |= {"losses/td_loss", "losses/q_values", "charts/episodic_return", "charts/SPS", "charts/epsilon/actor_1"}
    assert expected | {"eval/episodic_return"} <= set(tags) and len(tags["eval/episodic_return"]) >= 1
    assert tags["charts/epsilon/actor_1"][0][1] == pytest.approx(apex_dqn_atari.epsilon_ladder(4)[2:].mean())


def test_smoke_on_breakout(tmp_path):
    flags = ["--env-id", "BreakoutNoFrameskip-v4", *SMALL, "--learning-starts", "40", "--total-timesteps", "80"]
    result = run_script("apex_dqn_atari.py", *flags, "--save-model", "--eval-episodes", "1", cwd=tmp_path)
    assert "replay ratio" in result.stdout
    directory = run_dir(tmp_path)
    assert {"eval/episodic_return", "losses/td_loss"} <= set(scalars(directory))


def final_ratio(stdout: str) -> float:
    return float(re.search(r"replay ratio ([\d.]+) \(target", stdout).group(1))


@pytest.mark.parametrize("case", ["slow actors", "slow learner"])
def test_replay_ratio_holds(case, tmp_path):
    """Slow actors (2 ms env steps): the learner waits. Slow learner (50 ms per gradient step, two actors on the fast
    Counter-v0): the actors wait. Either way the measured ratio of transitions learned on to env steps collected is
    the target's."""
    if case == "slow actors":
        flags = ["--env-id", "tests.envs:SlowCounter-v0", "--replay-ratio", "4", "--total-timesteps", "3000"]
    else:
        flags = ["--env-id", "tests.envs:Counter-v0", "--replay-ratio", "1", "--total-timesteps", "4000"]
        flags += ["--num-actors", "2", "--debug-learner-sleep", "0.05"]
    result = run_script("apex_dqn_atari.py", *SMALL, *flags, cwd=tmp_path, timeout=300)
    target = float(flags[flags.index("--replay-ratio") + 1])
    assert final_ratio(result.stdout) == pytest.approx(target, rel=0.1), result.stdout
    assert scalars(run_dir(tmp_path))["charts/replay_ratio"][-1][1] == pytest.approx(target, rel=0.1)


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--replay-ratio", "0"], "--replay-ratio", "must be a positive finite number"),
        (["--actor-lead", "2"], "--actor-lead", "must exceed --batch-size / --replay-ratio = 4"),
        (["--buffer-size", "12"], "--buffer-size", "6 steps per env with 1 actors x 2 envs; --n-step 3 needs 8"),
        (["--epsilon", "1.5"], "--epsilon", "must be in [0, 1]"),
        (["--learning-starts", "1000"], "--learning-starts", "leaves no training"),
        (["--eval-interval", "100", "--eval-episodes", "0"], "--eval-episodes", "must be positive with --eval-interval"),
        (["--env-id", "tests.envs:Image-v0"], "--env-id", "1-dimensional observations"),
        (["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
    ],
)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    base = ["--env-id", "tests.envs:Counter-v0", *SMALL, "--replay-ratio", "2", "--total-timesteps", "1000"]
    assert_stops_with_one_line("apex_dqn_atari.py", override(base, flags), flag, message, tmp_path)


@pytest.mark.parametrize("env_mode", ["sync", "async"])
def test_crashing_actor_stops_the_run_in_one_line(env_mode, tmp_path):
    flags = ["--env-id", "tests.envs:CrashingCounter-v0", *SMALL, "--env-mode", env_mode, "--total-timesteps", "1000000"]
    result = run_script("apex_dqn_atari.py", *flags, cwd=tmp_path, check=False, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("apex_dqn_atari.py: actor 0") and line.endswith("; last checkpoint: none"), result.stderr
    assert "RuntimeError: CrashingCounter-v0: deliberate failure for the crash test" in line, line


def test_ctrl_c_leaves_no_process_and_no_shared_memory(tmp_path):
    flags = ["--env-id", "tests.envs:Counter-v0", *SMALL, "--num-actors", "2", "--total-timesteps", "100000000"]
    ctrl_c_leaves_nothing("apex_dqn_atari.py", flags, tmp_path, 2)  # the two actors (and the resource tracker)


def test_sigterm_writes_a_checkpoint_and_resume_continues(tmp_path):
    flags = ["--env-id", "tests.envs:SlowCounter-v0", *SMALL, "--replay-ratio", "2", "--total-timesteps", "4000"]
    flags += ["--save-model", "--eval-episodes", "2", "--checkpoint-interval", "500"]
    run, checkpoint = sigterm_after_a_checkpoint("apex_dqn_atari.py", flags, tmp_path)
    assert set(checkpoint["state"]) == {"q_network", "target_network", "optimizer"}  # not the replay
    assert checkpoint["counters"]["updates"] > 0
    step = checkpoint["global_step"]
    assert 500 <= step < 4000
    assert not list(run.glob("*.cleanrl_model"))

    flags = ["--resume", str(run), "--env-id", "tests.envs:SlowCounter-v0"]  # a module-qualified id is named again
    resumed = run_script("apex_dqn_atari.py", *flags, cwd=tmp_path, timeout=300)
    assert f"resumed at step {step}" in resumed.stdout
    assert f"refilling it until step {step + 100}" in resumed.stdout
    assert run_dir(tmp_path) == run and list(run.glob("*.cleanrl_model"))
    updates = scalars(run)["charts/updates"]
    assert updates[-1][1] > checkpoint["counters"]["updates"] and updates[-1][0] > step  # the gradient steps went on


# ---- learning


CARTPOLE = ["--env-id", "CartPole-v1", "--env-mode", "sync", "--num-actors", "2", "--num-envs", "4"]
CARTPOLE += ["--hidden-size", "128", "--n-step", "1", "--learning-rate", "5e-4", "--adam-eps", "1e-5"]
CARTPOLE += ["--batch-size", "64", "--replay-ratio", "32", "--publish-interval", "1", "--buffer-size", "100000"]
CARTPOLE += ["--target-network-frequency", "50", "--learning-starts", "1000", "--total-timesteps", "96000"]
CARTPOLE += ["--torch-threads", "1"]
"""The learning test's flags (the README's and the docstring's CartPole command)."""


@pytest.mark.learning
@pytest.mark.long
def test_learns_cartpole_with_two_actors(tmp_path):
    """CartPole-v1 solved by the learner's network: one of its greedy evaluations (20 episodes every 8,000 env steps,
    and of the final network) averages at least 475, within 96,000 env steps (two actor processes x 4 envs, replay
    ratio 32). The actors' own episodes cannot show it: they explore on the ε ladder (ε from 0.4 down to 0.4^8). Nor
    can the final network alone: DQN's greedy policy on CartPole oscillates. Measured with 80,000 steps, seeds 1-6
    three at a time on 2 cores: first at or above 475 at 64k, 80k, 32k, 40k, 48k and 32k steps, four of them below
    475 again at a later evaluation (benchmark/results/parallel/apex_cartpole_evaluations.json); the budget here
    leaves two evaluations more.
    Asynchronous, so each run differs."""
    flags = [*CARTPOLE, "--eval-interval", "8000", "--save-model", "--eval-episodes", "20"]
    result = run_script("apex_dqn_atari.py", *flags, cwd=tmp_path, timeout=1200)
    evaluations = [value for _, value in scalars(run_dir(tmp_path))["eval/episodic_return"]]
    print(evaluations)
    assert len(evaluations) >= 12  # every 8k steps during training, and the final network
    assert max(evaluations) >= 475, result.stdout


# ---- a process SIGKILLed while it holds the shared replay's lock


@pytest.mark.timeout(240)
def test_an_actor_killed_holding_the_replay_lock_stops_the_run_in_one_line(tmp_path):
    """An actor SIGKILLed inside the replay's lock (tests/envs.py): the learner does not wait for ever in sample(); the
    run ends with one line naming the dead actor, exit 1, and no process or shared memory left."""
    flags = ["--env-id", "tests.envs:ActorDiesHoldingReplayLock-v0", *SMALL, "--num-actors", "2", "--replay-ratio", "1"]
    an_actor_killed_in_the_lock_stops_the_run("apex_dqn_atari.py", flags, "apex-actor", tmp_path)


@pytest.mark.timeout(240)
def test_the_learner_killed_holding_the_replay_lock_leaves_no_orphan(tmp_path):
    """The learner SIGKILLed inside the replay's lock while its actors add and set priorities under it: the actors
    stop (the kernel released the lock, whose record names the dead learner) rather than wait for ever as orphans."""
    shm_before = set(os.listdir("/dev/shm"))
    flags = ["--env-id", "tests.envs:LearnerDiesHoldingReplayLock-v0", *SMALL, "--num-actors", "2"]
    process, _, err, seen = stops_within("apex_dqn_atari.py", [*flags, "--total-timesteps", "100000"], tmp_path, 120)
    assert process.returncode == -signal.SIGKILL, err
    assert len(seen) >= 2  # the actors (and the resource tracker)
    try:
        assert_gone(seen, shm_before)
    finally:  # orphans waiting for ever
        for pid in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_short_run_on_breakout_holds_what_it_can_fill(tmp_path):
    """With the default --buffer-size of 1,000,000 (7 GB of shared memory), an 80-step run on Breakout caps its replay
    at what its actors can collect, all of it perhaps by one env (and says so): a few MiB."""
    flags = ["--env-id", "BreakoutNoFrameskip-v4", *SMALL, "--learning-starts", "40", "--total-timesteps", "80"]
    result = run_script("apex_dqn_atari.py", *override(flags, ["--buffer-size", "1000000"]), cwd=tmp_path)
    # 80 steps, the throttle's lead (4 batches of 8 at replay ratio 8: 4; a step of each env: 2), a gradient step's 1,
    # a step of each env under way twice (4)
    most = apex_dqn_atari.most_steps(apex_dqn_atari.Args(num_actors=1, num_envs=2, batch_size=8, total_timesteps=80), 0)
    assert most == 80 + 4 + 2 + 1 + 4
    rows = buffers.rows_to_hold(-(-most // 2), 3, 4)  # rows per env: 2 per step (an episode end takes one more) and 7
    said = re.search(r"^replay: (\d+) transitions in shared memory \(([\d.]+) MiB\); --buffer-size 1000000 capped at what "
                     rf"{most} env steps can fill$", result.stdout, re.M)  # fmt: skip
    assert said and int(said.group(1)) == 2 * rows and float(said.group(2)) < 10, result.stdout


WITH_CGROUPS = """
import runpy, sys
import cleanrl_utils.buffers as buffers
buffers.CGROUP_ROOT, buffers.PROC_CGROUP = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_replay_beyond_the_cgroup_limit_is_refused_before_the_run_directory(tmp_path):
    """In a 512 MiB cgroup (a fake tree the replay's memory check is pointed at), a 700 MiB replay stops the run in one
    line naming --buffer-size and the limit, before the run directory exists (rather than an OOM kill, exit 137)."""
    cgroups = tmp_path / "cgroups"
    cgroups.mkdir()
    (cgroups / "memory.max").write_text(f"{512 * 2**20}\n")
    (cgroups / "memory.current").write_text(f"{2**20}\n")
    (tmp_path / "cgroup").write_text("0::/\n")
    flags = ["--env-id", "CartPole-v1", *SMALL, "--total-timesteps", "20000000"]
    script = str(ROOT / "cleanrl" / "apex_dqn_atari.py")
    command = [sys.executable, "-c", WITH_CGROUPS, str(cgroups), str(tmp_path / "cgroup"), script]
    process = subprocess.Popen([*command, *override(flags, ["--buffer-size", "12000000"])], cwd=tmp_path, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    try:
        out, err = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a run that started: its actors too
    assert process.returncode == 2 and err.count("\n") == 1, err
    limit = "is available, by the memory limit of cgroup / (0.50 GiB, 1.0 MiB of it in use); lower the capacity"
    refused = rf"error: --buffer-size: PrioritizedReplayBuffer needs 0\.7\d GiB but only 0\.50 GiB {re.escape(limit)}\n"
    assert re.fullmatch(refused, err), err
    assert not (tmp_path / "runs").exists()

"""R2D2 with asynchronous actors and learner (cleanrl/r2d2_async.py).

Unit tests: the value rescaling and its inverse, n-step targets against hand-computed numbers
(termination stops the bootstrap, truncation and the sequence end bootstrap), the Ape-X ε
ladder, the seqlock parameter publishing. Subprocess runs: bad input one-liners; the
replay-ratio throttle with slow actors and with a slow learner; an env raising inside an actor,
or hanging, stops the run in one line and status 1 (an actor's own error names its traceback's
file); Ctrl-C (SIGINT to the process group) leaves no process and no shared-memory file; SIGTERM
writes a checkpoint (no replay) and --resume continues; an actor SIGKILLed inside the replay's lock
ends the run in one line; the replay's cap. Learning (marked ``learning``): greedy evaluation on the
velocity-masked CartPole.
"""

import re
import time

import numpy as np
import pytest
import torch

import tests.envs  # noqa: F401  (registers Counter-v0, CrashingCounter-v0, SlowCounter-v0)
from cleanrl import r2d2_async
from cleanrl_utils.actors import ActorFailed, Shared, check_actors
from tests.conftest import assert_stops_with_one_line, override, run_dir, run_script, scalars
from tests.processes import (
    an_actor_killed_in_the_lock_stops_the_run,
    ctrl_c_leaves_nothing,
    sigterm_after_a_checkpoint,
)

MASKED = "cleanrl_utils.envs:CartPoleNoVelocity-v1"
# a small, fast configuration on the 3-step Counter-v0 episodes
SMALL = [
    "--env-mode",
    "sync",
    "--num-actors",
    "1",
    "--num-envs",
    "4",
    "--lstm-size",
    "16",
    "--hidden-size",
    "16",
    "--burn-in",
    "2",
    "--learn-length",
    "4",
    "--n-step",
    "2",
    "--batch-size",
    "8",
    "--buffer-size",
    "500",
    "--learning-starts",
    "200",
    "--target-network-frequency",
    "50",
]


# ---- pure functions


def test_value_rescale_known_values_and_inverse_round_trip():
    eps = 1e-3
    x = torch.tensor([0.0, 3.0, -3.0, 8.0], dtype=torch.float64)
    expected = torch.tensor([0.0, 1.0 + 3e-3, -(1.0 + 3e-3), 2.0 + 8e-3], dtype=torch.float64)
    torch.testing.assert_close(r2d2_async.value_rescale(x, eps), expected)
    values = torch.cat([torch.linspace(-1000, 1000, 2001, dtype=torch.float64), torch.tensor([1e5, -1e5])])
    for e in (1e-3, 1e-2, 0.0):
        torch.testing.assert_close(r2d2_async.inverse_value_rescale(r2d2_async.value_rescale(values, e), e), values)
        torch.testing.assert_close(r2d2_async.value_rescale(r2d2_async.inverse_value_rescale(values, e), e), values)


def test_n_step_targets_hand_computed():
    gamma, n = 0.5, 2
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 3)
    values = torch.tensor([[10.0, 20.0, 30.0, 40.0, 50.0]] * 3)  # v at observation indices 0..4
    terminations = torch.zeros(3, 4, dtype=torch.bool)
    truncations = torch.zeros(3, 4, dtype=torch.bool)
    mask = torch.ones(3, 4, dtype=torch.bool)
    terminations[1, 1] = True  # row 1: terminated at step 1, steps 2-3 are padding
    truncations[2, 1] = True  # row 2: truncated at step 1 (value 30 is of the real final observation)
    mask[1:, 2:] = False
    targets = r2d2_async.n_step_targets(rewards, terminations, truncations, mask, values, gamma, n)
    expected = torch.tensor(
        [
            [1 + 0.5 * 2 + 0.25 * 30, 2 + 0.5 * 3 + 0.25 * 40, 3 + 0.5 * 4 + 0.25 * 50, 4 + 0.5 * 50],  # end: bootstrap
            [1 + 0.5 * 2, 2, 0, 0],  # termination: no bootstrap
            [1 + 0.5 * 2 + 0.25 * 30, 2 + 0.5 * 30, 0, 0],  # truncation is not termination
        ]
    )
    torch.testing.assert_close(targets, expected)
    one_step = r2d2_async.n_step_targets(rewards[:1], terminations[:1], truncations[:1], mask[:1], values[:1], gamma, 1)
    torch.testing.assert_close(one_step, torch.tensor([[1 + 10.0, 2 + 15.0, 3 + 20.0, 4 + 25.0]]))


def test_epsilon_ladder():
    ladder = r2d2_async.epsilon_ladder(4, 0.4, 7.0)
    np.testing.assert_allclose(ladder, [0.4, 0.4 ** (1 + 7 / 3), 0.4 ** (1 + 14 / 3), 0.4**8])
    np.testing.assert_allclose(r2d2_async.epsilon_ladder(1, 0.4, 7.0), [0.4])
    assert np.all(np.diff(r2d2_async.epsilon_ladder(16)) < 0)


def test_parameter_publishing_is_a_seqlock():
    learner = r2d2_async.RecurrentQNetwork((2,), 2, 8, 8, atari=False)
    actor = r2d2_async.RecurrentQNetwork((2,), 2, 8, 8, atari=False)
    shared = Shared(sum(p.numel() for p in learner.parameters()), 1)
    shared.publish(learner)
    assert int(shared.version[0]) == 2
    version = shared.pull(actor, -1)
    assert version == 2
    for a, b in zip(actor.parameters(), learner.parameters()):
        assert torch.equal(a, b)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(1.0)
    shared.version += 1  # a write in progress: the actor keeps what it has
    assert shared.pull(actor, version) == version
    shared.version -= 1
    shared.publish(learner)
    assert shared.pull(actor, version) == 4
    assert all(torch.equal(a, b) for a, b in zip(actor.parameters(), learner.parameters()))


# ---- bad input


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--num-envs", "1"], "--num-envs", "at least 2"),
        (["--replay-ratio", "0"], "--replay-ratio", "must be a positive finite number"),
        (["--actor-lead", "10", "--batch-size", "8", "--learn-length", "4"], "--actor-lead", "must exceed"),
        (["--buffer-size", "4", "--batch-size", "8"], "--buffer-size", "fewer than --batch-size"),
        (["--epsilon", "1.5"], "--epsilon", "must be in [0, 1]"),
        (["--env-id", "tests.envs:Image-v0"], "--env-id", "1-dimensional observations"),
        (["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
    ],
)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    base = ["--env-id", "tests.envs:Counter-v0", "--total-timesteps", "1000", "--learning-starts", "100"]
    assert_stops_with_one_line("r2d2_async.py", override(base, flags), flag, message, tmp_path)


# ---- replay-ratio throttle


def final_ratio(stdout: str) -> float:
    return float(re.search(r"replay ratio ([\d.]+) \(target", stdout).group(1))


@pytest.mark.parametrize("case", ["slow actors", "slow learner"])
def test_replay_ratio_holds(case, tmp_path):
    """Slow actors (2 ms env steps): the learner waits. Slow learner (50 ms per gradient step,
    two actors on the fast Counter-v0): the actors wait. Either way the measured ratio of env
    steps learned on to env steps collected is the target's."""
    if case == "slow actors":
        flags = ["--env-id", "tests.envs:SlowCounter-v0", "--replay-ratio", "4", "--total-timesteps", "3000"]
    else:
        flags = [
            "--env-id",
            "tests.envs:Counter-v0",
            "--replay-ratio",
            "1",
            "--total-timesteps",
            "4000",
            "--num-actors",
            "2",
            "--debug-learner-sleep",
            "0.05",
        ]
    result = run_script("r2d2_async.py", *SMALL, *flags, cwd=tmp_path, timeout=300)
    target = float(flags[flags.index("--replay-ratio") + 1])
    assert final_ratio(result.stdout) == pytest.approx(target, rel=0.1), result.stdout
    curves = scalars(run_dir(tmp_path))
    assert curves["charts/replay_ratio"][-1][1] == pytest.approx(target, rel=0.1)
    assert {"charts/episodic_return", "charts/SPS", "losses/td_loss", "charts/epsilon/actor_0"} <= set(curves)
    if case == "slow learner":  # one ε per actor: the mean of its envs' rungs on the ladder
        ladder = r2d2_async.epsilon_ladder(8)
        assert curves["charts/epsilon/actor_1"][0][1] == pytest.approx(ladder[4:].mean(), rel=1e-5)


# ---- failures and signals


@pytest.mark.parametrize("env_mode", ["sync", pytest.param("async", marks=pytest.mark.long)])
def test_crashing_actor_stops_the_run_in_one_line(env_mode, tmp_path):
    """An env that raises, in a worker process or in the actor itself: its ``CheckedEnv`` says which env raised what
    and where, and the learner ends the run with that line."""
    result = run_script(
        "r2d2_async.py",
        *SMALL,
        "--env-id",
        "tests.envs:CrashingCounter-v0",
        "--num-actors",
        "2",
        "--total-timesteps",
        "1000000",
        "--env-mode",
        env_mode,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("r2d2_async.py: actor ") and line.endswith("; last checkpoint: none"), result.stderr
    assert "RuntimeError: CrashingCounter-v0: deliberate failure for the crash test" in line, line
    assert re.search(r"actor \d: env \d raised RuntimeError: .* \(\S*tests/envs.py:\d+\) in step, at its step 200", line), line


def test_an_actor_error_is_one_line_naming_its_traceback_file(tmp_path):
    """An error of the actor's own code (not an env's fault, which is one line already): its traceback is written to
    the run directory, and the line names the file."""

    class Exited:  # the actor process, after it reported its error (actor_main) and exited
        exitcode = 1

        def is_alive(self) -> bool:
            return False

    shared = Shared(1, 1)
    text = "Traceback (most recent call last):\n  File \"x.py\", line 1, in run_actor\nKeyError: 'slot'\n"
    shared.errors.put((0, text, "KeyError: 'slot'"))
    with pytest.raises(ActorFailed) as failed:
        check_actors([Exited()], shared, tmp_path)
    assert str(failed.value) == f"actor 0 failed with KeyError: 'slot' (its traceback: {tmp_path / 'actor_0_traceback.txt'})"
    assert (tmp_path / "actor_0_traceback.txt").read_text() == text


@pytest.mark.parametrize("env_mode", ["sync", pytest.param("async", marks=pytest.mark.long)])
def test_a_hung_env_is_stopped_after_env_timeout(env_mode, tmp_path):
    """A sync group steps in a thread of the actor, which waits at most --env-timeout for it; an async group's workers
    answer ``step_wait`` within it. Either way the run ends in one line."""
    flags = [*SMALL, "--env-id", "tests.envs:FaultyHang-v0", "--total-timesteps", "1000000", "--env-timeout", "2"]
    started = time.monotonic()
    result = run_script("r2d2_async.py", *flags, "--env-mode", env_mode, cwd=tmp_path, check=False, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    said = "envs 0-1: no answer to a step" if env_mode == "sync" else "env 0: no answer"
    assert line.startswith(f"r2d2_async.py: actor 0: {said} within --env-timeout 2 s; last checkpoint: none"), line
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("env_mode", ["sync", "async"])
def test_ctrl_c_leaves_no_process_and_no_shared_memory(env_mode, tmp_path):
    actors = 2 if env_mode == "sync" else 1
    flags = [
        *SMALL,
        "--env-id",
        "tests.envs:Counter-v0",
        "--num-actors",
        str(actors),
        "--total-timesteps",
        "10000000",
        "--env-mode",
        env_mode,
    ]
    # the actors (+ the resource tracker; async: a forkserver and 4 env processes per actor)
    ctrl_c_leaves_nothing("r2d2_async.py", flags, tmp_path, 2 if env_mode == "sync" else 6)


def test_sigterm_writes_a_checkpoint_and_resume_continues(tmp_path):
    flags = [
        *SMALL,
        "--env-id",
        "tests.envs:SlowCounter-v0",
        "--total-timesteps",
        "4000",
        "--replay-ratio",
        "2",
        "--save-model",
        "--eval-episodes",
        "2",
        "--checkpoint-interval",
        "500",
    ]
    run, checkpoint = sigterm_after_a_checkpoint("r2d2_async.py", flags, tmp_path)
    assert set(checkpoint["state"]) == {"q_network", "target_network", "optimizer"}  # not the replay
    assert checkpoint["counters"]["updates"] > 0
    step = checkpoint["global_step"]
    assert 500 < step < 4000
    assert not list(run.glob("*.cleanrl_model"))

    flags = ["--resume", str(run), "--env-id", "tests.envs:SlowCounter-v0"]  # a module-qualified id is named again
    resumed = run_script("r2d2_async.py", *flags, cwd=tmp_path, timeout=300)
    assert f"resumed at step {step}" in resumed.stdout
    assert f"refilling it until step {step + 200}" in resumed.stdout
    assert run_dir(tmp_path) == run and list(run.glob("*.cleanrl_model"))
    updates = scalars(run)["charts/updates"]
    assert updates[-1][1] > checkpoint["counters"]["updates"] and updates[-1][0] > step  # the gradient steps went on


# ---- learning


@pytest.mark.learning
@pytest.mark.long
def test_learns_masked_cartpole(tmp_path):
    """On CartPole without velocities the greedy policy reaches a mean return >= 400: the best of
    the evaluations (10 greedy episodes of the learner's current network every 8k env steps, and
    of the final network; eval/episodic_return) over 80k env steps at replay ratio 32.
    Measured (three runs at once on 2 loaded cores): seeds 1, 2, 3 reached 500.0 each (192 s,
    210 s, 204 s), their final networks 500.0, 500.0, 500.0; seeds 5, 6, 7 reached 500.0 each
    (324-337 s), their final networks 221.8, 491.3, 415.8: the greedy policy oscillates, so the
    final network alone is not a reliable test."""
    result = run_script(
        "r2d2_async.py",
        "--env-id",
        MASKED,
        "--env-mode",
        "sync",
        "--num-actors",
        "1",
        "--num-envs",
        "8",
        "--lstm-size",
        "64",
        "--hidden-size",
        "64",
        "--burn-in",
        "8",
        "--learn-length",
        "16",
        "--n-step",
        "3",
        "--gamma",
        "0.99",
        "--learning-rate",
        "1e-3",
        "--adam-eps",
        "1e-5",
        "--target-network-frequency",
        "50",
        "--buffer-size",
        "2000",
        "--batch-size",
        "32",
        "--replay-ratio",
        "32",
        "--learning-starts",
        "2000",
        "--total-timesteps",
        "80000",
        "--eval-interval",
        "8000",
        "--save-model",
        cwd=tmp_path,
        timeout=600,
    )
    evaluations = [value for _, value in scalars(run_dir(tmp_path))["eval/episodic_return"]]
    assert len(evaluations) >= 9  # every 8k steps during training, and the final network
    assert max(evaluations) >= 400, result.stdout


# ---- the shared replay: a process killed holding its lock, a capacity capped at what the run can fill


@pytest.mark.timeout(240)
def test_an_actor_killed_holding_the_replay_lock_stops_the_run_in_one_line(tmp_path):
    """The sequence replay's lock is the same kind as Ape-X's: an actor SIGKILLed inside it ends the run in one line
    naming it, exit 1, nothing left behind (not a learner waiting for ever in sample())."""
    flags = [*SMALL, "--env-id", "tests.envs:ActorDiesHoldingReplayLock-v0", "--num-actors", "2"]
    an_actor_killed_in_the_lock_stops_the_run("r2d2_async.py", flags, "r2d2-actor", tmp_path)


def test_the_replay_is_capped_at_what_the_run_can_fill():
    """Each env step is learned in one sequence only, so a run holds at most as many sequences as its actors can
    collect: --total-timesteps (less a resumed run's steps, its replay refilled from empty) and what the throttle lets
    them run past it (its lead of 7,680 steps by default; a gradient step's 1,280; a step of every env, twice)."""
    args = r2d2_async.Args(total_timesteps=1000, learning_starts=100, buffer_size=20_000)
    assert r2d2_async.most_steps(args, 0) == 1000 + 7680 + 1280 + 2 * 32
    assert r2d2_async.most_steps(args, 600) == r2d2_async.most_steps(args, 0) - 600

"""IMPALA (cleanrl/impala_atari.py): actor processes, trajectory slots in shared memory, a V-trace learner.

Unit tests: V-trace against hand-computed values (on-policy it is the n-step return to the trajectory's end;
truncated importance weights ρ̄ and c̄; a termination stops the bootstrap, a truncation bootstraps from the
final observation's value). Subprocess runs: Atari (both networks) with model and evaluation; bad input
one-liners; an env raising inside an actor; Ctrl-C to the process group leaves no process and no shared memory;
SIGTERM writes a checkpoint and --resume continues, logging IMPALA's tags. Learning (marked ``learning``):
CartPole-v1 with two actors. The short run with its model and checkpoint evaluated, the generic bad input and
another script's checkpoint: tests/test_contracts.py.
"""

import numpy as np
import pytest
import torch

import tests.envs  # noqa: F401  (registers Counter-v0, CrashingCounter-v0)
from cleanrl.impala_atari import vtrace
from tests.conftest import assert_stops_with_one_line, episodic_returns, override, run_dir, run_script, scalars
from tests.processes import ctrl_c_leaves_nothing, sigterm_after_a_checkpoint


def column(*values: float) -> torch.Tensor:
    """``[T, 1]``: one trajectory, time first."""
    return torch.tensor(values, dtype=torch.float32)[:, None]


def on_policy(T: int) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log(torch.full((T, 1), 0.5))
    return logp, logp.clone()


# ---- V-trace


def test_vtrace_on_policy_is_the_n_step_return_to_the_trajectory_end():
    """γ = 0.9, r = (1, 2, 3), V = (0.5, 1, 1.5), V(x_3) = 2: v_2 = 3 + 0.9 x 2 = 4.8,
    v_1 = 2 + 0.9 x 3 + 0.81 x 2 = 6.32, v_0 = 1 + 0.9 x 2 + 0.81 x 3 + 0.729 x 2 = 6.688; the advantages
    r_t + γ v_{t+1} − V_t are 6.188, 5.32, 3.3."""
    behaviour, target = on_policy(3)
    no_done = torch.zeros((3, 1), dtype=torch.bool)
    vs, advantages, rhos = vtrace(
        behaviour, target, column(1, 2, 3), column(0.5, 1, 1.5), column(0, 0, 0), torch.tensor([2.0]), no_done, 0.9
    )
    torch.testing.assert_close(vs, column(6.688, 6.32, 4.8))
    torch.testing.assert_close(advantages, column(6.188, 5.32, 3.3))
    torch.testing.assert_close(rhos, column(1, 1, 1))


def test_vtrace_on_policy_equals_the_n_step_return_for_random_numbers():
    generator = torch.Generator().manual_seed(0)
    T, B, gamma = 7, 5, 0.97
    rewards, values = torch.randn(T, B, generator=generator), torch.randn(T, B, generator=generator)
    bootstrap = torch.randn(B, generator=generator)
    behaviour = torch.log_softmax(torch.randn(T, B, 3, generator=generator), -1)[..., 0]
    no_done = torch.zeros((T, B), dtype=torch.bool)
    vs, _, _ = vtrace(behaviour, behaviour.clone(), rewards, values, torch.zeros(T, B), bootstrap, no_done, gamma, 1.0, 1.0)
    for s in range(T):
        n_step = sum(gamma ** (k - s) * rewards[k] for k in range(s, T)) + gamma ** (T - s) * bootstrap
        torch.testing.assert_close(vs[s], n_step)


def test_vtrace_lambda_on_policy_is_the_lambda_return():
    """With c_s = λ min(c̄, π/μ) on-policy, v_s − V(x_s) = Σ_k (γλ)^k δ_{s+k}, δ_t = r_t + γ V(x_{t+1}) − V(x_t)."""
    generator = torch.Generator().manual_seed(1)
    T, B, gamma, lam = 6, 3, 0.9, 0.8
    rewards, values = torch.randn(T, B, generator=generator), torch.randn(T, B, generator=generator)
    bootstrap = torch.randn(B, generator=generator)
    logp = torch.full((T, B), -1.0)
    no_done = torch.zeros((T, B), dtype=torch.bool)
    vs, _, _ = vtrace(logp, logp.clone(), rewards, values, torch.zeros(T, B), bootstrap, no_done, gamma, lam=lam)
    deltas = rewards + gamma * torch.cat([values[1:], bootstrap[None]]) - values
    for s in range(T):
        torch.testing.assert_close(vs[s] - values[s], sum((gamma * lam) ** (k - s) * deltas[k] for k in range(s, T)))


@pytest.mark.parametrize(
    "rho_bar, c_bar, v0, advantage0",
    [
        (1.0, 1.0, 1.75, 1.75),  # ρ_0 = 2 truncated to 1; c_0 = 1
        (3.0, 1.0, 2.75, 3.5),  # ρ_0 = 2 kept: δ_0 = 2 x 1, advantage 2 x (1 + 0.5 x 1.5)
        (1.0, 0.5, 1.375, 1.75),  # c_0 = 0.5 halves the trace: 1 + 0.5 x 0.5 x 1.5
    ],
)
def test_vtrace_truncated_importance_weights(rho_bar, c_bar, v0, advantage0):
    """γ = 0.5, r = (1, 1), V = (0, 0), V(x_2) = 4; μ(a) = (0.25, 0.5), π(a) = (0.5, 0.25), so π/μ = (2, 0.5).
    Step 1: δ_1 = min(ρ̄, 0.5)(1 + 0.5 x 4) = 1.5 = v_1 and its advantage. Step 0: δ_0 = min(ρ̄, 2) x 1,
    v_0 = δ_0 + γ min(c̄, 2)(v_1 − V_1), advantage min(ρ̄, 2)(1 + γ v_1)."""
    behaviour, target = torch.log(column(0.25, 0.5)), torch.log(column(0.5, 0.25))
    no_done = torch.zeros((2, 1), dtype=torch.bool)
    vs, advantages, rhos = vtrace(
        behaviour, target, column(1, 1), column(0, 0), column(0, 0), torch.tensor([4.0]), no_done, 0.5, rho_bar, c_bar
    )
    torch.testing.assert_close(rhos, column(2.0, 0.5))
    torch.testing.assert_close(vs, column(v0, 1.5))
    torch.testing.assert_close(advantages, column(advantage0, 1.5))


def test_vtrace_termination_cuts_and_truncation_bootstraps_from_the_final_value():
    """γ = 0.9, r = 1 and V = 1 everywhere, V(x_3) = 10. Step 0 terminates (no bootstrap): v_0 = 1. Step 1 is
    truncated with V(final observation) = 5: v_1 = 1 + 0.9 x 5 = 5.5, not reaching into the next episode. Step 2
    bootstraps from V(x_3): v_2 = 1 + 9 = 10."""
    behaviour, target = on_policy(3)
    dones = torch.tensor([[True], [True], [False]])
    vs, advantages, _ = vtrace(
        behaviour, target, column(1, 1, 1), column(1, 1, 1), column(0, 5, 123), torch.tensor([10.0]), dones, 0.9
    )
    torch.testing.assert_close(vs, column(1.0, 5.5, 10.0))
    torch.testing.assert_close(advantages, column(0.0, 4.5, 9.0))


# ---- whole runs

TINY = ["--env-mode", "sync", "--num-actors", "1", "--num-envs", "2", "--unroll-length", "8", "--batch-size", "2"]


@pytest.mark.parametrize("network", ["nature", "impala"])
def test_smoke_on_breakout(network, tmp_path):
    flags = ["--env-id", "BreakoutNoFrameskip-v4", *TINY, "--unroll-length", "4", "--total-timesteps", "64"]
    run_script("impala_atari.py", *flags, "--network", network, "--save-model", "--eval-episodes", "1", cwd=tmp_path)
    directory = run_dir(tmp_path)
    assert "eval/episodic_return" in scalars(directory)
    model = torch.load(directory / "impala_atari.cleanrl_model", weights_only=True)
    names = set(model["agent"]) if "agent" in model else set(model["models"]["agent"])
    assert any(".conv0." in name for name in names) == (network == "impala")  # the residual blocks' convolutions


@pytest.mark.parametrize(
    "flags, flag, message",
    [
        (["--batch-size", "3"], "--batch-size", "3 must be a multiple of --num-envs 2"),
        (["--num-slots", "1", "--batch-size", "4"], "--num-slots", "1 leaves the actors no free slot"),
        (["--total-timesteps", "10"], "--total-timesteps", "less than one batch of 16 steps"),
        (["--rho-bar", "0"], "--rho-bar", "must be a positive finite number"),
        (["--env-id", "tests.envs:Image-v0"], "--env-id", "1-dimensional observations"),
        (["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
        (["--network", "impala"], "--network", "impala is an Atari trunk"),
        (["--reward-scale", "0"], "--reward-scale", "must be a positive finite number"),
    ],
)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    base = ["--env-id", "tests.envs:Counter-v0", *TINY, "--total-timesteps", "1000"]
    assert_stops_with_one_line("impala_atari.py", override(base, flags), flag, message, tmp_path)


@pytest.mark.parametrize("env_mode", ["sync", "async"])
def test_crashing_actor_stops_the_run_in_one_line(env_mode, tmp_path):
    flags = ["--env-id", "tests.envs:CrashingCounter-v0", *TINY, "--env-mode", env_mode, "--total-timesteps", "1000000"]
    result = run_script("impala_atari.py", *flags, cwd=tmp_path, check=False, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("impala_atari.py: actor 0") and line.endswith("; last checkpoint: none"), result.stderr
    assert "RuntimeError: CrashingCounter-v0: deliberate failure for the crash test" in line, line


def test_ctrl_c_leaves_no_process_and_no_shared_memory(tmp_path):
    flags = ["--env-id", "tests.envs:Counter-v0", *TINY, "--num-actors", "2", "--total-timesteps", "100000000"]
    ctrl_c_leaves_nothing("impala_atari.py", flags, tmp_path, 2)  # the two actors (and the resource tracker)


def test_sigterm_writes_a_checkpoint_and_resume_continues(tmp_path):
    flags = ["--env-id", "CartPole-v1", *TINY, "--total-timesteps", "60000", "--save-model", "--eval-episodes", "2"]
    run, checkpoint = sigterm_after_a_checkpoint("impala_atari.py", [*flags, "--checkpoint-interval", "2000"], tmp_path)
    assert set(checkpoint["state"]) == {"agent", "optimizer"}
    assert checkpoint["counters"]["updates"] > 0
    step = checkpoint["global_step"]
    assert 2000 <= step < 60000
    assert not list(run.glob("*.cleanrl_model"))

    resumed = run_script("impala_atari.py", "--resume", str(run), cwd=tmp_path, timeout=300)
    assert f"resumed at step {step}" in resumed.stdout
    assert "trajectory slots: 3 of 2 x 8 steps" in resumed.stdout  # 2 x 1 actor + 1 slot per batch
    assert run_dir(tmp_path) == run and list(run.glob("*.cleanrl_model"))
    tags = scalars(run)
    expected = {"charts/policy_lag", "charts/learner_wait_fraction", "charts/importance_weight", "charts/updates"}
    expected |= {"losses/policy_loss", "losses/value_loss", "losses/entropy", "charts/episodic_return", "charts/SPS"}
    assert expected | {"eval/episodic_return"} <= set(tags)
    assert all(0 <= value for _, value in tags["charts/policy_lag"])
    updates = tags["charts/updates"]
    assert updates[-1][1] > checkpoint["counters"]["updates"] and updates[-1][0] > step  # the gradient steps went on
    assert updates[-1][0] >= 60000 - 16 * 2


# ---- learning


CARTPOLE = ["--env-id", "CartPole-v1", "--num-actors", "2", "--num-envs", "4", "--unroll-length", "16"]
CARTPOLE += ["--batch-size", "16", "--learning-rate", "3e-3", "--ent-coef", "0.0003", "--reward-scale", "0.1"]
CARTPOLE += ["--total-timesteps", "800000"]
"""The learning test's flags (the README's and the docstring's CartPole command)."""


@pytest.mark.learning
@pytest.mark.long
def test_learns_cartpole_with_two_actors(tmp_path):
    """CartPole-v1 solved by the training episodes: mean return >= 475 over the last 20, within 800,000 env steps
    (two actor processes x 4 envs, trajectories of 16 steps, batches of 16, RMSProp at 3e-3 annealed to 0, plain
    V-trace, rewards scaled by 0.1 in the learner). About a minute on 2 idle cores. Asynchronous, so each run
    differs: seeds 1-12, four runs at a time on 2 cores, ended at 500.0 each (benchmark/results/parallel/README.md)."""
    run_script("impala_atari.py", *CARTPOLE, "--seed", "1", cwd=tmp_path, timeout=1200)
    returns = episodic_returns(run_dir(tmp_path))
    print(f"last 20: {np.mean(returns[-20:]):.1f}, last 100: {np.mean(returns[-100:]):.1f}, {len(returns)} episodes")
    assert np.mean(returns[:20]) < 50  # from random play
    assert np.mean(returns[-20:]) >= 475

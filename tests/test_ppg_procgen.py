"""Phasic Policy Gradient on Procgen (ppg_procgen.py).

Pure parts against hand-computed values (GAE with Procgen's truncation rule, the full-batch advantage
normalisation, the policy phase's PPO losses, the auxiliary phase's joint and value losses), the two networks
(separate trunks: each loss reaches its own network only; PPG's normed initialisation), a short run (tags, the
auxiliary buffer, the saved model and its seeded evaluation, the evaluation tool), SIGTERM mid-phase then
--resume (the checkpoint holds the phase's start: the uninterrupted run's checkpoint at that boundary, exactly),
bad input, and a learning test on one jumper level.
"""

import os
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, kl_divergence

from cleanrl import ppg_procgen
from cleanrl.ppg_procgen import (
    PolicyNetwork,
    ValueNetwork,
    aux_losses,
    compute_gae,
    normalize_advantages,
    ppo_losses,
)
from tests.conftest import (
    ROOT,
    _run_in_process_until_exit,
    assert_stops_with_one_line,
    enjoy,
    run_dir,
    run_in_process,
    run_script,
    scalars,
)

pytest.importorskip("procgen")

TINY = [
    "--num-envs", "2", "--num-steps", "16", "--n-iteration", "2", "--num-minibatches", "2",
    "--e-auxiliary", "2", "--num-aux-rollouts", "2",
]  # fmt: skip
"""A phase of 2 rollouts of 2 x 16 steps (64 steps), 2 auxiliary epochs of 2 minibatches of 2 rollouts."""
ENVS = type("Envs", (), {"single_action_space": gym.spaces.Discrete(15)})()


# ---- GAE and the losses


def test_gae_bootstraps_a_truncation_from_the_last_value_of_its_episode_and_not_a_termination():
    # γ 0.9, λ 0.5 (γλ 0.45). Env 0: time limit at t=1 (s_2 is the next episode's first observation);
    # env 1: terminated at t=0.
    rewards = np.array([[1, 1], [2, 0], [3, 0]], np.float32)
    values = np.array([[0.5, 2.0], [1.0, 1.0], [1.5, 1.0]], np.float32)
    last = np.array([2.0, 4.0], np.float32)
    terminations = np.array([[0, 1], [0, 0], [0, 0]], np.float32)
    truncations = np.array([[0, 0], [1, 0], [0, 0]], np.float32)
    advantages, returns = compute_gae(rewards, values, last, terminations, truncations, 0.9, 0.5)
    # env 0: δ2 = 3 + .9*2 - 1.5 = 3.3; δ1 = 2 + .9*V(s_1) - V(s_1) = 2 + .9 - 1 = 1.9, the recursion cut;
    #        δ0 = 1 + .9*1 - .5 = 1.4, A0 = 1.4 + .45*1.9 = 2.255
    np.testing.assert_allclose(advantages[:, 0], [2.255, 1.9, 3.3], rtol=1e-6)
    # env 1: δ2 = 3.6 - 1 = 2.6; δ1 = .9 - 1 = -.1, A1 = -.1 + .45*2.6 = 1.07; δ0 = 1 - 2 = -1 (no bootstrap, cut)
    np.testing.assert_allclose(advantages[:, 1], [-1.0, 1.07, 2.6], rtol=1e-6)
    np.testing.assert_allclose(returns, advantages + values)
    assert advantages.dtype == returns.dtype == np.float32
    # the same end as a termination would not bootstrap: δ1 = 2 - 1 = 1
    as_termination, _ = compute_gae(rewards, values, last, terminations + truncations, 0 * truncations, 0.9, 0.5)
    assert as_termination[1, 0] == pytest.approx(1.0)


def test_advantages_are_normalised_over_the_whole_batch():
    a = torch.tensor([1.0, 2.0, 3.0, 6.0])
    normalized = normalize_advantages(a)
    torch.testing.assert_close(normalized, (a - 3.0) / (torch.tensor(14.0 / 3).sqrt() + 1e-8))
    assert normalized.mean().abs() < 1e-6 and normalized.std().item() == pytest.approx(1.0, abs=1e-6)


def test_ppo_losses_clip_the_ratio_and_the_value():
    newlogprob = torch.log(torch.tensor([1.5, 0.5])).requires_grad_()
    newvalue = torch.tensor([1.0, 0.0], requires_grad=True)
    args = (torch.zeros(2), torch.tensor([0.5, 0.0]), torch.tensor([1.0, 1.0]), torch.tensor([2.0, 1.0]), 0.2)
    out = ppo_losses(newlogprob, torch.tensor([2.0, 1.0]), newvalue, *args)
    # ratios 1.5, 0.5; A = 1: max(-1.5, -1.2) = -1.2, max(-0.5, -0.8) = -0.5 -> -0.85
    assert out["policy_loss"].item() == pytest.approx(-0.85)
    # value: sample 0 max((1-2)², (0.5+0.2-2)²) = 1.69, sample 1 max(1, 1) = 1 -> 0.5 * 2.69 / 2
    assert out["value_loss"].item() == pytest.approx(0.6725)
    assert out["entropy"].item() == pytest.approx(1.5) and out["clipfrac"].item() == 1.0
    assert out["approx_kl"].item() == pytest.approx(((0.5 - np.log(1.5)) + (-0.5 - np.log(0.5))) / 2, rel=1e-5)
    (out["policy_loss"] + out["value_loss"]).backward()
    assert newlogprob.grad.tolist() == [0.0, -0.25]  # the clipped sample carries none; d(-ρ / 2)/d log π = -0.5 / 2
    unclipped = ppo_losses(newlogprob, torch.ones(2), newvalue, *args, clip_vloss=False)
    assert unclipped["value_loss"].item() == pytest.approx(0.5)


def test_aux_losses_are_the_value_distillation_the_kl_to_the_old_policy_and_the_value_loss():
    torch.manual_seed(0)
    old, new = torch.randn(4, 15), torch.randn(4, 15, requires_grad=True)
    aux_values = torch.tensor([1.0, 3.0, 2.0, 2.0], requires_grad=True)
    values = torch.tensor([0.0, 2.0, 2.0, 2.0], requires_grad=True)
    returns = torch.full((4,), 2.0)
    out = aux_losses(new, old, aux_values, values, returns, beta_clone=0.5)
    kl = kl_divergence(Categorical(logits=old), Categorical(logits=new)).mean()  # KL(π_old || π)
    torch.testing.assert_close(out["kl_loss"], kl)
    assert out["aux_value_loss"].item() == pytest.approx(0.5 * 2 / 4)  # 0.5 mean (1 + 1 + 0 + 0)
    assert out["real_value_loss"].item() == pytest.approx(0.5 * 4 / 4)
    torch.testing.assert_close(out["joint_loss"], out["aux_value_loss"] + 0.5 * kl)
    out["joint_loss"].backward()
    assert new.grad.abs().sum() > 0 and aux_values.grad is not None and values.grad is None
    same = aux_losses(old, old, returns, returns, returns, beta_clone=1.0)
    assert same["kl_loss"].item() == pytest.approx(0.0, abs=1e-6) and same["joint_loss"].item() == pytest.approx(0.0, abs=1e-6)


def test_a_time_limit_truncation_in_a_run_bootstraps_from_the_value_of_the_last_observation(monkeypatch, tmp_path):
    """Maze, level 1 only (easy): the near-uniform initial policy of both envs wanders the whole 500-step limit,
    so both episodes are truncated at their 500th step, row 243 of the second rollout of 256 steps. A learning rate of
    1e-30 keeps the weights those of the rollout: the stored values are V of the stored frames, and there the
    advantage is r + γ V(s_t) - V(s_t), nothing of the next episode."""
    g = run_in_process(
        "ppg_procgen.py",
        monkeypatch,
        tmp_path,
        *["--env-id", "maze", "--num-levels", "1", "--start-level", "1", "--num-envs", "2", "--num-steps", "256"],
        *["--n-iteration", "2", "--num-minibatches", "2", "--e-auxiliary", "1", "--total-timesteps", "1024"],
        *["--learning-rate", "1e-30"],
    )
    truncations, terminations = g["truncations"], g["terminations"]
    assert np.argwhere(truncations).tolist() == [[243, 0], [243, 1]] and not terminations.any()
    with torch.no_grad():
        values = g["value"](g["obs"].reshape(-1, 64, 64, 3)).reshape(256, 2).numpy()
    np.testing.assert_allclose(g["values"].numpy(), values, rtol=1e-4, atol=1e-5)
    advantages = g["advantages"]
    np.testing.assert_allclose(advantages[243], g["rewards"][243] + (0.999 - 1.0) * values[243], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g["aux_returns"][:, 2:].numpy(), advantages + g["values"].numpy(), rtol=1e-6)
    assert [value for _, value in scalars(run_dir(tmp_path))["charts/episodic_length"]] == [500.0, 500.0]


# ---- the networks


def test_policy_and_value_networks_have_their_own_trunks():
    torch.manual_seed(0)
    policy, value = PolicyNetwork(ENVS), ValueNetwork()
    x = torch.randint(0, 256, (5, 64, 64, 3), dtype=torch.uint8)
    logits, aux_value = policy(x)
    assert logits.shape == (5, 15) and aux_value.shape == (5,) and value(x).shape == (5,)
    torch.testing.assert_close(policy.logits(x), logits)
    out = aux_losses(logits, logits.detach(), aux_value, value(x), torch.ones(5), beta_clone=1.0)
    out["joint_loss"].backward()  # L_joint: π's network only
    assert all(p.grad is None for p in value.parameters()) and policy.trunk[0].weight.grad.abs().sum() > 0
    policy.zero_grad()
    out["real_value_loss"].backward()  # L_value: V's network only
    assert all(p.grad is None for p in policy.parameters()) and value.trunk[0].weight.grad.abs().sum() > 0
    # PPG's initialisation: each output unit's weights of norm `scale`, zero biases
    assert torch.allclose(torch.linalg.vector_norm(policy.actor.weight, dim=1), torch.tensor(0.1))
    assert torch.allclose(torch.linalg.vector_norm(value.trunk[0].weight, dim=(1, 2, 3)), torch.tensor(1.0))
    assert torch.allclose(torch.linalg.vector_norm(value.trunk[-2].weight, dim=1), torch.tensor(1.4))
    assert all(
        module.bias.abs().sum() == 0 for module in policy.modules() if hasattr(module, "bias") and module.bias is not None
    )


# ---- whole runs


def test_smoke_aux_buffer_model_evaluation_and_the_evaluation_tool(monkeypatch, tmp_path):
    """Two phases: every rollout's tags, the auxiliary phase's at each phase end, the buffer holding the last
    phase's rollouts whole, the model (both networks) and its seeded evaluation, also by the evaluation tool."""
    g = run_in_process(
        "ppg_procgen.py", monkeypatch, tmp_path, *TINY, "--total-timesteps", "128", "--save-model", "--eval-episodes", "1"
    )
    directory = run_dir(tmp_path)
    assert directory.name.startswith("starpilot__ppg_procgen__1__")
    tags = scalars(directory)
    for tag in ("losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl", "charts/SPS"):
        assert [step for step, _ in tags[tag]] == [32, 64, 96, 128], tag
    for tag in ("losses/aux/kl_loss", "losses/aux/aux_value_loss", "losses/aux/real_value_loss"):
        assert [step for step, _ in tags[tag]] == [64, 128], tag
    assert all(value > 0 for _, value in tags["losses/aux/kl_loss"])  # the policy moved during the phase
    assert g["aux_obs"].shape == (16, 4, 64, 64, 3) and g["aux_returns"].shape == (16, 4)
    assert torch.equal(g["aux_obs"][:, 2:], g["obs"])  # the last rollout, in the last rollout's slots
    np.testing.assert_allclose(g["aux_returns"][:, 2:].numpy(), g["returns"])
    saved = torch.load(directory / "ppg_procgen.cleanrl_model", weights_only=True)
    assert {"policy", "value"} <= set(saved) and "optimizer" not in saved
    returns = ppg_procgen.evaluate(str(directory / "ppg_procgen.cleanrl_model"), eval_episodes=2)
    assert returns.shape == (2,) and (returns >= 0).all()
    np.testing.assert_array_equal(ppg_procgen.evaluate(str(directory / "ppg_procgen.cleanrl_model"), eval_episodes=2), returns)
    result = enjoy(str(directory), "--eval-episodes", "2", cwd=tmp_path)
    assert result.stdout.startswith("ppg_procgen.py, ") and f"return {returns.mean():.2f}" in result.stdout


def test_a_nan_reward_stops_the_run_in_one_line_naming_the_env_and_step(monkeypatch, tmp_path):
    """The rollout's game rewards checked once after it: env 1's NaN at its 40th step (phase 2's first rollout, steps
    33-48 of 2 envs) ends the run in one line, exit 1, before that rollout's update."""
    from tests.test_ppo_procgen import nan_reward_at

    nan_reward_at(monkeypatch)
    flags = [*TINY, "--total-timesteps", "128"]
    code, stderr = _run_in_process_until_exit(str(ROOT / "cleanrl" / "ppg_procgen.py"), flags, tmp_path)
    assert code == 1 and stderr.strip() == (
        "ppg_procgen.py: env 1 returned a non-finite reward (nan) at global step 80 (step 7 of the rollout); "
        "last checkpoint: none"
    ), stderr
    assert [step for step, _ in scalars(run_dir(tmp_path))["losses/value_loss"]] == [32, 64]


@pytest.mark.long  # three whole runs: CI's -m long, out of the README's command (30 minutes)
def test_sigterm_mid_phase_checkpoints_the_phase_start_then_resume_continues(monkeypatch, tmp_path):
    """Three phases of 64 steps, checkpoints every phase. SIGTERM in phase 3's first rollout: the run goes back to
    the phase's start and writes it: the uninterrupted run's checkpoint at step 128, tensor for tensor (networks,
    optimiser, reward statistics, generators); --resume then plays phase 3 with new envs, logging each rollout once."""
    flags = [*TINY, "--total-timesteps", "192", "--checkpoint-interval", "64"]
    (tmp_path / "whole").mkdir()
    run_in_process("ppg_procgen.py", monkeypatch, tmp_path / "whole", *flags)
    whole = run_dir(tmp_path / "whole")

    # the cut run: its 70th vector step (140 env steps, in phase 3: steps 129-192) sends it SIGTERM
    stop_at_70 = (
        "import os, runpy, signal, sys; from cleanrl_utils import procgen; step = procgen.ProcgenVectorEnv.step; "
        "calls = []; procgen.ProcgenVectorEnv.step = lambda self, a: (calls.append(1), len(calls) == 70 and "
        "os.kill(os.getpid(), signal.SIGTERM), step(self, a))[2]; "
        f"sys.argv = ['ppg_procgen.py', *{flags!r}]; "
        f"runpy.run_path({str(ROOT / 'cleanrl' / 'ppg_procgen.py')!r}, run_name='__main__')"
    )
    (tmp_path / "cut").mkdir()
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    stopped = subprocess.run(
        [sys.executable, "-c", stop_at_70], cwd=tmp_path / "cut", capture_output=True, text=True, env=environ, timeout=600
    )
    assert stopped.returncode == 128 + signal.SIGTERM and "Traceback" not in stopped.stderr, stopped.stderr
    assert "stopped in phase 3: the checkpoint holds the state at its start, step 128" in stopped.stdout
    cut = run_dir(tmp_path / "cut")
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["step_128.pt", "step_64.pt"]
    ours, theirs = (torch.load(d / "checkpoints" / "step_128.pt", weights_only=True) for d in (cut, whole))
    assert ours["global_step"] == theirs["global_step"] == 128 and ours["counters"] == theirs["counters"] == {"iteration": 4}
    for name in ("policy", "value", "reward_normalization"):
        for key, tensor in theirs["state"][name].items():
            assert torch.equal(ours["state"][name][key], tensor), (name, key)
    for a, b in zip(ours["state"]["optimizer"]["state"].values(), theirs["state"]["optimizer"]["state"].values()):
        assert all(torch.equal(a[key], b[key]) for key in a)
    assert torch.equal(ours["rng"]["torch"], theirs["rng"]["torch"]) and ours["rng"]["python"] == theirs["rng"]["python"]

    result = run_script("ppg_procgen.py", "--resume", str(cut), cwd=tmp_path / "cut")
    assert "resumed at step 128" in result.stdout and run_dir(tmp_path / "cut") == cut
    resumed, uninterrupted = scalars(cut), scalars(whole)
    for tag in ("losses/policy_loss", "losses/aux/kl_loss", "charts/learning_rate"):
        assert [s for s, _ in resumed[tag]] == [s for s, _ in uninterrupted[tag]], tag
    assert resumed["losses/policy_loss"][:4] == uninterrupted["losses/policy_loss"][:4]  # the same run up to the cut
    assert "step_192.pt" in {p.name for p in (cut / "checkpoints").iterdir()}


FORGED_CHECKPOINTS = {  # refused after the envs are made: one line, and Procgen's C envs closed quietly at exit
    "no reward statistics": (lambda c: c["state"].pop("reward_normalization"), "it lacks ['reward_normalization']"),
    "NaN reward statistics": (
        lambda c: c["state"]["reward_normalization"]["return_rms.var"].fill_(float("nan")),
        "the normalisation's 'return_rms.var' is not finite",
    ),
    "mid-phase": (lambda c: c.update(global_step=32, counters={"iteration": 1}), "step_64.pt: not at a phase's end"),
}


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A run of one phase (64 steps) with its checkpoint."""
    cwd = tmp_path_factory.mktemp("checkpointed")
    run_script("ppg_procgen.py", *TINY, "--total-timesteps", "64", "--checkpoint-interval", "64", cwd=cwd)
    return run_dir(cwd)


@pytest.mark.parametrize("forged", list(FORGED_CHECKPOINTS))
def test_resume_refuses_a_forged_checkpoint_in_one_line(forged, checkpointed_run, tmp_path):
    import shutil

    edit, message = FORGED_CHECKPOINTS[forged]
    run = tmp_path / "runs" / checkpointed_run.name
    shutil.copytree(checkpointed_run, run)
    checkpoint = run / "checkpoints" / "step_64.pt"
    content = torch.load(checkpoint, weights_only=True)
    edit(content)
    torch.save(content, checkpoint)
    longer = ["--resume", str(checkpoint), "--total-timesteps", "128"]  # the run finished at 64: trained on, not refused
    result = run_script("ppg_procgen.py", *longer, cwd=tmp_path, check=False)  # as finished before its state is read
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr[-2000:]


BAD_INPUT = [
    (["--env-id", "starpilots"], "--env-id", "did you mean starpilot?"),
    (["--env-id", "CartPole-v1"], "--env-id", "unknown Procgen game"),
    (["--distribution-mode", "memory"], "--distribution-mode", "invalid choice 'memory'"),
    (["--num-minibatches", "3"], "--num-minibatches", "does not divide the batch of 16384"),
    (["--total-timesteps", "100000"], "--total-timesteps", "less than one phase of 524288 steps"),
    (["--num-aux-rollouts", "2049"], "--num-aux-rollouts", "exceeds the rollouts of a phase"),
    (["--beta-clone", "-1"], "--beta-clone", "must be >= 0"),
    (["--e-auxiliary", "0"], "--e-auxiliary", "must be a positive finite number"),
    (["--v-value", "10001"], "--v-value", "must be in [1, 10000]"),
    (["--num-levels", "-1"], "--num-levels", "must be in [0, 2147483647]"),
]


@pytest.mark.parametrize("flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("ppg_procgen.py", flags, flag, message, tmp_path)


@pytest.mark.learning
@pytest.mark.long
def test_learns_a_jumper_level(tmp_path):
    """Jumper, level 4 only (easy): a uniform random policy reaches the carrot in 23% of its episodes (mean return
    2.29 over 205 episodes, 16 envs x 1,000 steps, measured). Two phases of 4 rollouts of 16 envs x 64 steps, 2
    auxiliary epochs: the episodes that end in the second phase average at least 6. Measured at 19c4c48 (seed 1):
    1.67 and 2.50 over the two halves of the first phase, 7.78 and 8.52 over the second's (one of 16,384 steps);
    with --learning-rate 1e-30 (the initial policy throughout) 2.34 over the second phase's 47 episodes: it fails."""
    run_script(
        "ppg_procgen.py",
        *["--env-id", "jumper", "--num-levels", "1", "--start-level", "4", "--num-envs", "16", "--num-steps", "64"],
        *["--n-iteration", "4", "--num-minibatches", "4", "--e-auxiliary", "2", "--total-timesteps", "8192"],
        cwd=tmp_path,
        timeout=1500,
    )
    curves = scalars(run_dir(tmp_path))
    second_phase = [value for step, value in curves["charts/episodic_return"] if step > 4096]
    assert [step for step, _ in curves["losses/aux/kl_loss"]] == [4096, 8192]
    assert len(second_phase) >= 20 and np.mean(second_phase) >= 6.0, second_phase

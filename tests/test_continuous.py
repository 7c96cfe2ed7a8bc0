"""DDPG, TD3 and SAC (continuous): their pure parts against hand-computed values, smoke runs,
evaluation of saved models, and learning on Pendulum-v1 (bad input: tests/test_scripts.py; what every script keeps,
ddpg_continuous.py's and td3_continuous.py's SIGTERM then --resume included: tests/test_contracts.py).

Learning budget (marked ``learning``; CI runs them): Pendulum-v1, seed 1, 1000 random steps,
then 12k steps in all, one torch thread (minutes each on 2 cores). Pass: mean return of the last
10 episodes above -250 (random play: about -1200).
"""

import math

import numpy as np
import pytest
import torch

from cleanrl import ddpg_continuous, sac_continuous, td3_continuous
from tests.conftest import (
    assert_stops_with_one_line,
    episodic_returns,
    run_dir,
    run_in_process,
    run_script,
    scalars,
    sigterm_then_resume,
)

SCRIPTS = ["ddpg_continuous.py", "td3_continuous.py", "sac_continuous.py"]
MODULES = {"ddpg_continuous.py": ddpg_continuous, "td3_continuous.py": td3_continuous, "sac_continuous.py": sac_continuous}
SHORT = ["--env-id", "Pendulum-v1", "--total-timesteps", "600", "--learning-starts", "300", "--batch-size", "32"]
LOSS_TAGS = {
    "ddpg_continuous.py": {"losses/qf1_values", "losses/qf1_loss", "losses/actor_loss"},
    "td3_continuous.py": {
        "losses/qf1_values",
        "losses/qf2_values",
        "losses/qf1_loss",
        "losses/qf2_loss",
        "losses/qf_loss",
        "losses/actor_loss",
    },
    "sac_continuous.py": {
        "losses/qf1_values",
        "losses/qf2_values",
        "losses/qf1_loss",
        "losses/qf2_loss",
        "losses/qf_loss",
        "losses/actor_loss",
        "losses/alpha",
        "losses/alpha_loss",
    },
}
STANDARD_TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate"}


# ---- action rescaling


@pytest.mark.parametrize("module", MODULES.values())
def test_action_rescaling_maps_unit_box_onto_bounds_and_back(module):
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 10.0])
    u = np.array([[-1.0, 1.0], [0.0, 0.0], [0.5, -0.5]])
    # a = low + (u + 1) (high - low) / 2: -1 -> low, 1 -> high, 0 -> the middle
    np.testing.assert_allclose(module.scale_action(u, low, high), [[-2.0, 10.0], [0.0, 5.0], [1.0, 2.5]])
    np.testing.assert_allclose(module.unscale_action(module.scale_action(u, low, high), low, high), u)
    np.testing.assert_allclose(module.unscale_action(np.array([1.0, 7.5]), low, high), [0.5, 0.5])


# ---- the batched critics


@pytest.mark.parametrize("module", MODULES.values())
def test_critic_ensemble_is_k_independent_mlps(module):
    torch.manual_seed(0)
    qf = module.QEnsemble(obs_dim=3, action_dim=2, num_critics=2, hidden=8)
    obs, actions = torch.randn(4, 3), torch.randn(4, 2, requires_grad=True)
    q = qf(obs, actions)
    assert q.shape == (2, 4)
    for k in range(2):  # row k is critic k alone: an MLP 5-8-8-1 of the concatenated (s, a)
        assert [tuple(layer.weight.shape) for layer in qf.critics[k][::2]] == [(8, 5), (8, 8), (1, 8)]
        torch.testing.assert_close(q[k], qf.critics[k](torch.cat([obs, actions], -1)).squeeze(-1))
    assert not torch.allclose(q[0], q[1])  # independently initialised
    torch.testing.assert_close(qf(obs, actions, first=1), q[:1])  # TD3's policy loss reads critic 1 alone
    qf(obs, actions).sum().backward()
    assert actions.grad is not None and actions.grad.abs().sum() > 0


# ---- SAC


def test_squashed_gaussian_log_probability_by_hand():
    # μ = 0.5, σ = 0.5, ε = 1: x = 1, u = tanh(1) = 0.761594
    # log N(1; 0.5, 0.5) = -ε²/2 - log σ - log(2π)/2 = -0.5 + 0.693147 - 0.918939 = -0.725792
    # log(1 - tanh²(1)) = log(0.419974) = -0.867561;  log π = -0.725792 + 0.867561 = 0.141769
    # second dimension μ = 0, σ = 1, ε = 0: x = 0, u = 0, log π = -0.918939 (no Jacobian at 0)
    mean = torch.tensor([[0.5, 0.0]])
    log_std = torch.tensor([[math.log(0.5), 0.0]])
    noise = torch.tensor([[1.0, 0.0]])
    u, log_prob = sac_continuous.squashed_gaussian(mean, log_std, noise)
    torch.testing.assert_close(u, torch.tensor([[0.761594, 0.0]]))
    torch.testing.assert_close(log_prob, torch.tensor([0.141769 - 0.918939]), atol=1e-5, rtol=0)
    # the same density as torch.distributions' tanh-transformed normal, where tanh(x) is not
    # within float rounding of ±1 (the distribution needs u to invert the tanh)
    torch.manual_seed(0)
    mean, log_std, noise = torch.randn(64, 3), torch.randn(64, 3).clamp(-2, 1), torch.randn(64, 3)
    u, log_prob = sac_continuous.squashed_gaussian(mean, log_std, noise)
    x = mean + log_std.exp() * noise
    ordinary = (x.abs() < 3).all(-1)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), torch.distributions.transforms.TanhTransform()
    )
    torch.testing.assert_close(log_prob[ordinary], dist.log_prob(u).sum(-1)[ordinary], atol=1e-4, rtol=1e-4)
    assert ordinary.sum() > 40
    # stays finite where tanh(x) rounds to 1 in float32
    _, far = sac_continuous.squashed_gaussian(torch.tensor([[20.0]]), torch.tensor([[-5.0]]), torch.tensor([[0.0]]))
    assert torch.isfinite(far).all()


def test_log_std_is_bounded_between_the_limits():
    raw = torch.tensor([-100.0, 0.0, 100.0])
    torch.testing.assert_close(sac_continuous.bound_log_std(raw), torch.tensor([-5.0, -1.5, 2.0]))


def test_sac_soft_td_target_by_hand():
    # y = r + γ (1 - terminated) (min_k Q'_k(s', a') - α log π(a'|s')): min(3, 1) = 1, 1 - 0.5 (-2) = 2,
    # 1 + 0.99 * 2 = 2.98; a termination leaves the reward: 5
    rewards, terminations = torch.tensor([1.0, 5.0]), torch.tensor([0.0, 1.0])
    next_q = torch.tensor([[3.0, 7.0], [1.0, 8.0]])
    y = sac_continuous.soft_td_target(rewards, terminations, next_q, torch.tensor([-2.0, 4.0]), 0.5, 0.99)
    torch.testing.assert_close(y, torch.tensor([2.98, 5.0]))


def test_sac_policy_loss_by_hand():
    # mean over the batch of α log π - min_k Q_k: (0.5 * 1 - 2 + 0.5 * -3 - (-1)) / 2 = -1.0
    q = torch.tensor([[2.0, -1.0], [4.0, 0.0]])
    torch.testing.assert_close(sac_continuous.policy_loss(q, torch.tensor([1.0, -3.0]), 0.5), torch.tensor(-1.0))


def test_sac_temperature_loss_value_and_gradient_by_hand():
    # J = mean(-α (log π + H̄)), α = 0.5, log π = (-1, 1), H̄ = -2: -0.5 * ((-3) + (-1)) / 2 = 1.0
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    log_probs = torch.tensor([-1.0, 1.0], requires_grad=True)
    loss = sac_continuous.temperature_loss(log_alpha, log_probs, target_entropy=-2.0)
    torch.testing.assert_close(loss, torch.tensor(1.0))
    loss.backward()
    # dJ/d log α = α dJ/dα = -α mean(log π + H̄) = 1.0 > 0: the entropy (0) is above the target (-2),
    # so a descent step lowers α; log π is a constant of this loss
    torch.testing.assert_close(log_alpha.grad, torch.tensor(1.0))
    assert log_probs.grad is None
    # below the target entropy the gradient flips and α rises
    low_entropy = torch.tensor([3.0, 5.0])  # entropy estimate -4 < -2
    log_alpha.grad = None
    sac_continuous.temperature_loss(log_alpha, low_entropy, -2.0).backward()
    assert log_alpha.grad < 0


# ---- TD3 and DDPG


def test_td3_smoothed_target_actions_by_hand():
    # σ̃ ε = (0.2, -0.6, 0.04) clipped to ±0.5 -> (0.2, -0.5, 0.04); μ' + noise = (1.1, -0.7, 0.04)
    # then clipped to the bounds [-1, 1] -> (1.0, -0.7, 0.04)
    next_actions = torch.tensor([[0.9, -0.2, 0.0]])
    noise = torch.tensor([[1.0, -3.0, 0.2]])
    out = td3_continuous.smoothed_target_actions(next_actions, noise, sigma=0.2, noise_clip=0.5)
    torch.testing.assert_close(out, torch.tensor([[1.0, -0.7, 0.04]]))


def test_td3_smoothing_noise_is_zero_mean_and_per_sample():
    torch.manual_seed(0)
    next_actions = torch.zeros(20000, 2)
    out = td3_continuous.smoothed_target_actions(next_actions, torch.randn(20000, 2), 0.2, 0.5)
    assert out.mean(0).abs().max() < 0.01  # no bias added on top of μ'
    assert 0.18 < out.std(0).min() and out.std(0).max() < 0.21
    assert out.abs().max() <= 0.5


def test_td3_clipped_double_q_target_by_hand():
    # min over the twin target critics: (1, 3); y = (1 + 0.99 * 1, 2 + 0 * 3) = (1.99, 2)
    next_q = torch.tensor([[1.0, 5.0], [2.0, 3.0]])
    y = td3_continuous.clipped_double_q_target(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0]), next_q, 0.99)
    torch.testing.assert_close(y, torch.tensor([1.99, 2.0]))


def test_ddpg_target_by_hand():
    y = ddpg_continuous.ddpg_target(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0]), torch.tensor([[4.0, 9.0]]), 0.5)
    torch.testing.assert_close(y, torch.tensor([3.0, 2.0]))


@pytest.mark.parametrize("module", [td3_continuous, ddpg_continuous])
def test_exploration_noise_is_added_per_entry_and_clipped_to_the_bounds(module):
    actions = np.array([[0.95, 0.0], [-0.5, 0.2]])
    noise = np.array([[1.0, -1.0], [-10.0, 0.5]])
    np.testing.assert_allclose(module.exploration_actions(actions, noise, 0.1), [[1.0, -0.1], [-1.0, 0.25]])


# ---- whole scripts


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_logs_saves_and_evaluates(script, tmp_path):
    module = MODULES[script]
    result = run_script(script, *SHORT, "--save-model", "--eval-episodes", "1", "--capture-video", cwd=tmp_path)
    directory = run_dir(tmp_path)
    assert directory.name.startswith(f"Pendulum-v1__{script[:-3]}__1__")
    tags = set(scalars(directory))
    assert STANDARD_TAGS | LOSS_TAGS[script] | {"eval/episodic_return"} <= tags, tags
    assert "evaluation over 1 episodes" in result.stdout
    assert list((directory / "videos").glob("*.mp4")) and list((directory / "videos-eval").glob("*.mp4"))
    model = directory / f"{script[:-3]}.cleanrl_model"
    returns = module.evaluate(str(model), eval_episodes=2)
    assert returns.shape == (2,) and np.all(returns < 0)  # Pendulum's rewards are <= 0
    # the same seed evaluates to the same returns; a file of another script is refused
    np.testing.assert_array_equal(module.evaluate(str(model), eval_episodes=2), returns)
    other = sac_continuous if module is not sac_continuous else td3_continuous
    with pytest.raises(ValueError, match=f"written by {script[:-3]}.py, not by {other.__name__.split('.')[-1]}.py"):
        other.evaluate(str(model), eval_episodes=1)


@pytest.mark.parametrize("script", SCRIPTS)
def test_same_seed_same_returns(script, tmp_path):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        run_script(script, *SHORT, "--total-timesteps", "1000", "--seed", "3", cwd=tmp_path / name)
        runs.append(episodic_returns(run_dir(tmp_path / name)))
    assert len(runs[0]) == 5 and runs[0] == runs[1]


def test_sac_on_mujoco_hopper_with_async_envs(tmp_path):
    """A MuJoCo task (the mujoco extra), two envs in subprocesses, truncation by Hopper's time limit unreachable here."""
    run_script(
        "sac_continuous.py",
        "--env-id",
        "Hopper-v5",
        "--total-timesteps",
        "600",
        "--learning-starts",
        "300",
        "--batch-size",
        "32",
        "--num-envs",
        "2",
        "--env-mode",
        "async",
        "--capture-video",
        cwd=tmp_path,
    )
    directory = run_dir(tmp_path)
    tags = scalars(directory)
    assert directory.name.startswith("Hopper-v5__sac_continuous__1__")
    assert tags["charts/episodic_return"] and "losses/qf1_loss" in tags
    # rendered off-screen (EGL without a display)
    assert [v for v in (directory / "videos").glob("*.mp4") if v.stat().st_size > 1000]


def test_training_from_the_first_step(tmp_path):
    """--learning-starts 0: the first update waits for the first complete transition instead of failing."""
    run_script(
        "td3_continuous.py", *SHORT, "--learning-starts", "0", "--total-timesteps", "150", "--batch-size", "4", cwd=tmp_path
    )
    assert "losses/qf1_loss" in scalars(run_dir(tmp_path))


# ---- checkpoints: interrupted by SIGTERM, resumed with --resume

CHECKPOINTED = [
    "--env-id",
    "Pendulum-v1",
    "--num-envs",
    "2",
    "--total-timesteps",
    "1200",
    "--learning-starts",
    "200",
    "--buffer-size",
    "800",
    "--batch-size",
    "32",
    "--save-model",
    "--eval-episodes",
    "1",
]


def _tensors(value, prefix=""):
    """The tensors of a nested dict of state dicts, by dotted name."""
    if isinstance(value, torch.Tensor):
        return {prefix: value}
    return {name: tensor for key, item in value.items() for name, tensor in _tensors(item, f"{prefix}.{key}").items()}


@pytest.mark.parametrize("script", ["sac_continuous.py"])  # ddpg_continuous.py's and td3_continuous.py's: test_contracts.py
def test_sigterm_then_resume_with_the_buffer_equals_an_uninterrupted_run(script, tmp_path):
    # two envs; the replay (400 steps of each) wraps around within the 600 steps, before and after the resume
    whole, resumed = sigterm_then_resume(script, [*CHECKPOINTED, "--checkpoint-buffer"], 300, 1200, tmp_path)
    models = [torch.load(next(run_dir(tmp_path / run).glob("*.cleanrl_model")), weights_only=True) for run in ("whole", "cut")]
    expected, got = (_tensors({name: model[name] for name in model["modules"]}) for model in models)  # every network
    assert expected.keys() == got.keys() and len(expected) >= 8
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name
    assert resumed["curves"] == whole["curves"]  # TensorBoard curves continue without a fold or a repeat
    assert [step for step, _ in whole["curves"]["losses/qf1_loss"]] == [402, 602, 802, 1002]  # every 100 iterations


def test_resume_without_the_buffer_refills_it_then_updates_on(tmp_path):
    """Resumed from a checkpoint without the replay, SAC acts for --learning-starts steps, then updates again,
    with its trained optimisers and temperature (the networks load as in the exact test above)."""
    from shutil import copytree

    flags = [
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "1200",
        "--learning-starts",
        "200",
        "--buffer-size",
        "1000",
        "--batch-size",
        "32",
        "--checkpoint-interval",
        "400",
    ]
    (tmp_path / "whole").mkdir()
    run_script("sac_continuous.py", *flags, cwd=tmp_path / "whole")
    whole = run_dir(tmp_path / "whole")
    assert sorted(path.name for path in (whole / "checkpoints").iterdir()) == ["step_1200.pt", "step_800.pt"]
    # the run continued from its step-800 checkpoint, in a copy of its directory
    copy = copytree(whole, tmp_path / "resumed" / "runs" / whole.name)
    (copy / "checkpoints" / "step_1200.pt").unlink()
    result = run_script(
        "sac_continuous.py",
        "--resume",
        str(copy / "checkpoints" / "step_800.pt"),
        "--checkpoint-interval",
        "400",
        cwd=tmp_path / "resumed",
    )
    assert "resumed at step 800" in result.stdout and "refilling it until step 1000" in result.stdout

    def load(run):
        return torch.load(run / "checkpoints" / "step_1200.pt", weights_only=True)

    before = torch.load(whole / "checkpoints" / "step_800.pt", weights_only=True)
    uninterrupted, after = load(whole), load(copy)
    assert "replay_buffer" not in before["state"] and before["kind"] == "checkpoint" and before["script"] == "sac_continuous"
    # one update per step after step 200, none in steps 801-1000 of the resumed run
    updates = [checkpoint["counters"]["num_updates"] for checkpoint in (before, uninterrupted, after)]
    assert updates == [600, 1000, 800]
    # the optimisers continued (Adam's step counts), they did not start again
    for name in ("q_optimizer", "actor_optimizer", "a_optimizer"):
        assert {int(s["step"]) for s in after["state"][name]["state"].values()} == {800}, name
    curves, original = scalars(copy), scalars(whole)
    losses = [step for step, _ in curves["losses/qf1_loss"]]
    # logged every 100 steps; the step-801 values, written after the checkpoint, were dropped on resuming,
    # and nothing is logged while the replay refills
    assert losses == [301, 401, 501, 601, 701, 1001, 1101]
    assert [step for step, _ in original["losses/qf1_loss"]] == [*losses[:5], 801, 901, 1001, 1101]
    for tag, values in original.items():  # the curves up to the checkpoint are the run's, unchanged
        if tag != "charts/SPS":
            assert [v for v in curves[tag] if v[0] <= 800] == [v for v in values if v[0] <= 800], tag
    assert [step for step, _ in curves["charts/episodic_return"]] == [200, 400, 600, 800, 1000, 1200]
    # the first update after the refill starts from the trained state: α one Adam step past the checkpoint's,
    # as at step 801 of the uninterrupted run (it fell from 0.2), and the critics' values as low as trained ones
    alpha, original_alpha = dict(curves["losses/alpha"]), dict(original["losses/alpha"])
    assert original_alpha[801] < 0.15 and abs(math.log(alpha[1001] / original_alpha[801])) < 0.005
    q_values = dict(curves["losses/qf1_values"])
    assert q_values[1001] < min(q_values[301], q_values[401]) < 0, q_values
    # another script's checkpoint is refused
    (tmp_path / "other").mkdir()
    assert_stops_with_one_line(
        "td3_continuous.py",
        ["--resume", str(whole)],
        "--resume",
        "was written by sac_continuous.py, not by td3_continuous.py",
        tmp_path / "other",
    )
    assert_stops_with_one_line(
        "ddpg_continuous.py",
        ["--checkpoint-interval", "-1"],
        "--checkpoint-interval",
        "must be >= 0, got -1",
        tmp_path / "other",
    )


@pytest.mark.learning
@pytest.mark.parametrize(
    "script,steps",
    [
        pytest.param("sac_continuous.py", 12000, marks=pytest.mark.long),
        pytest.param("td3_continuous.py", 12000, marks=pytest.mark.long),
        ("ddpg_continuous.py", 12000),
    ],
)
def test_learns_pendulum(script, steps, tmp_path):
    run_script(
        script,
        "--env-id",
        "Pendulum-v1",
        "--seed",
        "1",
        "--total-timesteps",
        str(steps),
        "--learning-starts",
        "1000",
        cwd=tmp_path,
        timeout=1800,
    )
    returns = episodic_returns(run_dir(tmp_path))
    last10 = float(np.mean(returns[-10:]))
    print(f"{script}: mean return over the last 10 episodes {last10:.1f} ({len(returns)} episodes)")
    assert len(returns) == steps // 200
    assert np.mean(returns[:5]) < -700  # it starts from random play
    assert last10 > -250


# ---- the training loop, run in this process so that its variables can be inspected

LOOP = [
    "--env-id",
    "tests.envs:ContinuousCounter-v0",
    "--num-envs",
    "2",
    "--total-timesteps",
    "60",
    "--learning-starts",
    "20",
    "--batch-size",
    "8",
    "--buffer-size",
    "100",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_loop_stores_final_observations_rescales_actions_and_counts_updates(script, monkeypatch, tmp_path):
    import tests.envs  # noqa: F401  registers the env

    g = run_in_process(script, monkeypatch, tmp_path, *LOOP)
    rb, envs = g["rb"], g["envs"]
    # Episodes of 3 steps, truncated: each column holds s_0, s_1, s_2 and the real final
    # observation s_3 = [3] of the truncated episode (not the [0] of the next one), 30 steps
    # per env in 40 rows
    np.testing.assert_array_equal(rb.observations[:40, 0, 0], np.tile([0.0, 1.0, 2.0, 3.0], 10))
    assert not rb.terminations[:40].any() and rb.truncations[:40].sum() == 20
    # the env received a = low + (u + 1)(high - low)/2 of the stored u in [-1, 1], inside [2, 6]
    for e in range(2):
        received = np.asarray(envs.envs[e].unwrapped.received)
        assert len(received) == 30 and received.min() >= 2.0 and received.max() <= 6.0
        stored = np.array([rb.actions[row, e, 0] for row in range(40) if row % 4 != 3])  # skip final-obs rows
        np.testing.assert_allclose(received, 2.0 + (stored + 1.0) * 2.0, rtol=1e-5)
    # both envs see the same observation at every step: after the random warm-up, their
    # actions still differ, since the exploration noise (or SAC's sample) is drawn per env
    after = slice(10, 30)
    assert np.all(envs.envs[0].unwrapped.received[after] != np.asarray(envs.envs[1].unwrapped.received[after]))
    # one critic update per vector step after the warm-up: 60/2 - 20/2 = 20; policy updates:
    # DDPG and TD3 one per --policy-frequency (2) critic updates, SAC as many as critic updates
    num_updates = g["num_updates"]
    assert num_updates == 20

    def steps(optimizer):
        return {int(state["step"]) for state in optimizer.state.values()}

    assert steps(g["q_optimizer"]) == {20}
    assert steps(g["actor_optimizer"]) == ({20} if script == "sac_continuous.py" else {10})


@pytest.mark.parametrize("script", SCRIPTS)
def test_loop_moves_target_networks_towards_the_online_ones(script, monkeypatch, tmp_path):
    """θ' ← τ θ + (1 - τ) θ': after more updates the targets have moved, towards the online weights."""
    import tests.envs  # noqa: F401

    (tmp_path / "short").mkdir()
    (tmp_path / "long").mkdir()
    short = run_in_process(script, monkeypatch, tmp_path / "short", *LOOP, "--total-timesteps", "24", "--tau", "0.5")
    long = run_in_process(script, monkeypatch, tmp_path / "long", *LOOP, "--total-timesteps", "60", "--tau", "0.5")
    for g in (short, long):
        online, target = g["qf"].critics[0][2].weight, g["qf_target"].critics[0][2].weight
        assert not torch.equal(online, target)
    # the same seed, so the same initial weights: the targets follow training (they are not
    # frozen at their initial values, as they would be if the update ran the other way)
    assert not torch.equal(long["qf_target"].critics[0][2].weight, short["qf_target"].critics[0][2].weight)

"""RPO (cleanrl/rpo_continuous.py): the perturbation's range and distribution, actions scored under the perturbed
mean in the update and not when acting, --rpo-alpha 0 equal to ppo_continuous.py to the bit, a smoke run on
Hopper-v5 with --save-model, its own bad input, and learning on InvertedPendulum-v5. What every script keeps (a short
run, bad input, SIGTERM then --resume: exact only if the perturbations' generator is in the checkpoint, another
script's checkpoint) is in tests/test_contracts.py.

What rpo_continuous.py shares with ppo_continuous.py (the Gaussian's log-density and entropy, the normalisation
on the vector env, GAE at truncations, make_env) is the same source, checked here, and tested in
tests/test_ppo_continuous.py; its dm_control runs are in tests/test_dm_control.py.

Learning budget (marked ``learning``): see :func:`test_learns_inverted_pendulum_and_evaluates_the_same`.
"""

import inspect
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl import ppo_continuous, rpo_continuous
from tests import conftest
from tests.conftest import assert_stops_with_one_line, episodic_returns, run_dir, run_script, scalars

TAGS = {
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "charts/episodic_return",
    "charts/SPS",
    "charts/learning_rate",
    "charts/action_std",
    "eval/episodic_return",
}


# ---- the perturbation


def test_perturbation_is_uniform_on_minus_alpha_to_alpha_for_every_entry():
    mean = torch.full((200_000, 2), 3.0)
    generator = torch.Generator().manual_seed(0)
    z = rpo_continuous.perturb_mean(mean, 0.5, generator) - 3.0
    assert z.shape == (200_000, 2) and z.min() >= -0.5 and z.max() <= 0.5
    assert z.min() < -0.499 and z.max() > 0.499  # it reaches the bounds
    # U(-α, α): mean 0, variance α²/3 = 1/12; standard errors .29 / sqrt(2e5) = .0006 and about .0002
    torch.testing.assert_close(z.mean(0), torch.zeros(2), atol=0.003, rtol=0)
    torch.testing.assert_close(z.var(0), torch.full((2,), 1 / 12), atol=0.001, rtol=0)
    # flat: each tenth of [-α, α] holds a tenth of the draws (standard error .0007)
    counts = torch.histc(z.flatten(), bins=10, min=-0.5, max=0.5) / z.numel()
    torch.testing.assert_close(counts, torch.full((10,), 0.1), atol=0.003, rtol=0)
    # independent entries: the two columns, and a row and the next, uncorrelated
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 0.01 and abs(np.corrcoef(z[:-1, 0], z[1:, 0])[0, 1]) < 0.01
    # drawn from the generator given: the same state, the same draws
    again = rpo_continuous.perturb_mean(mean, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(again, z + 3.0)


def test_perturbation_moves_only_the_values_and_alpha_zero_moves_nothing():
    mean = torch.randn(64, 3, requires_grad=True)
    assert torch.equal(rpo_continuous.perturb_mean(mean, 0.0, torch.Generator().manual_seed(1)), mean)
    perturbed = rpo_continuous.perturb_mean(mean, 0.3, torch.Generator().manual_seed(1))
    perturbed.sum().backward()
    assert torch.equal(mean.grad, torch.ones(64, 3))  # z is a constant: ∂(μ + z)/∂μ = 1


def spaces(obs_dim, action_dim):
    """What an Agent reads of a vector env: its single observation and action spaces."""
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1.0, 1.0, (obs_dim,)),
        single_action_space=gym.spaces.Box(-1.0, 1.0, (action_dim,)),
    )


def test_scoring_uses_the_perturbed_mean_and_acting_does_not():
    torch.manual_seed(0)
    agent = rpo_continuous.Agent(spaces(4, 2))
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[-0.5, 0.3]]))
    ppo_agent = ppo_continuous.Agent(spaces(4, 2))
    ppo_agent.load_state_dict(agent.state_dict())
    x, actions = torch.randn(32, 4), torch.randn(32, 2)
    with torch.no_grad():
        mean = agent.actor_mean(x)
        # α = 0: PPO's log π(a|s), to the bit
        _, log_prob, entropy, value = agent.get_action_and_value(x, actions, 0.0, torch.Generator().manual_seed(2))
        _, ppo_log_prob, ppo_entropy, ppo_value = ppo_agent.get_action_and_value(x, actions)
        assert torch.equal(log_prob, ppo_log_prob) and torch.equal(entropy, ppo_entropy) and torch.equal(value, ppo_value)
        # α = 0.5: the log-density under N(μ + z, σ²), z the generator's draws
        _, perturbed, perturbed_entropy, _ = agent.get_action_and_value(x, actions, 0.5, torch.Generator().manual_seed(2))
        z = torch.empty(32, 2).uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(2))
        torch.testing.assert_close(perturbed, ppo_continuous.gaussian_log_prob(mean + z, agent.actor_logstd, actions))
        assert (perturbed - log_prob).abs().min() > 0 and torch.equal(perturbed_entropy, entropy)  # σ unchanged
        # acting: a ~ N(μ, σ²) scored under the Gaussian itself, whatever α; the perturbations' generator untouched
        generator = torch.Generator().manual_seed(3)
        untouched = generator.get_state()
        torch.manual_seed(4)
        action, acted_log_prob, _, _ = agent.get_action_and_value(x, None, 0.5, generator)
        torch.manual_seed(4)
        ppo_action, ppo_acted_log_prob, _, _ = ppo_agent.get_action_and_value(x)
        assert torch.equal(action, ppo_action) and torch.equal(acted_log_prob, ppo_acted_log_prob)
        assert torch.equal(generator.get_state(), untouched)


def test_shares_ppo_continuous_code_where_rpo_does_not_change_it():
    """These parts are ppo_continuous.py's source, character for character, and tested in test_ppo_continuous.py."""
    shared = ("make_env", "TimedSteps", "NormalizeObservation", "Normalization", "layer_init", "gaussian_log_prob")
    shared += ("gaussian_entropy",)
    for name in (*shared, "compute_gae"):
        assert inspect.getsource(getattr(rpo_continuous, name)) == inspect.getsource(getattr(ppo_continuous, name)), name
    assert inspect.getsource(rpo_continuous.Agent.__init__) == inspect.getsource(ppo_continuous.Agent.__init__)


# ---- the training loop, in this process so that its variables can be inspected


def one_rollout(script, monkeypatch, cwd, *flags):
    """One rollout of 2 Pendulum-v1 envs x 64 steps and its update (2 epochs of 2 minibatches of 64); the globals."""
    cwd.mkdir()
    common = ["--env-id", "Pendulum-v1", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2"]
    common += ["--update-epochs", "2", "--total-timesteps", "128"]
    return conftest.run_in_process(script, monkeypatch, cwd, *common, *flags)


def test_alpha_zero_trains_as_ppo_continuous_and_the_update_alone_is_perturbed(monkeypatch, tmp_path):
    ppo = one_rollout("ppo_continuous.py", monkeypatch, tmp_path / "ppo")
    zero = one_rollout("rpo_continuous.py", monkeypatch, tmp_path / "zero", "--rpo-alpha", "0")
    half = one_rollout("rpo_continuous.py", monkeypatch, tmp_path / "half", "--rpo-alpha", "0.5")
    # the rollout (acting) is PPO's whatever α: the same observations, actions, log-probabilities and values
    for name in ("obs", "actions", "logprobs", "values"):
        assert torch.equal(zero[name], ppo[name]) and torch.equal(half[name], ppo[name]), name
    # α = 0: the update too, to the bit; α = 0.5: other weights
    trained = ppo["agent"].state_dict()
    assert all(torch.equal(zero["agent"].state_dict()[k], v) for k, v in trained.items())
    assert not torch.equal(half["agent"].state_dict()["actor_mean.4.weight"], trained["actor_mean.4.weight"])
    # one draw of z [minibatch, A] for each of the 2 x 2 minibatch updates, from the perturbations' own generator
    generator = torch.Generator().manual_seed(int(np.random.SeedSequence([1, 1]).generate_state(1)[0]))
    for _ in range(4):
        torch.empty(64, 1).uniform_(-0.5, 0.5, generator=generator)
    assert torch.equal(half["perturbation_rng"].get_state(), generator.get_state())


# ---- whole script


def test_smoke_hopper_saves_and_evaluates(tmp_path):
    """Hopper-v5, 2 rollouts of 256 steps, --save-model: the tags, the model, its seeded evaluation."""
    flags = ["--env-id", "Hopper-v5", "--num-steps", "256", "--num-minibatches", "4", "--total-timesteps", "512"]
    result = run_script("rpo_continuous.py", *flags, "--save-model", "--eval-episodes", "2", cwd=tmp_path)
    directory = run_dir(tmp_path)
    assert directory.name.startswith("Hopper-v5__rpo_continuous__1__")
    assert TAGS <= set(scalars(directory)), set(scalars(directory))
    assert "evaluation over 2 episodes" in result.stdout
    model = directory / "rpo_continuous.cleanrl_model"
    content = torch.load(model, weights_only=True)
    assert content["obs_norm"]["obs_rms.mean"].shape == (11,) and content["args"]["rpo_alpha"] == 0.5
    returns = rpo_continuous.evaluate(str(model), eval_episodes=2)
    assert returns.shape == (2,)
    np.testing.assert_array_equal(rpo_continuous.evaluate(str(model), eval_episodes=2), returns)  # seeded
    with pytest.raises(ValueError, match="written by rpo_continuous.py, not by ppo_continuous.py"):
        ppo_continuous.evaluate(str(model), eval_episodes=1)


BAD_INPUT = [
    (["--rpo-alpha", "-0.1"], "--rpo-alpha", "must be in [0, 1e6], got -0.1"),
    (["--rpo-alpha", "2e6"], "--rpo-alpha", "must be in [0, 1e6], got 2000000.0"),
    (["--rpo-alpha", "nan"], "--rpo-alpha", "must be finite, got nan"),  # check_run_args: every float flag finite
    (["--env-id", "CartPole-v1"], "--env-id", "supports Box only"),
    (["--num-minibatches", "3"], "--num-minibatches", "does not divide the batch of 2048"),
]


@pytest.mark.parametrize("flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("rpo_continuous.py", flags, flag, message, tmp_path)


@pytest.mark.learning
@pytest.mark.long
def test_learns_inverted_pendulum_and_evaluates_the_same(tmp_path):
    """InvertedPendulum-v5 (return 1000: balanced for the whole episode), seed 1, --rpo-alpha 0.5 (the default),
    102,400 steps (50 rollouts of 2048), ppo_continuous's test's budget and thresholds. The saved agent, evaluated
    with its frozen statistics and the Gaussian's mean, must score what it scored in training.

    Measured (seeds 1 and 2, this budget): the first 20 episodes average 6.0 and 7.3; the last-20 mean return
    first reached 950 at 37.3k and 39.0k steps, stayed at or above 952.2 and 961.2 from there, and ended at
    1000.0; evaluation 1000.0 ± 0.0 over 10 episodes for both. 159 s and 152 s of CPU (6:47 and 6:15 wall on
    the 2-core machine shared with other jobs, load average near 6): marked long.
    """
    run_script(
        "rpo_continuous.py",
        "--env-id",
        "InvertedPendulum-v5",
        "--seed",
        "1",
        "--total-timesteps",
        "102400",
        "--save-model",
        cwd=tmp_path,
        timeout=1200,
    )
    directory = run_dir(tmp_path)
    returns = episodic_returns(directory)
    last20 = float(np.mean(returns[-20:]))
    evaluation = scalars(directory)["eval/episodic_return"][0][1]
    print(f"rpo_continuous InvertedPendulum-v5: last-20 mean return {last20:.1f}, evaluation {evaluation:.1f}")
    assert np.mean(returns[:20]) < 100  # it starts from random play
    assert last20 >= 950
    assert evaluation >= 950

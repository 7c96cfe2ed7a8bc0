"""A2C (cleanrl/a2c.py): returns and loss against hand-computed values, the training loop on a
tiny time-limited env, a run with async envs (its logging interval, seeded evaluation), its own bad input, and
learning on CartPole-v1. What every script keeps (a short run, bad input, SIGTERM then --resume, another
script's checkpoint) is in tests/test_contracts.py.

Learning budget (marked ``learning``): CartPole-v1, seed 1, 250k steps at the defaults (8 envs
x 5 steps); pass: last-20 mean return and evaluation (10 episodes) >= 400. Measured: the test
took 102 s (40 s of CPU) on the 2-core machine while other jobs kept its load average near 6;
it ended at 500.0 / 500.0. Seeds 1 / 2 / 3 run to 300k steps: the last-20 mean return was
500.0 at 200k, 250k and 300k steps for all three (seed 1 dipped to 144 at 150k and had
recovered by 200k). Those runs sampled actions from a numpy copy of the actor; since the rollout
acts through the agent (torch sampling, another random stream) seed 1 ends at 500.0 / 500.0 too.
"""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl import a2c, ppo
from tests import conftest
from tests.conftest import (
    assert_stops_with_one_line,
    episodic_returns,
    returns_by_env_mode,
    run_dir,
    run_script,
    scalars,
)

SHORT = ["--total-timesteps", "2000"]
TAGS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/explained_variance",
    "eval/episodic_return",
    "eval/episodic_return_std",
}


# ---- pure functions


def test_n_step_returns_with_a_truncation_and_a_termination_by_hand():
    # λ = 1: R_t = r_t + γ R_{t+1}; env 0 is truncated at t = 1 (V(final obs) = 2.0) and
    # terminates at t = 3; env 1 runs through, bootstrapping from V(s_5) = 1.0
    gamma = 0.9
    rewards = np.ones((5, 2), dtype=np.float32)
    values = np.array([[0.5, 0.0], [0.6, 0.0], [0.7, 0.0], [0.8, 0.0], [0.9, 0.0]], dtype=np.float32)
    last_values = np.array([0.4, 1.0], dtype=np.float32)
    final_values = np.zeros((5, 2), dtype=np.float32)
    final_values[1, 0] = 2.0
    final_values[3, 0] = 7.0  # a terminated episode's final value is never read
    terminations = np.zeros((5, 2), dtype=np.float32)
    terminations[3, 0] = 1.0
    dones = terminations.copy()
    dones[1, 0] = 1.0
    advantages, returns = a2c.compute_gae(rewards, values, last_values, final_values, terminations, dones, gamma, 1.0)
    # env 0: R_4 = 1 + .9 * .4 = 1.36; R_3 = 1 (terminated); R_2 = 1 + .9 * 1 = 1.9;
    # R_1 = 1 + .9 * 2.0 = 2.8 (the final observation's value, not V(s_2)); R_0 = 1 + .9 * 2.8 = 3.52
    np.testing.assert_allclose(returns[:, 0], [3.52, 2.8, 1.9, 1.0, 1.36], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 0], [3.02, 2.2, 1.2, 0.2, 0.46], rtol=1e-5)
    # env 1: 1.9, 2.71, 3.439, 4.0951, 4.68559 from the end
    np.testing.assert_allclose(returns[:, 1], [4.68559, 4.0951, 3.439, 2.71, 1.9], rtol=1e-6)


def test_gae_is_ppo_gae():
    """The copy in a2c.py computes what ppo.py's (tested in test_truncation.py) does, for any λ."""
    rng = np.random.default_rng(0)
    T, N = 7, 3
    rewards, values, final_values = (rng.normal(size=(T, N)).astype(np.float32) for _ in range(3))
    last_values = rng.normal(size=N).astype(np.float32)
    terminations = (rng.random((T, N)) < 0.15).astype(np.float32)
    dones = np.maximum(terminations, (rng.random((T, N)) < 0.15).astype(np.float32))
    assert terminations.any() and (dones > terminations).any()
    for lam in (0.0, 0.95, 1.0):
        ours = a2c.compute_gae(rewards, values, last_values, final_values, terminations, dones, 0.99, lam)
        reference = ppo.compute_gae(rewards, values, last_values, final_values, terminations, dones, 0.99, lam)
        for x, y in zip(ours, reference):
            np.testing.assert_array_equal(x, y)


def test_a2c_loss_value_and_gradients_by_hand():
    log_probs = torch.tensor([-0.5, -1.0], requires_grad=True)
    entropy = torch.tensor([0.6, 0.4], requires_grad=True)
    values = torch.tensor([1.0, 2.0], requires_grad=True)
    advantages = torch.tensor([2.0, 1.0], requires_grad=True)
    returns = torch.tensor([3.0, 1.0], requires_grad=True)
    loss, policy_loss, value_loss, entropy_loss = a2c.a2c_loss(
        log_probs, entropy, values, advantages, returns, ent_coef=0.1, vf_coef=0.5
    )
    # policy: -mean(2 * -.5, 1 * -1) = 1.0; value: mean((3 - 1)², (1 - 2)²) = 2.5 (no ½);
    # entropy 0.5; loss = 1.0 - .1 * .5 + .5 * 2.5 = 2.2
    torch.testing.assert_close(policy_loss, torch.tensor(1.0))
    torch.testing.assert_close(value_loss, torch.tensor(2.5))
    torch.testing.assert_close(entropy_loss, torch.tensor(0.5))
    torch.testing.assert_close(loss, torch.tensor(2.2))
    loss.backward()
    # d/d log π = -A / B; d/dV = c_v 2 (V - R) / B; d/dH = -β / B; advantages and returns are constants
    torch.testing.assert_close(log_probs.grad, torch.tensor([-1.0, -0.5]))
    torch.testing.assert_close(values.grad, torch.tensor([-1.0, 0.5]))
    torch.testing.assert_close(entropy.grad, torch.tensor([-0.05, -0.05]))
    assert advantages.grad is None and returns.grad is None


def spaces(obs_dim, num_actions):
    """What an Agent reads of a vector env: its single observation and action spaces."""
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1.0, 1.0, (obs_dim,)), single_action_space=gym.spaces.Discrete(num_actions)
    )


def test_log_prob_and_entropy_of_the_categorical_policy():
    torch.manual_seed(0)
    agent = a2c.Agent(spaces(3, 2))
    with torch.no_grad():  # logits (0, log 3): π = (1/4, 3/4)
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, np.log(3.0)]))
    log_prob, entropy = agent.get_log_prob_and_entropy(torch.randn(2, 3), torch.tensor([0, 1]))
    torch.testing.assert_close(log_prob, torch.log(torch.tensor([0.25, 0.75])))
    h = -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))  # 0.562335 nats
    torch.testing.assert_close(entropy, torch.tensor([h, h], dtype=torch.float32))


# ---- the training loop, in this process so that its variables can be inspected


def run_in_process(monkeypatch, cwd, *flags):
    """Run ``cleanrl/a2c.py`` as ``__main__`` in this process; return its global variables."""
    return conftest.run_in_process("a2c.py", monkeypatch, cwd, *flags)


def test_loop_bootstraps_truncations_from_the_real_final_observation(monkeypatch, tmp_path):
    """Counter-v0: observation [t], time limit 3, action 1 terminates. A learning rate of 1e-12
    keeps the policy near uniform (episodes end by both termination and truncation) and the
    weights after training equal to those of the last rollout to float precision."""
    import tests.envs  # noqa: F401  registers the env

    g = run_in_process(
        monkeypatch,
        tmp_path,
        "--env-id",
        "tests.envs:Counter-v0",
        "--num-envs",
        "2",
        "--num-steps",
        "6",
        "--total-timesteps",
        "120",
        "--gamma",
        "0.5",
        "--learning-rate",
        "1e-12",
    )
    truncated, terminations, dones = g["truncated"], g["terminations"].astype(bool), g["dones"]
    assert truncated.any() and terminations.any()  # both kinds of episode end in the last rollout
    # the stored final observation of a truncated episode is the real one, [3] (not the reset [0])
    np.testing.assert_array_equal(g["final_obs"][truncated][:, 0], 3.0)
    np.testing.assert_array_equal(dones, np.maximum(terminations, truncated))
    # the bootstrap values: V([3]) at truncations, V(observations after the rollout) at the end
    agent = g["agent"]
    with torch.no_grad():
        v = agent.get_value(torch.tensor([[0.0], [1.0], [2.0], [3.0]])).numpy()
    assert abs(v[3] - v[0]) > 1e-3  # V([3]) and V([0]) tell the two apart
    np.testing.assert_allclose(g["final_values"][truncated], v[3], atol=1e-5)
    assert np.all(g["final_values"][~truncated] == 0)
    np.testing.assert_allclose(g["last_values"], v[g["next_obs"][:, 0].astype(int)], atol=1e-5)
    # the returns of the last rollout, by hand: R = r + γ R from V(s_T); V([3]) after a
    # truncation, 0 after a termination
    values, last_values = g["values"], g["last_values"]
    T, N = 6, 2
    expected = np.zeros((T, N))
    for n in range(N):
        R = last_values[n]
        for t in reversed(range(T)):
            if terminations[t, n]:
                R = 0.0
            elif truncated[t, n]:
                R = v[3]
            R = 1.0 + 0.5 * R
            expected[t, n] = R
    np.testing.assert_allclose(g["returns"], expected, rtol=1e-5)
    np.testing.assert_allclose(values, v[g["obs"][..., 0].long().numpy()], atol=1e-5)
    # one RMSprop step per rollout: 120 steps / (2 envs x 6 steps) = 10 updates
    assert {int(state["step"]) for state in g["optimizer"].state.values()} == {10}


def test_agent_samples_actions_from_its_softmax():
    """get_action, which acts in the rollouts: actions ~ softmax(actor(x))."""
    agent = a2c.Agent(spaces(4, 2))
    torch.manual_seed(0)
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 1.0]))  # logits [0, 1] for every observation
        action = agent.get_action(torch.zeros((60000, 4)))
    probs = torch.softmax(torch.tensor([0.0, 1.0]), -1).double()  # [0.269, 0.731]
    frequencies = torch.bincount(action, minlength=2).double() / len(action)
    torch.testing.assert_close(frequencies, probs, atol=0.006, rtol=0)  # > 3 standard errors


# ---- whole script


def test_smoke_async_envs_logs_saves_and_evaluates(tmp_path):
    result = run_script(
        "a2c.py", *SHORT, "--env-mode", "async", "--save-model", "--eval-episodes", "2", "--log-interval", "10", cwd=tmp_path
    )
    directory = run_dir(tmp_path)
    assert directory.name.startswith("CartPole-v1__a2c__1__")
    tags = scalars(directory)
    assert TAGS <= set(tags), set(tags)
    # 2000 steps / 40 per update = 50 updates, losses written every 10th
    assert [step for step, _ in tags["losses/value_loss"]] == [400, 800, 1200, 1600, 2000]
    assert "evaluation over 2 episodes" in result.stdout
    model = directory / "a2c.cleanrl_model"
    returns = a2c.evaluate(str(model), eval_episodes=3)
    assert returns.shape == (3,) and np.all(returns >= 1)
    np.testing.assert_array_equal(a2c.evaluate(str(model), eval_episodes=3), returns)  # seeded
    sampled = a2c.evaluate(str(model), eval_episodes=2, deterministic=False, seed=5)
    np.testing.assert_array_equal(a2c.evaluate(str(model), eval_episodes=2, deterministic=False, seed=5), sampled)
    with pytest.raises(ValueError, match="written by a2c.py, not by ppo.py"):
        ppo.evaluate(str(model), eval_episodes=1)


def test_async_envs_give_the_same_returns_as_sync_ones(tmp_path):
    """Same seed, same numbers: serial and subprocess environments give identical runs."""
    returns = returns_by_env_mode("a2c.py", *SHORT, "--num-envs", "2", "--seed", "3", cwd=tmp_path)
    assert len(returns["sync"]) > 10 and returns["sync"] == returns["async"]


BAD_INPUT = [
    (["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
    (["--env-id", "tests.envs:Image-v0"], "--env-id", "1-dimensional observations only"),
    (["--num-steps", "0"], "--num-steps", "must be a positive"),
    (["--checkpoint-interval", "-1"], "--checkpoint-interval", "must be >= 0"),
    (["--total-timesteps", "20"], "--total-timesteps", "less than one rollout of 40 steps"),
    (["--gae-lambda", "1.5"], "--gae-lambda", "must be in [0, 1]"),
    (["--rms-prop-alpha", "1"], "--rms-prop-alpha", "must be in [0, 1)"),
    (["--num-envs", "1", "--num-steps", "1", "--norm-adv"], "--norm-adv", "too small"),
]


@pytest.mark.parametrize("flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("a2c.py", flags, flag, message, tmp_path)


@pytest.mark.learning
def test_learns_cartpole(tmp_path):
    run_script("a2c.py", "--seed", "1", "--total-timesteps", "250000", "--save-model", cwd=tmp_path, timeout=1200)
    directory = run_dir(tmp_path)
    returns = episodic_returns(directory)
    last20 = float(np.mean(returns[-20:]))
    evaluation = scalars(directory)["eval/episodic_return"][0][1]
    print(f"a2c CartPole-v1: last-20 mean return {last20:.1f}, evaluation {evaluation:.1f}")
    assert np.mean(returns[:20]) < 50  # it starts from random play
    assert last20 >= 400
    assert evaluation >= 400

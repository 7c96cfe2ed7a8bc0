"""PQN (cleanrl/pqn.py): Q(λ) returns against hand-computed values, the loop's bootstrap at
truncations on a tiny time-limited env, a run with video and tracking (tags, schedules, model, evaluation), async
envs against sync ones, its own bad input, and learning on CartPole-v1. What every script keeps (a short run, bad
input, SIGTERM then --resume, another script's checkpoint) is in tests/test_contracts.py.

Learning budget (marked ``learning``): CartPole-v1, seed 1, CleanRL's defaults and its 500k
steps; pass: the mean return of the last 20 training episodes >= 475, and the greedy evaluation
(10 episodes) >= 475. Measured: the test took 121 s (about 65 s of CPU) on the 2-core machine
while other jobs kept its load average near 5; it ended at 500.0 / 500.0. Seeds 2 and 3 at the
same budget: 500.0 / 500.0 each; seed 4: last-20 mean 500.0. All four dipped between 200k and
350k steps (last-20 means down to 178-378) and were at 500.0 from 400k steps on.
"""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from cleanrl import dqn, pqn
from tests import conftest
from tests.conftest import (
    assert_stops_with_one_line,
    episodic_returns,
    returns_by_env_mode,
    run_dir,
    run_script,
    scalars,
)

SHORT = ["--total-timesteps", "2048"]  # 4 rollouts of 4 envs x 128 steps


# ---- q_lambda_returns, by hand


def q_lambda(rewards, terminations, truncations, next_values, gamma, lam):
    """pqn.q_lambda_returns of [T, E] lists, as an array."""
    tensors = (torch.tensor(x, dtype=torch.float32) for x in (rewards, terminations, truncations, next_values))
    returns = pqn.q_lambda_returns(*tensors, gamma, lam)
    assert returns.dtype == torch.float32 and returns.shape == (len(rewards), len(rewards[0]))
    return returns.numpy()


# T = 4 steps of 3 envs, reward 1 everywhere, γ = 0.5. Env 0 terminates at t = 1, env 1 is
# truncated at t = 1 (next_values[1] = 9 is the value of its real final observation), env 2 is
# both terminated and truncated at t = 1 (a termination: no bootstrap). next_values [2, 9, 3, 6]
# in every env; t = 3 ends the rollout, bootstrapping from 6.
ONES = [[1.0] * 3] * 4
ENDED_AT_1 = [[0.0] * 3, [1.0] * 3, [0.0] * 3, [0.0] * 3]
TERMINATIONS = [[0.0] * 3, [1.0, 0.0, 1.0], [0.0] * 3, [0.0] * 3]
TRUNCATIONS = [[0.0] * 3, [0.0, 1.0, 1.0], [0.0] * 3, [0.0] * 3]
NEXT_VALUES = [[2.0] * 3, [9.0] * 3, [3.0] * 3, [6.0] * 3]


def test_q_lambda_returns_with_a_termination_and_a_truncation_inside_the_rollout():
    returns = q_lambda(ONES, TERMINATIONS, TRUNCATIONS, NEXT_VALUES, gamma=0.5, lam=0.5)
    # G_3 = 1 + .5 * 6 = 4 (end of the rollout); G_2 = 1 + .5 (.5 * 3 + .5 * 4) = 2.75
    # env 0: G_1 = 1 (terminated; 9 is not read); G_0 = 1 + .5 (.5 * 2 + .5 * 1) = 1.75
    # env 1: G_1 = 1 + .5 * 9 = 5.5 (truncated: the real final observation's value, no mixing with G_2);
    #        G_0 = 1 + .5 (.5 * 2 + .5 * 5.5) = 2.875
    # env 2: as env 0
    np.testing.assert_allclose(returns[:, 0], [1.75, 1.0, 2.75, 4.0], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 1], [2.875, 5.5, 2.75, 4.0], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 2], returns[:, 0], rtol=0)


def test_q_lambda_returns_at_lambda_0_are_one_step_q_learning_targets():
    returns = q_lambda(ONES, TERMINATIONS, TRUNCATIONS, NEXT_VALUES, gamma=0.5, lam=0.0)
    # G_t = r_t + γ (1 - term_t) next_values[t] at every step
    np.testing.assert_allclose(returns[:, 0], [2.0, 1.0, 2.5, 4.0], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 1], [2.0, 5.5, 2.5, 4.0], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 2], [2.0, 1.0, 2.5, 4.0], rtol=1e-6)


def test_q_lambda_returns_at_lambda_1_are_monte_carlo_returns_to_the_episode_end():
    returns = q_lambda(ONES, TERMINATIONS, TRUNCATIONS, NEXT_VALUES, gamma=0.5, lam=1.0)
    # G_t = r_t + γ G_{t+1} within an episode, next_values read only where it ends: G_3 = 4, G_2 = 3
    # env 0: G_1 = 1, G_0 = 1.5; env 1: G_1 = 5.5, G_0 = 3.75
    np.testing.assert_allclose(returns[:, 0], [1.5, 1.0, 3.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 1], [3.75, 5.5, 3.0, 4.0], rtol=1e-6)
    # γ = 1, no episode end: the sum of the rewards and the value after the rollout
    returns = q_lambda([[1.0], [2.0], [3.0]], [[0.0]] * 3, [[0.0]] * 3, [[50.0], [60.0], [10.0]], gamma=1.0, lam=1.0)
    np.testing.assert_allclose(returns[:, 0], [16.0, 15.0, 13.0], rtol=1e-6)


def test_q_lambda_returns_of_a_one_step_rollout_bootstrap_from_its_next_values():
    # T = 1: G_0 = r_0 + γ (1 - term_0) next_values[0], whatever λ; envs: running, terminated, truncated
    for lam in (0.0, 0.65, 1.0):
        returns = q_lambda([[1.0, 2.0, 3.0]], [[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]], [[10.0, 20.0, 30.0]], 0.9, lam)
        np.testing.assert_allclose(returns, [[10.0, 2.0, 30.0]], rtol=1e-6)


def test_q_lambda_returns_equal_the_forward_view_lambda_return():
    """The backward recursion equals the forward view (Sutton & Barto 2018, eq. 12.3, truncated at the
    episode's or the rollout's end): G^λ_t = (1-λ) Σ_{n<N} λ^{n-1} G^(n)_t + λ^{N-1} G^(N)_t, with the
    n-step returns G^(n)_t bootstrapping from next_values[t+n-1]."""
    rng = np.random.default_rng(0)
    T, E, gamma, lam = 9, 4, 0.9, 0.65
    rewards, next_values = rng.normal(size=(T, E)), rng.normal(size=(T, E))
    terminations = (rng.random((T, E)) < 0.15).astype(np.float64)
    truncations = (rng.random((T, E)) < 0.15).astype(np.float64)
    assert terminations.any() and truncations.any()
    expected = np.zeros((T, E))
    for e in range(E):
        for t in range(T):
            ended = [k for k in range(t, T) if terminations[k, e] or truncations[k, e]]
            last = ended[0] if ended else T - 1  # the last step the return may reach
            n_step = []
            for n in range(1, last - t + 2):
                k = t + n - 1
                g = sum(gamma**j * rewards[t + j, e] for j in range(n))
                n_step.append(g + gamma**n * (1.0 - terminations[k, e]) * next_values[k, e])
            N = len(n_step)
            expected[t, e] = (1 - lam) * sum(lam ** (n - 1) * n_step[n - 1] for n in range(1, N)) + lam ** (N - 1) * n_step[-1]
    returns = q_lambda(rewards, terminations, truncations, next_values, gamma, lam)
    np.testing.assert_allclose(returns, expected, rtol=1e-5, atol=1e-5)


# ---- the network and the training loop


def spaces(obs_dim, num_actions):
    """What a QNetwork reads of a vector env: its single observation and action spaces."""
    return SimpleNamespace(
        single_observation_space=gym.spaces.Box(-1.0, 1.0, (obs_dim,)), single_action_space=gym.spaces.Discrete(num_actions)
    )


def test_q_network_normalises_each_hidden_layer():
    q_network = pqn.QNetwork(spaces(4, 3))
    layers = [type(layer) for layer in q_network.network]
    assert layers == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear]
    assert q_network(torch.randn(5, 4)).shape == (5, 3)


def test_loop_bootstraps_truncations_from_the_real_final_observation(monkeypatch, tmp_path):
    """Counter-v0: observation [t], time limit 3, action 1 terminates. ε = 1 throughout (uniform
    actions: episodes end by both termination and truncation) and a learning rate of 1e-12 keep
    the network after training equal to the one that computed the last rollout's targets, to float precision."""
    import tests.envs  # noqa: F401  registers the env

    g = conftest.run_in_process(
        "pqn.py",
        monkeypatch,
        tmp_path,
        "--env-id",
        "tests.envs:Counter-v0",
        "--num-envs",
        "2",
        "--num-steps",
        "6",
        "--num-minibatches",
        "2",
        "--total-timesteps",
        "120",
        "--gamma",
        "0.5",
        "--q-lambda",
        "0.5",
        "--end-e",
        "1.0",
        "--learning-rate",
        "1e-12",
    )
    obs, terminations, truncations = g["obs"][..., 0], g["terminations"].astype(bool), g["truncations"].astype(bool)
    assert terminations.any() and (truncations & ~terminations).any()  # both kinds of end in the last rollout
    # s'_{t+1}: [t + 1], the real final observation where an episode ended (never the reset [0]);
    # after the rollout, the observation the envs act on next
    np.testing.assert_array_equal(g["next_obs_real"][..., 0], obs + 1)
    np.testing.assert_array_equal(g["next_obs_real"][truncations & ~terminations][:, 0], 3.0)
    np.testing.assert_array_equal(obs[1:][(terminations | truncations)[:-1]], 0.0)  # what the policy saw next: the reset
    with torch.no_grad():
        v = g["q_network"](torch.tensor([[0.0], [1.0], [2.0], [3.0]])).max(dim=1).values
    assert abs(v[3] - v[0]) > 1e-3  # max Q of [3] and of [0] tell the two apart
    # the last rollout's targets, by hand: backwards from max Q(next observation), the value of [3]
    # after a truncation, none after a termination, λ-mixing only within an episode
    rewards, gamma, lam = g["rewards"], 0.5, 0.5
    expected = np.zeros((6, 2))
    for e in range(2):
        for t in reversed(range(6)):
            value = float(v[int(obs[t, e]) + 1])
            if terminations[t, e]:
                expected[t, e] = rewards[t, e]
            elif truncations[t, e] or t == 5:
                expected[t, e] = rewards[t, e] + gamma * value
            else:
                expected[t, e] = rewards[t, e] + gamma * ((1 - lam) * value + lam * expected[t + 1, e])
    np.testing.assert_allclose(g["returns"].numpy(), expected, rtol=1e-5, atol=1e-5)
    # 120 steps / (2 envs x 6 steps) = 10 rollouts of 4 epochs x 2 minibatches
    assert {int(state["step"]) for state in g["optimizer"].state.values()} == {80}


# ---- whole script

TAGS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "charts/epsilon",
    "losses/td_loss",
    "losses/q_values",
    "eval/episodic_return",
    "eval/episodic_return_std",
}


def test_smoke_logs_saves_and_evaluates(tmp_path):
    result = run_script(
        "pqn.py",
        *SHORT,
        "--capture-video",
        "--save-model",
        "--track",
        "--eval-episodes",
        "2",
        cwd=tmp_path,
        env={"WANDB_MODE": "offline"},
    )
    directory = run_dir(tmp_path)
    assert directory.name.startswith("CartPole-v1__pqn__1__")
    tags = scalars(directory)
    assert TAGS <= set(tags), set(tags)
    # one point per rollout: ε falls from 1 to 0.05 over the first 1024 steps (ε = 1 - .95 * 512 / 1024 after
    # the first rollout); the learning rate is annealed linearly from 2.5e-4 to 0
    assert [step for step, _ in tags["losses/td_loss"]] == [512, 1024, 1536, 2048]
    assert [e for _, e in tags["charts/epsilon"]] == pytest.approx([0.525, 0.05, 0.05, 0.05])
    assert [lr for _, lr in tags["charts/learning_rate"]] == pytest.approx([2.5e-4, 1.875e-4, 1.25e-4, 0.625e-4])
    assert "evaluation over 2 episodes" in result.stdout
    assert list((directory / "videos").glob("*.mp4")) and len(list((directory / "videos-eval").glob("*.mp4"))) == 2
    assert list((tmp_path / "wandb").glob("offline-run-*/*.wandb"))
    model = str(directory / "pqn.cleanrl_model")
    returns = pqn.evaluate(model, eval_episodes=3)
    assert returns.shape == (3,) and np.all(returns >= 1)
    np.testing.assert_array_equal(pqn.evaluate(model, eval_episodes=3), returns)  # seeded
    explored = pqn.evaluate(model, eval_episodes=2, epsilon=1.0, seed=5)
    np.testing.assert_array_equal(pqn.evaluate(model, eval_episodes=2, epsilon=1.0, seed=5), explored)
    with pytest.raises(ValueError, match="written by pqn.py, not by dqn.py"):
        dqn.evaluate(model, eval_episodes=1)
    out = conftest.enjoy(str(directory), "--eval-episodes", "2", cwd=tmp_path).stdout
    assert out.startswith("pqn.py, ")


@pytest.mark.long
def test_async_envs_give_the_same_returns_as_sync_ones(tmp_path):
    returns = returns_by_env_mode("pqn.py", *SHORT, "--num-envs", "2", "--num-steps", "64", "--seed", "3", cwd=tmp_path)
    assert len(returns["sync"]) > 10 and returns["sync"] == returns["async"]


BAD_INPUT = [
    (["--env-id", "Pendulum-v1"], "--env-id", "supports Discrete only"),
    (["--env-id", "tests.envs:Image-v0"], "--env-id", "1-dimensional observations only"),
    (["--env-id", "CartPole-v9"], "--env-id", "unknown environment"),
    (["--num-envs", "0"], "--num-envs", "must be a positive"),
    (["--num-steps", "0"], "--num-steps", "must be a positive"),
    (["--update-epochs", "0"], "--update-epochs", "must be a positive"),
    (["--max-grad-norm", "0"], "--max-grad-norm", "must be a positive"),
    (["--learning-rate", "-1"], "--learning-rate", "must be a positive"),
    (["--num-minibatches", "3"], "--num-minibatches", "does not divide"),
    (["--total-timesteps", "100"], "--total-timesteps", "less than one rollout of 512 steps"),
    (["--q-lambda", "1.5"], "--q-lambda", "must be in [0, 1]"),
    (["--gamma", "-0.1"], "--gamma", "must be in [0, 1]"),
    (["--start-e", "0.1", "--end-e", "0.5"], "--end-e", "is above --start-e"),
    (["--exploration-fraction", "0"], "--exploration-fraction", "must be in (0, 1]"),
    (["--checkpoint-interval", "-1"], "--checkpoint-interval", "must be >= 0"),
]


@pytest.mark.parametrize("flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("pqn.py", flags, flag, message, tmp_path)


def test_computed_fields_are_not_flags(tmp_path):
    result = run_script("pqn.py", "--minibatch-size", "64", cwd=tmp_path, check=False, timeout=120)
    assert result.returncode == 2 and "Unrecognized options" in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.learning
@pytest.mark.long  # about 70 s of CPU (500k steps); CI runs it with -m long
def test_learns_cartpole(tmp_path):
    run_script("pqn.py", "--seed", "1", "--total-timesteps", "500000", "--save-model", cwd=tmp_path, timeout=1200)
    directory = run_dir(tmp_path)
    returns = episodic_returns(directory)
    last20 = float(np.mean(returns[-20:]))
    evaluation = scalars(directory)["eval/episodic_return"][0][1]
    print(f"pqn CartPole-v1: last-20 mean return {last20:.1f}, evaluation {evaluation:.1f}")
    assert np.mean(returns[:20]) < 50  # it starts from random play
    assert last20 >= 475
    assert evaluation >= 475

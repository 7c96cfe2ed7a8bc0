"""Truncation vs termination, against hand-computed numbers.

A time-limit truncation bootstraps from the value of the real final observation; a
termination does not bootstrap. Tested on the pure functions and on a real vector env
(tests.envs:Counter-v0, time limit 3) built the way the scripts build theirs.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import tests.envs  # noqa: F401  (registers Counter-v0)
from cleanrl.dqn import compute_td_target, n_step_returns
from cleanrl.dqn import make_env as dqn_make_env
from cleanrl.ppo import compute_gae
from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.wrappers import SAME_STEP, real_next_obs

GAMMA, LAM = 0.9, 0.8
REWARDS = np.array([[1.0], [1.0], [1.0]], dtype=np.float32)
VALUES = np.array([[0.5], [0.6], [0.7]], dtype=np.float32)
LAST = np.array([0.4], dtype=np.float32)  # V(obs after the rollout)
FINAL = np.array([[0.0], [2.0], [0.0]], dtype=np.float32)  # V(final obs) of the episode ending at t=1


def test_gae_bootstraps_from_final_value_at_truncation():
    dones = np.array([[0.0], [1.0], [0.0]], dtype=np.float32)
    terminations = np.zeros_like(dones)
    advantages, returns = compute_gae(REWARDS, VALUES, LAST, FINAL, terminations, dones, GAMMA, LAM)
    # δ0 = 1 + .9*.6 - .5 = 1.04; δ1 = 1 + .9*2.0 - .6 = 2.2 (V(final), not V(s_2)=.7);
    # δ2 = 1 + .9*.4 - .7 = .66; A2 = .66; A1 = 2.2 (episode ended); A0 = 1.04 + .72*2.2
    np.testing.assert_allclose(advantages[:, 0], [2.624, 2.2, 0.66], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], [3.124, 2.8, 1.36], rtol=1e-6)


def test_gae_does_not_bootstrap_at_termination():
    dones = np.array([[0.0], [1.0], [0.0]], dtype=np.float32)
    terminations = dones.copy()
    advantages, _ = compute_gae(REWARDS, VALUES, LAST, FINAL, terminations, dones, GAMMA, LAM)
    # δ1 = 1 - .6 = .4; A0 = 1.04 + .72*.4 = 1.328
    np.testing.assert_allclose(advantages[:, 0], [1.328, 0.4, 0.66], rtol=1e-6)


def test_gae_with_lambda_one_is_discounted_return_minus_value():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 2)).astype(np.float32)
    values = rng.normal(size=(5, 2)).astype(np.float32)
    last = rng.normal(size=2).astype(np.float32)
    zeros = np.zeros_like(rewards)
    advantages, returns = compute_gae(rewards, values, last, zeros, zeros, zeros, 0.99, 1.0)
    expected = last.copy()
    for t in reversed(range(5)):
        expected = rewards[t] + 0.99 * expected
        np.testing.assert_allclose(returns[t], expected, rtol=1e-5)


def test_td_target_hand_computed():
    rewards = torch.tensor([1.0, 1.0, 0.5])
    terminations = torch.tensor([0.0, 1.0, 0.0])
    next_q_target = torch.tensor([[2.0, 5.0], [3.0, 4.0], [1.0, -1.0]])
    next_q_online = torch.tensor([[9.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    discounts = GAMMA * (1 - terminations)  # one-step: γ, or 0 after a termination
    # DQN: y = r + γ (1-d) max_a Q_target(s', a)
    dqn = compute_td_target(rewards, discounts, next_q_target)
    torch.testing.assert_close(dqn, torch.tensor([1 + 0.9 * 5.0, 1.0, 0.5 + 0.9 * 1.0]))
    # Double DQN: a' = argmax Q_online(s'), scored by Q_target: [2.0, -, -1.0]
    double = compute_td_target(rewards, discounts, next_q_target, next_q_online)
    torch.testing.assert_close(double, torch.tensor([1 + 0.9 * 2.0, 1.0, 0.5 - 0.9]))


def counter_envs(num_envs=1):
    """``num_envs`` Counter-v0 envs as dqn.py makes and steps them (same-step autoreset)."""
    thunks = [dqn_make_env("tests.envs:Counter-v0", i, False, "") for i in range(num_envs)]
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)


def test_vector_env_gives_real_final_obs_at_truncation():
    envs = counter_envs(2)
    obs, _ = envs.reset(seed=0)
    obs, _, terminated, truncated, infos = envs.step(np.array([0, 0]))
    np.testing.assert_array_equal(real_next_obs(obs, infos)[:, 0], [1.0, 1.0])
    # step 2: env 1 terminates by action 1; its obs is already the reset one
    obs, _, terminated, truncated, infos = envs.step(np.array([0, 1]))
    assert terminated.tolist() == [False, True] and truncated.tolist() == [False, False]
    np.testing.assert_array_equal(obs[:, 0], [2.0, 0.0])
    np.testing.assert_array_equal(real_next_obs(obs, infos)[:, 0], [2.0, 2.0])
    # step 3: env 0 is truncated by the time limit of 3
    obs, _, terminated, truncated, infos = envs.step(np.array([0, 0]))
    assert terminated.tolist() == [False, False] and truncated.tolist() == [True, False]
    np.testing.assert_array_equal(obs[:, 0], [0.0, 1.0])
    np.testing.assert_array_equal(real_next_obs(obs, infos)[:, 0], [3.0, 1.0])
    assert obs[0, 0] == 0.0  # real_next_obs copied, did not overwrite
    envs.close()


def test_dqn_replay_stores_final_obs_and_bootstraps_from_it():
    """The dqn.py path: a truncated transition keeps s' = [3] and its target bootstraps."""
    envs = counter_envs()
    rb = ReplayBuffer(8, 1, envs.single_observation_space, envs.single_action_space, seed=0)
    obs, _ = envs.reset(seed=0)
    for _ in range(3):
        actions = np.array([0])
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
        obs = next_obs
    # rows: observations 0, 1, 2, then the real final observation 3 (the reset one is not kept)
    np.testing.assert_array_equal(rb.observations[:4, 0, 0], [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(rb.truncations[:3, 0], [False, False, True])
    np.testing.assert_array_equal(rb.terminations[:3, 0], [False, False, False])
    # Q_target(s') = [s', 2 s'] for the stored s' = 3: y = 1 + .9 * 6
    last = rb.sample(64)
    pick = last.next_obs[:, 0] == 3.0
    assert pick.any() and (last.truncations[pick, 0] == 1).all()
    q_next = torch.stack([last.next_obs[:, 0], 2 * last.next_obs[:, 0]], dim=1)
    returns, discounts = n_step_returns(last.rewards, last.terminations, last.next_obs_steps, GAMMA)
    targets = compute_td_target(returns, discounts, q_next)
    torch.testing.assert_close(targets[pick], torch.full((int(pick.sum()),), 1 + 0.9 * 6.0))
    envs.close()


@pytest.mark.parametrize("script", ["ppo", "dqn"])
def test_scripts_train_on_a_custom_time_limited_env(script, tmp_path):
    """Both scripts run through episodes that end by truncation and by termination."""
    from tests.conftest import run_dir, run_script, scalars

    flags = ["--env-id", "tests.envs:Counter-v0", "--total-timesteps", "2048", "--no-cuda"]
    if script == "dqn":
        flags += ["--learning-starts", "200", "--train-frequency", "1", "--target-network-frequency", "50"]
    run_script(f"{script}.py", *flags, cwd=tmp_path)
    lengths = [v for _, v in scalars(run_dir(tmp_path))["charts/episodic_length"]]
    assert lengths and max(lengths) <= 3


def test_ppo_agent_samples_from_its_softmax_and_scores_what_it_sampled():
    """get_action_and_value, which acts in the rollouts: actions ~ softmax(logits); log π and entropy by hand."""
    from cleanrl.ppo import Agent

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    agent = Agent(envs)
    torch.manual_seed(0)
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 1.0]))  # logits [0, 1] for every observation
        x = torch.zeros((60000, 4))
        action, log_prob, entropy, value = agent.get_action_and_value(x)
    probs = torch.softmax(torch.tensor([0.0, 1.0]), -1)  # [0.269, 0.731]
    frequencies = torch.bincount(action, minlength=2).double() / len(action)
    torch.testing.assert_close(frequencies, probs.double(), atol=0.006, rtol=0)  # > 3 standard errors
    torch.testing.assert_close(log_prob, torch.log(probs)[action])
    torch.testing.assert_close(entropy, torch.full((60000,), float(-(probs * probs.log()).sum())))
    assert value.shape == (60000,)
    envs.close()

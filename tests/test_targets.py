"""Every replay-based script computes its own n-step return and TD target from the raw window the
replay buffer samples (issue 30): each script's copy of ``n_step_returns`` against hand-computed
values, and through a real buffer, the targets the scripts computed before the buffer stopped
discounting."""

import importlib

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl_utils.buffers import PrioritizedReplayBuffer, ReplayBuffer

N_STEP_SCRIPTS = ["dqn", "dqn_atari", "c51", "c51_atari", "rainbow_atari", "qrdqn", "qrdqn_atari"]


def n_step_returns_of(script):
    return importlib.import_module(f"cleanrl.{script}").n_step_returns


@pytest.mark.parametrize("script", N_STEP_SCRIPTS)
def test_n_step_returns_hand_computed(script):
    n_step_returns = n_step_returns_of(script)
    # rows: a whole window; truncated at its 2nd step (bootstraps, 2 steps on); terminated at its 2nd
    # step (no bootstrap); terminated at the 1st; truncated at the last step of the window
    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    terminations = torch.tensor([[0.0, 0, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]])
    next_obs_steps = torch.tensor([3, 2, 2, 1, 3])
    returns, discounts = n_step_returns(rewards, terminations, next_obs_steps, 0.5)
    torch.testing.assert_close(returns, torch.tensor([1 + 0.5 * 2 + 0.25 * 4, 1 + 0.5 * 2, 1 + 0.5 * 2, 3.0, 1.75]))
    torch.testing.assert_close(discounts, torch.tensor([0.125, 0.25, 0.0, 0.0, 0.125]))
    assert returns.dtype == discounts.dtype == torch.float32


@pytest.mark.parametrize("script", N_STEP_SCRIPTS)
def test_one_step_returns_are_the_reward_and_gamma(script):
    returns, discounts = n_step_returns_of(script)(
        torch.tensor([[1.5], [-2.0]]), torch.tensor([[0.0], [1.0]]), torch.tensor([1, 1]), 0.99
    )
    assert returns.tolist() == [1.5, -2.0]  # exactly r
    assert discounts.tolist() == [torch.tensor(0.99).item(), 0.0]  # γ in float32, 0 after a termination


def add(rb, obs, reward, terminated=False, truncated=False, final_obs=-1.0):
    one = np.array
    rb.add(
        one([[obs]], np.float32), one([0]), one([reward]), one([terminated]), one([truncated]), one([[final_obs]], np.float32)
    )


@pytest.mark.parametrize("prioritized", [False, True])
def test_buffer_window_and_script_give_the_n_step_targets(prioritized):
    """An episode truncated at its 4th step (real final obs 4), one terminated at its 2nd (final obs 12):
    3-step returns and bootstrap discounts by hand, γ = 0.5, through the buffer and dqn.py's function."""
    from cleanrl.dqn import n_step_returns

    box, discrete = gym.spaces.Box(-100, 100, (1,), np.float32), gym.spaces.Discrete(2)
    buffer = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    rb = buffer(16, 1, box, discrete, n_step=3, seed=0)
    for t in range(4):
        add(rb, t, t + 1, truncated=t == 3, final_obs=4.0)
    add(rb, 10, 10)
    add(rb, 11, 20, terminated=True, final_obs=12.0)
    batch = rb.sample(2000)
    returns, discounts = n_step_returns(batch.rewards, batch.terminations, batch.next_obs_steps, 0.5)
    expected = {  # obs: (G, γ^m or 0, s_{t+m})
        0: (1 + 0.5 * 2 + 0.25 * 3, 0.125, 3.0),
        1: (2 + 0.5 * 3 + 0.25 * 4, 0.125, 4.0),  # truncated at the window's last step: the real final obs
        2: (3 + 0.5 * 4, 0.25, 4.0),  # truncated inside the window: bootstraps 2 steps on
        3: (4.0, 0.5, 4.0),
        10: (10 + 0.5 * 20, 0.0, 12.0),  # terminated inside the window: no bootstrap
        11: (20.0, 0.0, 12.0),
    }
    seen = set()
    for i in range(len(returns)):
        o = int(batch.obs[i, 0])
        G, discount, next_obs = expected[o]
        assert (returns[i].item(), discounts[i].item(), batch.next_obs[i, 0].item()) == pytest.approx((G, discount, next_obs))
        seen.add(o)
    assert seen == set(expected)


@pytest.mark.parametrize(
    "script, function",
    [("ddpg_continuous", "ddpg_target"), ("td3_continuous", "clipped_double_q_target"), ("sac_continuous", "soft_td_target")],
)
def test_one_step_scripts_bootstrap_after_a_truncation_not_a_termination(script, function):
    """The continuous-action scripts read the one-step window: y = r + γ (1 - terminated) V(s')."""
    target = getattr(importlib.import_module(f"cleanrl.{script}"), function)
    rewards, terminations = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])  # truncated (or running); terminated
    next_q = torch.tensor([[4.0, 4.0]])
    extra = (torch.zeros(2), 0.0) if script == "sac_continuous" else ()  # log π(a'|s') and α
    y = target(rewards, terminations, next_q, *extra, 0.5)
    torch.testing.assert_close(y, torch.tensor([1 + 0.5 * 4, 1.0]))

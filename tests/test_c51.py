"""C51's categorical projection (Bellemare et al. 2017, Algorithm 1) against hand-computed values;
c51.py's and c51_atari.py's checkpoints."""

from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

from cleanrl.c51 import QNetwork, categorical_projection

ATOMS = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])  # Δz = 1


def project(probs, returns, discounts):
    return categorical_projection(torch.tensor(probs), torch.tensor(returns), torch.tensor(discounts), ATOMS)


def test_terminal_transition_collapses_onto_the_return():
    # discount 0: every atom moves to G = 0.5, halfway between atoms 0 and 1
    m = project([[0.2] * 5], [0.5], [0.0])
    torch.testing.assert_close(m, torch.tensor([[0.0, 0.0, 0.5, 0.5, 0.0]]))


def test_atoms_between_and_on_the_support():
    # T z = 1 + 0.5 z = [0, .5, 1, 1.5, 2]: on atom 0 -> all to it; .5 -> split; 2 = v_max -> all to it
    m = project([[0.2] * 5], [1.0], [0.5])
    torch.testing.assert_close(m, torch.tensor([[0.0, 0.0, 0.3, 0.4, 0.3]]))


def test_atoms_beyond_the_edges_are_clipped():
    m = project(
        [[0.0, 0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.5]], [3.0, -5.0, -1.0], [1.0, 1.0, 1.0]
    )
    # 3 + 2 = 5 -> v_max; -5 - 2 = -7 -> v_min; -1 + [-2, 2] = [-3 -> -2, 1]
    torch.testing.assert_close(
        m, torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.5, 0.0]])
    )


def test_projection_keeps_mass_and_mean_inside_the_support():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(64, 5), dim=-1)
    returns, discounts = torch.rand(64) - 0.5, torch.rand(64) * 0.7
    m = categorical_projection(probs, returns, discounts, ATOMS)
    torch.testing.assert_close(m.sum(dim=1), torch.ones(64))
    # no clipping happens here (|G| + 2γ < 2), and splitting by closeness keeps the mean: E[m] = G + γ E[p]
    torch.testing.assert_close((m * ATOMS).sum(1), returns + discounts * (probs * ATOMS).sum(1))


def test_q_values_are_the_means_of_the_distributions():
    envs = SimpleNamespace(single_observation_space=gym.spaces.Box(-1, 1, (3,)), single_action_space=gym.spaces.Discrete(2))
    net = QNetwork(envs, n_atoms=5, v_min=-2.0, v_max=2.0)
    logits = torch.zeros(1, 2, 5)
    logits[0, 1, 4] = 100.0  # action 1: all mass on z = 2
    torch.testing.assert_close(net.q_values(logits), torch.tensor([[0.0, 2.0]]))


# ---- checkpoints: resumed without the buffer (SIGTERM, then --resume: tests/test_contracts.py)


@pytest.mark.parametrize(
    "script,flags,total",
    [
        ("c51.py", ["--buffer-size", "1000", "--batch-size", "32", "--train-frequency", "2"], 2000),
        ("c51_atari.py", ["--buffer-size", "1000", "--batch-size", "4", "--target-network-frequency", "100"], 800),
    ],
)
def test_c51_resume_without_the_buffer_refills_it_then_updates(script, flags, total, tmp_path):
    from tests.conftest import resume_without_the_buffer

    resume_without_the_buffer(script, flags, total, "losses/loss", tmp_path)

"""Rainbow's pure parts against hand-computed values: factorised noisy layers (Fortunato et al.
2018), the double-Q distributional target, and the prioritized n-step loss (Hessel et al. 2018)."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl.rainbow_atari import (
    NoisyLinear,
    RainbowNetwork,
    double_q_target_distribution,
    linear_schedule,
    n_step_returns,
    noise_buffers,
    weighted_cross_entropy,
)
from cleanrl_utils.buffers import PrioritizedReplayBuffer
from cleanrl_utils.checkpoint import capture
from cleanrl_utils.resume import restore


def f(x):
    return x.sign() * x.abs().sqrt()


def test_noisy_layer_initialisation_noise_shapes_and_factorisation():
    torch.manual_seed(0)
    layer = NoisyLinear(6, 3, sigma0=0.5)
    bound = 1 / math.sqrt(6)
    assert layer.weight_mu.shape == layer.weight_sigma.shape == layer.weight_epsilon.shape == (3, 6)
    assert layer.bias_mu.shape == layer.bias_sigma.shape == layer.bias_epsilon.shape == (3,)
    assert layer.epsilon_in.shape == (6,)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    torch.testing.assert_close(layer.weight_sigma, torch.full((3, 6), 0.5 * bound))
    torch.testing.assert_close(layer.bias_sigma, torch.full((3,), 0.5 * bound))
    # reset_noise draws ε_in then ε_out from torch's generator: ε_w = f(ε_out) f(ε_in)ᵀ, ε_b = f(ε_out)
    torch.manual_seed(123)
    layer.reset_noise()
    torch.manual_seed(123)
    eps_in, eps_out = f(torch.randn(6)), f(torch.randn(3))
    torch.testing.assert_close(layer.weight_epsilon, torch.outer(eps_out, eps_in))
    torch.testing.assert_close(layer.bias_epsilon, eps_out)
    torch.testing.assert_close(layer.epsilon_in, eps_in)
    # nothing noisy is saved: a state dict holds μ and σ only
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}


def test_noisy_layer_output_fixed_until_reset_and_mean_in_eval_mode():
    torch.manual_seed(1)
    layer = NoisyLinear(5, 4, sigma0=0.5)
    x = torch.randn(10, 5)
    weight = layer.weight_mu + layer.weight_sigma * layer.weight_epsilon
    bias = layer.bias_mu + layer.bias_sigma * layer.bias_epsilon
    expected = x @ weight.T + bias
    torch.testing.assert_close(layer(x), expected)
    torch.testing.assert_close(layer(x), expected)  # the noise stays until reset_noise
    # the factorised path for a few rows (acting) gives the same numbers as the full one
    torch.testing.assert_close(layer(x[:2]), expected[:2])
    torch.testing.assert_close(layer(x[:1]), expected[:1])
    layer.reset_noise()
    assert not torch.allclose(layer(x), expected)
    layer.eval()
    torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)


def test_noisy_layer_gradients_reach_sigma_through_the_noise():
    torch.manual_seed(2)
    layer = NoisyLinear(3, 2)
    x = torch.randn(8, 3)
    layer(x).sum().backward()
    # d/dσ_w of sum_b (σ_w ⊙ ε_w) x_b = ε_w ⊙ (1 x_bᵀ summed) ; d/dσ_b = 8 ε_b
    torch.testing.assert_close(layer.weight_sigma.grad, layer.weight_epsilon * x.sum(0))
    torch.testing.assert_close(layer.bias_sigma.grad, 8 * layer.bias_epsilon)
    torch.testing.assert_close(layer.weight_mu.grad, x.sum(0).expand(2, 3))
    # σ0 = 0: a plain linear layer
    plain = NoisyLinear(3, 2, sigma0=0.0)
    torch.testing.assert_close(plain(x), x @ plain.weight_mu.T + plain.bias_mu)


def test_network_reset_noise_reaches_every_noisy_layer_and_dueling_head():
    torch.manual_seed(3)
    net = RainbowNetwork(num_actions=3, n_atoms=5)
    noisy = [m for m in net.modules() if isinstance(m, NoisyLinear)]
    assert len(noisy) == 4
    before = [m.weight_epsilon.clone() for m in noisy]
    net.reset_noise()
    assert all(not torch.equal(b, m.weight_epsilon) for b, m in zip(before, noisy))
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    logits = net(obs)
    assert logits.shape == (2, 3, 5)
    # dueling: logits = v + a - mean_a a, so the mean over actions is the value stream
    features = net.torso(obs.float() / 255)
    torch.testing.assert_close(logits.mean(1), net.value(features), rtol=1e-5, atol=1e-5)
    q = net.q_values(logits)
    torch.testing.assert_close(q, (torch.softmax(logits, -1) * net.atoms).sum(-1))


def test_double_q_target_uses_online_argmax_and_target_distribution():
    atoms = torch.tensor([-1.0, 0.0, 1.0])
    big = 20.0
    # online: action 1 has the higher mean (mass on +1); target: action 0 has (mass on +1)
    online = torch.tensor([[[0.0, big, 0.0], [0.0, 0.0, big]]])
    target = torch.tensor([[[0.0, 0.0, big], [big, 0.0, 0.0]]])
    m = double_q_target_distribution(online, target, torch.tensor([0.0]), torch.tensor([1.0]), atoms)
    # a* = 1 (online), whose target distribution is all on -1: T z = -1 -> atom -1
    torch.testing.assert_close(m, torch.tensor([[1.0, 0.0, 0.0]]), atol=1e-6, rtol=0)
    # terminal: the target is the return, projected: G = 0.5 -> half on 0, half on 1
    m = double_q_target_distribution(online, target, torch.tensor([0.5]), torch.tensor([0.0]), atoms)
    torch.testing.assert_close(m, torch.tensor([[0.0, 0.5, 0.5]]))


def test_weighted_cross_entropy_hand_computed():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]])).requires_grad_()
    target = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    weights = torch.tensor([1.0, 0.5])
    loss, priorities = weighted_cross_entropy(logits, target, weights)
    ce = torch.tensor([-math.log(0.5), -0.5 * math.log(0.8) - 0.5 * math.log(0.1)])
    entropy = torch.tensor([0.0, math.log(2)])  # H(m)
    torch.testing.assert_close(loss, (weights * ce).mean())
    torch.testing.assert_close(priorities, ce - entropy)  # KL(m || p)
    assert not priorities.requires_grad
    # an exact prediction of a target split between two atoms: KL 0, cross-entropy ln 2
    exact = torch.tensor([[-100.0, 0.0, 0.0]])  # softmax: [~0, 0.5, 0.5]
    loss0, priority0 = weighted_cross_entropy(exact, torch.tensor([[0.0, 0.5, 0.5]]), torch.ones(1))
    assert priority0.item() == pytest.approx(0.0, abs=1e-6) and loss0.item() == pytest.approx(math.log(2))
    loss.backward()  # gradient of the mean weighted loss: w_i (softmax - m) / B
    torch.testing.assert_close(logits.grad, weights[:, None] * (torch.softmax(logits, -1) - target) / 2)


def test_n_step_targets_with_prioritized_importance_weights():
    """3-step returns from the prioritized buffer, their weights after a priority update, the weighted loss."""
    space = gym.spaces.Box(-100, 100, (1,), np.float32)
    gamma, alpha, beta = 0.5, 1.0, 1.0
    rb = PrioritizedReplayBuffer(32, 1, space, gym.spaces.Discrete(2), n_step=3, alpha=alpha, eps=1e-6, seed=0)
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0]  # obs 0..4, the episode terminates after the step from obs 4
    for t, r in enumerate(rewards):
        rb.add(
            np.array([[t]], np.float32),
            np.array([0]),
            np.array([r]),
            np.array([t == 4]),
            np.array([False]),
            np.array([[t + 1]], np.float32),
        )
    assert len(rb) == 5
    # hand-computed 3-step returns and discounts; the window stops at the termination
    expected = {
        0: (1 + 0.5 * 2 + 0.25 * 4, 3.0, 0.125),
        1: (2 + 0.5 * 4 + 0.25 * 8, 4.0, 0.125),
        2: (4 + 0.5 * 8 + 0.25 * 16, 5.0, 0.0),
        3: (8 + 0.5 * 16, 5.0, 0.0),
        4: (16.0, 5.0, 0.0),
    }
    batch = rb.sample(200, beta)
    returns, discounts = n_step_returns(batch.rewards, batch.terminations, batch.next_obs_steps, gamma)  # the script's
    slot_of = {}
    for i in range(200):
        o = int(batch.obs[i, 0])
        G, next_obs, discount = expected[o]
        assert returns[i].item() == pytest.approx(G)
        assert discounts[i].item() == pytest.approx(discount)
        if discount:  # after a termination s' is never used
            assert batch.next_obs[i, 0].item() == next_obs
        slot_of[o] = int(batch.indices[i])
    assert sorted(slot_of) == [0, 1, 2, 3, 4]
    # priorities = per-transition losses 1, 1, 2, 4, 8 -> P = p / 16 (α = 1)
    losses = {0: 1.0, 1: 1.0, 2: 2.0, 3: 4.0, 4: 8.0}
    rb.update_priorities(np.array([slot_of[o] for o in losses]), torch.tensor(list(losses.values())))
    batch = rb.sample(4000, beta)
    obs = batch.obs[:, 0].numpy().astype(int)
    P = np.array([1.0, 1.0, 2.0, 4.0, 8.0]) / 16
    # w_i = (N P_i)^-β / max_j w_j over the batch, N = 5: the rarest (obs 0, 1) get weight 1
    w = (5 * P[obs]) ** -beta
    np.testing.assert_allclose(batch.weights.numpy(), w / w.max(), rtol=1e-4)
    np.testing.assert_allclose(np.bincount(obs, minlength=5) / len(obs), P, atol=0.02)
    # the weighted loss is then unbiased: E_P[w L] ∝ the uniform mean of L
    per_sample = torch.tensor([losses[o] for o in obs])
    weighted = (batch.weights * per_sample).sum() / batch.weights.sum()
    assert weighted.item() == pytest.approx(np.mean(list(losses.values())), rel=0.05)


def test_beta_is_annealed_linearly_from_its_start_to_one():
    """Importance-sampling β (logged as charts/beta): --prioritized-replay-beta at step 0, 1 from the last step on."""
    betas = [linear_schedule(0.4, 1.0, 600, step) for step in (0, 150, 300, 600, 900)]
    assert betas == pytest.approx([0.4, 0.55, 0.7, 1.0, 1.0])


# ---- checkpoints: the noise, and --resume without the buffer (SIGTERM then --resume: tests/test_contracts.py)


def test_noise_is_saved_and_restored_outside_the_state_dict(tmp_path):
    torch.manual_seed(0)
    network = RainbowNetwork(4, n_atoms=5)
    network.reset_noise()
    path = tmp_path / "noise.pt"
    torch.save(capture({"network": network, **noise_buffers(network, "network")}), path)
    saved = torch.load(path, weights_only=True)
    assert not any("epsilon" in name for name in saved["network"])  # not in a saved model
    assert len(saved) == 1 + 3 * 4  # ε_in, ε_w, ε_b of the four noisy layers
    x = torch.rand(2, 4, 84, 84)
    expected = network(x)
    network.reset_noise()  # the captured noise is a copy
    assert not torch.equal(network(x), expected)
    other = RainbowNetwork(4, n_atoms=5)  # other parameters and noise
    other.load_state_dict(saved["network"])
    assert not torch.equal(other(x), expected)
    restore({"network": other, **noise_buffers(other, "network")}, {"state": saved, "path": str(path)})  # in place
    assert torch.equal(other(x), expected)


RAINBOW_RESUME = [
    "--buffer-size",
    "1000",
    "--batch-size",
    "4",
    "--train-frequency",
    "4",
    "--target-network-frequency",
    "100",
]  # tiny runs: each noisy-network step (acting or update) costs several ms on one core


@pytest.mark.long
def test_rainbow_resume_without_the_buffer_refills_it_then_updates(tmp_path):
    from tests.conftest import resume_without_the_buffer

    resume_without_the_buffer("rainbow_atari.py", RAINBOW_RESUME, 600, "losses/loss", tmp_path)

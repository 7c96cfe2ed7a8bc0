"""SAC-Discrete's pure parts against hand-computed values: the soft state value, the twin-critic
target, the actor loss and the temperature loss (Christodoulou 2019; Haarnoja et al. 2018)."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl.sac_atari import (
    NatureCNN,
    discrete_actor_loss,
    discrete_temperature_loss,
    soft_state_value,
    soft_td_target,
)
from cleanrl_utils.buffers import ReplayBuffer

# Two actions with π = (0.25, 0.75):
#   log π = (ln 0.25, ln 0.75) = (-1.386294, -0.287682)
#   H(π) = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335 nats
PROBS = torch.tensor([[0.25, 0.75]])
LOG_PROBS = PROBS.log()
ENTROPY = 0.25 * math.log(4) + 0.75 * math.log(4 / 3)


def test_entropy_constant_is_the_hand_value():
    assert ENTROPY == pytest.approx(0.562335, abs=1e-6)


def test_soft_state_value_hand_computed():
    q = torch.tensor([[1.0, 2.0]])
    # α = 0.5: V = 0.25 (1 - 0.5 ln 0.25) + 0.75 (2 - 0.5 ln 0.75) = 1.75 + 0.5 H = 1.75 + 0.281168 = 2.031168
    torch.testing.assert_close(soft_state_value(PROBS, LOG_PROBS, q, 0.5), torch.tensor([2.031168]))
    # α = 0: the expected Q under π, 0.25 · 1 + 0.75 · 2 = 1.75 (not max_a Q = 2)
    torch.testing.assert_close(soft_state_value(PROBS, LOG_PROBS, q, 0.0), torch.tensor([1.75]))
    # uniform over two actions, Q = 0, α = 1: V = α H = ln 2; rows are independent
    probs = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    v = soft_state_value(probs, probs.log(), torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor(1.0))
    torch.testing.assert_close(v, torch.tensor([1.75 + ENTROPY, math.log(2)]))


def test_target_takes_the_min_of_the_twin_target_critics():
    q1 = torch.tensor([[1.0, 3.0]])
    q2 = torch.tensor([[2.0, 0.0]])
    # min(Q'_1, Q'_2) = (1, 0); α = 0: V = 0.25 · 1 + 0.75 · 0 = 0.25; y = 1 + 0.99 · 0.25 = 1.2475
    # (max would give V = 0.25 · 2 + 0.75 · 3 = 2.75; Q'_1 alone 2.5; Q'_2 alone 0.5; the mean 1.5)
    y = soft_td_target(torch.tensor([1.0]), torch.tensor([0.0]), PROBS, LOG_PROBS, q1, q2, 0.0, 0.99)
    torch.testing.assert_close(y, torch.tensor([1.2475]))
    # symmetric in the two critics
    torch.testing.assert_close(
        soft_td_target(torch.tensor([1.0]), torch.tensor([0.0]), PROBS, LOG_PROBS, q2, q1, 0.0, 0.99), y
    )
    # α = 0.2 adds γ α H: y = 1 + 0.99 (0.25 + 0.2 · 0.562335) = 1.358842
    y = soft_td_target(torch.tensor([1.0]), torch.tensor([0.0]), PROBS, LOG_PROBS, q1, q2, 0.2, 0.99)
    torch.testing.assert_close(y, torch.tensor([1.358842]))


def test_target_is_the_reward_alone_after_a_termination():
    # terminated: y = r, whatever the critics and the entropy bonus say
    big = torch.tensor([[100.0, 100.0]])
    y = soft_td_target(
        torch.tensor([0.5, 0.5]),
        torch.tensor([1.0, 0.0]),
        PROBS.expand(2, 2),
        LOG_PROBS.expand(2, 2),
        big.expand(2, 2),
        big.expand(2, 2),
        0.2,
        0.99,
    )
    # second row bootstraps: 0.5 + 0.99 (100 + 0.2 · 0.562335) = 99.611342
    torch.testing.assert_close(y, torch.tensor([0.5, 99.611342]))


def test_replay_targets_stop_the_bootstrap_at_a_termination_but_not_at_a_truncation():
    """Through the replay the script uses: the target bootstraps with γ, not after a termination, and after a truncation."""
    space = gym.spaces.Box(-100, 100, (1,), np.float32)
    rb = ReplayBuffer(16, 1, space, gym.spaces.Discrete(2), seed=0)
    # obs 0 -> 1 -> 2 (terminated); obs 10 -> 11 (truncated, real final obs 11)
    steps = [(0, 1, False, False), (1, 2, True, False), (10, 11, False, True)]
    for o, next_o, terminated, truncated in steps:
        rb.add(
            np.array([[o]], np.float32),
            np.array([1]),
            np.array([1.0]),
            np.array([terminated]),
            np.array([truncated]),
            np.array([[next_o]], np.float32),
        )
    batch = rb.sample(64)
    q = torch.full((64, 2), 10.0)
    probs = torch.full((64, 2), 0.5)
    y = soft_td_target(batch.rewards[:, 0], batch.terminations[:, 0], probs, probs.log(), q, q, 0.0, 0.99)
    for i in range(64):
        o, next_o = int(batch.obs[i, 0]), int(batch.next_obs[i, 0])
        assert batch.truncations[i, 0].item() == (o == 10)
        if o == 1:  # terminated: y = r
            assert batch.terminations[i, 0].item() == 1.0 and y[i].item() == pytest.approx(1.0)
        else:  # bootstraps from the real next observation, a truncation included
            assert next_o == o + 1
            assert batch.terminations[i, 0].item() == 0.0 and y[i].item() == pytest.approx(1 + 0.99 * 10)
    assert {int(o) for o in batch.obs[:, 0]} == {0, 1, 10}


def test_actor_loss_hand_computed_and_critics_untouched():
    q = torch.tensor([[1.0, 2.0]], requires_grad=True)
    # Σ_a π (α log π - Q) = -V: -(1.75 + 0.5 H) = -2.031168 with α = 0.5; -1.75 with α = 0
    torch.testing.assert_close(discrete_actor_loss(PROBS, LOG_PROBS, q, 0.5), torch.tensor(-2.031168))
    torch.testing.assert_close(discrete_actor_loss(PROBS, LOG_PROBS, q, 0.0), torch.tensor(-1.75))
    # a sum over actions, a mean over states: rows -2.031168 and (uniform, Q = 0, α = 0.5) -0.5 ln 2
    probs = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    loss = discrete_actor_loss(probs, probs.log(), torch.tensor([[1.0, 2.0], [0.0, 0.0]]), 0.5)
    torch.testing.assert_close(loss, torch.tensor((-2.031168 - 0.5 * math.log(2)) / 2))
    # the critics get no gradient from the actor's loss
    logits = torch.zeros(1, 2, requires_grad=True)
    log_probs = torch.log_softmax(logits, -1)
    discrete_actor_loss(log_probs.exp(), log_probs, q, 0.5).backward()
    assert q.grad is None and logits.grad is not None


def test_actor_loss_is_minimised_by_the_softmax_of_q_over_alpha():
    """The loss is α KL(π || softmax(Q / α)) + const: its gradient vanishes at π = softmax(Q / α) only."""
    q, alpha = torch.tensor([[1.0, 2.0, -0.5]]), 0.5

    def gradient(logits):
        logits = logits.clone().requires_grad_()
        log_probs = torch.log_softmax(logits, -1)
        discrete_actor_loss(log_probs.exp(), log_probs, q, alpha).backward()
        return logits.grad

    torch.testing.assert_close(gradient(q / alpha), torch.zeros(1, 3), atol=1e-6, rtol=0)
    # from the uniform policy, a descent step raises the logits of the actions with higher Q
    step = -gradient(torch.zeros(1, 3))
    assert step[0, 1] > step[0, 0] > step[0, 2] and step.abs().max() > 0.05
    # the minimum value is -α log Σ_a exp(Q / α)
    log_probs = torch.log_softmax(q / alpha, -1)
    torch.testing.assert_close(
        discrete_actor_loss(log_probs.exp(), log_probs, q, alpha), -alpha * torch.logsumexp(q / alpha, -1)[0]
    )


def test_temperature_loss_hand_computed():
    log_alpha = torch.tensor(0.3, requires_grad=True)
    # L = log α (H - H̄) = 0.3 (0.562335 - 1.0) = -0.131300; ∂L/∂log α = H - H̄ = -0.437665
    loss = discrete_temperature_loss(log_alpha, PROBS, LOG_PROBS, 1.0)
    torch.testing.assert_close(loss, torch.tensor(0.3 * (ENTROPY - 1.0)))
    assert loss.item() == pytest.approx(-0.131300, abs=1e-6)
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(-0.437665, abs=1e-6)
    # a mean over states: the uniform row (H = ln 2 = 0.693147) gives 0.693147 - 1, the mean -0.372259
    probs = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    log_alpha.grad = None
    discrete_temperature_loss(log_alpha, probs, probs.log(), 1.0).backward()
    assert log_alpha.grad.item() == pytest.approx((ENTROPY + math.log(2)) / 2 - 1.0, abs=1e-6)


def test_temperature_rises_below_the_target_entropy_and_falls_above_it():
    def alpha_after_one_step(probs, target_entropy):
        log_alpha = torch.zeros((), requires_grad=True)
        optimizer = torch.optim.SGD([log_alpha], lr=0.1)
        logits = probs.log().clone().requires_grad_()
        log_probs = torch.log_softmax(logits, -1)
        discrete_temperature_loss(log_alpha, log_probs.exp(), log_probs, target_entropy).backward()
        assert logits.grad is None  # π is fixed: the temperature loss does not train the actor
        optimizer.step()
        return log_alpha.exp().item()

    target = 0.89 * math.log(4)  # 1.233795 nats, the default for 4 actions
    peaked = torch.tensor([[0.97, 0.01, 0.01, 0.01]])  # H = 0.167944 < target
    uniform = torch.full((1, 4), 0.25)  # H = ln 4 = 1.386294 > target
    assert alpha_after_one_step(peaked, target) > 1.0
    assert alpha_after_one_step(uniform, target) < 1.0
    # log α moves by lr (H̄ - H): 0.1 (1.233795 - 1.386294) for the uniform policy
    assert math.log(alpha_after_one_step(uniform, target)) == pytest.approx(0.1 * (target - math.log(4)), abs=1e-6)


def test_network_outputs_one_value_per_action_from_frames():
    torch.manual_seed(0)
    net = NatureCNN(6).to(memory_format=torch.channels_last)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out = net(obs)
    assert out.shape == (3, 6) and out.dtype == torch.float32
    layers = [m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 5 and all(not m.bias.detach().any() for m in layers)  # zero biases
    # pixels are scaled by 1/255: a frame of 255s equals a float input of 1s through the encoder
    ones = torch.full((1, 4, 84, 84), 255, dtype=torch.uint8)
    torch.testing.assert_close(net(ones), net.head(net.encoder(torch.ones(1, 4, 84, 84))))


# ---- checkpoints: resumed without the replay (whole runs on Breakout; SIGTERM then --resume: tests/test_contracts.py)

CHECKPOINTED = [
    "--total-timesteps",
    "800",
    "--learning-starts",
    "400",
    "--buffer-size",
    "600",
    "--batch-size",
    "16",
    "--update-frequency",
    "8",
    "--target-network-frequency",
    "48",
    "--torch-threads",
    "1",
]


@pytest.mark.long
def test_resume_without_the_buffer_refills_it_then_updates_on(tmp_path):
    """Resumed without the replay in the middle of a life (its frame stack full of frames the new replay does not
    hold), the run refills the replay for --learning-starts steps, then updates on with its trained optimisers."""
    from shutil import copytree

    from tests.conftest import run_dir, run_script

    flags = [*CHECKPOINTED, "--learning-starts", "100", "--checkpoint-interval", "200"]
    (tmp_path / "whole").mkdir()
    run_script("sac_atari.py", *flags, cwd=tmp_path / "whole")
    whole = run_dir(tmp_path / "whole")
    copy = copytree(whole, tmp_path / "resumed" / "runs" / whole.name)
    (copy / "checkpoints" / "step_800.pt").unlink()
    result = run_script(
        "sac_atari.py",
        "--resume",
        str(copy / "checkpoints" / "step_600.pt"),
        "--checkpoint-interval",
        "200",
        cwd=tmp_path / "resumed",
    )
    assert "resumed at step 600" in result.stdout and "refilling it until step 700" in result.stdout

    def adam_steps(run, step):
        state = torch.load(run / "checkpoints" / f"step_{step}.pt", weights_only=True)["state"]
        assert "replay_buffer" not in state
        return [
            {int(s["step"]) for s in state[name]["state"].values()}
            for name in ("q_optimizer", "actor_optimizer", "alpha_optimizer")
        ]

    # updates at every 8th iteration after step 100: 62 by step 600, 87 by step 800; resumed at 600, none in
    # steps 601-700 and 12 in steps 701-800 (iterations 704, ..., 792), from the trained optimisers' states
    assert adam_steps(whole, 600) == [{62}] * 3 and adam_steps(whole, 800) == [{87}] * 3
    assert adam_steps(copy, 800) == [{62 + 12}] * 3

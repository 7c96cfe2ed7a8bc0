import numpy as np
import pytest
import torch
import torch.nn as nn

from cleanrl_utils.buffers import ReplayBuffer
from cleanrl_utils.numpy_net import NumpyMLP


def test_replay_buffer_ring_and_uniform_sampling():
    rb = ReplayBuffer(4, 2, (3,), seed=0)
    assert len(rb) == 0
    with pytest.raises(ValueError):
        rb.sample(1)
    for t in range(6):  # rows 0..3 then overwrite rows 0, 1
        obs = np.full((2, 3), t, np.float32) + np.array([[0.0], [0.5]], np.float32)
        rb.add(obs, obs + 1, np.array([t, t]), np.array([t, -t]), np.zeros(2), np.zeros(2))
    assert len(rb) == 8 and rb.pos == 2
    batch = rb.sample(4000)
    seen = set(batch.obs[:, 0].tolist())
    assert seen == {2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5}  # steps 0 and 1 overwritten
    torch.testing.assert_close(batch.next_obs, batch.obs + 1)
    # the env half (x.5) was env 1 whose reward is -t
    t = batch.obs[:, 0].floor()
    env1 = batch.obs[:, 0] != t
    torch.testing.assert_close(batch.rewards, torch.where(env1, -t, t))
    counts = np.unique(batch.obs[:, 0].numpy(), return_counts=True)[1]
    assert counts.min() > 400  # roughly uniform over the 8 stored transitions (500 each)


def test_replay_buffer_rejects_bad_sizes():
    with pytest.raises(ValueError):
        ReplayBuffer(0, 1, (1,))


def test_numpy_mlp_matches_torch_and_follows_updates():
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    copy = NumpyMLP(actor)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(copy(x), actor(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)
        for p in actor.parameters():
            p.add_(1.0)
    copy.sync()
    with torch.no_grad():
        np.testing.assert_allclose(copy(x), actor(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_numpy_mlp_relu_and_rejects_other_modules():
    net = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    x = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(NumpyMLP(net)(x), net(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError):
        NumpyMLP(nn.Sequential(nn.Linear(3, 5), nn.Dropout(), nn.Linear(5, 2)))

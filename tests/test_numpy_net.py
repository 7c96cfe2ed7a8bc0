import numpy as np
import pytest
import torch
import torch.nn as nn

from cleanrl_utils.numpy_net import NumpyMLP


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

"""Fast forward passes of small torch MLPs in numpy, for acting in the environment.

When a script acts in a handful of environments, each forward pass sees a batch of a few
observations, and on a CPU the time goes to torch's per-operation overhead rather than to
arithmetic. :class:`NumpyMLP` runs the same network in numpy: one matrix product and one
activation per layer. Training is unchanged: gradients, optimiser and losses stay in torch;
only action selection uses this copy.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out=None: np.maximum(x, 0.0, out=out)}


class NumpyMLP:
    """Numpy copy of a torch MLP: the same function, up to float32 rounding.

    Args:
        net: ``nn.Sequential`` of ``nn.Linear`` layers, each optionally followed by
            ``nn.Tanh`` or ``nn.ReLU``; on any device.

    Raises:
        TypeError: ``net`` has another module in it.

    Call :meth:`sync` after every optimiser step so the copy follows the torch weights.
    """

    def __init__(self, net: nn.Sequential):
        self.linears: list[nn.Linear] = []
        self.activations: list = []
        for module in net:
            if isinstance(module, nn.Linear):
                self.linears.append(module)
                self.activations.append(None)
            elif type(module) in _ACTIVATIONS and self.linears and self.activations[-1] is None:
                self.activations[-1] = _ACTIVATIONS[type(module)]
            else:
                raise TypeError(
                    f"NumpyMLP supports nn.Sequential of Linear layers each followed by at most one "
                    f"of {[a.__name__ for a in _ACTIVATIONS]}; got {module}"
                )
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        self.sync()

    @torch.no_grad()
    def sync(self) -> None:
        """Copy the current torch weights into the numpy weights."""
        # torch stores weight as [out, in]; numpy computes x @ W with W [in, out].
        self.weights = [np.ascontiguousarray(layer.weight.cpu().numpy().T, dtype=np.float32) for layer in self.linears]
        self.biases = [layer.bias.cpu().numpy().astype(np.float32) for layer in self.linears]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Forward pass: inputs ``[B, in_features]`` -> outputs ``[B, out_features]`` float32."""
        x = np.asarray(x, dtype=np.float32)
        for weight, bias, activation in zip(self.weights, self.biases, self.activations):
            x = x @ weight
            x += bias
            if activation is not None:
                activation(x, out=x)
        return x

"""Fast forward passes of small torch MLPs in numpy, for acting in the environment.

When a script acts in a handful of environments, each forward pass sees a batch of a few
observations, and on a CPU the time goes to torch's per-operation overhead rather than to
arithmetic. :class:`NumpyMLP` runs the same network in numpy, with several networks that read
the same input (an actor and a critic, say) fused into one block-diagonal network, so that
one pass costs three matrix products instead of a dozen torch calls. Training is unchanged:
gradients, optimiser and losses stay in torch; only action selection uses this copy.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out=None: np.maximum(x, 0.0, out=out)}


def _structure(net: nn.Sequential) -> tuple[list[nn.Linear], list[type | None]]:
    """Split ``net`` into its Linear layers and the activation after each (None: none)."""
    linears: list[nn.Linear] = []
    activations: list[type | None] = []
    for module in net:
        if isinstance(module, nn.Linear):
            linears.append(module)
            activations.append(None)
        elif type(module) in _ACTIVATIONS and linears and activations[-1] is None:
            activations[-1] = type(module)
        else:
            raise TypeError(
                f"NumpyMLP supports nn.Sequential of Linear layers each followed by at most one "
                f"of {[a.__name__ for a in _ACTIVATIONS]}; got {module}"
            )
    return linears, activations


class NumpyMLP:
    """Numpy copy of one or more torch MLPs that read the same input, fused into one network.

    The networks must have the same depth and the same activation after each layer. Layer k
    of the fused network has the weights of the k-th layers of all networks side by side
    (the first layer) or block-diagonal (later layers), so its output is the outputs of the
    networks concatenated. Exactly the same function as the torch networks, up to float32
    rounding.

    Args:
        *nets: ``nn.Sequential`` of ``nn.Linear`` each optionally followed by ``nn.Tanh`` or
            ``nn.ReLU``; all with the same input size, on any device.

    Raises:
        TypeError: a network has another module in it.
        ValueError: no network given, or the networks differ in depth, activations or
            input size.

    Call :meth:`sync` after every optimiser step so the copy follows the torch weights.
    """

    def __init__(self, *nets: nn.Sequential):
        if not nets:
            raise ValueError("NumpyMLP needs at least one network")
        structures = [_structure(net) for net in nets]
        depths = {len(linears) for linears, _ in structures}
        patterns = {tuple(activations) for _, activations in structures}
        inputs = {linears[0].in_features for linears, _ in structures}
        if len(depths) != 1 or len(patterns) != 1 or len(inputs) != 1:
            raise ValueError("NumpyMLP fuses networks of the same depth, activations and input size only")
        self.layers_per_net = [linears for linears, _ in structures]
        self.activations = [None if a is None else _ACTIVATIONS[a] for a in structures[0][1]]
        self.output_sizes = [linears[-1].out_features for linears in self.layers_per_net]
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        self.sync()

    @torch.no_grad()
    def sync(self) -> None:
        """Copy the current torch weights into the fused numpy weights."""
        self.weights, self.biases = [], []
        for depth in range(len(self.activations)):
            layers = [linears[depth] for linears in self.layers_per_net]
            # torch stores weight as [out, in]; numpy computes x @ W with W [in, out].
            blocks = [layer.weight.detach().cpu().numpy().T for layer in layers]
            if depth == 0:
                weight = np.concatenate(blocks, axis=1)
            else:
                weight = np.zeros((sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks)), np.float32)
                row = col = 0
                for block in blocks:
                    weight[row : row + block.shape[0], col : col + block.shape[1]] = block
                    row, col = row + block.shape[0], col + block.shape[1]
            self.weights.append(np.ascontiguousarray(weight, dtype=np.float32))
            self.biases.append(np.concatenate([layer.bias.detach().cpu().numpy() for layer in layers]).astype(np.float32))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Forward pass: inputs ``[B, in_features]`` -> ``[B, sum of output sizes]`` float32."""
        x = np.asarray(x, dtype=np.float32)
        for weight, bias, activation in zip(self.weights, self.biases, self.activations):
            x = x @ weight
            x += bias
            if activation is not None:
                activation(x, out=x)
        return x

    def split(self, y: np.ndarray) -> list[np.ndarray]:
        """Split a fused output ``[B, sum of output sizes]`` into one array per network."""
        return np.split(y, np.cumsum(self.output_sizes)[:-1], axis=-1)

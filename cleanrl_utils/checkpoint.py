"""Checkpoints: what a run writes to continue exactly where it stopped, as tensors and plain data.

A script declares its checkpoint state once: networks, optimisers, anything with ``state_dict`` (a replay buffer),
generators, tensors (a learnt ``log α``) and vector envs of :class:`~cleanrl_utils.wrappers.ReplayableEnv` (their
replay logs), by name. :mod:`cleanrl_utils.resume` loads it back (PyTorch's "Saving and loading a general checkpoint").
"""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.wrappers import envs_state


def rng_state() -> dict:
    """The states of python's ``random``, numpy's global generator and torch's CPU (and CUDA) generators, as tensors
    and plain data."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy = {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss)}
    state = {"python": random.getstate(), "numpy": {**numpy, "cached": float(cached)}, "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the generators :func:`rng_state` saved."""
    python, numpy = state["python"], state["numpy"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["name"], keys, numpy["pos"], numpy["has_gauss"], numpy["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def model_content(model: dict[str, Any]) -> dict[str, Any]:
    """What a model file holds of ``model`` (by name: networks and other objects with ``state_dict``, tensors, plain
    data): the state dicts, the tensors detached on the CPU, the rest as it is. ``--save-model`` writes it at the end,
    and each checkpoint holds it as it is at its step (``enjoy --export`` writes that)."""
    content = {name: value.state_dict() if hasattr(value, "state_dict") else value for name, value in model.items()}
    return {name: value.detach().cpu() if isinstance(value, torch.Tensor) else value for name, value in content.items()}


def capture(state: dict[str, Any]) -> dict[str, Any]:
    """Each object of a checkpoint ``state`` as tensors and plain data (see the module docstring).

    Raises:
        TypeError: an object of another kind.
    """
    captured = {}
    for name, value in state.items():
        if isinstance(value, gym.vector.VectorEnv):
            captured[name] = envs_state(value)
        elif isinstance(value, np.random.Generator):
            captured[name] = value.bit_generator.state
        elif isinstance(value, torch.Generator):
            captured[name] = value.get_state()
        elif isinstance(value, torch.Tensor):
            captured[name] = value.detach().cpu().clone()
        elif hasattr(value, "state_dict"):
            captured[name] = value.state_dict()
        else:
            raise TypeError(f"checkpoint state {name!r}: cannot save a {type(value).__name__}")
    return captured

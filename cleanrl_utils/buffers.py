"""Replay buffers shared by the off-policy scripts.

:class:`ReplayBuffer` is uniform experience replay (Lin 1992; Mnih et al. 2015, "Human-level
control through deep reinforcement learning", Nature 518) over storage shaped
``[capacity, num_envs, ...]``: one row per vector-env step, written in a ring.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class ReplaySamples(NamedTuple):
    """A sampled batch of transitions (s, a, r, s'), each field ``[batch_size, ...]``.

    Attributes:
        obs: s, ``[B, *obs_shape]``.
        actions: a, ``[B, *action_shape]``.
        next_obs: s', the real next observation (at a truncation: the episode's final
            observation, not the first of the next episode), ``[B, *obs_shape]``.
        rewards: r, float32 ``[B]``.
        terminations: 1.0 where the episode terminated at this step (no bootstrap), ``[B]``.
        truncations: 1.0 where the episode was truncated at this step (bootstrap from
            ``next_obs``), ``[B]``.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    next_obs: torch.Tensor
    rewards: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor


class ReplayBuffer:
    """Uniform replay over ``[capacity, num_envs]`` transitions, terminations and truncations apart.

    Each :meth:`add` writes one vector-env step (one transition per env) into the next row;
    when full, the oldest row is overwritten. :meth:`sample` draws transitions uniformly with
    replacement among those written.

    Args:
        capacity: rows (vector steps) kept; the buffer holds ``capacity * num_envs``
            transitions.
        num_envs: environments per row.
        obs_shape: shape of one observation.
        action_shape: shape of one action (``()`` for Discrete).
        obs_dtype: numpy dtype of observations.
        action_dtype: numpy dtype of actions.
        device: torch device of sampled batches.
        seed: seed of the sampling generator.

    Raises:
        ValueError: ``capacity`` or ``num_envs`` is not positive.
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        obs_dtype=np.float32,
        action_dtype=np.int64,
        device: torch.device | str = "cpu",
        seed: int | None = None,
    ):
        if capacity <= 0 or num_envs <= 0:
            raise ValueError(f"capacity and num_envs must be positive, got {capacity} and {num_envs}")
        self.capacity, self.num_envs, self.device = capacity, num_envs, torch.device(device)
        self.obs = np.zeros((capacity, num_envs, *obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((capacity, num_envs, *obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((capacity, num_envs, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros((capacity, num_envs), dtype=np.float32)
        self.terminations = np.zeros((capacity, num_envs), dtype=np.float32)
        self.truncations = np.zeros((capacity, num_envs), dtype=np.float32)
        self.pos = 0
        self.full = False
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        """Number of transitions stored (rows written times num_envs)."""
        return (self.capacity if self.full else self.pos) * self.num_envs

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> None:
        """Store one vector step: arrays ``[num_envs, ...]``.

        ``next_obs`` must be the real next observation: where an episode ended, the final
        observation (gymnasium's ``infos["final_obs"]``), not the reset one.
        """
        self.obs[self.pos] = obs
        self.next_obs[self.pos] = next_obs
        self.actions[self.pos] = actions
        self.rewards[self.pos] = rewards
        self.terminations[self.pos] = terminations
        self.truncations[self.pos] = truncations
        self.pos += 1
        if self.pos == self.capacity:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int) -> ReplaySamples:
        """Draw ``batch_size`` transitions uniformly, with replacement, as torch tensors.

        Raises:
            ValueError: the buffer is empty.
        """
        rows = self.capacity if self.full else self.pos
        if rows == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        flat = self.rng.integers(0, rows * self.num_envs, size=batch_size)
        t, env = np.divmod(flat, self.num_envs)

        def get(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array[t, env]).to(self.device)

        return ReplaySamples(
            get(self.obs), get(self.actions), get(self.next_obs),
            get(self.rewards), get(self.terminations), get(self.truncations),
        )

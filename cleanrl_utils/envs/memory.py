"""A memory task: a cue seen once, a delay, then a choice the cue decides (ProofOfMemory).

Memory (``ppo_trxl.py``):

- ``ProofOfMemory-v0`` (:class:`ProofOfMemory`): a cue seen at the first step only, a delay of
  4 to 12 blank steps, then a choice that the cue decides; a memoryless policy scores 0 in
  expectation, one that remembers the cue scores 1.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ProofOfMemory(gym.Env):
    """Remember a cue across a delay: the smallest task that a policy without memory cannot beat chance on.

    Observation ``[left, right, go]`` (float32): at the first step of an episode one of ``left`` and
    ``right`` is 1 (the rewarded side, drawn uniformly); then ``delay`` steps (drawn uniformly from
    ``[min_delay, max_delay]``) show ``[0, 0, 0]``; then ``go`` is 1: the action taken on that
    observation (0 left, 1 right) ends the episode (terminated) with reward +1 if it names the cue's
    side, -1 otherwise. Actions before ``go`` do nothing (reward 0). Episodes last ``delay + 2``
    steps. The observation at ``go`` is the same whatever the cue, so any memoryless policy's
    expected return is 0; a policy that remembers the cue over up to ``max_delay + 1`` steps
    scores 1. (The proof-of-memory idea of Pleines et al.'s ``ProofofMemory-v0`` in CleanRL's
    ppo_trxl, with a cue, a delay and a choice instead of a walk along a corridor.)

    Args:
        min_delay: fewest blank steps between the cue and ``go`` (>= 0).
        max_delay: most blank steps (>= ``min_delay``).
        render_mode: ``"rgb_array"`` (three cells: the cue's side green while shown, ``go`` yellow) or None.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    observation_space = gym.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, min_delay: int = 4, max_delay: int = 12, render_mode: str | None = None):
        if not 0 <= min_delay <= max_delay:
            raise ValueError(f"need 0 <= min_delay <= max_delay, got {min_delay}, {max_delay}")
        self.min_delay, self.max_delay, self.render_mode = min_delay, max_delay, render_mode
        self.side, self.delay, self.t = 0, min_delay, 0

    def _observe(self) -> np.ndarray:
        observation = np.zeros(3, dtype=np.float32)
        if self.t == 0:
            observation[self.side] = 1.0
        if self.t == self.delay + 1:
            observation[2] = 1.0
        return observation

    def render(self) -> np.ndarray:
        """A frame ``[32, 96, 3]`` (uint8): the cue's cell green at the first step, the third cell yellow at ``go``."""
        frame = np.full((32, 96, 3), 90, dtype=np.uint8)
        observation = self._observe()
        for cell, color in enumerate([(0, 160, 0), (0, 160, 0), (220, 200, 0)]):
            if observation[cell]:
                frame[:, 32 * cell : 32 * (cell + 1)] = color
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.side = int(self.np_random.integers(2))
        self.delay = int(self.np_random.integers(self.min_delay, self.max_delay + 1))
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        if self.t == self.delay + 1:  # the choice
            return self._observe(), 1.0 if int(action) == self.side else -1.0, True, False, {}
        self.t += 1
        return self._observe(), 0.0, False, False, {}

"""``MultiDiscreteIdentity-v0``: MultiDiscrete observations and actions (``ppo_structured.py``,
``dqn_structured.py``); each action dimension is rewarded for repeating the observed value."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class MultiDiscreteIdentity(gym.Env):
    """Repeat the observation: a small MultiDiscrete task.

    The observation is ``dims`` values, each in ``[0, values)``, drawn uniformly at every step;
    the action is ``dims`` values in the same range, and the reward is the fraction of
    dimensions where the action equals the observation it answers. Episodes are truncated
    after ``max_episode_steps`` (the registration's 20), so the optimal return is 20 and a
    uniform policy's expected return 20 / values. (The identity tasks of OpenAI Baselines' and
    Stable-Baselines3's tests, ``IdentityEnvMultiDiscrete``, with a reward per dimension.)

    Observation: ``MultiDiscrete([values] * dims)``. Actions: ``MultiDiscrete([values] * dims)``.

    Args:
        dims: action (and observation) dimensions.
        values: values per dimension.
        render_mode: ``"rgb_array"`` (one row per dimension, the observed value white) or None.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, dims: int = 3, values: int = 4, render_mode: str | None = None):
        if dims < 1 or values < 2:
            raise ValueError(f"need dims >= 1 and values >= 2, got {dims}, {values}")
        self.observation_space = gym.spaces.MultiDiscrete([values] * dims)
        self.action_space = gym.spaces.MultiDiscrete([values] * dims)
        self.state = np.zeros(dims, dtype=np.int64)
        self.render_mode = render_mode

    def render(self) -> np.ndarray:
        """A frame ``[16 * dims, 16 * values, 3]`` (uint8): in row d, the observed value's cell is white."""
        cells = np.zeros((len(self.state), int(self.observation_space.nvec[0])), dtype=np.uint8)
        cells[np.arange(len(self.state)), self.state] = 255
        return np.repeat(np.repeat(cells, 16, axis=0), 16, axis=1)[..., None].repeat(3, axis=2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(self.observation_space.nvec)
        return self.state.copy(), {}

    def step(self, action):
        reward = float(np.mean(np.asarray(action).reshape(-1) == self.state))
        self.state = self.np_random.integers(self.observation_space.nvec)
        return self.state.copy(), reward, False, False, {}

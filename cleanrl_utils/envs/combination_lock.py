"""``CombinationLock-v0`` and ``CombinationLockInfoMask-v0``: a task where action masking decides success
(``ppo_structured.py``, ``dqn_structured.py``). The mask is the observation key ``action_mask``, or, in
``CombinationLockInfoMask-v0``, ``info["action_mask"]`` with the stage as the whole observation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class CombinationLock(gym.Env):
    """A lock of ``stages`` dials, each opened by one of ``num_actions`` actions; most actions are invalid.

    At stage s (the observation, one of ``stages``), ``allowed`` of the ``num_actions`` actions
    are valid: one opens the dial (stage s + 1; the last one opens the lock, reward +1,
    terminated), the others leave the stage as it is (reward 0). Any other action is invalid:
    reward -1, terminated. The valid sets and the opening actions are fixed (drawn once from
    ``layout_seed``), so the task is one deterministic MDP; episodes start at stage 0 and are
    truncated after ``max_episode_steps`` (the registration's 2 * stages).

    An agent that samples only valid actions opens the lock by chance on a fraction of
    episodes from the start (13.2% of 3,000 episodes with the defaults) and has only the opening actions to
    learn; one that does not mask ends almost every early episode on an invalid action (a
    uniform action is valid with probability allowed / num_actions = 3/8), and the reward of
    the lock is stages dials away. This is the kind of task where masking decides success
    (Huang & Ontañón 2022, "A Closer Look at Invalid Action Masking in Policy Gradient
    Algorithms", arXiv:2006.14171, whose invalid actions are likewise many and state-dependent).

    Observation: ``Dict(stage: Discrete(stages), action_mask: MultiBinary(num_actions))``; with
    ``mask_in_info`` the observation is the stage alone (``Discrete(stages)``) and the mask is
    ``info["action_mask"]`` of every reset and step. Actions: ``Discrete(num_actions)``.
    Optimal return: 1, in ``stages`` steps.

    Args:
        stages: dials to open.
        num_actions: size of the action space.
        allowed: valid actions per stage (at least 1, at most ``num_actions``).
        layout_seed: seed of the fixed valid sets and opening actions.
        mask_in_info: put the mask in the info, not in the observation.
        render_mode: ``"rgb_array"`` (a row of dials: open green, current yellow, closed grey) or None.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(
        self,
        stages: int = 8,
        num_actions: int = 8,
        allowed: int = 3,
        layout_seed: int = 0,
        mask_in_info: bool = False,
        render_mode: str | None = None,
    ):
        if stages < 1 or not 1 <= allowed <= num_actions:
            raise ValueError(f"need stages >= 1 and 1 <= allowed <= num_actions, got {stages}, {allowed}, {num_actions}")
        layout = np.random.default_rng(layout_seed)
        self.masks = np.zeros((stages, num_actions), dtype=np.int8)
        self.opening = np.zeros(stages, dtype=np.int64)
        for stage in range(stages):
            valid = layout.choice(num_actions, size=allowed, replace=False)
            self.masks[stage, valid] = 1
            self.opening[stage] = valid[0]
        self.stages, self.mask_in_info, self.render_mode = stages, mask_in_info, render_mode
        self.action_space = gym.spaces.Discrete(num_actions)
        stage_space = gym.spaces.Discrete(stages)
        if mask_in_info:
            self.observation_space = stage_space
        else:
            self.observation_space = gym.spaces.Dict(
                {"stage": stage_space, "action_mask": gym.spaces.MultiBinary(num_actions)}
            )
        self.stage = 0

    def render(self) -> np.ndarray:
        """A frame ``[32, 32 * stages, 3]`` (uint8): the dials opened so far green, the current one yellow."""
        colors = np.array([[0, 160, 0]] * self.stage + [[220, 200, 0]] + [[90, 90, 90]] * (self.stages - self.stage - 1))
        return np.repeat(np.repeat(colors[None].astype(np.uint8), 32, axis=0), 32, axis=1)

    def _observe(self) -> tuple[Any, dict]:
        mask = self.masks[self.stage].copy()
        if self.mask_in_info:
            return np.int64(self.stage), {"action_mask": mask}
        return {"stage": np.int64(self.stage), "action_mask": mask}, {}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.stage = 0
        return self._observe()

    def step(self, action):
        action = int(action)
        if not self.masks[self.stage, action]:
            observation, info = self._observe()
            return observation, -1.0, True, False, info
        if action == self.opening[self.stage]:
            self.stage += 1
            if self.stage == self.stages:
                self.stage -= 1  # the final observation shows the last dial
                observation, info = self._observe()
                return observation, 1.0, True, False, info
        observation, info = self._observe()
        return observation, 0.0, False, False, info

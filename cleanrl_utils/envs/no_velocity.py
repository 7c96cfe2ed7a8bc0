"""The no-velocity tasks: a classic-control or MuJoCo task with entries of its observation removed.

Each is its original task — same dynamics, rewards, termination and time limit —
with some entries of the observation vector removed, so that a memoryless policy cannot see
the state and a recurrent one must infer the velocities from successive observations (the
"no velocity" tasks of recurrent-RL benchmarks, e.g. sb3-contrib's ``CartPoleNoVel-v1``;
Meng, Gorbet, Kulić 2021, "Memory-based Deep Reinforcement Learning for POMDPs",
arXiv:2102.12344).

- ``CartPoleNoVelocity-v1`` (CartPole-v1): hides 1 cart velocity and 3 pole angular
  velocity; observation (2,): cart position, pole angle.
- ``AcrobotNoVelocity-v1`` (Acrobot-v1): hides 4 and 5, the angular velocities of the two
  links; observation (4,): cos θ1, sin θ1, cos θ2, sin θ2.
- ``MountainCarNoVelocity-v0`` (MountainCar-v0): hides 1 car velocity; observation (1,):
  car position.
- ``PendulumNoVelocity-v1`` (Pendulum-v1): hides 2 angular velocity; observation (2,):
  cos θ, sin θ.
- ``InvertedPendulumNoVelocity-v5`` (InvertedPendulum-v5, MuJoCo; needs the ``mujoco`` extra):
  hides 2 cart velocity and 3 pole angular velocity; observation (2,): cart position, pole angle.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator


class HideObservationEntries(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Remove the entries ``hidden`` from a 1-D ``Box`` observation; everything else is unchanged.

    Observations ``[D]`` become ``[D - len(hidden)]``, the remaining entries in their original
    order, with the bounds and dtype of those entries.

    Args:
        env: an environment with a 1-D ``Box`` observation space.
        hidden: indices of the entries to remove (each in ``[0, D)``, distinct, not all of them).

    Raises:
        ValueError: the observation space is not a 1-D Box, or ``hidden`` is not a proper
            subset of its indices.
    """

    def __init__(self, env: gym.Env, hidden: Sequence[int]):
        gym.utils.RecordConstructorArgs.__init__(self, hidden=tuple(hidden))
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"HideObservationEntries needs a 1-D Box observation space, got {space}")
        size = space.shape[0]
        hidden = tuple(int(i) for i in hidden)
        if len(set(hidden)) != len(hidden) or not all(0 <= i < size for i in hidden) or len(hidden) >= size:
            raise ValueError(f"hidden must be distinct indices in [0, {size}) leaving at least one, got {hidden}")
        self.hidden = hidden
        self.kept = np.array([i for i in range(size) if i not in hidden], dtype=np.int64)
        self.observation_space = gym.spaces.Box(space.low[self.kept], space.high[self.kept], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """``[D]`` -> the kept entries ``[D - len(hidden)]``."""
        return observation[self.kept]


def make_hidden_entries_env(base_id: str, hidden: Sequence[int], **kwargs) -> gym.Env:
    """Entry point of the tasks: the unwrapped environment of ``base_id`` with ``hidden`` removed.

    ``kwargs`` (``render_mode``, ...) go to the original environment. The time limit is not
    applied here: the registration gives each task its original's ``max_episode_steps``, which
    ``gymnasium.make`` applies outside this wrapper, as for the original.
    """
    spec = gym.spec(base_id)
    env = load_env_creator(spec.entry_point)(**{**spec.kwargs, **kwargs})
    return HideObservationEntries(env, hidden)

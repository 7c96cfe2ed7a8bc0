"""Small tasks of this project, registered with gymnasium when this package is imported: scripts reach them with
``--env-id cleanrl_utils.envs:<id>`` (gymnasium imports the package, in env workers too). Each task's code is a
module of the package, imported when the task is made:

- :mod:`~cleanrl_utils.envs.no_velocity`: ``CartPoleNoVelocity-v1``, ``AcrobotNoVelocity-v1``,
  ``MountainCarNoVelocity-v0``, ``PendulumNoVelocity-v1``, ``InvertedPendulumNoVelocity-v5`` (partial observability);
- :mod:`~cleanrl_utils.envs.combination_lock`: ``CombinationLock-v0``, ``CombinationLockInfoMask-v0`` (action masks);
- :mod:`~cleanrl_utils.envs.multi_discrete_identity`: ``MultiDiscreteIdentity-v0`` (MultiDiscrete actions);
- :mod:`~cleanrl_utils.envs.memory`: ``ProofOfMemory-v0`` (memory);
- :mod:`~cleanrl_utils.envs.multi_agent`: ``MinefieldRace`` (PettingZoo's parallel API, not registered:
  ``--env-id cleanrl_utils.envs:MinefieldRace``).
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym

TASKS = {
    # id: (original id, hidden entries)
    "CartPoleNoVelocity-v1": ("CartPole-v1", (1, 3)),
    "AcrobotNoVelocity-v1": ("Acrobot-v1", (4, 5)),
    "MountainCarNoVelocity-v0": ("MountainCar-v0", (1,)),
    "PendulumNoVelocity-v1": ("Pendulum-v1", (2,)),
    "InvertedPendulumNoVelocity-v5": ("InvertedPendulum-v5", (2, 3)),
}
"""The registered tasks: id -> (original id, indices of the hidden observation entries)."""

for _env_id, (_base_id, _hidden) in TASKS.items():
    if _env_id not in gym.registry:
        _base = gym.spec(_base_id)
        gym.register(
            _env_id,
            entry_point="cleanrl_utils.envs.no_velocity:make_hidden_entries_env",
            kwargs={"base_id": _base_id, "hidden": _hidden},
            max_episode_steps=_base.max_episode_steps,
            reward_threshold=_base.reward_threshold,
        )


STRUCTURED_TASKS = {
    # id: (entry point, kwargs, max_episode_steps)
    "CombinationLock-v0": ("cleanrl_utils.envs.combination_lock:CombinationLock", {}, 16),
    "CombinationLockInfoMask-v0": ("cleanrl_utils.envs.combination_lock:CombinationLock", {"mask_in_info": True}, 16),
    "MultiDiscreteIdentity-v0": ("cleanrl_utils.envs.multi_discrete_identity:MultiDiscreteIdentity", {}, 20),
}
"""The registered structured-space tasks: id -> (entry point, kwargs, time limit)."""

for _env_id, (_entry_point, _kwargs, _steps) in STRUCTURED_TASKS.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point, kwargs=_kwargs, max_episode_steps=_steps)


if "ProofOfMemory-v0" not in gym.registry:  # the time limit is never reached (episodes end after at most 14 steps)
    gym.register("ProofOfMemory-v0", entry_point="cleanrl_utils.envs.memory:ProofOfMemory", max_episode_steps=64)


_CLASSES = {
    "HideObservationEntries": "no_velocity",
    "make_hidden_entries_env": "no_velocity",
    "CombinationLock": "combination_lock",
    "MultiDiscreteIdentity": "multi_discrete_identity",
    "ProofOfMemory": "memory",
    "MinefieldRace": "multi_agent",
}
"""Where each task's code is: a module of this package, imported when the name is first read
(``cleanrl_utils.envs:MinefieldRace``, ``from cleanrl_utils.envs import CombinationLock``) or the task made."""


def __getattr__(name: str) -> Any:
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_CLASSES[name]}"), name)

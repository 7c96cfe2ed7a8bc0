"""Small tasks of this project: partially observed classic control, action masking, MultiDiscrete actions, memory.

Importing this module registers the tasks below; scripts reach them with
``--env-id cleanrl_utils.envs:CartPoleNoVelocity-v1`` (the module is imported to register
them, see ``check_env`` in ``cleanrl_utils/env_checks.py``; ``gymnasium.make`` does the same in
subprocesses). Each is its original task — same dynamics, rewards, termination and time limit —
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

Structured spaces (``ppo_structured.py``, ``dqn_structured.py``):

- ``CombinationLock-v0`` (:class:`CombinationLock`): a task where action masking decides
  success. Invalid actions end the episode with a penalty; the mask is the observation key
  ``action_mask``. ``CombinationLockInfoMask-v0`` is the same task with the mask in
  ``info["action_mask"]`` and the stage as the whole observation.
- ``MultiDiscreteIdentity-v0`` (:class:`MultiDiscreteIdentity`): MultiDiscrete observations
  and actions; each action dimension is rewarded for repeating the observed value.

Memory (``ppo_trxl.py``):

- ``ProofOfMemory-v0`` (:class:`ProofOfMemory`): a cue seen at the first step only, a delay of
  4 to 12 blank steps, then a choice that the cue decides; a memoryless policy scores 0 in
  expectation, one that remembers the cue scores 1.

A multi-agent task (PettingZoo's parallel API, for ``ppo_pettingzoo.py``; not registered with gymnasium):

- :class:`MinefieldRace` (``--env-id cleanrl_utils.envs:MinefieldRace``): racers on parallel lanes, each with
  mines where the others have none; a racer that steps on one of its mines dies mid-episode (leaves the
  dicts) while the others race on; the first to the finish wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
            entry_point="cleanrl_utils.envs:make_hidden_entries_env",
            kwargs={"base_id": _base_id, "hidden": _hidden},
            max_episode_steps=_base.max_episode_steps,
            reward_threshold=_base.reward_threshold,
        )


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


STRUCTURED_TASKS = {
    # id: (entry point, kwargs, max_episode_steps)
    "CombinationLock-v0": ("cleanrl_utils.envs:CombinationLock", {}, 16),
    "CombinationLockInfoMask-v0": ("cleanrl_utils.envs:CombinationLock", {"mask_in_info": True}, 16),
    "MultiDiscreteIdentity-v0": ("cleanrl_utils.envs:MultiDiscreteIdentity", {}, 20),
}
"""The registered structured-space tasks: id -> (entry point, kwargs, time limit)."""

for _env_id, (_entry_point, _kwargs, _steps) in STRUCTURED_TASKS.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point, kwargs=_kwargs, max_episode_steps=_steps)


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


if "ProofOfMemory-v0" not in gym.registry:  # the time limit is never reached (episodes end after at most 14 steps)
    gym.register("ProofOfMemory-v0", entry_point="cleanrl_utils.envs:ProofOfMemory", max_episode_steps=64)


try:  # PettingZoo's base class where the pettingzoo extra is installed; the API is the same without it
    from pettingzoo.utils.env import ParallelEnv as _ParallelEnv
except ImportError:
    _ParallelEnv = object


class MinefieldRace(_ParallelEnv):
    """A race across mines, in PettingZoo's parallel API: agents that die mid-episode, lanes that differ.

    ``racers`` racers (``racer_0``, ...) start at cell 0 or 1 (uniformly, each) of their own lane of cells
    0..``length``. Racer i's lane has mines at the cells c in 1..length-1 with (c + i) % 3 == 0, so each
    lane's mines lie where the next lane has none; they are not observed: a policy shared by the racers
    must know which racer it drives (its id) to cross. Actions: 0 step one cell, 1 jump two cells, 2 wait.
    A racer that lands on one of its mines dies: reward -1, terminated, gone from the dicts while the
    others race on. The racers that reach cell ``length`` first win (+1 each), and every other racer still
    in the race loses then (-1, terminated). After ``max_steps`` steps the racers still in the race are
    truncated (reward 0). A lane is crossed in 6 moves from either start; a uniformly random racer
    mostly dies or runs out of time.

    Observation of racer i: ``Box(-1, 1, (length + racers,))`` float32: the one-hot of its cell
    (``length + 1`` entries), then each other racer's cell / length (-1 once out of the race).

    Args:
        racers: number of racers (2-8).
        length: the finish cell (at least 4).
        max_steps: steps before the truncation.
        render_mode: ``"rgb_array"`` (a row of cells per lane: mines red, the racer white, grey once out) or None.
    """

    metadata = {"render_modes": ["rgb_array"], "name": "minefield_race_v0", "render_fps": 4, "is_parallelizable": True}

    def __init__(self, racers: int = 2, length: int = 10, max_steps: int = 20, render_mode: str | None = None):
        if not 2 <= racers <= 8 or length < 4 or max_steps < 1:
            raise ValueError(f"need 2 <= racers <= 8, length >= 4, max_steps >= 1; got {racers}, {length}, {max_steps}")
        self.length, self.max_steps, self.render_mode = length, max_steps, render_mode
        self.possible_agents = [f"racer_{i}" for i in range(racers)]
        self.agents: list[str] = []
        self.mines = np.array([[(c + i) % 3 == 0 and 0 < c < length for c in range(length + 1)] for i in range(racers)])
        self._observation_space = gym.spaces.Box(-1.0, 1.0, (length + racers,), np.float32)
        self._action_space = gym.spaces.Discrete(3)
        self.np_random = np.random.default_rng()
        self.positions = np.zeros(racers, dtype=np.int64)
        self.in_race = np.zeros(racers, dtype=bool)
        self.time = 0

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return self._action_space

    def _observe(self, i: int) -> np.ndarray:
        own = np.zeros(self.length + 1, dtype=np.float32)
        own[min(self.positions[i], self.length)] = 1.0
        others = np.where(self.in_race, np.minimum(self.positions, self.length) / self.length, -1.0).astype(np.float32)
        return np.concatenate([own, np.delete(others, i)])

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.positions = self.np_random.integers(0, 2, size=len(self.possible_agents))
        self.in_race[:] = True
        self.time = 0
        self.agents = list(self.possible_agents)
        return {agent: self._observe(i) for i, agent in enumerate(self.possible_agents)}, {a: {} for a in self.agents}

    def step(self, actions: dict):
        acting = [self.possible_agents.index(agent) for agent in self.agents]
        rewards = {self.possible_agents[i]: 0.0 for i in acting}
        terminations = {self.possible_agents[i]: False for i in acting}
        self.time += 1
        finished = []
        for i in acting:
            self.positions[i] += (1, 2, 0)[int(actions[self.possible_agents[i]])]
            if self.positions[i] >= self.length:
                finished.append(i)
            elif self.mines[i, self.positions[i]]:  # dead: out of the race, the others go on
                rewards[self.possible_agents[i]], terminations[self.possible_agents[i]] = -1.0, True
                self.in_race[i] = False
        for i in acting:
            if finished and self.in_race[i]:  # the race is over: the first win, the others lose
                rewards[self.possible_agents[i]] = 1.0 if i in finished else -1.0
                terminations[self.possible_agents[i]] = True
                self.in_race[i] = False
        truncations = {self.possible_agents[i]: self.time >= self.max_steps and self.in_race[i] for i in acting}
        observations = {self.possible_agents[i]: self._observe(i) for i in acting}
        self.in_race &= self.time < self.max_steps
        self.agents = [agent for i, agent in enumerate(self.possible_agents) if self.in_race[i]]
        return observations, rewards, terminations, truncations, {self.possible_agents[i]: {} for i in acting}

    def render(self) -> np.ndarray:
        """A frame ``[16 * racers, 16 * (length + 1), 3]`` (uint8)."""
        cells = np.zeros(self.mines.shape + (3,), dtype=np.uint8)
        cells[self.mines] = (200, 0, 0)
        for i, position in enumerate(np.minimum(self.positions, self.length)):
            cells[i, position] = (255, 255, 255) if self.in_race[i] else (120, 120, 120)
        return np.repeat(np.repeat(cells, 16, axis=0), 16, axis=1)

    def close(self) -> None:
        pass

"""A multi-agent task in PettingZoo's parallel API (MinefieldRace), not registered with gymnasium.

A multi-agent task (PettingZoo's parallel API, for ``ppo_pettingzoo.py``; not registered with gymnasium):

- :class:`MinefieldRace` (``--env-id cleanrl_utils.envs:MinefieldRace``): racers on parallel lanes, each with
  mines where the others have none; a racer that steps on one of its mines dies mid-episode (leaves the
  dicts) while the others race on; the first to the finish wins.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

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

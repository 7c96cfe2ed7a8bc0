"""Procgen's games as a gymnasium vector env, for the scripts that train on them (ppo_procgen.py, ppg_procgen.py).

Procgen (Cobbe, Hesse, Hilton, Schulman 2020, "Leveraging Procedural Generation to Benchmark
Reinforcement Learning", arXiv:1912.01588) steps its envs in C++ behind the gym3 interface
(``act`` / ``observe``). Its ``procgen-mirror`` build installs here; it declares ``gym`` and
``numpy<2`` though it runs without them, so the ``procgen`` extra installs it with ``--no-deps``
(``requirements/procgen.txt``). :class:`ProcgenVectorEnv` gives its games this project's vector-env
conventions: the gymnasium step 5-tuple with termination and truncation apart, episode statistics
where ``Run.log_episodes`` reads them (:class:`cleanrl_utils.envpool_atari.GameStatistics`),
seeding and video.
"""

from __future__ import annotations

import difflib
import weakref
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from cleanrl_utils.flags import fail, require

try:  # procgen comes with the procgen extra; without it, --env-id says so
    from procgen import ProcgenGym3Env
except ImportError:
    ProcgenGym3Env = None

GAMES = (
    "bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
    "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot",
)  # fmt: skip
"""The 16 Procgen games."""
TIMEOUTS = {"bigfish": 6000, "bossfight": 4000, "plunder": 4000, "leaper": 500, "maze": 500}
"""Steps after which a game ends its episode by its time limit (procgen/src/games/*.cpp); 1000 for the others."""
NUM_ACTIONS = 15
"""Procgen's action set: the 9 moves and 6 special keys of its keyboard mapping, the same for every game."""


class ProcgenVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of one Procgen game, gymnasium's vector API with same-step autoreset.

    Observations: uint8 ``[num_envs, 64, 64, 3]`` (RGB, height-width-channels). Actions: int
    ``[num_envs]`` in ``[0, 15)``. Procgen resets an env inside the step that ends its episode, so
    the observation returned with done is the first of the next episode (gymnasium's
    ``AutoresetMode.SAME_STEP``); the episode's final observation is not returned by Procgen
    and ``infos["final_obs"]`` is absent: a script that bootstraps at a truncation must stand
    something in for V(final observation) and say what.

    A step that ends an episode is a truncation when the episode reached its game's time limit
    (:data:`TIMEOUTS`; Procgen does not say why an episode ended, so a death on the very step of
    the time limit also counts as a truncation), else a termination (the level completed, or the
    agent died). ``infos`` holds, ``[num_envs]`` each: ``"reward"`` the game's reward,
    ``"terminated"`` (1 at a termination), ``"elapsed_step"`` the steps of the episode so far (of
    the episode that ended, on its last step), ``"level_complete"`` (1 on the last step of an
    episode whose level was completed) and ``"level_seed"``, the level being played.

    Levels: ``num_levels`` 0 draws from every level, ``num_levels`` > 0 from ``start_level`` ..
    ``start_level + num_levels - 1``, the sequence of levels fixed by ``seed`` (Procgen's
    ``rand_seed``): the same seed gives the same episodes under the same actions.

    Args:
        env_id: a game of :data:`GAMES`.
        num_envs: envs stepped together.
        seed: Procgen's ``rand_seed`` (0 .. 2**31 - 1).
        distribution_mode: ``"easy"`` or ``"hard"`` (Cobbe et al. 2020, sec. 2.1).
        render: with True, :meth:`render` returns 512x512 frames of each env (Procgen's
            ``render_mode="rgb_array"``) for video.

    Raises:
        ValueError: an unknown game or distribution mode, ``num_levels`` or ``start_level`` outside [0, 2**31).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int,
        num_levels: int = 0,
        start_level: int = 0,
        distribution_mode: str = "easy",
        render: bool = False,
    ):
        if env_id not in GAMES:
            raise ValueError(f"unknown Procgen game {env_id!r}")
        if distribution_mode not in ("easy", "hard"):
            raise ValueError(f"distribution mode {distribution_mode!r} is not easy or hard")
        for name, value in (("num_levels", num_levels), ("start_level", start_level)):
            if not 0 <= value < 2**31:  # Procgen's C++ aborts the process on a negative one (an int32)
                raise ValueError(f"{name} must be in [0, 2**31), got {value}")
        self.env = ProcgenGym3Env(
            num=num_envs,
            env_name=env_id,
            num_levels=num_levels,
            start_level=start_level,
            distribution_mode=distribution_mode,
            rand_seed=seed,
            **({"render_mode": "rgb_array"} if render else {}),
        )
        # the C env closed with this one, or at exit while still open: gym3 closes it in __del__, which fails once
        # the interpreter is shutting down (a run stopped by a refusal or a fault, its envs not closed)
        self._close_env = weakref.finalize(self, self.env.close)
        self.num_envs = num_envs
        self.timeout = TIMEOUTS.get(env_id, 1000)
        self.single_observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.render_mode = "rgb_array" if render else None
        self.spec = None
        self.elapsed = np.zeros(num_envs, dtype=np.int64)  # steps of each env's episode so far

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        """The observation of each env's episode in progress (``seed`` is not used: Procgen's envs are seeded when
        made, and a new env starts its first episode when made); the episode counters start at 0."""
        _, obs, _ = self.env.observe()
        self.elapsed[:] = 0
        return obs["rgb"].copy(), {}

    def step(self, actions):
        self.env.act(np.asarray(actions, dtype=np.int32))
        rewards, obs, first = self.env.observe()
        infos = self.env.get_info()
        self.elapsed += 1
        dones = first.astype(bool)
        truncations = dones & (self.elapsed >= self.timeout)
        terminations = dones & ~truncations
        info = {
            "reward": rewards.astype(np.float64),
            "terminated": terminations.astype(np.int32),
            "elapsed_step": self.elapsed.copy(),
            "level_complete": np.array([int(i["prev_level_complete"]) for i in infos], dtype=np.int32) * dones,
            "level_seed": np.array([int(i["level_seed"]) for i in infos], dtype=np.int64),
        }
        self.elapsed[dones] = 0
        return obs["rgb"].copy(), rewards.astype(np.float32), terminations, truncations, info

    def render(self) -> Optional[list[np.ndarray]]:
        """Each env's current frame, uint8 ``[512, 512, 3]`` (with ``render=True``; else None)."""
        if self.render_mode is None:
            return None
        return [info["rgb"] for info in self.env.get_info()]

    def close_extras(self, **kwargs: Any) -> None:
        self._close_env()
        self.env = None


def check_procgen(args: Any) -> None:
    """Stop in one line naming the flag unless Procgen is installed, ``args.env_id`` is one of its games (a close
    name is suggested) and ``args.distribution_mode`` is easy or hard."""
    install = "pip install --no-deps -r requirements/procgen.txt"
    require(ProcgenGym3Env is not None, "--env-id", f"Procgen is not installed: {install}")
    if args.env_id not in GAMES:
        close = difflib.get_close_matches(args.env_id.lower().split("-")[0], GAMES, n=3)
        suggestion = f"; did you mean {', '.join(close)}?" if close else f"; the games: {', '.join(GAMES)}"
        fail("--env-id", f"unknown Procgen game {args.env_id!r}{suggestion}")
    require(args.distribution_mode in ("easy", "hard"), "--distribution-mode", "must be easy or hard")

"""Tiny environments whose every number is known, for hand-computed tests.

Importing this module registers them; scripts reach them as ``tests.envs:Counter-v0``.
"""

import multiprocessing
import os
import signal
import time

import gymnasium as gym
import numpy as np


class CounterEnv(gym.Env):
    """Observation [t] (the step count), reward 1 per step, Discrete(2) actions.

    Action 1 terminates the episode; action 0 never does, so with a time limit of L an
    episode of zeros is truncated after L steps with final observation [L].
    """

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(0.0, 1000.0, shape=(1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], dtype=np.float32), 1.0, bool(action == 1), False, {}


if "Counter-v0" not in gym.registry:
    gym.register("Counter-v0", entry_point=CounterEnv, max_episode_steps=3)


class ImageEnv(CounterEnv):
    """Like CounterEnv but with 2-D observations (a script for flat vectors must refuse it)."""

    observation_space = gym.spaces.Box(0.0, 1000.0, shape=(2, 2), dtype=np.float32)


if "Image-v0" not in gym.registry:
    gym.register("Image-v0", entry_point=ImageEnv, max_episode_steps=3)


class UnboundedActionsEnv(CounterEnv):
    """Like CounterEnv but with unbounded Box actions (a script that rescales actions into bounds must refuse it)."""

    action_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)

    def step(self, action):
        return super().step(0)


if "UnboundedActions-v0" not in gym.registry:
    gym.register("UnboundedActions-v0", entry_point=UnboundedActionsEnv, max_episode_steps=3)


class ContinuousCounterEnv(gym.Env):
    """Observation [t] (the step count), reward 1 per step, Box actions in [2, 6]; never terminates.

    With a time limit of L every episode is truncated after L steps with final observation
    [L]. The actions received are kept in ``received`` (to check rescaling and noise).
    """

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(0.0, 1000.0, shape=(1,), dtype=np.float32)
    action_space = gym.spaces.Box(2.0, 6.0, shape=(1,), dtype=np.float32)

    def __init__(self):
        self.received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.received.append(float(np.asarray(action).reshape(-1)[0]))
        self.t += 1
        return np.array([self.t], dtype=np.float32), 1.0, False, False, {}


if "ContinuousCounter-v0" not in gym.registry:
    gym.register("ContinuousCounter-v0", entry_point=ContinuousCounterEnv, max_episode_steps=3)


class ContinuousEchoEnv(gym.Env):
    """Observation [t, a]: the step count and the action last received (0 at reset); reward 1 per step; Box
    actions in [-1, 1]; an action above 0.5 terminates the episode.

    With the registered time limit of 4 steps, the episodes of a Gaussian policy end at different
    steps in different envs, some terminated and some truncated (final observation [4, a]), and the
    observations depend on the actions, so recurrent states differ from env to env. The actions
    received are kept in ``received``.
    """

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(-1000.0, 1000.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self):
        self.received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        a = float(np.asarray(action).reshape(-1)[0])
        self.received.append(a)
        self.t += 1
        return np.array([self.t, a], dtype=np.float32), 1.0, a > 0.5, False, {}


if "ContinuousEcho-v0" not in gym.registry:
    gym.register("ContinuousEcho-v0", entry_point=ContinuousEchoEnv, max_episode_steps=4)


class CrashingCounterEnv(CounterEnv):
    """Like CounterEnv but raises RuntimeError at its 200th step (a failing env inside an actor)."""

    steps_before_crash = 200

    def step(self, action):
        self.total = getattr(self, "total", 0) + 1
        if self.total >= self.steps_before_crash:
            raise RuntimeError("CrashingCounter-v0: deliberate failure for the crash test")
        return super().step(action)


if "CrashingCounter-v0" not in gym.registry:
    gym.register("CrashingCounter-v0", entry_point=CrashingCounterEnv, max_episode_steps=20)


class SlowCounterEnv(CounterEnv):
    """Like CounterEnv but each step sleeps 2 ms (slow actors, for throttle tests)."""

    def step(self, action):
        time.sleep(0.002)
        return super().step(action)


if "SlowCounter-v0" not in gym.registry:
    gym.register("SlowCounter-v0", entry_point=SlowCounterEnv, max_episode_steps=20)


def _sigkill_this_process(*args, **kwargs):
    time.sleep(2.0)  # holding the lock: the other processes come to wait for it
    os.kill(os.getpid(), signal.SIGKILL)


class DiesHoldingReplayLockEnv(CounterEnv):
    """Like CounterEnv, but the process that made it is SIGKILLed while it holds the shared replay's lock (as the OOM
    killer may do), 2 s after it took it, so that the others wait for it then: ``who="actor"``, an actor process
    (named ``*-actor-*``), in its first write to the replay's sum tree after its 200th step, when the learner learns
    (every shared replay updates the tree under its lock); ``who="learner"``, the learner (the script's main process
    makes one to read the spaces), in its tenth sampled batch."""

    def __init__(self, who: str):
        self.who, self.total = who, 0
        if who == "learner" and multiprocessing.current_process().name == "MainProcess":
            from cleanrl_utils import buffers

            stratified_sample, calls = buffers.SumTree.stratified_sample, []

            def dies_at_the_tenth(tree, *args, **kwargs):
                calls.append(1)
                if len(calls) == 10:
                    _sigkill_this_process()
                return stratified_sample(tree, *args, **kwargs)

            buffers.SumTree.stratified_sample = dies_at_the_tenth

    def step(self, action):
        self.total += 1
        if self.who == "actor" and self.total == 200 and "-actor-" in multiprocessing.current_process().name:
            from cleanrl_utils import buffers

            buffers.SumTree.update = _sigkill_this_process
        return super().step(action)


for _who in ("actor", "learner"):
    if f"{_who.title()}DiesHoldingReplayLock-v0" not in gym.registry:
        gym.register(f"{_who.title()}DiesHoldingReplayLock-v0", entry_point=DiesHoldingReplayLockEnv, kwargs={"who": _who},
                     max_episode_steps=3)  # fmt: skip


class FaultyEnv(gym.Env):
    """A small task that misbehaves on purpose after ``after`` steps of each env instance.

    Observations: 4 floats drawn from the env's generator; reward 1 per step; episodes truncated
    after 20 steps by the registered time limit. ``continuous`` gives a bounded Box(1) action
    space (for sac_continuous), else Discrete(2). ``fault``:

    - ``"nan_reward"``: the reward turns NaN; ``"nan_obs"``: the observation turns NaN;
    - ``"die"``: the process exits at once (``os._exit(3)``, as after an out-of-memory kill);
    - ``"hang"``: ``step`` never returns (sleeps for a day); ``"hang_init"``: nor does the constructor;
    - ``"assert"``: an exception without a message; ``"exit"``: ``SystemExit(0)`` from ``step``;
      ``"unpicklable"``: an exception of a class defined in a function; ``"huge_obs"``: a float64
      observation of 1e300;
    - wrong-typed output: ``"array_reward"`` (an array of two), ``"none_reward"``, ``"str_reward"`` ("1.0"),
      ``"str_obs"``, ``"shape_obs"`` (5 floats for a space of 4), ``"old_api"`` (gym's old 4-tuple),
      ``"bool_terminated"`` (the string "no"), ``"info_collision"`` (info keys ``final_obs`` and ``episode``,
      which the vector env and the episode statistics use), ``"broken_episode"`` (a terminating step whose
      info carries an ``episode`` entry of the wrong types);
    - ``"mutate"``: no fault in the numbers, but one observation array is returned by every
      ``reset`` and ``step`` and overwritten in place (Gymnasium#1132): a stored observation that
      is not a copy changes afterwards.
    """

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)

    def __init__(self, fault: str = "none", after: int = 300, continuous: bool = False):
        if fault == "hang_init":
            time.sleep(86400)
        self.fault, self.after, self.total = fault, after, 0
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32) if continuous else gym.spaces.Discrete(2)
        self.buffer = np.zeros(4, dtype=np.float32)

    def _obs(self) -> np.ndarray:
        values = self.np_random.normal(size=4).astype(np.float32)
        if self.fault == "mutate":
            self.buffer[:] = values
            return self.buffer
        return values

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        self.total += 1
        obs, reward = self._obs(), 1.0
        if self.total >= self.after:
            if self.fault == "nan_reward":
                reward = float("nan")
            elif self.fault == "nan_obs":
                obs = np.full(4, np.nan, dtype=np.float32)
            elif self.fault == "die":
                import os

                os._exit(3)
            elif self.fault == "hang":
                time.sleep(86400)
            elif self.fault == "assert":
                assert False  # noqa: B011  (an exception without a message)
            elif self.fault == "exit":
                raise SystemExit(0)  # as pygame's quit would end the process
            elif self.fault == "unpicklable":

                class LocalError(Exception):  # defined in a function: cannot be pickled to the main process
                    pass

                raise LocalError("from a local class")
            elif self.fault == "huge_obs":
                obs = np.full(4, 1e300)  # float64, finite; infinite as the float32 of the space
            elif self.fault == "array_reward":
                reward = np.array([1.0, 2.0])
            elif self.fault == "none_reward":
                reward = None
            elif self.fault == "str_reward":
                reward = "1.0"
            elif self.fault == "str_obs":
                obs = "up"
            elif self.fault == "shape_obs":
                obs = np.zeros(5, dtype=np.float32)
            elif self.fault == "old_api":
                return obs, reward, False, {}  # gym's old 4-tuple: done, no truncated
            elif self.fault == "bool_terminated":
                return obs, reward, "no", False, {}
            elif self.fault == "info_collision":
                return obs, reward, False, False, {"final_obs": 3, "episode": "over"}
            elif self.fault == "broken_episode":  # an env recording episode statistics of its own, broken
                return obs, reward, True, False, {"episode": {"r": "high", "l": None}}
        return obs, reward, False, False, {}


_FAULTS = ("nan_reward", "nan_obs", "die", "hang", "hang_init", "mutate", "assert", "exit", "unpicklable", "huge_obs")
_FAULTS += ("array_reward", "none_reward", "str_reward", "str_obs", "shape_obs", "old_api", "bool_terminated")
_FAULTS += ("info_collision", "broken_episode")
for _fault in _FAULTS:
    _name = "".join(part.title() for part in _fault.split("_"))  # NanReward, NanObs, Die, Hang, HangInit, Mutate
    if _fault in _FAULTS[10:] and f"Faulty{_name}First-v0" not in gym.registry:  # the fault at the first step
        gym.register(
            f"Faulty{_name}First-v0", entry_point=FaultyEnv, max_episode_steps=20, kwargs={"fault": _fault, "after": 1}
        )
    for _suffix, _continuous in (("", False), ("Box", True)):
        if f"Faulty{_name}{_suffix}-v0" not in gym.registry:
            gym.register(
                f"Faulty{_name}{_suffix}-v0",
                entry_point=FaultyEnv,
                max_episode_steps=20,
                kwargs={"fault": _fault, "continuous": _continuous},
            )


class EmptyMaskEnv(gym.Env):
    """Dict observation ``{"t": [t], "action_mask": MultiBinary(3)}``, reward 0, Discrete(3) actions.

    An env first reset with an even seed allows no action from step 5 on (its mask is all
    false); one reset with an odd seed always allows all. With ``--seed 1`` and two envs, env 1
    (seed 2) has an all-false mask at vector step 5.
    """

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Dict(
        {"t": gym.spaces.Box(0.0, 1000.0, shape=(1,), dtype=np.float32), "action_mask": gym.spaces.MultiBinary(3)}
    )
    action_space = gym.spaces.Discrete(3)
    empty_from = None

    def _obs(self):
        mask = np.zeros(3, np.int8) if self.empty_from is not None and self.t >= self.empty_from else np.ones(3, np.int8)
        return {"t": np.array([self.t], dtype=np.float32), "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.empty_from = 5 if seed % 2 == 0 else None
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, False, {}


if "EmptyMask-v0" not in gym.registry:
    gym.register("EmptyMask-v0", entry_point=EmptyMaskEnv, max_episode_steps=50)


class TextObservationEnv(EmptyMaskEnv):
    """Like EmptyMaskEnv, with a text leaf ``note`` in its observation (the structured-space scripts refuse it)."""

    observation_space = gym.spaces.Dict(
        {"t": gym.spaces.Box(0.0, 1000.0, shape=(1,), dtype=np.float32), "note": gym.spaces.Text(5)}
    )


if "TextObservation-v0" not in gym.registry:
    gym.register("TextObservation-v0", entry_point=TextObservationEnv, max_episode_steps=50)


class OddShapesEnv(EmptyMaskEnv):
    """Like EmptyMaskEnv (all actions allowed with odd seeds), with leaves of odd shapes: a scalar Box ``()``, an image
    smaller than the grid CNN reads ``(5, 5, 3)``, and a 3-D Box of features ``(8, 2, 16)``."""

    observation_space = gym.spaces.Dict(
        {
            "scalar": gym.spaces.Box(0.0, 1000.0, shape=(), dtype=np.float32),
            "tiny_image": gym.spaces.Box(0, 255, shape=(5, 5, 3), dtype=np.uint8),
            "features": gym.spaces.Box(-1.0, 1.0, shape=(8, 2, 16), dtype=np.float32),
            "action_mask": gym.spaces.MultiBinary(3),
        }
    )

    def _obs(self):
        space = self.observation_space
        return {
            "scalar": np.float32(self.t),
            "tiny_image": np.full(space["tiny_image"].shape, self.t % 256, np.uint8),
            "features": np.zeros(space["features"].shape, np.float32),
            "action_mask": np.ones(3, np.int8),
        }


if "OddShapes-v0" not in gym.registry:
    gym.register("OddShapes-v0", entry_point=OddShapesEnv, max_episode_steps=10)


class StartsAtOneEnv(CounterEnv):
    """Like CounterEnv, with actions ``Discrete(2, start=1)`` (1 and 2): the scripts, whose actions are 0-based, refuse it."""

    action_space = gym.spaces.Discrete(2, start=1)


if "StartsAtOne-v0" not in gym.registry:
    gym.register("StartsAtOne-v0", entry_point=StartsAtOneEnv, max_episode_steps=3)


class MultiDiscreteCounterEnv(CounterEnv):
    """Like CounterEnv, with actions ``MultiDiscrete([2, 3])``: action[0] == 1 terminates the episode and the reward is
    action[1] (0, 1 or 2), so a test reads from the rollout which dimension reached the env."""

    action_space = gym.spaces.MultiDiscrete([2, 3])

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(int(action[0]))
        return obs, float(action[1]), terminated, truncated, info


class MultiDiscreteTableEnv(CounterEnv):
    """Like CounterEnv, with a 2-D ``MultiDiscrete([[2, 2], [2, 2]])`` of actions (a table, not one row)."""

    action_space = gym.spaces.MultiDiscrete([[2, 2], [2, 2]])

    def step(self, action):
        return super().step(0)


if "MultiDiscreteCounter-v0" not in gym.registry:
    gym.register("MultiDiscreteCounter-v0", entry_point=MultiDiscreteCounterEnv, max_episode_steps=3)
    gym.register("MultiDiscreteTable-v0", entry_point=MultiDiscreteTableEnv, max_episode_steps=3)


class HangingCloseEnv(CounterEnv):
    """Like CounterEnv, but once it has stepped 8 times its ``close`` never returns (a sync run must still end,
    within --env-timeout; the start-up checks' env steps less and closes)."""

    steps = 0

    def step(self, action):
        self.steps += 1
        return super().step(action)

    def close(self):
        if self.steps > 8:
            time.sleep(3600)


if "HangingClose-v0" not in gym.registry:
    gym.register("HangingClose-v0", entry_point=HangingCloseEnv, max_episode_steps=3)

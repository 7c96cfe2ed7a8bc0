"""Gymnasium wrappers a script stacks in its make_env: output checks, and the replay log that restores an env exactly.

:class:`CheckedEnv` checks what an env returns; :class:`ReplayableEnv` logs what rebuilds it (:func:`envs_state` reads
every env's log through the vector env's public ``call``). Also :class:`TimedSteps` and :func:`real_next_obs`.
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from typing import Any

import gymnasium as gym
import numpy as np

from cleanrl_utils.faults import EnvFault

SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
"""An env whose episode ends is reset in that ``step``; its last observation is ``infos["final_obs"][i]``."""
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_NUMBERS = frozenset({float, int, np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8})
_FLAGS = frozenset({bool, np.bool_})
_NARROW = (np.dtype(np.float32), np.dtype(np.float16))
_RESERVED = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})  # the vector env writes these


class TimedSteps(gym.vector.VectorWrapper):
    """A vector env whose ``reset`` and ``step`` give the workers of a ``gym.vector.AsyncVectorEnv`` ``timeout`` seconds
    to answer (``--env-timeout``; gymnasium's own ``reset_wait``/``step_wait`` timeout, else
    ``multiprocessing.TimeoutError``, which :meth:`cleanrl_utils.run.Run.stop_on_fault` says in one line); any other
    vector env resets and steps as it does. :func:`call_envs` times the workers' other calls."""

    def __init__(self, env: gym.vector.VectorEnv, timeout: float):
        super().__init__(env)
        self.timeout = timeout

    def step(self, actions: Any) -> tuple:
        """``env.step(actions)``, an async env's workers timed."""
        if not isinstance(self.env, gym.vector.AsyncVectorEnv):
            return self.env.step(actions)
        self.env.step_async(actions)
        return self.env.step_wait(timeout=self.timeout)

    def reset(self, *, seed: int | list | None = None, options: dict | None = None) -> tuple:
        """``env.reset(seed=seed, options=options)``, an async env's workers timed."""
        if not isinstance(self.env, gym.vector.AsyncVectorEnv):
            return self.env.reset(seed=seed, options=options)
        self.env.reset_async(seed=seed, options=options)
        return self.env.reset_wait(timeout=self.timeout)


def call_envs(envs: gym.vector.VectorEnv, name: str, *args: Any) -> tuple:
    """``envs.unwrapped.call(name, *args)``: the method ``name`` of every env, a tuple ``[num_envs]`` of its results;
    the workers of an async env get the timeout of the :class:`TimedSteps` in ``envs`` (none there: no limit)."""
    timeout, env = None, envs
    while isinstance(env, gym.vector.VectorWrapper):
        timeout, env = env.timeout if isinstance(env, TimedSteps) else timeout, env.env
    if not isinstance(env, gym.vector.AsyncVectorEnv):
        return env.call(name, *args)
    env.call_async(name, *args)
    return env.call_wait(timeout=timeout)


def space_problem(space: gym.Space, value: Any, what: str = "observation") -> str | None:
    """What is wrong with ``value`` in ``space`` (its structure, shape and kind of dtype; not bounds), or None."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        keys = list(space.spaces) if isinstance(space, gym.spaces.Dict) else list(range(len(space.spaces)))
        if not isinstance(value, dict if isinstance(space, gym.spaces.Dict) else (tuple, list)) or len(value) != len(keys):
            return f"{what} {str(value)[:60]}, not a {type(space).__name__} of {keys}"
        if isinstance(space, gym.spaces.Dict) and set(value) != set(keys):
            return f"{what} with keys {sorted(map(str, value))}, not {sorted(keys)}"
        problems = (space_problem(space[key], value[key], f"{what}[{key!r}]") for key in keys)
        return next((problem for problem in problems if problem is not None), None)
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return None
    try:
        array = np.asarray(value) if isinstance(value, (np.ndarray, np.generic, int, float, bool, list, tuple)) else None
    except ValueError:  # ragged lists
        array = None
    kinds = "iub" if space.dtype is not None and space.dtype.kind in "iub" else "iubf"
    if array is None or array.dtype.kind not in kinds:
        return f"{what} {str(value)[:60]} ({type(value).__name__}), not an array of {space}"
    return None if array.shape == space.shape else f"{what} of shape {array.shape} where {space} has shape {space.shape}"


def step_problem(result: Any, space: gym.Space | None = None) -> str | None:
    """What is wrong with a ``step`` result (its API, types, and observation in ``space`` if given), or None."""
    if not isinstance(result, tuple) or len(result) != 5:
        old = " (gym's old API: obs, reward, done, info)" if isinstance(result, tuple) and len(result) == 4 else ""
        return f"returned {str(result)[:60]} from step, not (obs, reward, terminated, truncated, info){old}"
    obs, reward, terminated, truncated, info = result
    if not isinstance(reward, (int, float, np.integer, np.floating)) or isinstance(reward, (bool, np.bool_)):
        return f"returned a reward of {reward!r:.60} ({type(reward).__name__}), not a real number"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            return f"returned {name} = {flag!r:.60} ({type(flag).__name__}), not a bool"
    if not isinstance(info, dict) or _RESERVED & set(info):
        return f"returned an info that is not a dict or holds a key the vector env writes: {str(info)[:80]}"
    problem = None if space is None else space_problem(space, obs)
    return None if problem is None else f"returned an {problem}"


class CheckedEnv(gym.Wrapper):
    """An env (``index`` in its vector env) whose output is checked where it runs (in its worker process under
    ``gym.vector.AsyncVectorEnv``): in full at its first reset and step (:func:`step_problem`), then cheaply at every
    step and reset: a number reward, finite and within float32's range; bool flags; floating observations finite and
    within float32's range (what the scripts store), or float16's for a float16 space. Observations
    are copied once the env returns the same array twice (reusing it, Gymnasium#1132). In a worker process an env's
    exception becomes an :class:`EnvFault` saying where it was raised, and SIGINT, SIGTERM and SIGHUP are ignored (unless
    the process handles SIGINT itself, as a script run in a child process does): the main process gets them,
    checkpoints with its envs alive, then closes them.

    Raises (from ``reset`` or ``step``):
        EnvFault: ``env 2 returned a non-finite reward (nan) at its step 17``.
    """

    def __init__(self, env: gym.Env, index: int = 0):
        super().__init__(env)
        self.index, self.steps, self._first, self._last = index, 0, {"reset", "step"}, None
        space = env.observation_space  # floating observations: finite, and within float32's range (or float16's)
        floating = isinstance(space, gym.spaces.Box) and space.dtype.kind == "f"
        self._obs_max = min(float(np.finfo(space.dtype).max), _FLOAT32_MAX) if floating else 0
        self._dtype_name = "float16" if floating and space.dtype == np.float16 else "float32"
        self._copy = False
        # a worker or actor process, not a script run in a child process (which has a stop handler of its own)
        handler = signal.getsignal(signal.SIGINT)
        self._in_worker = multiprocessing.parent_process() is not None and handler in (
            signal.default_int_handler,
            signal.SIG_IGN,
        )

    def reset(self, **kwargs):
        """Reset as the wrapped env does; its first reset is checked in full, the others as a step's observation."""
        obs, info = self._call("reset", kwargs)
        self._check_observation(obs, f"in a reset after its step {self.steps}")
        return obs.copy() if self._copy else obs, info

    def step(self, action):
        """Step as the wrapped env does, checked (see the class)."""
        result = self._call("step", action)
        self.steps += 1
        obs, reward, terminated, truncated, info = result
        fine = type(reward) in _NUMBERS and type(terminated) in _FLAGS and type(truncated) in _FLAGS
        if not fine or (info and not _RESERVED.isdisjoint(info)):
            self._refuse(step_problem(result))
        if not -_FLOAT32_MAX <= reward <= _FLOAT32_MAX:  # NaN compares false
            what = "a non-finite reward" if np.isnan(reward) or np.isinf(reward) else "a reward beyond float32's range"
            self._refuse(f"returned {what} ({reward})")
        self._check_observation(obs)
        return (obs.copy() if self._copy else obs, reward, terminated, truncated, info)

    def _check_observation(self, obs: Any, where: str = "") -> None:
        if not self._obs_max or (
            getattr(obs, "dtype", None) in _NARROW and abs(np.add.reduce(obs, axis=None)) <= self._obs_max
        ):
            return  # float32 or float16 values of a finite sum are all finite and in range: one reduction, the common case
        if not (largest := np.abs(obs).max(initial=0)) <= self._obs_max:  # NaN compares false
            beyond = f"an observation beyond {self._dtype_name}'s range ({largest:g})"
            self._refuse(f"returned {beyond if np.isfinite(largest) else 'a non-finite observation'}", where)

    def _call(self, name: str, argument: Any) -> Any:
        if self._in_worker and self._first == {"reset", "step"}:  # once made, the main process handles stop signals
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
        try:
            result = self.env.reset(**argument) if name == "reset" else self.env.step(argument)
        except EnvFault:
            raise
        except (Exception, SystemExit) as error:  # SystemExit: env code that would end the process (a game's quit)
            where = traceback.extract_tb(error.__traceback__)[-1]
            if self._in_worker or isinstance(error, SystemExit):  # the main process gets no traceback: say where
                message = f"raised {type(error).__name__}: {str(error)[:200]} ({where.filename}:{where.lineno})"
                raise EnvFault(f"env {self.index} {message} in {name}, at its step {self.steps + 1}") from None
            error.add_note(f"(raised by env {self.index} in {name}, at its step {self.steps + 1})")
            raise
        if name in self._first:  # the first reset and the first step: in full, against the declared space
            self._first.discard(name)
            if name == "step":
                problem = step_problem(result, self.observation_space)
            elif isinstance(result, tuple) and len(result) == 2:
                problem = step_problem((result[0], 0.0, False, False, result[1]), self.observation_space)
            else:
                problem = f"returned {str(result)[:60]} from reset, not (obs, info)"
            self._refuse(problem, f"in its first {name}")
            self._copy = self._copy or (self._last is not None and result[0] is self._last)
            self._last = result[0] if isinstance(result[0], np.ndarray) else None
        return result

    def _refuse(self, problem: str | None, where: str = "") -> None:
        if problem is not None:
            raise EnvFault(f"env {self.index} {problem} {where or f'at its step {self.steps}'}")


# ---- exact resume: the replay log


def generator_state(generator: np.random.Generator | np.random.RandomState) -> dict:
    """A numpy generator's state as plain data (a legacy ``RandomState``'s, which dm_control draws from, too)."""
    if isinstance(generator, np.random.RandomState):
        return {"RandomState": _plain(generator.get_state(legacy=False))}
    return generator.bit_generator.state


def _plain(value: Any) -> Any:
    """An action, seed or reset option as plain data (arrays as ``{"ndarray": list, "dtype": str}``)."""
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value.item() if isinstance(value, np.generic) else value


class ReplayableEnv(gym.Wrapper):
    """An env whose exact state a checkpoint can rebuild (the outermost wrapper of a training env).

    It logs the base env's ``np_random`` state just before the base env's last real reset (an episodic-life wrapper's
    reset after a lost life is not one), and every ``reset``/``step`` call since; :meth:`restore` replays the log in a
    fresh env, rebuilding the base env and every wrapper below (frame stacks, time limits, episode statistics) for an
    env whose dynamics depend only on its actions and ``np_random`` (classic control, MuJoCo, the ALE without sticky
    actions). At most one episode is replayed. It sees real resets by setting the base env's ``reset`` attribute, on
    that instance only, to a function that notes the generator state and calls the original. ``index``: the env's
    index in its vector env.
    """

    def __init__(self, env: gym.Env, index: int = 0):
        super().__init__(env)
        self.index = index
        self._start: dict | None = None  # the base env's generator state just before its last real reset
        self._events: list = []  # ["reset", seed, options] or the action of a step
        self._reset_start: dict | None = None  # set by a real reset during the current call
        self.replay_generator = None  # while restoring: the generator the base env's first reset draws from
        base, original_reset = env.unwrapped, env.unwrapped.reset

        def observed_reset(*args, **kwargs):
            if self.replay_generator is not None:
                base.np_random, self.replay_generator = self.replay_generator, None
            if self._reset_start is None:  # the first real reset of this call
                self._reset_start = generator_state(base.np_random)
            return original_reset(*args, **kwargs)

        base.reset = observed_reset

    def _restart_if_reset(self) -> None:
        if self._reset_start is not None:  # this call reset the base env: the log starts again here
            self._start, self._events, self._reset_start = self._reset_start, [], None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset as the wrapped env does, and log it."""
        self._reset_start = None
        result = self.env.reset(seed=seed, options=options)
        self._restart_if_reset()
        self._events.append(["reset", seed, options])
        return result

    def step(self, action):
        """Step as the wrapped env does, and log the action."""
        result = self.env.step(action)
        self._restart_if_reset()
        self._events.append(action.copy() if type(action) is np.ndarray else action)  # the caller may reuse its array
        return result

    def replay_log(self) -> dict:
        """``{"start": generator state or None, "events": [["reset", seed, options] | ["step", action], ...]}``."""
        events = [_plain(event) if type(event) is list else ["step", _plain(event)] for event in self._events]
        return {"start": self._start, "events": events}

    def restore(self, logs: list[dict]) -> tuple:
        """Replay ``logs[self.index]`` in this fresh env (:func:`cleanrl_utils.resume.replay`, loaded by a resumed run
        only): ``(observation, info)`` of its last call."""
        from cleanrl_utils.resume import replay

        return replay(self, logs[self.index])


def envs_state(envs: gym.vector.VectorEnv) -> dict:
    """The replay logs of every env of ``envs`` (a vector env of :class:`ReplayableEnv`), as plain data."""
    return {"logs": list(call_envs(envs, "replay_log"))}


def real_next_obs(next_obs: Any, infos: dict) -> Any:
    """The real next observations ``[num_envs, ...]`` of a same-step-autoreset vector step: ``next_obs`` with the
    entries of envs whose episode just ended replaced by ``infos["final_obs"][i]`` (a copy when any are). What a TD
    target or a truncation bootstrap must use as s'. Dict and Tuple observations are replaced field by field."""
    if "_final_obs" not in infos:
        return next_obs
    ended = np.flatnonzero(infos["_final_obs"])

    def replace(batch: Any, finals: list) -> Any:
        if isinstance(batch, dict):
            return {key: replace(field, [final[key] for final in finals]) for key, field in batch.items()}
        if isinstance(batch, tuple):
            return tuple(replace(field, [final[j] for final in finals]) for j, field in enumerate(batch))
        real = batch.copy()
        real[ended] = np.stack(finals)
        return real

    return replace(next_obs, [infos["final_obs"][i] for i in ended])

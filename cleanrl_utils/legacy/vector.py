"""Vector environments for the scripts: sync or async stepping, same-step autoreset, and env state for checkpoints.

The scripts build their environments themselves (``make_env`` in each script shows every
wrapper); this module holds what is not specific to a script:

- :func:`vector_env`: ``env_fns`` stepped in this process, in one subprocess each, or in two groups of
  subprocesses stepped in turn (:class:`AlternatingVectorEnv`, rlpyt's alternating sampler), with the
  autoreset mode the script names;
- :class:`ReplayableEnv`: the wrapper that lets a checkpoint rebuild an env's exact state, and
  :func:`envs_state` / :func:`restore_envs` that save and restore every env of a vector env;
- :class:`EpisodesFromFinalInfo`: episode statistics recorded by each env (Atari game scores)
  brought to where the scripts read them;
- :func:`real_next_obs`: the observation that ended an episode, for TD targets and bootstraps.

How a checkpoint rebuilds an env: :class:`ReplayableEnv` keeps a replay log, the state of the
base env's random generator just before its last real reset and every ``reset``/``step`` call
since. Replaying the log in a fresh env rebuilds the exact state of the env and of every
wrapper in its stack (frame stacks, time limits, episode statistics, episodic-life
bookkeeping), for any env whose dynamics depend only on its actions and its ``np_random`` (the
classic-control and MuJoCo tasks, and the ALE games without sticky actions that the Atari
scripts take). An episode is replayed at most once, so restoring costs at most one episode of
environment steps per env. (The idea is that of deterministic simulators: the ALE's own
``cloneState`` was a seed plus actions in early versions; Bellemare et al. 2013, JAIR 47.)
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
from copy import deepcopy
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.async_vector_env import AsyncState

from cleanrl_utils.legacy.faults import (
    STOP_SIGNALS,
    EnvFault,
    check_env_step,
    close_on_fault,
    describe_exit,
    ignore_stop_signals,
    stop_now,
    stop_signals_held,
    time_limit,
)

SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
"""Same-step autoreset: when a sub-env's episode ends, ``step`` returns the first observation of
its next episode, and the observation that ended the episode is in ``infos["final_obs"][i]``
(flagged by ``infos["_final_obs"]``); its last info is in ``infos["final_info"]``."""


def vector_env(
    env_fns: Sequence[Callable[[], gym.Env]],
    env_mode: str = "sync",
    autoreset_mode: gym.vector.AutoresetMode = SAME_STEP,
    timeout: float = 600.0,
) -> gym.vector.VectorEnv:
    """``env_fns`` vectorised in this process (``"sync"``), in one subprocess each (``"async"``), or in two groups of
    subprocesses stepped in turn (``"alternating"``).

    Each vector env also has ``groups``, ``send`` and ``receive`` (:class:`AlternatingVectorEnv`; one group of
    every env in the other modes), so that one rollout loop serves every mode.

    Async subprocesses start from a ``forkserver`` (a fresh interpreter: a fork of a process
    whose torch/OpenMP thread pools run can crash the child), so ``env_fns`` must be picklable
    by cloudpickle (closures are); each worker first imports the module that defined its
    ``env_fn`` (what it registers on import, such as ale-py's game ids, is then there) and
    ignores SIGINT, SIGTERM and SIGHUP (held back while it starts): a Ctrl-C, a scheduler's
    SIGTERM or a closed terminal's SIGHUP sent to the whole process group reaches the main
    process, which checkpoints with its envs alive and then closes them.
    Without a display, rendering is set up headless (``SDL_VIDEODRIVER=dummy``,
    ``MUJOCO_GL=egl``; variables already set are kept).

    Every step is checked: a non-finite reward, or a non-finite value in a floating
    observation, raises :class:`cleanrl_utils.legacy.faults.EnvFault` naming the env. Each env's first
    ``reset`` and ``step`` are checked against the API and its declared spaces (a 5-tuple; the
    observation's structure, shape and dtype; a real-number reward; bool flags; a dict info
    without the keys the vector env and episode statistics write), and every step's types
    cheaply: a wrong one is an ``EnvFault`` naming the env, the step and the value. In async mode a
    worker that dies, or that does not answer a ``reset``/``step`` within ``timeout`` seconds,
    raises it too (naming the env, and the worker's exit code or signal); observations are
    copied out of each worker's env as it returns them, so an env that reuses its arrays
    cannot change a stored final observation.

    Args:
        env_fns: one thunk per env, each returning a ``gym.Env``.
        env_mode: ``"sync"``, ``"async"`` or ``"alternating"`` (two groups of async envs, see
            :class:`AlternatingVectorEnv`).
        autoreset_mode: gymnasium's autoreset mode (the scripts use :data:`SAME_STEP`).
        timeout: seconds an async worker may take to answer (``--env-timeout``); sync envs run
            in this process and are not timed.

    Raises:
        ValueError: ``env_mode`` is none of these; ``"alternating"`` with fewer than 2 envs.
    """
    headless_rendering()
    if env_mode == "sync":
        env_fns = [_FirstCallsChecked(env_fn, index) for index, env_fn in enumerate(env_fns)]
        if autoreset_mode == SAME_STEP:
            return SyncVectorEnv(env_fns, timeout)
        return gym.vector.SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
    if env_mode == "async":
        with stop_signals_held():  # the forkserver and the workers start with the signals held back
            try:
                return AsyncVectorEnv(env_fns, autoreset_mode, timeout)
            except BaseException as error:
                _stopped_while_starting(error)
                raise
    if env_mode == "alternating":
        with stop_signals_held():
            try:
                return AlternatingVectorEnv(env_fns, autoreset_mode, timeout)
            except BaseException as error:
                _stopped_while_starting(error)
                raise
    raise ValueError(f"env_mode must be 'sync', 'async' or 'alternating', got {env_mode!r}")


def headless_rendering() -> None:
    """Without a display, set rendering up off-screen: ``SDL_VIDEODRIVER=dummy`` (pygame's classic control) and
    ``MUJOCO_GL=egl`` (MuJoCo through EGL, no X server); variables already set are kept. dm_control reads
    ``MUJOCO_GL`` when it is imported, so this comes before (:func:`register_dm_control`)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless rgb_array rendering, no SDL noise
        os.environ.setdefault("MUJOCO_GL", "egl")  # MuJoCo renders off-screen through EGL (no X server)


DM_CONTROL = "dm_control/"
"""The namespace of the DeepMind Control Suite's ids as Shimmy registers them: ``dm_control/<domain>-<task>-v0``."""


def register_dm_control(env_id: str | None = None) -> None:
    """Register the ``dm_control/...`` ids in gymnasium's registry of this process, if ``env_id`` is one of them
    (None: whatever the id) and they are not registered yet.

    Shimmy registers them when it is imported (Tunyasuvunakool et al. 2020, "dm_control: Software and Tasks
    for Continuous Control", arXiv:2006.12983, through Farama's Shimmy); a process that has not imported it
    (an async env worker started from the forkserver, a fresh process evaluating a saved model) does not know
    them. Rendering is set up headless first (:func:`headless_rendering`): dm_control picks its OpenGL backend
    on import. Used by ``check_env`` (the main process), the async env workers and the evaluation.

    Raises:
        ModuleNotFoundError: Shimmy or dm_control is not installed: ``dm_control ids need the dm_control extra:
            pip install -e '.[dm_control]' (No module named 'shimmy')``.
    """
    if env_id is not None and (not str(env_id).startswith(DM_CONTROL) or env_id in gym.registry):
        return
    try:  # a CUDA build's triton, loaded lazily by the optimiser after dm_control's EGL has loaded Mesa's LLVM,
        import torch._dynamo  # noqa: F401  crashes the process (SIGSEGV): loaded first, both work
    except ImportError:
        pass
    headless_rendering()
    try:
        import dm_control  # noqa: F401  without it Shimmy registers no dm_control id, silently
        import shimmy
    except ModuleNotFoundError as error:
        extra = "dm_control ids need the dm_control extra: pip install -e '.[dm_control]'"
        raise ModuleNotFoundError(f"{extra} ({error})", name=error.name) from None
    gym.register_envs(shimmy)  # importing shimmy registered its ids; this names the use


def _stopped_while_starting(error: BaseException) -> None:
    """Where a stop signal (held back, see :func:`cleanrl_utils.legacy.faults.stop_signals_held`) arrived while the env
    workers were starting and the start failed (a worker or the forkserver killed by it), end the process with
    one line and 128 + the signal, as a stop does: no training step was made, so there is nothing to checkpoint."""
    pending = signal.sigpending() & set(STOP_SIGNALS)
    if not pending:
        return
    signum = min(pending)
    stop_now(
        f"{signal.Signals(signum).name} while the env workers were starting ({type(error).__name__}); "
        "stopped before the first step",
        128 + signum,
    )


# ---- checks of what envs return


REWARD_TYPES = frozenset({float, int, np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8})
"""Types of a reward accepted without a closer look (the per-step fast path; see :func:`step_problem`)."""
FLAG_TYPES = frozenset({bool, np.bool_})
"""Types of ``terminated`` and ``truncated`` accepted without a closer look."""
PLUMBING_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})
"""Info keys the vector env writes itself (same-step autoreset): an env's own would be taken for them."""
_BASE_ENV_KEYS = PLUMBING_KEYS | {"episode", "_episode"}
"""Info keys a base env must not return: the vector env's, and those of the episode statistics."""


def _show(value: Any) -> str:
    """A short description of ``value`` for a message: ``None``, ``'up' (str)``, ``array of shape (2,) (float64)``."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    text = repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({type(value).__name__})"


def space_problem(space: gym.Space, value: Any, what: str = "observation") -> str | None:
    """What is wrong with ``value`` as an element of ``space`` (its structure, shape and dtype), or None.

    Bounds are not checked (many envs leave them loosely declared); a dtype of another kind (text,
    objects, floats for an integer space) is refused, a wider one of the same kind is not.

    Args:
        space: a ``gymnasium.spaces`` Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple (others pass).
        value: what the env returned.
        what: its name in the message (``"observation"``, ``"observation['image']"``).

    Returns:
        A phrase to follow "returned a": ``"observation of shape (5,) where Box(...) has shape (4,)"``.
    """
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            found = f"with keys {sorted(map(str, value))}" if isinstance(value, dict) else _show(value)
            return f"{what} {found}, not a dict with keys {sorted(space.spaces)}"
        problems = (space_problem(sub, value[key], f"{what}[{key!r}]") for key, sub in space.spaces.items())
        return next((problem for problem in problems if problem is not None), None)
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
            return f"{what} {_show(value)}, not a tuple of {len(space.spaces)}"
        problems = (space_problem(sub, value[i], f"{what}[{i}]") for i, sub in enumerate(space.spaces))
        return next((problem for problem in problems if problem is not None), None)
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return None
    if not isinstance(value, (np.ndarray, np.generic, int, float, bool, list, tuple)):
        return f"{what} {_show(value)}, not an array of {space}"
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nested lists
        return f"{what} {_show(value)}, not an array of {space}"
    integers = space.dtype is not None and space.dtype.kind in "iub"
    if array.dtype.kind not in ("iub" if integers else "iubf"):
        return f"{what} {_show(value)}, whose dtype does not fit {space}"
    if array.shape != space.shape:
        return f"{what} of shape {array.shape} where {space} has shape {space.shape}"
    return None


def step_problem(result: Any, space: gym.Space | None = None, base: bool = False) -> str | None:
    """What is wrong with a ``step`` result, or None: the API (a 5-tuple), the reward (a real number),
    ``terminated`` and ``truncated`` (bools), the info (a dict without the vector env's keys) and, given
    ``space``, the observation (:func:`space_problem`). ``base``: the result of the innermost env, whose
    info must not hold the episode statistics' keys either."""
    if not isinstance(result, tuple) or len(result) != 5:
        if isinstance(result, tuple) and len(result) == 4:
            return (
                "returned 4 values from step (gym's old API: obs, reward, done, info); gymnasium's step returns 5 "
                "(obs, reward, terminated, truncated, info)"
            )
        return f"returned {_show(result)} from step, not (obs, reward, terminated, truncated, info)"
    obs, reward, terminated, truncated, info = result
    number = isinstance(reward, (int, float, np.integer, np.floating)) and not isinstance(reward, (bool, np.bool_))
    if not number and not (isinstance(reward, np.ndarray) and reward.shape == () and reward.dtype.kind in "iuf"):
        return f"returned a reward of {_show(reward)}, not a real number"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            return f"returned {name} = {_show(flag)}, not a bool"
    problem = info_problem(info, base)
    if problem is None and space is not None:
        problem = space_problem(space, obs)
        problem = None if problem is None else f"returned an {problem}"
    return problem


def info_problem(info: Any, base: bool = False) -> str | None:
    """What is wrong with an env's info, or None: not a dict, or a key the vector env writes (``final_obs``,
    ``final_info``, their ``_`` masks) or, with ``base``, the episode statistics (``episode``, ``_episode``)."""
    if not isinstance(info, dict):
        return f"returned an info of {_show(info)}, not a dict"
    clash = sorted(set(info) & (_BASE_ENV_KEYS if base else PLUMBING_KEYS))
    if clash:
        writer = "the episode statistics write" if "episode" in clash[0] else "the vector env writes"
        return f"returned an info with the key {clash[0]!r}, which {writer}"
    return None


def reset_problem(result: Any, space: gym.Space | None = None) -> str | None:
    """What is wrong with a ``reset`` result, or None: an ``(obs, info)`` pair whose obs fits ``space``."""
    if not isinstance(result, tuple) or len(result) != 2:
        return f"returned {_show(result)} from reset, not (obs, info)"
    problem = info_problem(result[1], base=True)
    if problem is None and space is not None:
        problem = space_problem(space, result[0])
        problem = None if problem is None else f"returned an {problem}"
    return problem


def check_final_observations(space: gym.Space, infos: dict, step: int, first: int = 0) -> None:
    """Raise :class:`EnvFault` naming the first env whose final observation (``infos["final_obs"]``, where an
    episode ended) does not fit ``space`` (:func:`space_problem`); ``step``: the vector step, for the message;
    ``first``: the run's index of the env in row 0 (a group of an alternating sampler)."""
    for index in np.flatnonzero(infos["_final_obs"]):
        problem = space_problem(space, infos["final_obs"][index], "final observation")
        if problem is not None:
            raise EnvFault(f"env {first + index} returned a {problem} at vector step {step}")


def unpacked_step(result: Any, index: int, step: int | None = None) -> tuple:
    """An env's ``step`` result as its five values, with the cheap per-step look at their types: a reward,
    ``terminated`` or ``truncated`` of a type outside :data:`REWARD_TYPES` / :data:`FLAG_TYPES`, or an info
    holding one of the :data:`PLUMBING_KEYS`, gets the closer look of :func:`step_problem`.

    Args:
        result: what ``env.step`` returned.
        index: the env's index, for the message.
        step: the vector step, for the message (None: the caller names it, as an async worker's main process does).

    Raises:
        EnvFault: ``env <index> <what is wrong>[ at vector step <step>]``.
    """
    try:
        obs, reward, terminated, truncated, info = result
    except (TypeError, ValueError):
        problem = step_problem(result)
    else:
        types_ok = type(reward) in REWARD_TYPES and type(terminated) in FLAG_TYPES and type(truncated) in FLAG_TYPES
        if types_ok and (not info or PLUMBING_KEYS.isdisjoint(info)):
            return result
        problem = step_problem(result)  # refused, or a subclass of a number or bool
        if problem is None:
            return result
    raise EnvFault(f"env {index} {problem}" + (f" at vector step {step}" if step is not None else ""))


class _FirstCallsChecked:
    """``env_fn`` whose env's base env (``env.unwrapped``) has its first ``reset`` and first ``step`` checked
    (:func:`reset_problem`, :func:`step_problem` against the base env's own declared spaces), before any wrapper
    reads them; then the checks step aside (nothing is added to later calls).

    Raises (from the checked call):
        EnvFault: ``env <index> returned ... at its first step`` (or ``reset``).
    """

    def __init__(self, env_fn: Callable[[], gym.Env], index: int):
        self.env_fn, self.index = env_fn, index

    def __call__(self) -> gym.Env:
        env = self.env_fn()
        base = env.unwrapped
        for name in ("reset", "step"):
            self._check_first(base, name)
        return env

    def _check_first(self, base: gym.Env, name: str) -> None:
        shadowed = name in vars(base)  # ReplayableEnv observes reset through an instance attribute
        original, index = getattr(base, name), self.index

        def checked(*args, **kwargs):
            result = original(*args, **kwargs)
            if shadowed:
                setattr(base, name, original)
            else:
                delattr(base, name)
            if name == "reset":
                problem = reset_problem(result, base.observation_space)
            else:
                problem = step_problem(result, base.observation_space, base=True)
            if problem is not None:
                raise EnvFault(f"env {index} {problem} at its first {name}")
            return result

        setattr(base, name, checked)


class _OneGroup:
    """The stepping interface of :class:`AlternatingVectorEnv` for a vector env whose envs form one group, so that a
    rollout loop written for groups runs with every ``--env-mode``: ``groups`` is ``[slice(0, num_envs)]``, and
    ``send(0, actions)`` then ``receive(0)`` is one ``step(actions)``."""

    @property
    def groups(self) -> list[slice]:
        """The one group of all envs."""
        return [slice(0, self.num_envs)]

    def send(self, group: int, actions) -> None:
        """Start a step of every env with its action ``actions[i]`` (``group`` is 0)."""
        self.step_async(actions)

    def receive(self, group: int) -> tuple:
        """The step :meth:`send` started: ``(obs, rewards, terminations, truncations, infos)`` of every env."""
        return self.step_wait()


class SyncVectorEnv(_OneGroup, gym.vector.SyncVectorEnv):
    """gymnasium's ``SyncVectorEnv`` with same-step autoreset and a leaner ``step``.

    Steps the envs one after another in this process and returns exactly what gymnasium's
    returns in ``AutoresetMode.SAME_STEP`` (the same infos, ``final_obs`` and ``final_info``
    included), with less work per step: actions of Box / Discrete / MultiDiscrete / MultiBinary
    spaces are indexed rather than iterated through a generic dispatch, infos are merged only
    when an env returns some, and Box observations are stacked into a new array rather than
    stacked and then deep-copied. The observation that ended an episode is copied before the
    env resets, so an env that reuses its observation array in place cannot overwrite it.

    A ``step`` or ``reset`` that takes longer than ``timeout`` seconds is interrupted (a
    ``SIGALRM`` timer, in the main thread) with :class:`cleanrl_utils.legacy.faults.EnvFault` naming
    the env; rewards and floating observations are checked for NaN and infinity.

    Args:
        env_fns: one thunk per env, each returning a ``gym.Env``.
        timeout: seconds a vector step or reset may take.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], timeout: float = 600.0):
        with time_limit(timeout, "creating the envs"):
            super().__init__(env_fns, copy=True, autoreset_mode=SAME_STEP)
        self.timeout, self.steps, self._current = timeout, 0, 0  # steps: vector steps so far, for fault messages
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGALRM, _on_alarm)
        flat = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
        self._index_actions = isinstance(self.single_action_space, flat)
        self._stack_obs = isinstance(self.single_observation_space, gym.spaces.Box)
        self._obs_dtype, self._obs_shape = self.single_observation_space.dtype, self.single_observation_space.shape

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs, within ``timeout`` seconds (an env whose ``close`` hangs is an ``EnvFault``).

        An ALE game's emulator is let go too: ale-py's env keeps it after ``close``, and its bindings report one
        still alive at the interpreter's exit as leaked (20 lines on stderr). The envs themselves stay readable.
        """
        with time_limit(self.timeout, "closing the envs"):
            super().close_extras(**kwargs)
        for env in self.envs:
            vars(env.unwrapped).pop("ale", None)

    def _check_observations(self) -> None:
        """Raise :class:`EnvFault` naming the first env whose observation does not fit the observation space."""
        for index, obs in enumerate(self._env_obs):
            problem = space_problem(self.single_observation_space, obs)
            if problem is not None:
                raise EnvFault(f"env {index} returned an {problem} at vector step {self.steps + 1}")

    def _timer(self, armed: bool) -> bool:
        """Arm (or disarm) the timeout for this vector env; only in the main thread, where signals are delivered
        (elsewhere it returns False: a caller stepping envs in a thread times them itself, as r2d2_async does)."""
        global _timed
        if threading.get_ident() != _MAIN_THREAD:
            return False
        _timed = self if armed else None
        # repeats every timeout seconds until disarmed: an env that swallows one is stopped by the next
        signal.setitimer(signal.ITIMER_REAL, self.timeout if armed else 0.0, self.timeout if armed else 0.0)
        return True

    def reset(self, *, seed=None, options=None):
        """Reset every env (see gymnasium's ``SyncVectorEnv.reset``), under the timeout."""
        timed, self._current = self._timer(True), None
        try:
            return super().reset(seed=seed, options=options)
        finally:
            if timed:
                self._timer(False)

    def step_async(self, actions) -> None:
        """Keep ``actions`` for :meth:`step_wait`, which steps the envs (in this process: nothing overlaps)."""
        self._actions = actions

    def step_wait(self) -> tuple:
        """Step every env with the actions given to :meth:`step_async` (see :meth:`step`)."""
        return self.step(self._actions)

    def step(self, actions):
        """Step every env with its action ``actions[i]``; an env whose episode ends is reset in the same call."""
        global _timed
        if threading.get_ident() != _MAIN_THREAD:  # not timed here (see _timer)
            return self._step(actions)
        _timed = self  # the timer (_timer, inlined: this runs every step) repeats until disarmed
        signal.setitimer(signal.ITIMER_REAL, self.timeout, self.timeout)
        try:
            return self._step(actions)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)

    def _step(self, actions):
        if self._index_actions and isinstance(actions, np.ndarray):
            actions_iter = actions
        else:
            actions_iter = list(gym.vector.utils.iterate(self.action_space, actions))
        infos: dict = {}
        try:
            for i, env in enumerate(self.envs):
                self._current = i
                obs, reward, terminated, truncated, env_info = unpacked_step(env.step(actions_iter[i]), i, self.steps + 1)
                self._rewards[i], self._terminations[i], self._truncations[i] = reward, terminated, truncated
                if terminated or truncated:
                    final_obs = _snapshot(obs)
                    infos = self._add_info(infos, {"final_obs": final_obs, "final_info": env_info}, i)
                    obs, env_info = env.reset()
                    unpacked_step((obs, 0.0, False, False, env_info), i, self.steps + 1)  # the reset's info
                if env_info:
                    infos = self._add_info(infos, env_info, i)
                self._env_obs[i] = obs
        except (SystemExit, KeyboardInterrupt) as error:  # env code that would end the process (a pygame quit)
            if isinstance(error, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                raise  # a Ctrl-C where no run handles it (an evaluation)
            raise EnvFault(f"env {self._current} raised {error!r} in step at vector step {self.steps + 1}") from None
        except EnvFault:
            raise
        except Exception as error:  # the env's own code: its traceback shows where, the note which env and when
            error.add_note(f"(raised by env {self._current} at vector step {self.steps + 1})")
            raise
        if self._stack_obs:  # in the space's dtype, as gymnasium's (float64 1e300 in a float32 space: inf, caught below)
            try:  # np.array of the list: np.stack's result in one C call (np.stack is Python: ~3x the cost)
                observations = np.array(self._env_obs, dtype=self._obs_dtype)
            except (TypeError, ValueError):  # text, or arrays of different shapes
                observations = None
            if observations is None or observations.shape[1:] != self._obs_shape:
                self._check_observations()
        else:
            self._observations = gym.vector.utils.concatenate(self.single_observation_space, self._env_obs, self._observations)
            observations = deepcopy(self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        self.steps += 1
        if "final_obs" in infos:
            check_final_observations(self.single_observation_space, infos, self.steps)
        check_env_step(self._rewards, observations, infos, self.steps)
        return observations, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos


_MAIN_THREAD = threading.main_thread().ident
_timed: SyncVectorEnv | None = None
"""The sync vector env whose reset or step the SIGALRM timer times now."""


def _on_alarm(signum, frame):
    if _timed is not None:
        which = f"env {_timed._current}" if _timed._current is not None else "an env resetting"
        raise EnvFault(f"{which}: no answer within --env-timeout {_timed.timeout:g} s (hung in reset or step?)")


class AsyncVectorEnv(_OneGroup, gym.vector.AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv`` (forkserver workers) that names the env behind a fault.

    A worker that died (its exit code or signal), or that does not answer within ``timeout``
    seconds, raises :class:`cleanrl_utils.legacy.faults.EnvFault` naming the env; the workers are then
    killed (they ignore SIGTERM, see :func:`vector_env`). Each step's rewards and floating
    observations are checked for NaN and infinity.

    Args:
        env_fns: one thunk per env.
        autoreset_mode: gymnasium's autoreset mode.
        timeout: seconds a worker may take to answer a call.
        first: the run's index of ``env_fns[0]``'s env, for messages (a group of :class:`AlternatingVectorEnv`).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        autoreset_mode: gym.vector.AutoresetMode,
        timeout: float,
        first: int = 0,
    ):
        self.timeout, self.steps, self.first = timeout, 0, first
        workers = [_Worker(_FirstCallsChecked(env_fn, first + i), first + i) for i, env_fn in enumerate(env_fns)]
        super().__init__(workers, autoreset_mode=autoreset_mode, context="forkserver")
        close_on_fault(self)

    def _fault(self, index: int | None, what: str) -> EnvFault:
        """Kill every worker and return the fault to raise (``index``: the env, None to find a dead one)."""
        processes = getattr(self, "processes", [])
        if index is None:
            for process in processes:
                process.join(timeout=1.0)  # a worker that closed its pipe is exiting
            index = next((i for i, process in enumerate(processes) if process.exitcode is not None), None)
        queued = self._queued_error()
        if queued is not None:  # the worker sent its env's error, then ended: that error, not its exit, is the fault
            index, what = queued
        elif index is not None and processes[index].exitcode is not None:
            what = f"its worker process (pid {processes[index].pid}) died: {describe_exit(processes[index].exitcode)}"
        for process in processes:
            if process.exitcode is None:
                process.kill()
        self.closed = True  # nothing left to close: the workers are gone
        name = f"env {self.first + index}" if index is not None else "an env worker"
        return EnvFault(f"{name}: {what}")

    def _queued_error(self) -> tuple[int, str] | None:
        """``(env index, "its env raised Kind: message")`` of an error a worker queued before it ended, else None."""
        try:
            index, kind, value, _ = self.error_queue.get(timeout=0.2)
        except (queue.Empty, AttributeError, OSError, ValueError):
            return None
        if issubclass(kind, EnvFault):  # the worker's own checks: left to the worker's exit as before
            return None
        return index, _raised(kind, value, self._when())

    def _when(self) -> str:
        """Where the envs were when a worker failed: ``at vector step N`` or ``in reset``."""
        states = {AsyncState.WAITING_STEP: f"at vector step {self.steps + 1}", AsyncState.WAITING_RESET: "in reset"}
        return states.get(self._state, f"in {self._state.value}")

    def _poll_pipe_envs(self, timeout: float | None = None) -> bool:
        timeout = self.timeout if timeout is None else timeout
        end = time.perf_counter() + timeout
        for index, pipe in enumerate(self.parent_pipes):
            if pipe is None or pipe.closed:
                raise self._fault(index, "its worker was shut down after an error")
            if not pipe.poll(max(end - time.perf_counter(), 0.0)):
                if self.processes[index].exitcode is not None:
                    raise self._fault(index, "")
                raise self._fault(index, f"no answer within --env-timeout {timeout:g} s (hung in reset or step?)")
        return True

    def _call_worker(self, method: Callable, *args):
        try:
            return method(*args)
        except (EOFError, BrokenPipeError, ConnectionResetError) as error:
            raise self._fault(None, f"lost contact with its worker ({type(error).__name__})") from None

    def reset_async(self, *args, **kwargs):
        return self._call_worker(lambda: super(AsyncVectorEnv, self).reset_async(*args, **kwargs))

    def reset_wait(self, *args, **kwargs):
        return self._call_worker(lambda: super(AsyncVectorEnv, self).reset_wait(*args, **kwargs))

    def step_async(self, actions):
        return self._call_worker(super().step_async, actions)

    def step_wait(self, timeout: float | None = None):
        try:
            result = self._call_worker(super().step_wait, timeout)
        except (TypeError, ValueError) as error:  # gymnasium's batching of what the workers sent (checked there first)
            raise self._fault(None, f"returned what cannot be batched at vector step {self.steps + 1}: {error}") from None
        self.steps += 1
        if "final_obs" in result[4]:
            check_final_observations(self.single_observation_space, result[4], self.steps, self.first)
        check_env_step(result[1], result[0], result[4], self.steps, self.first)
        return result

    def _raise_if_errors(self, successes):
        if all(successes):
            return
        try:  # gymnasium has logged the worker's traceback
            index, kind, value, _ = self.error_queue.get(timeout=10.0)
        except queue.Empty:  # an exception that cannot be pickled never arrives
            index = next((i for i, ok in enumerate(successes) if not ok), None)
            raise self._fault(index, "its env raised an exception that cannot be sent between processes") from None
        message = (str(value).strip().splitlines() or [""])[0][:300]
        when = self._when()
        if issubclass(kind, EnvFault):  # the worker's own checks (_Snapshots, _FirstCallsChecked): said as they are
            self._fault(index, "")  # kills the workers
            raise EnvFault(message if "at its first" in message else f"{message} {when}")
        raise self._fault(index, _raised(kind, value, when))

    def close_extras(self, timeout: float | None = None, terminate: bool = False):
        """Ask the workers to close their envs; kill those that have not ended within 10 s (or at once with ``terminate``)."""
        processes = getattr(self, "processes", [])
        if not terminate:
            for pipe in self.parent_pipes:
                if pipe is not None and not pipe.closed:
                    try:
                        pipe.send(("close", None))
                    except OSError:
                        pass
            deadline = time.perf_counter() + 10.0
            for pipe in self.parent_pipes:  # each worker acknowledges, then closes its env and ends
                try:
                    if pipe is not None and not pipe.closed and pipe.poll(max(deadline - time.perf_counter(), 0.0)):
                        pipe.recv()
                except (EOFError, OSError):
                    pass
            for process in processes:
                process.join(max(deadline - time.perf_counter(), 0.0))
        for process in processes:  # the workers ignore SIGTERM: kill them
            if process.exitcode is None:
                process.kill()
            process.join()
        for pipe in self.parent_pipes:
            if pipe is not None:
                pipe.close()


class AlternatingVectorEnv(gym.vector.VectorEnv):
    """rlpyt's alternating sampler: the envs in two groups of worker processes, stepped in turn so that the policy
    chooses one group's actions while the other group steps (Stooke & Abbeel 2019, arXiv:1909.01500, section 3.1).

    Envs ``0 .. h-1`` form group 0 and envs ``h .. N-1`` group 1 (``h = N // 2``), each an
    :class:`AsyncVectorEnv` (one subprocess per env, the same checks, faults and signal handling). A rollout loop
    steps the groups through :attr:`groups`, :meth:`send` and :meth:`receive`: group g's step runs from its
    ``send`` until its ``receive``, while this process computes the other group's actions::

        for g, cols in enumerate(envs.groups):
            obs_g, rewards_g, terminations_g, truncations_g, infos_g = envs.receive(g)  # columns cols
            envs.send(g, policy(obs_g))

    ``reset`` and ``step`` act on all ``N`` envs at once (both groups step together), with the results and infos
    of the two groups joined as one vector env of ``N`` returns them; ``call``, ``get_attr`` and ``set_attr``
    reach every env in order, as checkpoints need.

    Args:
        env_fns: one thunk per env, at least 2.
        autoreset_mode: gymnasium's autoreset mode.
        timeout: seconds a worker may take to answer a call.

    Raises:
        ValueError: fewer than 2 envs.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], autoreset_mode: gym.vector.AutoresetMode, timeout: float):
        if len(env_fns) < 2:
            raise ValueError(f"the alternating sampler needs at least 2 envs, got {len(env_fns)}")
        half = len(env_fns) // 2
        self.group_envs: list[AsyncVectorEnv] = []
        try:
            for first, fns in ((0, env_fns[:half]), (half, env_fns[half:])):
                self.group_envs.append(AsyncVectorEnv(fns, autoreset_mode, timeout, first=first))
        except BaseException:
            for made in self.group_envs:
                made.close(terminate=True)
            raise
        self.groups = [slice(0, half), slice(half, len(env_fns))]
        group = self.group_envs[0]
        self.num_envs = len(env_fns)
        self.single_observation_space, self.single_action_space = group.single_observation_space, group.single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata, self.render_mode, self.spec = group.metadata, group.render_mode, group.spec
        self.timeout = timeout

    @property
    def steps(self) -> int:
        """Vector steps so far (each group's count; they step in turn)."""
        return self.group_envs[0].steps

    @steps.setter
    def steps(self, value: int) -> None:
        for group in self.group_envs:
            group.steps = value

    def send(self, group: int, actions) -> None:
        """Start a step of group ``group``'s envs with their actions ``actions [len(group), ...]``; returns at once."""
        self.group_envs[group].step_async(actions)

    def receive(self, group: int) -> tuple:
        """Wait for the step :meth:`send` started in group ``group``: ``(obs, rewards, terminations, truncations,
        infos)`` of its envs only (row i is env ``groups[group].start + i``)."""
        return self.group_envs[group].step_wait()

    def reset(self, *, seed=None, options=None):
        """Reset every env; an int ``seed`` seeds env i with ``seed + i``, as gymnasium's vector envs do."""
        for group, cols in zip(self.group_envs, self.groups):
            if isinstance(seed, int):
                group_seed = seed + cols.start
            else:
                group_seed = None if seed is None else list(seed)[cols]
            group.reset_async(seed=group_seed, options=options)
        results = [group.reset_wait() for group in self.group_envs]
        return self._joined([obs for obs, _ in results]), _joined_infos(*(info for _, info in results), self.groups)

    def step(self, actions):
        """Step every env with its action ``actions[i]``, both groups at once."""
        for g, cols in enumerate(self.groups):
            self.send(g, actions[cols])
        results = [self.receive(g) for g in range(len(self.groups))]
        obs, rewards, terminations, truncations = (self._joined([r[i] for r in results]) for i in range(4))
        return obs, rewards, terminations, truncations, _joined_infos(results[0][4], results[1][4], self.groups)

    def _joined(self, parts: list) -> Any:
        if isinstance(parts[0], np.ndarray):
            return np.concatenate(parts)
        space = self.single_observation_space  # a Dict or Tuple observation
        return gym.vector.utils.concatenate(
            space,
            [
                *gym.vector.utils.iterate(self.group_envs[0].observation_space, parts[0]),
                *gym.vector.utils.iterate(self.group_envs[1].observation_space, parts[1]),
            ],
            gym.vector.utils.create_empty_array(space, n=self.num_envs),
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """``name`` called (or read) on every env, in order."""
        return tuple(result for group in self.group_envs for result in group.call(name, *args, **kwargs))

    def get_attr(self, name: str) -> tuple:
        """Attribute ``name`` of every env, in order."""
        return tuple(value for group in self.group_envs for value in group.get_attr(name))

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every env: to ``values[i]`` for a list or tuple, else to ``values``."""
        for group, cols in zip(self.group_envs, self.groups):
            group.set_attr(name, list(values)[cols] if isinstance(values, (list, tuple)) else values)

    def close_extras(self, **kwargs: Any) -> None:
        """Close both groups (``terminate=True``: kill their workers at once)."""
        for group in self.group_envs:
            group.close(**kwargs)


def _joined_infos(first: dict, second: dict, groups: list[slice]) -> dict:
    """The infos of two groups of envs as one vector env's: each array of per-env values (and its ``_key`` mask) of
    ``first`` [len(groups[0])] followed by ``second``'s [len(groups[1])]; a key only one group has is filled with
    gymnasium's blanks (zeros, False, None) for the other."""
    sizes = [cols.stop - cols.start for cols in groups]
    joined: dict = {}
    for key in [*first, *(key for key in second if key not in first)]:
        parts = [first.get(key), second.get(key)]
        if any(isinstance(part, dict) for part in parts):
            joined[key] = _joined_infos(parts[0] or {}, parts[1] or {}, groups)
            continue
        given = next(part for part in parts if part is not None)
        for i, part in enumerate(parts):
            if part is None:
                blank = None if given.dtype == object else 0
                parts[i] = np.full((sizes[i], *given.shape[1:]), blank, dtype=given.dtype)
        joined[key] = np.concatenate(parts)
    return joined


def _raised(kind: type, value: BaseException, when: str) -> str:
    """``its env raised Kind: first line of the message (when)``, as a fault names an env's exception."""
    message = (str(value).strip().splitlines() or [""])[0][:300]
    return f"its env raised {kind.__name__}" + (f": {message}" if message else "") + f" ({when})"


class _Worker:
    """``env_fn`` as an async worker runs it: signals ignored, the defining module imported first, every
    step's types checked (:class:`_Snapshots`)."""

    def __init__(self, env_fn: Callable[[], gym.Env], index: int = 0):
        self.env_fn, self.index = env_fn, index
        # made in the main process: a worker's registry (a fresh interpreter) is given the dm_control ids it holds
        self.dm_control = any(env_id.startswith(DM_CONTROL) for env_id in gym.registry)

    def __call__(self) -> gym.Env:
        if multiprocessing.parent_process() is not None:  # in a worker (the parent also calls it, for the spaces)
            ignore_stop_signals()
        if self.dm_control:
            register_dm_control()
        inner = getattr(self.env_fn, "env_fn", self.env_fn)  # inside _FirstCallsChecked
        module = getattr(inner, "__module__", None)
        if module and module != "__main__" and module not in sys.modules:
            try:
                importlib.import_module(module)
            except ImportError:  # a script loaded from a file under another name: nothing to redo
                pass
        return _Snapshots(self.env_fn(), self.index)


class _Snapshots(gym.Wrapper):
    """Copies of the observations an env returns, so that an env that reuses its arrays in place
    (Gymnasium#1132) cannot change an observation already handed on (a worker's final
    observation is sent after the env has reset). An exception that cannot be pickled to the
    main process is replaced by an :class:`EnvError` with its type's name and message. Each
    step's types are checked as :class:`SyncVectorEnv` checks them (an :class:`EnvFault` the main
    process names the step of)."""

    def __init__(self, env: gym.Env, index: int = 0):
        super().__init__(env)
        self.index = index

    def reset(self, **kwargs):
        try:
            obs, info = self.env.reset(**kwargs)
        except Exception as error:
            _raise_sendable(error)
            raise
        return _snapshot(obs), info

    def step(self, action):
        try:  # no cost per step: a try block is free until something raises
            result = self.env.step(action)
        except Exception as error:
            _raise_sendable(error)
            raise
        obs, reward, terminated, truncated, info = unpacked_step(result, self.index)  # the main process names the step
        return _snapshot(obs), reward, terminated, truncated, info


class EnvError(RuntimeError):
    """An env's exception that could not be sent from its worker process as it was; the message names its type."""


def _raise_sendable(error: Exception) -> None:
    """Raise :class:`EnvError` in place of ``error`` if ``error`` cannot be pickled to the main process
    (a class defined in a function, an ``__init__`` with other arguments, ...); else return. An exception
    without a message (a bare ``assert``) is given one: where it was raised, and that line of code."""
    if not str(error) and error.__traceback__ is not None:
        import traceback

        frame = traceback.extract_tb(error.__traceback__)[-1]
        error.args = (f"at {frame.filename}:{frame.lineno}: {frame.line}",)
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        raise EnvError(f"{type(error).__name__}: {error}") from None


def _snapshot(obs: Any) -> Any:
    """A copy of ``obs`` that later changes to the env's arrays cannot reach (``ndarray.copy`` where it is one)."""
    return obs.copy() if isinstance(obs, np.ndarray) else deepcopy(obs)


class EpisodesFromFinalInfo(gym.vector.VectorWrapper):
    """Episode statistics recorded by each env (``gym.wrappers.RecordEpisodeStatistics`` inside its
    stack, e.g. the game score below Atari's episodic life and reward clipping) reported where
    ``gym.wrappers.vector.RecordEpisodeStatistics`` puts them: ``infos["episode"]`` (``"r"``,
    ``"l"`` arrays ``[num_envs]``) and ``infos["_episode"]`` (bool ``[num_envs]``).

    With same-step autoreset the info of an episode's last step is under ``infos["final_info"]``;
    this copies its ``episode`` entries to the top.
    """

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        final = infos.get("final_info")
        if final is not None and "_episode" in final:
            infos["episode"], infos["_episode"] = final["episode"], final["_episode"]
        return obs, rewards, terminations, truncations, infos


def real_next_obs(next_obs: Any, infos: dict) -> Any:
    """The real next observations of a same-step-autoreset vector step, ``[num_envs, *obs_shape]``.

    ``next_obs[i]`` of an env whose episode just ended is already the first observation of its
    next episode; the one that ended the episode is ``infos["final_obs"][i]``. This returns
    ``next_obs`` with those entries replaced (a copy when any are; ``next_obs`` itself
    otherwise): what a TD target or a truncation bootstrap must use as s'.

    Args:
        next_obs: the vector env's observations: an array, or for Dict / Tuple spaces a dict /
            tuple of arrays (each ``[num_envs, ...]``, replaced field by field).
        infos: the vector env's infos of the same step.
    """
    if "_final_obs" not in infos:
        return next_obs
    ended = np.flatnonzero(infos["_final_obs"])
    finals = [infos["final_obs"][i] for i in ended]

    def replace(batch: Any, values: list) -> Any:
        if isinstance(batch, dict):
            return {key: replace(field, [value[key] for value in values]) for key, field in batch.items()}
        if isinstance(batch, tuple):
            return tuple(replace(field, [value[j] for value in values]) for j, field in enumerate(batch))
        real = batch.copy()
        for i, value in zip(ended, values):
            real[i] = value
        return real

    return replace(next_obs, finals)


# ---- env state for checkpoints


def generator_state(generator: np.random.Generator | np.random.RandomState) -> dict:
    """A numpy ``Generator``'s bit-generator state as plain data (ints, strings, dicts); of a legacy
    ``RandomState`` (dm_control's tasks draw from one, which Shimmy's env exposes as its ``np_random``),
    ``{"RandomState": its state}`` with the Mersenne Twister's key as a list of ints."""
    if isinstance(generator, np.random.RandomState):
        state = generator.get_state(legacy=False)
        key, pos = state["state"]["key"].tolist(), int(state["state"]["pos"])
        return {"RandomState": {**state, "state": {"key": key, "pos": pos}}}
    return generator.bit_generator.state


def make_generator(state: dict) -> np.random.Generator | np.random.RandomState:
    """A numpy ``Generator`` (or ``RandomState``) in the state returned by :func:`generator_state`.

    Raises:
        ValueError: the state names a bit generator numpy does not have, or does not fit it.
    """
    if "RandomState" in state:
        legacy = state["RandomState"]
        generator = np.random.RandomState()
        key = np.asarray(legacy["state"]["key"], dtype=np.uint32)
        generator.set_state({**legacy, "state": {"key": key, "pos": legacy["state"]["pos"]}})
        return generator
    try:
        bit_generator = getattr(np.random, state["bit_generator"])()
    except AttributeError:
        raise ValueError(f"unknown numpy bit generator {state['bit_generator']!r}") from None
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _plain(value: Any) -> Any:
    """``value`` (an action, a seed, reset options) as plain python data."""
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _unplain(value: Any) -> Any:
    """Inverse of :func:`_plain` (arrays come back with their dtype, values exactly)."""
    if isinstance(value, dict) and set(value) == {"ndarray", "dtype"}:
        return np.asarray(value["ndarray"], dtype=value["dtype"])
    if isinstance(value, dict):
        return {key: _unplain(item) for key, item in value.items()}
    return value


class _Reset:
    """A logged ``reset(seed=..., options=...)`` call."""

    __slots__ = ("seed", "options")

    def __init__(self, seed, options):
        self.seed, self.options = seed, options


class ReplayableEnv(gym.Wrapper):
    """Log what rebuilds this env's exact state in a checkpoint: its seed state and actions since the last reset.

    Wrap the outermost layer of each training env (``make_env`` of each script does). The log
    holds the base env's ``np_random`` state just before the base env's last real reset (an
    episodic-life wrapper's reset after a lost life is not one) and every ``reset``/``step``
    call on this wrapper since, with its arguments; :meth:`restore` replays it in a fresh env.
    The base env's ``reset`` is observed by shadowing it on the instance; nothing else changes.

    Args:
        env: the env with all its wrappers.
        index: the env's index in its vector env (picks its log in :meth:`restore`).
    """

    def __init__(self, env: gym.Env, index: int = 0):
        super().__init__(env)
        self.index = index
        self._start: dict | None = None  # base env's np_random state just before the last real reset
        self._events: list = []  # a _Reset(seed, options), or the action of a step
        self._reset_start: dict | None = None  # set by a real reset during the current call
        self._replay_start: dict | None = None  # while restoring: the generator state to reset with
        base = env.unwrapped
        original_reset = base.reset

        def observed_reset(*args, **kwargs):
            if self._replay_start is not None:  # restoring: the generator as it was at the recorded reset
                base.np_random = make_generator(self._replay_start)
                self._replay_start = None
            if self._reset_start is None:  # the first real reset of this call (a no-op reset may reset again)
                self._reset_start = generator_state(base.np_random)
            return original_reset(*args, **kwargs)

        base.reset = observed_reset  # the wrappers below call base.reset: an instance attribute wins

    def _restart_log_if_reset(self) -> None:
        if self._reset_start is not None:  # this call reset the base env: the log starts again here
            self._start, self._events = self._reset_start, []
            self._reset_start = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset as the wrapped env does, and log it."""
        self._reset_start = None
        result = self.env.reset(seed=seed, options=options)
        self._restart_log_if_reset()
        self._events.append(_Reset(seed, options))
        return result

    def step(self, action):
        """Step as the wrapped env does, and log the action."""
        result = self.env.step(action)
        if self._reset_start is not None:  # a wrapper reset the base env inside step
            self._restart_log_if_reset()
        self._events.append(action.copy() if type(action) is np.ndarray else action)  # the caller may reuse its array
        return result

    def replay_log(self) -> dict:
        """``{"start": generator state or None, "events": [["reset", seed, options] | ["step", action], ...]}``."""
        events = [
            ["reset", _plain(event.seed), _plain(event.options)] if type(event) is _Reset else ["step", _plain(event)]
            for event in self._events
        ]
        return {"start": self._start, "events": events}

    def restore(self, logs: list[dict]):
        """Rebuild the state logged in ``logs[self.index]`` by replaying it in this (fresh) env.

        Returns:
            ``(observation, info)`` of the last replayed call: the observation the run would
            act on next.

        Raises:
            ValueError: the log is empty (the env was never reset).
        """
        log = logs[self.index]
        events = log["events"]
        if not events:
            raise ValueError("empty replay log: the env was never reset")
        observation, info = None, {}
        for number, event in enumerate(events):
            if number == 0:  # the first call resets the base env: with the recorded generator state
                self._replay_start = log["start"]
            if event[0] == "reset":
                observation, info = self.reset(seed=event[1], options=_unplain(event[2]))
            else:
                observation, _, _, _, info = self.step(_unplain(event[1]))
        return observation, info


def envs_state(envs: gym.vector.VectorEnv) -> dict:
    """The replay logs of every sub-env of ``envs`` (sync or async), and the vector-level episode
    statistics when ``envs`` records them, as plain data and tensors."""
    state = {"logs": list(envs.unwrapped.call("replay_log")), "vector_steps": getattr(envs.unwrapped, "steps", 0)}
    statistics = _episode_statistics(envs)
    if statistics is not None:
        state["episode_returns"] = torch.tensor(statistics.episode_returns)
        state["episode_lengths"] = torch.tensor(statistics.episode_lengths)
    return state


def restore_envs(envs: gym.vector.VectorEnv, state: dict) -> Any:
    """Replay every sub-env of a freshly made ``envs`` into the state saved by :func:`envs_state`.

    Returns:
        The batched observation ``[num_envs, ...]`` the run acts on next.

    Raises:
        ValueError: the number of saved envs differs from ``envs.num_envs``, or a log is empty.
    """
    logs = state["logs"]
    if len(logs) != envs.num_envs:
        raise ValueError(f"the checkpoint has {len(logs)} envs, this run {envs.num_envs}")
    results = envs.unwrapped.call("restore", logs)
    statistics = _episode_statistics(envs)
    if hasattr(envs.unwrapped, "steps"):  # fault messages count the vector steps of the whole run
        envs.unwrapped.steps = int(state.get("vector_steps", 0))
    if statistics is not None and "episode_returns" in state:
        statistics.episode_returns[:] = state["episode_returns"].numpy()
        statistics.episode_lengths[:] = state["episode_lengths"].numpy()
    observations = [observation for observation, _ in results]
    return gym.vector.utils.concatenate(
        envs.single_observation_space,
        observations,
        gym.vector.utils.create_empty_array(envs.single_observation_space, n=envs.num_envs),
    )


def _episode_statistics(envs):
    """The vector-level ``RecordEpisodeStatistics`` wrapper of ``envs``, if any."""
    layer = envs
    while isinstance(layer, gym.vector.VectorWrapper):
        if isinstance(layer, gym.wrappers.vector.RecordEpisodeStatistics):
            return layer
        layer = layer.env
    return None

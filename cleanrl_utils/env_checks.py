"""Checks of an environment before a run: its id is known, the env can be made, and its spaces fit the script.

Each refusal is one line naming ``--env-id`` (exit 2), with the ids it may have meant.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from cleanrl_utils.flags import fail, require


def headless_rendering() -> None:
    """Without a display, render off-screen (``SDL_VIDEODRIVER=dummy`` for pygame, ``MUJOCO_GL=egl`` for MuJoCo);
    variables already set are kept."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("MUJOCO_GL", "egl")


def check_env(args: Any, action_spaces: type | tuple, observation_spaces: type | tuple, obs_ndim: int | None = None,
              bounded_actions: bool = False, id_suffix: str | None = None, flatten: bool = False) -> tuple:  # fmt: skip
    """Stop with one line unless ``args.env_id`` is known, can be made, and has spaces the script supports.

    ``"package.module:Env-v0"`` imports the module (the working directory last) to register the id; Atari ids are
    registered from ale-py, ``dm_control/...`` ids from Shimmy (:mod:`cleanrl_utils.dmc`). One env is made to read its spaces.

    Args:
        action_spaces, observation_spaces: the ``gymnasium.spaces`` class(es) accepted.
        obs_ndim: the number of dimensions observations must have (1: flat vectors).
        bounded_actions: a 1-D Box of actions with finite bounds (scripts that rescale into them).
        id_suffix: suggest only ids ending with it (``"NoFrameskip-v4"``: ``Breakout-v5`` gets ``BreakoutNoFrameskip-v4``).
        flatten: the script flattens a Dict of vectors (``gym.wrappers.FlattenObservation``): checked as that Box.

    Returns:
        ``(observation_space, action_space)``.

    Raises:
        SystemExit: status 2, one line naming ``--env-id``.
    """
    headless_rendering()
    env_id, script = args.env_id, f"{args.script}.py"
    module, _, name = env_id.rpartition(":")
    if module:
        if os.getcwd() not in sys.path and "" not in sys.path:  # the working directory last: a file there cannot
            sys.path.append(os.getcwd())  # replace a module the script imports (`python cleanrl/x.py` puts cleanrl/ first)
        try:
            importlib.import_module(module)
        except (ImportError, TypeError, ValueError) as error:
            from cleanrl_utils.env_modules import cannot_import  # the refusal's words: where it looked

            fail("--env-id", cannot_import(module, f" to register {name!r}", error))
    elif name not in gym.registry and importlib.util.find_spec("ale_py"):
        import ale_py

        gym.register_envs(ale_py)
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
    missing = ""
    if name.startswith("dm_control/"):
        from cleanrl_utils import dmc

        try:
            dmc.register(name)
        except ModuleNotFoundError as error:
            missing = f" ({error})"
    if name not in gym.registry:
        from cleanrl_utils.env_modules import unknown_env  # the refusal's words: the ids it may have meant

        fail("--env-id", unknown_env(env_id, id_suffix) + missing)
    try:
        with gym.make(env_id) as env:
            action_space, observation_space = env.action_space, env.observation_space
    except Exception as error:  # a missing extra (mujoco), a broken env
        extra = " (this project's mujoco extra: pip install -e '.[mujoco]')" * ("MuJoCo is not installed" in str(error))
        fail("--env-id", f"cannot create {env_id!r}: {type(error).__name__}: {error}{extra}")
    if flatten and isinstance(observation_space, gym.spaces.Dict):
        for key, entry in observation_space.items():
            flat = isinstance(entry, gym.spaces.Box) and len(entry.shape) <= 1
            require(flat, "--env-id", f"{env_id} has the entry {key!r} {entry}; {script} flattens Dicts of vectors only")
        observation_space = gym.spaces.flatten_space(observation_space)
    for what, space, accepted in (
        ("action", action_space, action_spaces),
        ("observation", observation_space, observation_spaces),
    ):
        names = " or ".join(kind.__name__ for kind in np.atleast_1d(accepted))
        require(isinstance(space, accepted), "--env-id", f"{env_id} has {what} space {space}; {script} supports {names} only")
    starts = np.asarray(getattr(action_space, "start", 0))  # Discrete(n, start=1): the scripts act with 0..n-1
    shift = f"whose actions start at {starts.tolist()}; {script} acts from 0 (shift them: gym.wrappers.TransformAction)"
    require(not starts.any(), "--env-id", f"{env_id} has action space {action_space}, {shift}")
    if obs_ndim is not None:
        shape = observation_space.shape
        only = f"{script} supports {obs_ndim}-dimensional observations only"
        require(len(shape) == obs_ndim, "--env-id", f"{env_id} has observations of shape {shape}; {only}")
    if bounded_actions:
        bounded = len(action_space.shape) == 1 and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()
        require(bool(bounded), "--env-id", f"{env_id} has unbounded actions {action_space}; {script} rescales into bounds")
    return observation_space, action_space

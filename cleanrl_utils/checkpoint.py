"""Exact resume: a run's state captured into a checkpoint and restored in place, and the arguments of the run it continues.

A script declares its checkpoint state once, a dict of what changes while it trains (``{"agent": agent,
"optimizer": optimizer, "envs": envs, "rng": rng}``). :func:`capture` turns it into tensors and plain data:

- a ``torch.nn.Module`` or ``torch.optim.Optimizer``, or anything with ``state_dict``/``load_state_dict`` (a replay
  buffer, normalisation statistics): its state dict, checked when loaded (:mod:`cleanrl_utils.files`);
- a ``numpy.random.Generator`` or ``torch.Generator``: its state; a ``torch.Tensor`` (a learnt ``log α``): its value;
- a ``gymnasium.vector.VectorEnv`` of :class:`~cleanrl_utils.wrappers.ReplayableEnv`: every env's replay log.

:func:`restore` loads it back into the same objects. A checkpoint also holds the global generators of python,
numpy and torch (:func:`rng_state`) and the loop's counters. The format follows PyTorch's "Saving and loading a
general checkpoint".
"""

from __future__ import annotations

import dataclasses
import json
import random
import shlex
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.files import (
    FileDamaged,
    FileRefused,
    checkpoints,
    load_module,
    load_optimizer,
    model_path,
    read_file,
    untrusted_env_module,
)
from cleanrl_utils.flags import RESUMABLE_WITH_OTHER_VALUES, check_saved_types, fail, flag_name
from cleanrl_utils.wrappers import envs_state, restore_envs


def rng_state() -> dict:
    """The states of python's ``random``, numpy's global generator and torch's CPU (and CUDA) generators, loadable
    with ``weights_only=True``."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy = {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss)}
    state = {"python": random.getstate(), "numpy": {**numpy, "cached_gaussian": float(cached)}, "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the generators :func:`rng_state` saved."""
    python, numpy = state["python"], state["numpy"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["name"], keys, numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def capture(state: dict[str, Any]) -> dict[str, Any]:
    """Each object of a script's checkpoint ``state`` as tensors and plain data (see the module docstring).

    Raises:
        TypeError: an object of another type.
    """
    captured = {}
    for name, value in state.items():
        if isinstance(value, gym.vector.VectorEnv):
            captured[name] = envs_state(value)
        elif isinstance(value, np.random.Generator):
            captured[name] = value.bit_generator.state
        elif isinstance(value, (torch.Generator, torch.Tensor)):
            captured[name] = value.get_state() if isinstance(value, torch.Generator) else value.detach().cpu().clone()
        elif hasattr(value, "state_dict"):
            captured[name] = value.state_dict()
        else:
            raise TypeError(f"checkpoint state {name!r}: cannot save a {type(value).__name__}")
    return captured


def restore(state: dict[str, Any], saved: dict[str, Any]) -> tuple[Any, list[str]]:
    """Load ``saved`` (a checkpoint's content: its ``"state"`` captured by :func:`capture`, ``"modules"``, ``"path"``)
    into the objects of ``state``, in place.

    Returns:
        ``(obs, missing)``: the batched observation the restored vector env acts on next (None without one), and the
        names of the entries of ``state`` the checkpoint lacks (left as they are).

    Raises:
        cleanrl_utils.files.FileRefused: one line: a network or optimiser state that does not fit.
        ValueError, KeyError, TypeError: saved envs, generators or a buffer that do not fit.
    """
    obs, missing, captured = None, [], saved["state"]
    content = {**captured, "path": saved["path"], "modules": saved.get("modules", {})}
    for name, value in state.items():
        if name not in captured:
            missing.append(name)
        elif isinstance(value, gym.vector.VectorEnv):
            obs = restore_envs(value, captured[name])
        elif isinstance(value, np.random.Generator):
            value.bit_generator.state = captured[name]
        elif isinstance(value, torch.Generator):
            value.set_state(captured[name])
        elif isinstance(value, torch.Tensor):
            with torch.no_grad():
                value.copy_(captured[name])
        elif isinstance(value, torch.nn.Module):
            load_module(value, name, content)
        elif isinstance(value, torch.optim.Optimizer):
            load_optimizer(value, name, content)
        else:
            value.load_state_dict(captured[name])
    return obs, missing


def load(path: str, script: str) -> dict:
    """The checkpoint ``script`` wrote at ``path``: the file, or a run directory's newest checkpoint (when that one is
    damaged, by a crash or a full disk, the one before it, said on stderr). It must lie in its run directory's
    ``checkpoints/`` beside an ``args.json`` of the same run.

    Raises:
        cleanrl_utils.files.FileRefused: one line.
    """
    candidates = checkpoints(path) if Path(path).is_dir() else [Path(path)]
    if not candidates:
        raise FileRefused(f"{path} has no checkpoints (looked in {Path(path) / 'checkpoints'})")
    while True:
        try:
            content = read_file(candidates.pop(), "checkpoint", script)
            break
        except FileDamaged as error:
            if not candidates:
                raise
            print(f"--resume: {error}; resuming from {candidates[-1].name} instead", file=sys.stderr, flush=True)
    file = Path(content["path"])
    run = file.parent.parent
    if file.parent.name != "checkpoints" or not (run / "args.json").is_file():
        raise FileRefused(f"{file} is not in a run directory (<run>/checkpoints/ beside <run>/args.json)")
    try:
        recorded = json.loads((run / "args.json").read_text())
    except (OSError, ValueError, RecursionError) as error:
        raise FileRefused(f"{run / 'args.json'} cannot be read: {error}") from None
    recorded = recorded if isinstance(recorded, dict) else {}
    differ = [key for key in ("env_id", "exp_name", "seed") if recorded.get(key) != content["args"].get(key)]
    if differ:  # a checkpoint copied or linked into another run's folder
        raise FileRefused(f"{file} belongs to another run than {run} (its {', '.join(differ)} differ from args.json)")
    return content


def resumed_args(args: Any, given: set[str]) -> tuple[Any, dict]:
    """The arguments of the run ``args.resume`` names, and its checkpoint: the checkpoint's values, but for the flags
    of :data:`~cleanrl_utils.flags.RESUMABLE_WITH_OTHER_VALUES` in ``given``.

    Raises:
        SystemExit: status 2, one line: no such checkpoint, another script's, damaged; a flag given with another
            value than the checkpoint's; an env id that imports a module the user did not name; a finished run.
    """
    try:
        checkpoint = load(args.resume, args.script)
    except FileRefused as error:
        fail("--resume", str(error))
    fields = [field.name for field in dataclasses.fields(args)]
    saved = check_saved_types(type(args), checkpoint["args"], checkpoint["path"], ("env_id", "exp_name", "seed"))
    unknown = sorted(set(checkpoint["args"]) - set(fields))
    if unknown:
        fail("--resume", f"the checkpoint has arguments this {args.script}.py does not know: {', '.join(unknown)}")
    module = untrusted_env_module(saved["env_id"])
    if module and "env_id" not in given:  # the user names what would be imported, not the file
        again = f"--resume {args.resume} --env-id {saved['env_id']}"
        fail("--env-id", f"the checkpoint's env id {saved['env_id']!r} imports the module {module!r}; name it: {again}")
    for name in given - RESUMABLE_WITH_OTHER_VALUES:
        if name in saved and getattr(args, name) != saved[name]:
            why = "leave it out to continue the run as it was started"
            fail(flag_name(name), f"{getattr(args, name)!r} differs from the resumed run's {saved[name]!r}; {why}")
    run = Path(checkpoint["path"]).parent.parent
    if model_path(run, saved["exp_name"]).exists():  # written once, when training ended
        fail(
            "--resume",
            f"{run} has finished: its model exists; evaluate it: python -m cleanrl_utils.enjoy {shlex.quote(str(run))}",
        )
    keep = {name for name in fields if name == "resume" or name not in saved or name in given & RESUMABLE_WITH_OTHER_VALUES}
    return type(args)(**{name: getattr(args, name) if name in keep else saved[name] for name in fields}), checkpoint

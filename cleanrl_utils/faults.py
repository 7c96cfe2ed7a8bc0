"""Faults that stop a run in one line: non-finite numbers, envs that die, hang or misbehave, files that cannot be written.

A :class:`Fault` is an error a run cannot survive and a user can act on. The scripts do not catch
them: :func:`one_line_faults` (installed by ``cleanrl_utils.run.start_run``) prints an uncaught
``Fault`` as one line, ``<script>.py: <what and where>; last checkpoint: <file or none>``, and the
process exits with status 1; every other exception keeps its traceback. Nothing is written after a
fault: the last good checkpoint is the one the line names.
"""

from __future__ import annotations

import math
import sys
import weakref
from typing import Any, Callable

import numpy as np
import torch

_to_close: weakref.WeakSet = weakref.WeakSet()
"""Objects with ``close(terminate=True)`` (async vector envs) closed when a fault ends the run."""


def close_on_fault(closable: Any) -> None:
    """Have :func:`one_line_faults` call ``closable.close(terminate=True)`` when a fault ends the run."""
    _to_close.add(closable)


class Fault(RuntimeError):
    """An error that ends a run, reported in one line (see :func:`one_line_faults`)."""


class NonFinite(Fault):
    """A loss, gradient norm, parameter, reward or observation that is NaN or infinite."""


class EnvFault(Fault):
    """An environment (or its worker process) that died, hung past ``--env-timeout``, or returned non-finite numbers."""


class WriteFailed(Fault, OSError):
    """A model or checkpoint file that could not be written (disk full, read-only folder, ...)."""


def check_finite(update: int | str, global_step: int, **quantities: torch.Tensor | float) -> None:
    """Raise :class:`NonFinite` naming the first of ``quantities`` that is not finite.

    Call it once per gradient update, before ``optimizer.step()`` where it can be, with the
    losses and the gradient norm: a diverging update then stops before it reaches the weights.
    On a GPU the check reads one boolean back per update; the loops already read the actions
    back to the CPU at every env step, so it adds no synchronisation point of its own.

    Args:
        update: the number of this gradient update (an int: "update 37"), or where it is
            (a string: "iteration 4, epoch 2").
        global_step: environment steps so far.
        quantities: scalar tensors (any shape is reduced with ``all``) or numbers, by name.

    Raises:
        NonFinite: ``non-finite value_loss (nan) at update 37, global step 18944``.
    """
    tensors = [torch.as_tensor(value).detach() for value in quantities.values()]
    if bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()):
        return
    for name, tensor in zip(quantities, tensors):
        if not bool(torch.isfinite(tensor).all()):
            shown = tensor.flatten()[~torch.isfinite(tensor.flatten())][0].item()
            where = f"update {update}" if isinstance(update, int) else update
            raise NonFinite(f"non-finite {name} ({shown}) at {where}, global step {global_step}")


def check_parameters(modules: dict[str, Any], what: str) -> None:
    """Raise :class:`NonFinite` if a floating tensor of ``modules`` (networks, tensors) is not finite.

    Args:
        modules: ``{name: torch.nn.Module or torch.Tensor}``; other values are ignored.
        what: the file about to be written, for the message.
    """
    for name, value in modules.items():
        if isinstance(value, torch.nn.Module):
            tensors = [(f"{name}.{key}", t) for key, t in value.state_dict().items()]
        elif isinstance(value, torch.Tensor):
            tensors = [(name, value)]
        else:
            continue
        for key, tensor in tensors:
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise NonFinite(f"{key} holds non-finite values: {what} not written")


def check_env_step(rewards: np.ndarray, observations: Any, infos: dict, step: int) -> None:
    """Raise :class:`EnvFault` naming the env whose reward or (floating) observation is not finite.

    Args:
        rewards: ``[num_envs]``.
        observations: ``[num_envs, ...]`` (a floating array is checked; integer images are finite),
            or a dict/tuple of such arrays.
        infos: the step's infos; the final observations of ended episodes (``"final_obs"``) are checked too.
        step: the vector env's step count, for the message.
    """
    if (
        np.isfinite(rewards).all()
        and "final_obs" not in infos
        and (not isinstance(observations, np.ndarray) or observations.dtype.kind != "f" or np.isfinite(observations).all())
    ):
        return  # the common case, in a few microseconds: all finite, no episode ended
    if not np.isfinite(rewards).all():
        index = int(np.flatnonzero(~np.isfinite(rewards))[0])
        raise EnvFault(f"env {index} returned a non-finite reward ({rewards[index]}) at vector step {step}")
    index = _non_finite_row(observations)
    if index is not None:
        raise EnvFault(f"env {index} returned a non-finite observation at vector step {step}")
    if "final_obs" in infos:
        for index in np.flatnonzero(infos["_final_obs"]):
            if _non_finite_row(infos["final_obs"][index], batched=False) is not None:
                raise EnvFault(f"env {index} returned a non-finite final observation at vector step {step}")


def _non_finite_row(observations: Any, batched: bool = True) -> int | None:
    """The first env index (0 when not ``batched``) with a non-finite value in a floating array of ``observations``."""
    if isinstance(observations, dict):
        arrays = list(observations.values())
    else:
        arrays = list(observations) if isinstance(observations, tuple) else [observations]
    for array in arrays:
        if isinstance(array, (dict, tuple)):
            found = _non_finite_row(array, batched)
        elif isinstance(array, np.ndarray) and array.dtype.kind == "f" and not np.isfinite(array).all():
            found = int(np.flatnonzero(~np.isfinite(array.reshape(len(array), -1)).all(axis=1))[0]) if batched else 0
        else:
            found = None
        if found is not None:
            return found
    return None


def one_line_faults(script: str, last_checkpoint: Callable[[], Any], close: Callable[[], None]) -> None:
    """Install a ``sys.excepthook`` that ends the run in one line on an uncaught :class:`Fault` or a second Ctrl-C.

    Prints ``<script>.py: <message>; last checkpoint: <path or "none">`` on stderr (for a
    ``KeyboardInterrupt``, the second Ctrl-C: ``stopped at once by a second Ctrl-C``), kills this
    process's env workers (closing the vector envs given to :func:`close_on_fault`; they ignore
    SIGTERM), calls ``close`` (the run's logs are flushed); the process then exits with status 1,
    or at once with 130 after Ctrl-C. Other exceptions keep Python's traceback.

    Args:
        script: the script's name (``"ppo"``).
        last_checkpoint: returns the last checkpoint written or resumed from (or None).
        close: flushes and closes what the run writes (TensorBoard events).
    """
    default = sys.excepthook

    def hook(kind, error, traceback):
        if not issubclass(kind, (Fault, KeyboardInterrupt)):
            return default(kind, error, traceback)
        what = str(error) if issubclass(kind, Fault) else "stopped at once by a second Ctrl-C"
        print(f"{script}.py: {what}; last checkpoint: {last_checkpoint() or 'none'}", file=sys.stderr, flush=True)
        for closable in list(_to_close):
            try:
                closable.close(terminate=True)
            except Exception:  # already closed or broken: its processes are killed below
                pass
        import multiprocessing

        for child in multiprocessing.active_children():
            child.kill()
        close()
        if issubclass(kind, KeyboardInterrupt):
            sys.stdout.flush()
            sys.stderr.flush()
            import os

            os._exit(130)

    sys.excepthook = hook


def describe_exit(exitcode: int | None) -> str:
    """``"exit code 3"``, ``"killed by SIGKILL"``, or ``"still running"`` for a process's ``exitcode``."""
    import signal

    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def free_space(path: Any) -> str:
    """The free space on the disk holding ``path`` (or its nearest existing parent), e.g. ``"12.5 MiB free"``."""
    import shutil
    from pathlib import Path

    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "free space unknown"
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    power = min(int(math.log(free, 1024)) if free > 0 else 0, len(units) - 1)
    full = ": the disk is full" if free < 2**20 else ""
    return f"{free / 1024**power:.3g} {units[power]} free on its disk{full}"

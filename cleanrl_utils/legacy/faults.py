"""Faults that stop a run in one line: non-finite numbers, envs that die, hang or misbehave, files that cannot be written.

A :class:`Fault` is an error a run cannot survive and a user can act on. The scripts do not catch
them: :func:`one_line_faults` (installed by ``cleanrl_utils.legacy.run.start_run``) prints an uncaught
``Fault`` as one line, ``<script>.py: <what and where>; last checkpoint: <file or none>``, and the
process exits with status 1; every other exception keeps its traceback. Nothing is written after a
fault: the last good checkpoint is the one the line names.
"""

from __future__ import annotations

import atexit
import math
import os
import signal
import sys
import threading
import weakref
from contextlib import contextmanager
from multiprocessing import resource_tracker
from typing import Any, Callable

import numpy as np
import torch

_to_close: weakref.WeakSet = weakref.WeakSet()
"""Objects with ``close(terminate=True)`` (async vector envs) closed when a fault ends the run."""


def close_on_fault(closable: Any) -> None:
    """Have ``closable.close(terminate=True)`` called when an uncaught exception (a fault, or any other error)
    ends the run (:func:`one_line_faults`), and at the process's exit if it is still open.

    At exit, before multiprocessing's own exit handler, which would wait forever for env workers that
    ignore SIGTERM and sit waiting for their next command.
    """
    global _exit_registered
    _to_close.add(closable)
    if not _exit_registered:  # registered after multiprocessing's (children exist now): runs before it
        atexit.register(_kill_workers)
        _exit_registered = True


_exit_registered = False


from cleanrl_utils.faults import EnvFault, Fault, NonFinite, WriteFailed  # noqa: E402, F401  one set for both runtimes


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
    # CPU scalars (the common case) as Python floats: NaN and infinity carry through the sum, and a sum that
    # merely overflows only leads to the exact check below
    total = 0.0
    for value in quantities.values():
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu" or value.numel() != 1:
                total = math.nan  # on a GPU, or not a scalar: the check below, one read per update
                break
            value = value.item()
        total += value
    if math.isfinite(total):
        return
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


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_env_step(rewards: np.ndarray, observations: Any, infos: dict, step: int, first: int = 0) -> None:
    """Raise :class:`EnvFault` naming the env whose reward or (floating) observation is not finite.

    A float64 reward beyond float32's range (1e300) is refused too: the scripts store rewards as float32.

    Args:
        rewards: ``[num_envs]``.
        observations: ``[num_envs, ...]`` (a floating array is checked; integer images are finite),
            or a dict/tuple of such arrays.
        infos: the step's infos; the final observations of ended episodes (``"final_obs"``) are checked too.
        step: the vector env's step count, for the message.
        first: the run's index of the env in row 0 (a group of an alternating sampler), for the message.
    """
    # The common case (all finite, no episode ended) in two sums: NaN and infinity carry through a sum, a
    # reward beyond float32's range is infinite once summed in float32; a sum that merely overflows only
    # sends the step to the exact checks below, which find nothing and return.
    if "final_obs" not in infos:
        total = float(np.add.reduce(rewards, dtype=np.float32))
        if isinstance(observations, np.ndarray) and observations.dtype.kind == "f":
            total += float(np.add.reduce(observations, axis=None))
        if math.isfinite(total) and (isinstance(observations, np.ndarray) or _non_finite_row(observations) is None):
            return
    if not np.isfinite(rewards).all():
        index = int(np.flatnonzero(~np.isfinite(rewards))[0])
        raise EnvFault(f"env {first + index} returned a non-finite reward ({rewards[index]}) at vector step {step}")
    if np.abs(rewards).max(initial=0.0) > _FLOAT32_MAX:  # stored as float32: inf
        index = int(np.flatnonzero(np.abs(rewards) > _FLOAT32_MAX)[0])
        reward = f"a reward ({rewards[index]:g}) beyond float32's range"
        raise EnvFault(f"env {first + index} returned {reward} at vector step {step}")
    index = _non_finite_row(observations)
    if index is not None:
        raise EnvFault(f"env {first + index} returned a non-finite observation at vector step {step}")
    if "final_obs" in infos:
        for index in np.flatnonzero(infos["_final_obs"]):
            if _non_finite_row(infos["final_obs"][index], batched=False) is not None:
                raise EnvFault(f"env {first + index} returned a non-finite final observation at vector step {step}")


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


def one_line_faults(
    script: str, last_checkpoint: Callable[[], Any] | None, close: Callable[[], None], rank: int | None = None
) -> None:
    """Install a ``sys.excepthook`` that ends the run in one line on an uncaught :class:`Fault`.

    Prints ``<script>.py: <message>; last checkpoint: <path or "none">`` on stderr, kills this
    process's env workers (closing the vector envs given to :func:`close_on_fault`; they ignore
    SIGTERM), calls ``close`` (the run's logs are flushed); the process then exits with status 1.
    A collective of a distributed run that fails (``all_reduce`` raises when another rank died),
    and TensorBoard events that cannot be written (a full disk), are one line too; the events
    writer's thread says nothing itself. Other exceptions keep Python's traceback, and the env
    workers are killed after it, so the process exits rather than wait for them.

    Installed once; a later call updates what the line names and what is closed.

    Args:
        script: the script's name (``"ppo"``).
        last_checkpoint: returns the last checkpoint written or resumed from (or None); None for a
            process that writes none (another rank reports it).
        close: flushes and closes what the run writes (TensorBoard events).
        rank: this process's rank in a distributed run, named in the line (``ddp_ppo.py, rank 1: ...``).
    """
    _ending.update(name=f"{script}.py" + (f", rank {rank}" if rank is not None else ""), last_checkpoint=last_checkpoint)
    _ending["close"] = close
    if getattr(sys.excepthook, "one_line_faults", False):  # installed already (set-up, then the started run)
        return
    default = sys.excepthook

    def hook(kind, error, traceback):
        collective, events = _failed_collective(kind, error, traceback), _from_tensorboard(kind, traceback)
        if not issubclass(kind, Fault) and not collective and not events:
            default(kind, error, traceback)
            _kill_workers()
            return
        if collective:
            what = f"{collective} failed: another rank died or hung ({first_line(error)})"
        elif events:
            where = os.fsdecode(getattr(error, "filename", None) or ".")
            what = f"cannot write the TensorBoard events ({first_line(error)}; {free_space(where)})"
        else:
            what = str(error)
        print(_line(what), file=sys.stderr, flush=True)
        _kill_workers()
        try:
            _ending["close"]()
        except Exception:  # the events cannot be written: the line above said so
            pass

    hook.one_line_faults = True
    sys.excepthook = hook
    threading_hook = threading.excepthook

    def thread_hook(args):  # TensorBoard's writer thread: its error reaches the main thread's next write, said there
        if not _from_tensorboard(args.exc_type, args.exc_traceback):
            threading_hook(args)

    threading.excepthook = thread_hook


_ending: dict = {"name": "this script", "last_checkpoint": None, "close": lambda: None}
"""What :func:`one_line_faults` and :func:`stop_now` name (the script, where its last checkpoint is) and what the
hook closes."""


def _line(what: str) -> str:
    last = _ending["last_checkpoint"]
    return f"{_ending['name']}: {what}" + (f"; last checkpoint: {last() or 'none'}" if last is not None else "")


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (its type's name when it has none), at most 200 characters."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def _from_tensorboard(kind: type, traceback: Any) -> bool:
    """Whether an OSError was raised while writing TensorBoard events (a full disk, a read-only folder)."""
    if not issubclass(kind, OSError):
        return False
    while traceback is not None:
        if "tensorboard" in traceback.tb_frame.f_code.co_filename:
            return True
        traceback = traceback.tb_next
    return False


def _failed_collective(kind: type, error: BaseException, traceback: Any) -> str | None:
    """What failed when a RuntimeError comes from ``torch.distributed``: the collective's name (``"all_reduce"``)
    when raised in its API, ``"the gradient all-reduce"`` for DDP's in ``backward``; None for other errors."""
    if not issubclass(kind, RuntimeError):
        return None
    name, in_backward = None, False
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if code.co_filename.endswith("distributed_c10d.py"):
            name = code.co_name  # the innermost frame of torch.distributed's API
        in_backward = in_backward or code.co_name == "backward"
        traceback = traceback.tb_next
    if name is None and any(word in str(error) for word in ("gloo", "NCCL", "ProcessGroup")):
        name = "the gradient all-reduce" if in_backward else "a collective"
    return name


def _kill_workers() -> None:
    """Close the vector envs given to :func:`close_on_fault` and kill every child process left."""
    for closable in list(_to_close):
        if getattr(closable, "closed", False):
            continue
        try:
            closable.close(terminate=True)
        except Exception:  # already closed or broken: its processes are killed below
            pass
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
        child.join(1.0)


being_written: set = set()
"""Temporary files being written (cleanrl_utils.legacy.files.write_file), removed by :func:`stop_now`."""


def stop_now(what: str, status: int) -> None:
    """End the process at once (a second Ctrl-C): one line on stderr, env workers killed, exit ``status``.

    Safe in a signal handler, wherever the main thread is (even in exit handlers): a file being
    written is removed (the previous checkpoint stays); nothing is flushed but stdout and
    stderr: TensorBoard events after the last checkpoint may be lost, which a resumed run
    drops anyway.
    """
    print(_line(what), file=sys.stderr, flush=True)
    _kill_workers()
    for temporary in list(being_written):  # a file cut short by the exit: no partial file stays
        try:
            os.unlink(temporary)
        except OSError:
            pass
    sys.stdout.flush()
    os._exit(status)


@contextmanager
def time_limit(seconds: float, what: str):
    """Raise :class:`EnvFault` (``"<what>: no answer within --env-timeout <seconds> s"``) if the block runs longer.

    A ``SIGALRM`` timer: in the main thread only (elsewhere the block is not timed); the previous
    handler and timer are put back afterwards.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def timed_out(signum, frame):
        raise EnvFault(f"{what}: no answer within --env-timeout {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.setitimer(signal.ITIMER_REAL, seconds, seconds)  # repeats: an env that swallows one is stopped by the next
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a run: Ctrl-C, a scheduler, a closed terminal."""


@contextmanager
def stop_signals_held():
    """Hold the :data:`STOP_SIGNALS` back while child processes start (env workers, actors, the forkserver,
    multiprocessing's resource tracker): each child inherits the block and ignores them before it lets
    them through (:func:`ignore_stop_signals`), so a signal to the whole process group while it starts
    cannot kill it; one that arrives meanwhile reaches this process when the block ends. In the main
    thread only (elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        # multiprocessing's resource tracker (shared memory, the forkserver's) starts here if it has not: it
        # keeps SIGHUP held and ignores the others, but its start unblocks SIGINT and SIGTERM as it ends
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_stop_signals() -> None:
    """In a child process: ignore the :data:`STOP_SIGNALS` (the main process stops the run and its children),
    then unblock them (see :func:`stop_signals_held`)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def describe_exit(exitcode: int | None) -> str:
    """``"exit code 3"``, ``"killed by SIGKILL"``, or ``"still running"`` for a process's ``exitcode``."""
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

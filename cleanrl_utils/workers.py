"""What the async workers of a run's vector envs did when a step failed: one line naming the env, and their end.

Loaded where an error ends a run (:meth:`cleanrl_utils.run.Run.stop_on_fault`) or an actor's envs
(:func:`cleanrl_utils.actors.actor_envs`).
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Sequence
from typing import Any

import gymnasium as gym


def worker_fault(vector_envs: Sequence[Any], error: BaseException, timeout: float, firsts: Sequence[int] = ()) -> str | None:
    """What ``error`` says of the async workers of ``vector_envs`` (vector envs, or wrappers of them) in one line: a
    worker that did not answer within ``timeout`` s (``multiprocessing.TimeoutError``) or died (a closed pipe), named
    by its env's index in the run (``firsts[k]``: the index of ``vector_envs[k]``'s first env; by default numbered
    across them); None for other errors."""
    workers, first = [], 0  # (the run's index of its env, process, pipe) of each async worker
    for k, vector_env in enumerate(getattr(env, "unwrapped", env) for env in vector_envs):
        if isinstance(vector_env, gym.vector.AsyncVectorEnv):
            first = firsts[k] if firsts else first
            pairs = zip(vector_env.processes, vector_env.parent_pipes)
            workers += [(first + i, process, pipe) for i, (process, pipe) in enumerate(pairs)]
            first += len(vector_env.processes)
    if isinstance(error, multiprocessing.TimeoutError) and workers:
        late = next((index for index, _, pipe in workers if pipe is not None and not pipe.poll(0)), "?")
        return f"env {late}: no answer within --env-timeout {timeout:g} s"
    if isinstance(error, (EOFError, BrokenPipeError, ConnectionResetError)) and workers:
        for _, process, _ in workers:
            process.join(1.0)  # a worker whose pipe closed is exiting
        dead = next(((index, process) for index, process, _ in workers if process.exitcode is not None), None)
        if dead is None:
            return f"lost contact with an env worker ({type(error).__name__})"
        return f"env {dead[0]}: its worker process (pid {dead[1].pid}) died: {exit_status(dead[1].exitcode)}"
    return None


def kill_workers(vector_envs: Sequence[Any]) -> None:
    """Kill the workers of the async ones among ``vector_envs`` (or wrappers of them) and mark them closed:
    gymnasium's ``close`` would wait for a dead or hung worker (and they ignore stop signals)."""
    for vector_env in (getattr(env, "unwrapped", env) for env in vector_envs):
        if isinstance(vector_env, gym.vector.AsyncVectorEnv) and not vector_env.closed:
            for process in vector_env.processes:
                process.kill()
                process.join()
            for pipe in vector_env.parent_pipes:
                if pipe is not None:
                    pipe.close()
            vector_env.closed = True


def exit_status(exitcode: int | None) -> str:
    """``"exit code 3"``, ``"killed by SIGKILL"`` or ``"still running"`` for a process's ``exitcode``."""
    if exitcode is None:
        return "still running"
    if exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        return f"killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"killed by signal {-exitcode}"

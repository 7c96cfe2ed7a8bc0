"""Actor processes of the asynchronous scripts (r2d2_async.py, apex_dqn_atari.py, impala_atari.py): what a learner
and its actors share, how actors start, report failures and stop, the Ape-X ε ladder and the replay-ratio throttle.

The layout is rlpyt's asynchronous runner (Stooke & Abbeel 2019, arXiv:1909.01500, section 3): the learner is
the main process; actors are spawned processes that step their own envs with a copy of the policy, read its
parameters from shared memory without waiting (:meth:`Shared.pull`) and hand their data to the learner through
shared memory (a replay buffer, or trajectory slots). What the actors collect and how the learner learns from
it stays in each script; this module holds only the plumbing the scripts would otherwise repeat.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from cleanrl_utils.env_checks import check_env
from cleanrl_utils.faults import EnvFault, Fault
from cleanrl_utils.flags import require
from cleanrl_utils.workers import exit_status, kill_workers, worker_fault
from cleanrl_utils.writes import write_atomic

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
"""Ctrl-C, a scheduler, a closed terminal: the learner's to handle; actors and their env workers ignore them."""


class Shared:
    """What a learner and its actors share: tensors in shared memory and two queues.

    - ``params`` float32 ``[P]``, ``version`` int64 ``[1]``: the published network; a seqlock (odd while the
      learner writes, even after; :meth:`publish`, :meth:`pull`).
    - ``actor_steps`` int64 ``[num_actors]``: env steps each actor collected in this process (each actor
      writes only its own entry; the learner sums them).
    - ``updates`` int64 ``[1]``: gradient steps of this process (written by the learner).
    - ``stop`` int64 ``[1]``: set by the learner to end the actors.
    - ``hold`` int64 ``[1]``: set by the learner when the actors must step no more (``--total-timesteps``
      collected) while it finishes its work.
    - ``episodes``: queue of ``(actor, env, return, length)`` of finished episodes.
    - ``errors``: queue of ``(actor, traceback text, its exception's lines joined)`` of failed actors.

    Create it in the learner after ``start_run``, which starts multiprocessing's resource tracker (the queues' semaphores
    are registered with it).
    """

    def __init__(self, num_params: int, num_actors: int):
        context = mp.get_context("spawn")
        self.params = torch.zeros(num_params).share_memory_()
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.actor_steps = torch.zeros(num_actors, dtype=torch.int64).share_memory_()
        self.updates = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.stop = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.hold = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.episodes = context.Queue()
        self.errors = context.Queue()

    def publish(self, network: nn.Module) -> None:
        """Learner: write the network's parameters (version odd while writing, even after)."""
        self.version += 1
        with torch.no_grad():  # each parameter into its slice, whatever its memory layout (as pull reads them back)
            offset = 0
            for parameter in network.parameters():
                self.params[offset : offset + parameter.numel()].view(parameter.shape).copy_(parameter)
                offset += parameter.numel()
        self.version += 1

    def pull(self, network: nn.Module, known: int) -> int:
        """Actor: copy the published parameters into ``network`` if their version is newer than ``known`` and
        was not being written; returns the version now in ``network``. Never waits."""
        version = int(self.version[0])
        if version == known or version % 2:
            return known
        flat = self.params.clone()
        if int(self.version[0]) != version:  # written meanwhile: try again at the next step
            return known
        with torch.no_grad():  # into each parameter in place, keeping its memory layout (channels-last convolutions)
            offset = 0
            for parameter in network.parameters():
                parameter.copy_(flat[offset : offset + parameter.numel()].view(parameter.shape))
                offset += parameter.numel()
        return version

    def episodes_ended(self) -> list[tuple[int, int, float, int]]:
        """Learner: the ``(actor, env, return, length)`` of the episodes reported since the last call."""
        ended = []
        while True:
            try:
                ended.append(self.episodes.get_nowait())
            except queue.Empty:
                return ended


class ActorFailed(Fault):
    """An actor process failed or died (one line; see :func:`check_actors`)."""


def actor_main(run_actor: Callable[..., None], actor_id: int, shared: Shared, *args: Any) -> None:
    """Entry point of actor ``actor_id`` (a spawned process): ``run_actor(actor_id, shared, *args)``, with
    failures reported to the learner.

    SIGINT, SIGTERM and SIGHUP are ignored, and stay blocked as :func:`start_actors` started the process, so that the
    actor's env workers (and their forkserver) ignore them from their start too: the learner stops the run, then the
    actors (``shared.stop``) after its checkpoint. A failure goes to ``shared.errors`` (a
    :class:`~cleanrl_utils.faults.Fault`'s one line, or a traceback) and the process exits with 1. Actors are not
    daemonic (their async envs are child processes); ``run_actor`` should call :func:`check_parent` in its loop so
    that it ends when the learner is gone, and open its envs with :func:`actor_envs`.
    """
    for signum in STOP_SIGNALS:  # the learner stops the run and its actors
        signal.signal(signum, signal.SIG_IGN)
    # gymnasium logs a worker's error with its traceback as a warning: actor_envs says it in one line instead
    warnings.filterwarnings("ignore", ".*ERROR: (Received the following error|Traceback|Raising the last)")
    shared.episodes.cancel_join_thread()  # at exit, do not wait for a learner that no longer reads
    try:
        run_actor(actor_id, shared, *args)
    except BaseException as error:
        summary = " ".join(line.strip() for line in traceback.format_exception_only(error))  # with its notes
        shared.errors.put((actor_id, str(error) if isinstance(error, Fault) else traceback.format_exc(), summary))
        sys.exit(1)  # a normal exit: multiprocessing's finalizers unlink this process's semaphores


@contextmanager
def actor_envs(*envs: gym.vector.VectorEnv, first: int | list[int], timeout: float) -> Iterator[None]:
    """An actor's vector envs (gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv``, ``envs[k]`` holding the run's envs
    from ``first[k]``), closed when the block ends. Within it, an async worker that died, or did not answer within
    ``timeout`` s (``multiprocessing.TimeoutError`` from ``step_wait(timeout=...)``), is an
    :class:`~cleanrl_utils.faults.EnvFault` naming the env (one line in the learner); after any error the workers
    are killed first (they ignore stop signals, and a dead or hung one would keep ``close`` waiting).

    Args:
        first: the run's index of the first env of each vector env (an int for one vector env).
        timeout: ``--env-timeout``, named in the message.

    Raises:
        cleanrl_utils.faults.EnvFault: ``env 5: no answer within --env-timeout 600 s``, ``env 5: its worker process
            (pid 4242) died: killed by SIGKILL``; other errors pass unchanged.
    """
    firsts = [first] if isinstance(first, int) else list(first)
    try:
        yield
    except BaseException as error:
        what = worker_fault(envs, error, timeout, firsts)
        kill_workers(envs)
        if what is None:
            raise
        raise EnvFault(what) from None
    finally:
        for vector_env in envs:
            vector_env.close()


def check_parent(parent_pid: int) -> None:
    """Actor: raise ``RuntimeError`` if the learner (process ``parent_pid``) is gone."""
    if os.getppid() != parent_pid:
        raise RuntimeError("the learner process is gone")


def spawn_actors(run_actor: Callable[..., None], num_actors: int, shared: Shared, *args: Any, name: str = "actor") -> list:
    """``num_actors`` processes (spawn context, not started; ``name-0``, ``name-1``, ...) that will run
    :func:`actor_main` with ``run_actor`` (a module-level function: it is pickled by name), ``actor_id`` and
    ``shared``, then ``args``. Start them with :func:`start_actors` inside the ``try`` whose ``finally``
    calls :func:`stop_actors`."""
    context = mp.get_context("spawn")
    return [
        context.Process(target=actor_main, name=f"{name}-{i}", args=(run_actor, i, shared, *args)) for i in range(num_actors)
    ]


def start_actors(actors: list) -> None:
    """Start the processes of :func:`spawn_actors` with the stop signals blocked, which they inherit: a signal to the
    whole process group cannot kill one half-started (:func:`actor_main` ignores them before anything else)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for process in actors:
            process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a signal that came meanwhile reaches the learner now


def stop_actors(actors: list, shared: Shared, timeout: float = 10.0) -> None:
    """Ask the actors to stop, wait up to ``timeout`` s, then kill those still alive."""
    shared.stop[0] = 1
    deadline = time.monotonic() + timeout
    for process in actors:
        if process.pid is not None:
            process.join(max(0.0, deadline - time.monotonic()))
    for process in actors:
        if process.is_alive():
            process.kill()
            process.join(5)


def check_actors(actors: list, shared: Shared, run_dir: str | Path) -> None:
    """Raise :class:`ActorFailed` if an actor reported a failure or died.

    Its message is one line: the actor's :class:`~cleanrl_utils.faults.Fault` (a dead, hung or misbehaving
    env), or the last line of another error's traceback, which is written in full to
    ``{run_dir}/actor_{i}_traceback.txt`` (named in the line).
    """
    try:
        actor_id, text, summary = shared.errors.get_nowait()
        exitcode = None
    except queue.Empty:
        dead = [(actor_id, process.exitcode) for actor_id, process in enumerate(actors) if not process.is_alive()]
        if not dead:
            return
        try:  # its report may still be on its way
            (actor_id, text, summary), exitcode = shared.errors.get(timeout=2.0), dead[0][1]
        except queue.Empty:
            (actor_id, exitcode), text = dead[0], ""
    if not text:
        raise ActorFailed(f"actor {actor_id} died ({exit_status(exitcode)}) without a word")
    if "\n" not in text.strip():  # a Fault: one line already
        raise ActorFailed(f"actor {actor_id}: {text.strip()}")
    path = write_atomic(Path(run_dir) / f"actor_{actor_id}_traceback.txt", text)
    raise ActorFailed(f"actor {actor_id} failed with {summary} (its traceback: {path})")


def epsilon_ladder(num_envs: int, epsilon: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X exploration: env i of N acts with ε_i = ε^(1 + α i / (N − 1)) (Horgan et al. 2018, section 4.1).

    Returns:
        float64 ``[num_envs]``, from ε (i = 0) down to ε^(1+α) (i = N − 1); ``[ε]`` when N = 1.
    """
    if num_envs == 1:
        return np.array([epsilon], dtype=np.float64)
    return epsilon ** (1.0 + alpha * np.arange(num_envs) / (num_envs - 1))


def learner_may_update(updates: int, collected: int, per_update: float, learning_starts: int) -> bool:
    """The replay-ratio throttle, learner side: gradient step ``updates + 1`` is owed once the actors have collected
    ``(updates + 1) x per_update`` env steps beyond ``learning_starts``.

    Args:
        updates: gradient steps made (in this process).
        collected: env steps the actors collected (in this process).
        per_update: env steps each gradient step needs: samples per batch / the replay ratio (samples learned on
            per env step collected).
        learning_starts: env steps collected before the first gradient step.
    """
    return (updates + 1) * per_update <= collected - learning_starts


def actors_may_step(updates: int, collected: int, per_update: float, learning_starts: int, lead: float) -> bool:
    """The replay-ratio throttle, actor side: the actors step on while what they collected beyond ``learning_starts``
    is at most ``lead`` env steps more than the learner's ``updates`` have consumed (``updates x per_update``);
    otherwise they wait for the learner. Arguments as :func:`learner_may_update`."""
    return collected - learning_starts <= updates * per_update + lead


def wait_for_learner(
    shared: Shared, per_update: float, learning_starts: int, lead: float, parent_pid: int, poll: float = 0.001
) -> None:
    """Actor, after each step: wait while :func:`actors_may_step` says the actors are too far ahead of the learner, or
    the learner holds them (``shared.hold``: --total-timesteps collected); return at once on ``shared.stop``. Checks
    every ``poll`` seconds, and raises ``RuntimeError`` if the learner (process ``parent_pid``) is gone."""
    while not shared.stop[0]:
        check_parent(parent_pid)
        if actors_may_step(int(shared.updates[0]), int(shared.actor_steps.sum()), per_update, learning_starts, lead):
            if not shared.hold[0]:
                return
        time.sleep(poll)


def learner_turn(
    run: Any, shared: Shared, actors: list, state: dict, step_offset: int, global_step: int, **counters: Any
) -> tuple[int, int]:
    """Learner, at each turn of its loop: log the episodes the actors ended since the last turn at ``global_step``
    (``charts/episodic_return``, ``charts/episodic_length``, the progress line), stop with :class:`ActorFailed` if
    an actor failed (:func:`check_actors`), advance the progress to the steps collected now, and write a
    checkpoint of ``state`` with ``counters`` when one is due (every --checkpoint-interval steps, and after SIGTERM
    or Ctrl-C: the caller then stops).

    Args:
        run: the script's :class:`cleanrl_utils.run.Run`.
        step_offset: env steps of the run before this process (a resumed run's checkpoint).
        global_step: the env steps at the last turn, where the episodes ended since are logged.

    Returns:
        ``(collected, global_step)``: the env steps the actors collected in this process, and ``step_offset``
        plus those.
    """
    for _, _, episodic_return, length in shared.episodes_ended():
        run.log_episode(global_step, episodic_return, length)
    check_actors(actors, shared, run.directory)
    collected = int(shared.actor_steps.sum())
    global_step = step_offset + collected
    run.progress(global_step)
    if run.checkpoint_due(global_step):
        run.save_checkpoint(state, global_step, **counters)
    return collected, global_step


__all__ = [
    "Shared",
    "ActorFailed",
    "actor_main",
    "actor_envs",
    "check_parent",
    "spawn_actors",
    "start_actors",
    "stop_actors",
    "check_actors",
    "learner_turn",
    "epsilon_ladder",
    "learner_may_update",
    "actors_may_step",
    "wait_for_learner",
]


def check_atari_or_vector_env(args: Any, make_env: Callable[[], gym.Env]) -> tuple[gym.Space, gym.Space, bool]:
    """:func:`check_env` for the asynchronous scripts, which take an Atari NoFrameskip game (whose spaces are those
    of the thunk ``make_env``'s preprocessing) or a task with 1-D Box observations: ``(obs_space, action_space, atari)``.

    Raises:
        SystemExit: status 2, one line naming ``--env-id``.
    """
    observation_space, action_space = check_env(args, gym.spaces.Discrete, gym.spaces.Box)
    with gym.make(args.env_id) as env:
        atari, frameskip = hasattr(env.unwrapped, "ale"), env.spec.kwargs.get("frameskip", 1)
    if not atari:
        shape, only = observation_space.shape, f"{args.script}.py supports Atari games and 1-dimensional observations only"
        require(len(shape) == 1, "--env-id", f"{args.env_id} has observations of shape {shape}; {only}")
        return observation_space, action_space, False
    require(frameskip == 1, "--env-id", f"{args.env_id} skips frames itself; take its NoFrameskip-v4 id")
    with make_env() as probe:
        return probe.observation_space, probe.action_space, True

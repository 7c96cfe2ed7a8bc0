"""Replay buffers shared by the off-policy scripts.

- :class:`ReplayBuffer`: uniform experience replay (Lin 1992; Mnih et al. 2015, "Human-level
  control through deep reinforcement learning", Nature 518) that samples each transition with
  the raw window of the n steps after it, from which a script computes its own n-step return
  and TD target (Sutton 1988; Hessel et al. 2018, "Rainbow", arXiv:1710.02298, eq. 2), and
  optional frame-stacked storage that keeps each Atari frame once.
- :class:`PrioritizedReplayBuffer`: proportional prioritized replay (Schaul et al. 2016,
  "Prioritized Experience Replay", arXiv:1511.05952, section 3.3 and Algorithm 1) on a
  vectorised :class:`SumTree`.
- :class:`SequenceBuilder` + :class:`SequenceReplayBuffer`: prioritized replay of fixed-length
  sequences with burn-in and stored recurrent state (Kapturowski et al. 2019, "Recurrent
  Experience Replay in Distributed Reinforcement Learning", ICLR, section 2.3 and 3).

Storage layout of :class:`ReplayBuffer`: a ring of rows per environment, ``[capacity,
num_envs, ...]``. Row ``r`` of column ``e`` holds one observation of env ``e`` (its newest frame
when frames are stacked) and the action, reward, termination and truncation of the step taken
from it. The next observation of a transition is the observation of the next row, so each
observation is stored once. When an episode ends, the real final observation (gymnasium's
``infos["final_obs"]``, not the first observation of the next episode) is written into one
extra row, which is never sampled itself; columns therefore advance independently.

Every buffer can live in shared memory (``shared=True``) so that several processes use it:
actors add, a learner samples and updates priorities, all under one :class:`ProcessLock`, which
the kernel releases when its holder dies; the arrays are in an :class:`AnonymousSharedMemory`,
which no process's end leaves behind. Buffers check before allocating that their arrays fit in
the memory this process may still use: the machine's, and its cgroups' limits (Docker, Slurm
``--mem``, Kubernetes).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import multiprocessing as mp
import os
import struct
import tempfile
import threading
import weakref
from multiprocessing.reduction import DupFd
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.faults import Fault
from cleanrl_utils.namedarraytuple import (
    buffer_from_example,
    conform,
    example_from_space,
    is_namedarraytuple,
    map_leaves,
    namedarraytuple,
    to_device,
)

ReplaySamples = namedarraytuple(
    "ReplaySamples",
    ["obs", "actions", "next_obs", "rewards", "terminations", "truncations", "next_obs_steps", "indices", "weights"],
)
ReplaySamples.__doc__ = """A sampled batch of transitions with their n-step windows, a namedarraytuple of torch tensors.

The buffer returns what happened; the script computes its own return and target from it (for
n = 1 the target is ``rewards[:, 0] + γ (1 - terminations[:, 0]) V(next_obs)``).

Fields (B = batch size, n = the buffer's ``n_step``):
    obs: s_t, ``[B, *obs_shape]``.
    actions: a_t, ``[B, *action_shape]``.
    next_obs: s_{t+m}, the observation to bootstrap from, ``[B, *obs_shape]``: m = n, or m = k + 1
        when the episode ended at step t + k inside the window (then it is the real final
        observation of that episode, not the first of the next one).
    rewards: r_t, ..., r_{t+n-1}, float32 ``[B, n]``; 0 after the step that ended the episode.
    terminations: float32 ``[B, n]``, 1.0 at the step t + k whose episode terminated; 0 elsewhere.
    truncations: float32 ``[B, n]``, 1.0 at the step t + k whose episode was truncated (a time
        limit: the target still bootstraps from ``next_obs``); 0 elsewhere.
    next_obs_steps: m, how many steps ``next_obs`` is after ``obs``, int64 ``[B]``, in [1, n].
    indices: flat slot indices ``row * num_envs + env``, int64 ``[B]``, for priority updates.
    weights: importance-sampling weights, float32 ``[B]`` (prioritized replay; None otherwise).
"""

Sequences = namedarraytuple(
    "Sequences",
    [
        "obs",
        "actions",
        "rewards",
        "terminations",
        "truncations",
        "mask",
        "learn_mask",
        "states",
        "starts_episode",
        "indices",
        "weights",
    ],
)
Sequences.__doc__ = """Fixed-length sequences, a namedarraytuple with leading dimension K (sequences).

Fields (T = sequence length):
    obs: ``[K, T + 1, *obs_shape]``: the observations of the T steps and the one after the last
        real step (the real final observation where the episode ended); zeros after it.
    actions: ``[K, T, *action_shape]``; rewards: float32 ``[K, T]``.
    terminations, truncations: bool ``[K, T]``, at the step that ended the episode.
    mask: bool ``[K, T]``, True on real steps (False on the padding after an episode end).
    learn_mask: bool ``[K, T]``, the steps a loss uses: real steps after the burn-in, or all real
        steps of a sequence that starts its episode (its stored state is exact).
    states: the recurrent state before the first step, ``[K, *state_shape]`` (zeros at an
        episode start), an array or namedarraytuple such as ``(h, c)``.
    starts_episode: bool ``[K]``, the first step is the first of an episode.
    indices: int64 ``[K]`` slots in the buffer (in sampled batches; None when built).
    weights: importance-sampling weights float32 ``[K]`` (in sampled batches; None when built).
"""


# --------------------------------------------------------------------------------------------
# Memory and sharing

CGROUP_ROOT = "/sys/fs/cgroup"
"""Where the cgroup file systems are mounted: v2 at the root, v1's memory controller in ``memory/`` (tests point it
at a fake tree)."""
PROC_CGROUP = "/proc/self/cgroup"
"""This process's cgroups: ``0::/path`` (v2), ``N:memory:/path`` (v1)."""


def memory_limits() -> dict[str, int]:
    """Each bound on the bytes this process may still allocate, by what sets it.

    ``MemAvailable`` of /proc/meminfo (elsewhere the physical memory), and for every cgroup from this process's up to
    the root that has a memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, as Docker, Slurm ``--mem``
    and Kubernetes set), that limit less what its processes use now (``memory.current``, v1
    ``memory.usage_in_bytes``) apart from their inactive file cache, which the kernel reclaims. Shared buffers count
    the same (:class:`AnonymousSharedMemory` is not in /dev/shm, and the cgroup is charged for it). Files that are
    missing or unreadable bound nothing.
    """
    limits = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    limits["the machine's available memory (MemAvailable)"] = int(line.split()[1]) * 1024
    if not limits:
        limits["the machine's memory"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits.update(_cgroup_headroom())
    return limits


def _cgroup_headroom() -> dict[str, int]:
    """``{description: bytes}`` of each cgroup above this process with a memory limit (see :func:`memory_limits`)."""
    try:
        lines = Path(PROC_CGROUP).read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "-", "")
        if controllers == "":  # v2: one hierarchy for every controller
            base, names = Path(CGROUP_ROOT), ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # v1's memory controller
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            base = Path(CGROUP_ROOT, "memory")
        else:
            continue
        parts = [part for part in path.strip().split("/") if part]
        # its own cgroup and every one above it; in a container the mount's root is the container's own cgroup
        for depth in range(len(parts), -1, -1):
            folder = base.joinpath(*parts[:depth])
            limit, used = _read_number(folder / names[0]), _read_number(folder / names[1])
            if limit is None or used is None or limit >= 2**60:  # "max", or v1's "no limit" (about 2**63)
                continue
            with contextlib.suppress(OSError, ValueError):
                for entry in (folder / "memory.stat").read_text().splitlines():
                    if entry.startswith(names[2] + " "):
                        used -= int(entry.split()[1])
            name = f"the memory limit of cgroup /{'/'.join(parts[:depth])} ({_format_bytes(limit)}"
            found[f"{name}, {_format_bytes(max(used, 0))} of it in use)"] = max(limit - max(used, 0), 0)
    return found


def _read_number(path: Path) -> int | None:
    """The integer a cgroup file holds; None for ``max``, a missing or unreadable file."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def available_memory() -> int:
    """Bytes this process may still allocate: the smallest of :func:`memory_limits`."""
    return min(memory_limits().values())


def _anonymous_file(name: str) -> Any:
    """A new file that has no name (Linux: ``memfd_create``, in memory; elsewhere an unnamed temporary file), open for
    reading and writing without buffering: nothing of it outlives the last process that has it open or mapped."""
    if hasattr(os, "memfd_create"):
        return open(os.memfd_create(name, os.MFD_CLOEXEC), "r+b", buffering=0)
    return tempfile.TemporaryFile(buffering=0)


class AnonymousSharedMemory:
    """Memory that processes share, in a file without a name (:func:`_anonymous_file`), mapped in each process.

    Its pages read as zeros and take no memory until they are written (so a buffer is built in place: no private copy,
    no zeroing pass, its peak its size once); it goes when the last process that maps it ends, however the processes
    end (SIGKILL, the OOM killer), and no file of it is ever in /dev/shm. Pickled (to a process of
    ``multiprocessing``, spawned or forked) it sends its file descriptor.

    Args:
        nbytes: its size.
    """

    def __init__(self, nbytes: int):
        file = _anonymous_file("cleanrl-buffer")
        os.ftruncate(file.fileno(), max(nbytes, 1))
        self._map(file, nbytes)

    def _map(self, file: Any, nbytes: int) -> None:
        self._file, self.nbytes = file, nbytes
        self._buffer = mmap.mmap(file.fileno(), max(nbytes, 1))

    def __getstate__(self) -> dict:
        return {"file": DupFd(self._file.fileno()), "nbytes": self.nbytes}

    def __setstate__(self, state: dict) -> None:
        self._map(open(state["file"].detach(), "r+b", buffering=0), state["nbytes"])

    def array(self, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """The numpy array of ``shape`` and ``dtype`` at byte ``offset`` (a view: writes are seen by every process)."""
        return np.ndarray(shape, np.dtype(dtype), buffer=self._buffer, offset=offset)


class LockHolderDied(Fault):
    """A process died while it held a shared buffer's :class:`ProcessLock`: what it was writing may be half done."""


class ProcessLock:
    """A lock for the processes and threads that share a buffer, which the kernel releases when its holder dies.

    Each process locks its own open description of one small anonymous file (Linux: ``memfd_create``; elsewhere a
    temporary file) with ``flock(2)``, which the kernel drops when the process ends, however it ends (SIGKILL, the
    OOM killer); a ``threading.Lock`` keeps the threads of a process apart. While it holds the lock, the holder's pid
    and process name are written in the file; it clears them before it unlocks. A process that gets the lock and
    finds them set knows that the holder died inside its update: it raises :class:`LockHolderDied` naming it, and so
    does every process after it, rather than read a half-written buffer. Pickled (to a process of ``multiprocessing``,
    spawned or not) it sends the file; a forked child opens its own description at its first use.

    Raises (``acquire``, ``with``):
        LockHolderDied: ``process 4242 (apex-actor-0) died while it held the replay buffer's lock (...)``.
    """

    _RECORD = 64  # bytes of the file read and written: the holder's pid (8) and name (56)

    def __init__(self) -> None:
        self._path = None
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):  # each process reopens it there
            file = _anonymous_file("cleanrl-buffer-lock")
        else:  # a named temporary file, removed when the lock is collected in this process
            descriptor, self._path = tempfile.mkstemp(prefix="cleanrl-buffer-lock-")
            file = open(descriptor, "r+b", buffering=0)
            weakref.finalize(self, os.unlink, self._path)
        os.ftruncate(file.fileno(), mmap.PAGESIZE)
        self._open(file)

    def _open(self, file: Any) -> None:
        """Use ``file``, an open description of the lock's file that is this process's own."""
        self._file, self._pid, self._threads = file, os.getpid(), threading.Lock()
        self._map = mmap.mmap(file.fileno(), self._RECORD)
        name = mp.current_process().name.encode(errors="replace")[: self._RECORD - 8]
        self._me = struct.pack("q", os.getpid()) + name.ljust(self._RECORD - 8, b"\0")

    def _reopen(self, descriptor: int) -> Any:
        """A new open description of the file behind ``descriptor`` (an flock belongs to a description)."""
        return open(self._path or f"/proc/self/fd/{descriptor}", "r+b", buffering=0)

    def __getstate__(self) -> dict:
        return {"path": self._path, "file": None if self._path else DupFd(self._file.fileno())}

    def __setstate__(self, state: dict) -> None:
        self._path = state["path"]
        if self._path:
            self._open(open(self._path, "r+b", buffering=0))
        else:
            descriptor = state["file"].detach()  # the sender's description: this process opens its own
            self._open(self._reopen(descriptor))
            os.close(descriptor)

    def acquire(self) -> None:
        """Wait for the lock (Ctrl-C and stop signals are handled meanwhile; a dead holder's lock is released at once).

        Raises:
            LockHolderDied: the last holder died while it held the lock (the lock is not held then).
        """
        self._threads.acquire()
        try:
            if self._pid != os.getpid():  # forked: the parent's description is shared with the parent
                self._open(self._reopen(self._file.fileno()))
                self._threads.acquire()
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise
        holder = self._map[: self._RECORD]
        if holder[:8] != bytes(8):
            self._unlock()  # the record stays: every later holder stops too
            pid, name = struct.unpack("q", holder[:8])[0], holder[8:].rstrip(b"\0").decode(errors="replace")
            raise LockHolderDied(
                f"process {pid} ({name}) died while it held the replay buffer's lock; what it was writing may be half "
                "done, so the buffer is not used again"
            )
        self._map[: self._RECORD] = self._me

    def release(self) -> None:
        """Release the lock held by this thread."""
        self._map[:8] = bytes(8)
        self._unlock()

    def _unlock(self) -> None:
        fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
        self._threads.release()

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def nbytes_of(example: Any, leading_dims: tuple[int, ...]) -> int:
    """Bytes of a buffer shaped ``leading_dims + example.shape`` (recursing into namedarraytuples)."""
    if example is None:
        return 0
    if is_namedarraytuple(example):
        return sum(nbytes_of(field, leading_dims) for field in example)
    return int(np.prod(leading_dims, dtype=np.int64)) * np.asarray(example).nbytes


def _format_bytes(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


class _Storage:
    """Arrays of a buffer, allocated after a memory check, optionally in shared memory.

    Subclasses declare their arrays with :meth:`_allocate` (name -> example and leading
    dimensions), then read and write them as numpy attributes. In shared mode the arrays are
    numpy views of one :class:`AnonymousSharedMemory`: built in place (a page takes memory when
    first written), gone with the last process that maps it, however it ends, with no file in
    /dev/shm. Pickling the buffer (to pass it to a ``multiprocessing`` Process, fork or spawn)
    sends that memory's file descriptor, so every process sees the same arrays. A
    :class:`ProcessLock` serialises add / sample / update_priorities: a process that dies holding
    it is named by the next one that takes it (:class:`LockHolderDied`), rather than leaving the
    others blocked.
    """

    def _allocate(self, arrays: dict[str, tuple[Any, tuple[int, ...]]], shared: bool) -> None:
        needed = sum(nbytes_of(example, dims) for example, dims in arrays.values())
        limits = memory_limits()
        tightest = min(limits, key=limits.get)
        if needed > limits[tightest]:
            raise MemoryError(
                f"{type(self).__name__} needs {_format_bytes(needed)} but only {_format_bytes(limits[tightest])} "
                f"is available, by {tightest}; lower the capacity"
            )
        self.nbytes = needed
        self.shared = shared
        self._array_names = tuple(arrays)
        if not shared:
            for name, (example, dims) in arrays.items():
                setattr(self, name, buffer_from_example(example, dims))
            self._lock = contextlib.nullcontext()
            return
        self._layout, end = {}, 0
        for name, (example, dims) in arrays.items():

            def place(leaf: Any, dims: tuple[int, ...] = dims) -> tuple:
                nonlocal end
                leaf = np.asarray(leaf)
                start = -(-end // 64) * 64  # each array on a cache line of its own
                end = start + int(np.prod(dims, dtype=np.int64)) * leaf.nbytes
                return start, (*dims, *leaf.shape), leaf.dtype.str

            self._layout[name] = map_leaves(place, example)  # (offset, shape, dtype) of each array
        try:
            self._memory = AnonymousSharedMemory(end)
        except OSError as error:  # no address space left to map it (a ulimit -v, strict overcommit)
            raise MemoryError(
                f"{type(self).__name__} needs {_format_bytes(needed)} of shared memory, which this process cannot map "
                f"({error.strerror}); lower the capacity"
            ) from None
        self._view_memory()
        self._lock = ProcessLock()

    def _view_memory(self) -> None:
        for name, layout in self._layout.items():
            setattr(self, name, map_leaves(lambda where: self._memory.array(*where), layout))

    def __getstate__(self):
        state = self.__dict__.copy()
        if self.shared:
            for name in self._array_names:
                state[name] = None  # numpy views are rebuilt from the shared memory
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.shared:
            self._view_memory()
        self._bind()

    def _bind(self) -> None:
        """Build what wraps the arrays (a sum tree over its storage); called again after unpickling."""

    def reseed(self, seed: int | None) -> None:
        """Give this process its own sampling generator (a pickled copy shares its parent's)."""
        self.rng = np.random.default_rng(seed)

    def state_dict(self) -> dict:
        """The buffer's contents and sampling generator as tensors and plain data, for checkpoints.

        Returns:
            ``{"arrays": {name: tensor or nested dict/list of tensors}, "rng": bit-generator
            state}``: every array (transitions, positions, counts, the sum tree of a
            prioritized buffer) as tensors, so the dict loads with ``torch.load(...,
            weights_only=True)``. Its size is the buffer's ``nbytes``. The tensors share the
            buffer's memory (save them before the next ``add``); a shared-memory buffer is
            copied under its lock instead, since other processes may write to it.
        """
        with self._lock:  # a shared buffer is copied (other processes may write on); otherwise no copy
            arrays = {name: _to_tensors(getattr(self, name), copy=self.shared) for name in self._array_names}
        return {"arrays": arrays, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Copy the contents saved by :meth:`state_dict` into this buffer (built with the same arguments).

        Raises:
            ValueError: the saved arrays do not match this buffer's (names, shapes or dtypes),
                e.g. a checkpoint of a buffer with another capacity or observation space, or
                their values cannot have been written by this buffer (a position beyond the
                capacity, an action outside the action space, a count that does not add up);
                the buffer's contents are then undefined.
        """
        arrays = state["arrays"]
        if set(arrays) != set(self._array_names):
            raise ValueError(f"the saved buffer has arrays {sorted(arrays)}, this one {sorted(self._array_names)}")
        with self._lock:
            for name in self._array_names:
                _copy_into(getattr(self, name), arrays[name], name)
            self._check_contents()
        self.rng.bit_generator.state = state["rng"]

    def _check_contents(self) -> None:
        """Hook: raise ValueError where loaded values break what :meth:`add` keeps true."""


def _leaves(value: Any) -> list[np.ndarray]:
    """The arrays of an array, namedarraytuple or tuple of them (nested)."""
    return [value] if isinstance(value, np.ndarray) else [leaf for item in value for leaf in _leaves(item)]


def _to_tensors(value: Any, copy: bool) -> Any:
    """An array (or namedarraytuple / tuple of arrays, nested) as tensors in dicts and lists,
    sharing its memory or (``copy``) copied."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy() if copy else value)
    if is_namedarraytuple(value):
        return {field: _to_tensors(item, copy) for field, item in zip(value._fields, value)}
    return [_to_tensors(item, copy) for item in value]


def _copy_into(target: Any, saved: Any, name: str) -> None:
    """Copy ``saved`` (from :func:`_to_tensors`) into the arrays of ``target`` in place."""
    if isinstance(target, np.ndarray):
        source = saved.numpy() if isinstance(saved, torch.Tensor) else None
        if source is None or source.shape != target.shape or source.dtype != target.dtype:
            got = f"{tuple(source.shape)} {source.dtype}" if source is not None else type(saved).__name__
            raise ValueError(f"buffer array {name!r}: saved {got}, this buffer {target.shape} {target.dtype}")
        np.copyto(target, source)
        return
    items = [saved[field] for field in target._fields] if is_namedarraytuple(target) else saved
    for index, (part, item) in enumerate(zip(target, items, strict=True)):
        _copy_into(part, item, f"{name}[{index}]")


# --------------------------------------------------------------------------------------------
# Sum tree


class SumTree:
    """A binary tree whose every node holds the sum of its children's values; vectorised numpy.

    Leaf ``i`` holds a non-negative value (a priority p_i^α); the root holds their sum. Updates
    and prefix-sum searches handle a whole batch of indices per call, level by level, in
    O(log size) numpy operations (no Python loop over the batch). Schaul et al. (2016),
    section 3.3 and Appendix B.2.1.

    Args:
        size: number of leaves.
        storage: optional float64 array of ``2 * SumTree.leaf_offset(size)`` zeros to use (a
            shared-memory buffer); allocated here when None.

    Attributes:
        tree: float64 ``[2 * leaf_offset]``; node 1 is the root, nodes ``2k`` and ``2k + 1`` are
            the children of ``k``, leaf ``i`` is node ``leaf_offset + i``.
    """

    def __init__(self, size: int, storage: np.ndarray | None = None):
        if size <= 0:
            raise ValueError(f"size must be positive, got {size}")
        self.size = size
        self.leaf_offset = self.leaf_offset_of(size)
        self.depth = int(math.log2(self.leaf_offset))
        self.tree = np.zeros(2 * self.leaf_offset) if storage is None else storage

    @staticmethod
    def leaf_offset_of(size: int) -> int:
        """The smallest power of two >= ``size``: the node index of leaf 0."""
        return 1 << max(size - 1, 0).bit_length()

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.tree[1])

    def __getitem__(self, indices: np.ndarray) -> np.ndarray:
        """Values of leaves ``indices``."""
        return self.tree[self.leaf_offset + np.asarray(indices)]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` (int ``[K]``) to ``values`` (``[K]`` or scalar) and refresh their ancestors.

        With repeated indices the last value wins. Parents are recomputed as the sum of their
        children (not by adding differences), so no rounding error accumulates.
        """
        tree = self.tree
        nodes = self.leaf_offset + np.asarray(indices, dtype=np.int64).reshape(-1)
        tree[nodes] = values
        if len(nodes) <= 4:  # a few leaves (one vector-env step): plain Python is faster
            for node in set(nodes.tolist()):
                for _ in range(self.depth):
                    node >>= 1
                    tree[node] = tree[2 * node] + tree[2 * node + 1]
            return
        for _ in range(self.depth):  # repeated parents are recomputed twice, to the same value
            nodes = nodes >> 1
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Leaves ``i`` with ``sum(leaves[:i]) <= u < sum(leaves[:i + 1])`` for each ``u`` of ``prefix_sums``.

        ``u`` is clipped into ``[0, total)``, so a leaf of value 0 is never returned while the
        total is positive.
        """
        u = np.clip(np.asarray(prefix_sums, dtype=np.float64), 0.0, np.nextafter(self.tree[1], 0.0))
        nodes = np.ones(u.shape, dtype=np.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_sum = self.tree[left]
            go_right = u >= left_sum
            u = np.where(go_right, u - left_sum, u)
            nodes = left + go_right
        return nodes - self.leaf_offset

    def stratified_sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` leaves drawn with probability value / total, one from each of ``batch_size``
        equal segments of ``[0, total)`` (Schaul et al. 2016, Appendix B.2.1).

        Raises:
            ValueError: every leaf is 0.
        """
        total = self.tree[1]
        if total <= 0:
            raise ValueError("cannot sample: every priority is 0 (nothing stored yet)")
        segment = total / batch_size
        return self.find((np.arange(batch_size) + rng.random(batch_size)) * segment)


def importance_weights(probabilities: np.ndarray, num_stored: int, beta: float) -> np.ndarray:
    """w_i = (N · P(i))^-β / max_j w_j over the batch (Schaul et al. 2016, section 3.4).

    Args:
        probabilities: P(i) of the sampled items, ``[B]``.
        num_stored: N, items that could have been sampled.
        beta: β in [0, 1]; 1 fully corrects the bias of prioritized sampling.

    Returns:
        float32 ``[B]``, the largest equal to 1.
    """
    weights = (num_stored * probabilities) ** (-beta)
    return (weights / weights.max()).astype(np.float32)


def _priorities(values: Any) -> np.ndarray:
    """|values| as float64 numpy; a NaN or infinite one (a diverged loss) raises ValueError."""
    values = np.abs(np.asarray(torch.as_tensor(values).detach().cpu(), dtype=np.float64))
    if not np.isfinite(values).all():
        raise ValueError(f"priorities must be finite, got {values[~np.isfinite(values)][:3].tolist()}: has the loss diverged?")
    return values


def _check_beta(beta: float) -> None:
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")


# --------------------------------------------------------------------------------------------
# Transition replay


def rows_to_hold(steps: int, n_step: int = 1, frame_stack: int = 1) -> int:
    """The capacity (rows per env) of a :class:`ReplayBuffer` that holds ``steps`` steps of an env without its ring
    wrapping: a row per step and one per episode end (at most one a step), and the rows an n-step window or a
    frame stack reads past the newest. Such a buffer samples exactly as a larger one, draw for draw with the same
    seed (the rows beyond are never written), so a run that cannot fill ``--buffer-size`` may be capped at it.
    """
    return max(2 * steps, 1) + n_step + frame_stack


class ReplayBuffer(_Storage):
    """Uniform replay of transitions and their n-step windows over ``[capacity, num_envs]`` rows.

    Each :meth:`add` takes one vector-env step and must be called for every consecutive step
    (the next observation of a transition is read from the next row). A transition becomes
    sampleable once its n-step window is known: n more steps were added, or its episode ended.
    A sample holds the window's rewards, terminations and truncations, kept apart, and the
    observation n steps later, or the real final observation where the episode ended sooner
    (:data:`ReplaySamples`). The buffer knows nothing of discounting: the script computes its
    n-step return G = sum_{j<m} γ^j r_{t+j} and target ``G + γ^m (1 - terminated) V(s_{t+m})``
    (Sutton & Barto 2018, eq. 7.1; Hessel et al. 2018, eq. 2).

    Frame stacking (``frame_stack = k > 1``, observations ``[k, *frame_shape]`` stacked on
    axis 0, newest last, as SB3's ``VecFrameStack(channels_order="first")`` or gymnasium's
    ``FrameStackObservation(padding_type="zero")`` give): each row keeps only the newest frame,
    ``[*frame_shape]``, and stacks are rebuilt at sample time from the k - 1 rows before, with the
    frames from before an episode start set to zero. One million 84x84 Atari transitions then
    take about 7.1 GB rather than the 56 GB of storing obs and next_obs stacks.

    Args:
        capacity: rows per environment (observations kept; each episode end uses one extra
            row for its final observation). Must be >= n_step + frame_stack + 1.
        num_envs: environments, one column each.
        observation_space: the single-env observation space (Box, Discrete, Dict or Tuple;
            Box only when frames are stacked).
        action_space: the single-env action space.
        n_step: n, the steps of the window sampled with each transition (1: one-step TD).
        frame_stack: frames per observation stored once each (1: store whole observations).
        device: torch device of sampled batches.
        seed: seed of the sampling generator.
        shared: allocate in shared memory for use by several processes (see :class:`_Storage`):
            one process adds (the rows of a column must be one env's consecutive steps), any
            number sample and update priorities. Several actors: give each its own buffer,
            or use :class:`SequenceReplayBuffer`, whose unit is a whole sequence.

    Raises:
        ValueError: a size is not positive, capacity is too small, or the observation space
            does not fit ``frame_stack``.
        MemoryError: the arrays would not fit in available memory (message gives both sizes).
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        n_step: int = 1,
        frame_stack: int = 1,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        shared: bool = False,
    ):
        if num_envs <= 0 or n_step <= 0 or frame_stack <= 0:
            raise ValueError(f"num_envs, n_step and frame_stack must be positive, got {num_envs}, {n_step}, {frame_stack}")
        if capacity < n_step + frame_stack + 1:
            raise ValueError(
                f"capacity must be at least n_step + frame_stack + 1 = {n_step + frame_stack + 1}, got {capacity}"
            )
        obs_example = example_from_space(observation_space)
        if frame_stack > 1:
            if not isinstance(observation_space, gym.spaces.Box) or observation_space.shape[0] != frame_stack:
                raise ValueError(
                    f"frame_stack={frame_stack} needs Box observations stacked on axis 0, got {observation_space}"
                )
            obs_example = obs_example[0]  # one frame
        self.capacity, self.num_envs, self.n_step = capacity, num_envs, n_step
        self.frame_stack, self.device, self.action_space = frame_stack, torch.device(device), action_space
        self.rng = np.random.default_rng(seed)
        rows = (capacity, num_envs)
        self._allocate(
            {
                "observations": (obs_example, rows),  # the newest frame when stacking
                "actions": (example_from_space(action_space), rows),
                "rewards": (np.float32(0), rows),
                "terminations": (False, rows),
                "truncations": (False, rows),
                "first": (False, rows),  # row starts an episode: no frames before it
                "valid": (False, rows),  # row is a complete transition that may be sampled
                "versions": (np.int64(0), rows),  # times the row was written (stale priority updates)
                "pos": (np.int64(0), (num_envs,)),  # next row to write, per column
                "episode_rows": (np.int64(0), (num_envs,)),  # transition rows of the current episode
                "written": (np.int64(0), (num_envs,)),  # rows ever written, per column
                "counts": (np.int64(0), (1,)),  # [valid rows]
                **self._extra_arrays(),
            },
            shared,
        )
        self._bind()

    def _extra_arrays(self) -> dict:
        return {}

    def _bind(self) -> None:
        self._valid_flat = self.valid.reshape(-1)

    def _check_contents(self) -> None:
        cap, bad = self.capacity, []
        for name, high in (("pos", cap - 1), ("episode_rows", None), ("written", None), ("versions", None)):
            values = getattr(self, name)
            if values.min() < 0 or (high is not None and values.max() > high):
                bad.append(f"{name} outside [0, {high if high is not None else 'inf'}]")
        if int(self.counts[0]) != int(self.valid.sum()):
            bad.append(f"counts {int(self.counts[0])} while {int(self.valid.sum())} rows are valid")
        if not np.isfinite(self.rewards).all():
            bad.append("a non-finite reward")
        if any(np.issubdtype(leaf.dtype, np.floating) and not np.isfinite(leaf).all() for leaf in _leaves(self.observations)):
            bad.append("a non-finite observation")
        ended = self.terminations | self.truncations
        if (self.valid & np.roll(ended, 1, axis=0)).any():  # the row after an episode's end holds its final observation
            bad.append("a sampleable row that holds an episode's final observation")
        if not bad:  # positions in range: the rows that cannot be sampled yet are known
            for e in range(self.num_envs):
                pos, length, written = int(self.pos[e]), int(self.episode_rows[e]), int(self.written[e])
                span = min(length, cap - 1)  # an episode longer than the ring keeps its newest rows
                episode = [(pos - span + j) % cap for j in range(span)]  # the current episode's rows, oldest first
                if length == 0 and written >= 2 and not ended[(pos - 2) % cap, e]:
                    bad.append(f"env {e}'s current episode has no rows, yet its last row did not end one")
                elif length and length < cap - 1 and (not self.first[episode[0], e] or self.first[episode[1:], e].any()):
                    bad.append(f"env {e}'s current episode does not start {length} rows back")
                elif length and ended[episode, e].any():
                    bad.append(f"env {e}'s current episode holds an episode end")
                # its last n rows (their windows are not complete) and, stacking frames, the k - 1 oldest rows
                rows = episode[-self.n_step :] + [(pos + j) % cap for j in range(self.frame_stack - 1)]
                if self.valid[rows, e].any():  # (their stacks would reach into new data) cannot be sampled
                    bad.append(f"a sampleable row in env {e} whose n-step window or frame stack is not complete")
                if bad:
                    break
        space = self.action_space
        if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            high = space.start + (space.n if isinstance(space, gym.spaces.Discrete) else space.nvec) - 1
            if ((self.actions < space.start) | (self.actions > high)).any():
                bad.append(f"an action outside {space}")
        elif isinstance(space, gym.spaces.Box) and np.issubdtype(self.actions.dtype, np.floating):
            if not np.isfinite(self.actions).all():
                bad.append("a non-finite action")
        if bad:
            raise ValueError(f"the saved replay buffer holds values this buffer cannot have written: {'; '.join(bad)}")

    def __len__(self) -> int:
        """Number of transitions that can be sampled now."""
        return int(self.counts[0])

    # ---- writing

    def add(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        next_obs: Any,
        columns: np.ndarray | list[int] | None = None,
    ) -> np.ndarray:
        """Store one vector step, arrays ``[num_envs, ...]`` (or ``[len(columns), ...]``).

        Args:
            obs: s_t of each env; for Dict/Tuple spaces the vector env's dict/tuple of arrays
                or a namedarraytuple of the class of ``buffer.observations``.
            actions: a_t.
            rewards: r_t.
            terminations, truncations: the episode ended at this step (bool or 0/1).
            next_obs: the real next observation s_{t+1}: where an episode ended, its final
                observation (``infos["final_obs"]``), see :func:`cleanrl_utils.wrappers.real_next_obs`.
                Only the entries of envs whose episode ended are read; the others are the
                ``obs`` of the next call.
            columns: the columns this step writes, in the order of the arrays' rows (None: all):
                several processes adding to one shared buffer each write their own columns
                (Ape-X's actors).

        Returns:
            int64 ``[K]``: the flat slots ``row * num_envs + column`` that became sampleable in this
            step (their n-step windows completed), for a caller that computes their priorities.

        Raises:
            ValueError: the arrays are not ``[num_envs, ...]`` (``[len(columns), ...]``), a column is out
                of range, or (frame stacking) an episode's first stack is not zero-padded.
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        if columns is None:
            columns = range(self.num_envs)
        else:
            columns = [int(c) for c in columns]
            if any(not 0 <= c < self.num_envs for c in columns):
                raise ValueError(f"columns must be in [0, {self.num_envs}), got {columns}")
        terminations, truncations = np.asarray(terminations, bool), np.asarray(truncations, bool)
        if np.shape(rewards)[:1] != (len(columns),) or terminations.shape != (len(columns),):
            raise ValueError(
                f"add takes one vector step of {len(columns)} envs (num_envs={self.num_envs}, or its columns): rewards "
                f"and terminations shaped [{len(columns)}], got {np.shape(rewards)} and {terminations.shape}"
            )
        obs, next_obs = self._as_observation(obs), self._as_observation(next_obs)
        with self._lock:
            changed = self._add(obs, actions, rewards, terminations, truncations, next_obs, columns)
        return np.array([slot for slot, valid in changed if valid], dtype=np.int64)

    def _as_observation(self, obs: Any) -> Any:
        """A vector env's dict / tuple observation as the namedarraytuple the storage uses."""
        return conform(obs, self.observations)

    def _add(self, obs, actions, rewards, terminations, truncations, next_obs, columns) -> list[tuple[int, bool]]:
        # One environment at a time, in plain Python: for the few envs of an off-policy run this
        # is several times faster than numpy calls on arrays of num_envs elements.
        cap, n, E, k = self.capacity, self.n_step, self.num_envs, self.frame_stack
        frames = self._newest_frame(obs)
        changed: list[tuple[int, bool]] = []  # slots that became (un)sampleable
        for i, e in enumerate(columns):  # row i of the arrays, column e of the buffer
            row, ended = int(self.pos[e]), bool(terminations[i] or truncations[i])
            # The rows about to be written (the transition, and the final observation where the
            # episode ended) stop being sampleable; so do the k - 1 rows after them, the oldest
            # of the ring, whose frame stacks would reach back into the new data.
            for j in range(k + ended):
                self._mark((row + j) % cap * E + e, False, changed)
            self.versions[row, e] += 1
            self.observations[row, e] = frames[i]
            self.actions[row, e] = actions[i]
            self.rewards[row, e] = rewards[i]
            self.terminations[row, e] = terminations[i]
            self.truncations[row, e] = truncations[i]
            length = int(self.episode_rows[e]) + 1  # transitions of this episode so far
            self.first[row, e] = length == 1
            if length == 1 and k > 1 and obs[i, :-1].any():
                raise ValueError(
                    "the first frame stack of an episode must be zero-padded before its first frame, as "
                    "FrameStackObservation(padding_type='zero') or SB3's VecFrameStack give (and each "
                    "env's first add must be the start of an episode)"
                )
            # Transitions whose n-step window is now known: row - n, whose s_{t+n} this row is,
            if length > n:
                self._mark((row - n) % cap * E + e, True, changed)
            if ended:  # and the last min(n, length) transitions of an ended episode.
                final = (row + 1) % cap
                self.versions[final, e] += 1
                self.observations[final, e] = self._newest_frame(next_obs)[i]
                self.rewards[final, e] = 0.0
                self.terminations[final, e] = self.truncations[final, e] = self.first[final, e] = False
                for j in range(min(n, length)):
                    self._mark((row - j) % cap * E + e, True, changed)
                length = 0
            self.episode_rows[e] = length
            self.pos[e] = (row + 1 + ended) % cap
            self.written[e] += 1 + ended
        if changed:
            self._on_valid_change(changed)
        return changed

    def _newest_frame(self, obs: Any) -> Any:
        return obs[:, -1] if self.frame_stack > 1 else obs

    def _mark(self, slot: int, valid: bool, changed: list) -> None:
        """Mark flat slot ``row * num_envs + env`` sampleable or not, keeping the count."""
        if self._valid_flat[slot] != valid:
            self._valid_flat[slot] = valid
            self.counts[0] += 1 if valid else -1
            changed.append((slot, valid))

    def _on_valid_change(self, changed: list[tuple[int, bool]]) -> None:
        """Hook: ``(slot, valid)`` pairs whose sampleability changed in one :meth:`add`."""

    # ---- reading

    def sample(self, batch_size: int) -> ReplaySamples:
        """Draw ``batch_size`` complete transitions uniformly, with replacement, as torch tensors.

        Returns:
            :data:`ReplaySamples` with ``weights`` None.

        Raises:
            ValueError: no transition is complete yet.
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        with self._lock:
            flat = self._uniform_indices(batch_size)
            return self._gather(flat, None)

    def transitions(self, slots: np.ndarray) -> tuple[ReplaySamples, np.ndarray]:
        """The transitions at flat slots ``slots`` (``[K]``, sampleable ones, such as :meth:`add` returns) with their
        n-step windows, and the slots' versions (int64 ``[K]``, for :meth:`PrioritizedReplayBuffer.update_priorities`),
        read together under the lock.

        Returns:
            :data:`ReplaySamples` with ``weights`` None, and the versions.
        """
        flat = np.asarray(slots, dtype=np.int64)
        with self._lock:
            return self._gather(flat, None), self.versions.reshape(-1)[flat].copy()

    def _uniform_indices(self, batch_size: int) -> np.ndarray:
        if self.counts[0] == 0:
            raise ValueError("cannot sample: no complete transition in the replay buffer yet")
        high = min(int(self.written.max()), self.capacity) * self.num_envs
        valid = self.valid.reshape(-1)
        flat = self.rng.integers(0, high, size=batch_size)
        for _ in range(8):  # rejection sampling: almost every written row is valid
            bad = ~valid[flat]
            if not bad.any():
                return flat
            flat[bad] = self.rng.integers(0, high, size=int(bad.sum()))
        bad = ~valid[flat]
        flat[bad] = self.rng.choice(np.flatnonzero(valid[:high]), size=int(bad.sum()))
        return flat

    def _gather(self, flat: np.ndarray, weights: np.ndarray | None) -> ReplaySamples:
        """Assemble the transitions at flat slots ``flat`` (``[B]``) with their n-step windows."""
        cap, n = self.capacity, self.n_step
        rows, envs = np.divmod(flat, self.num_envs)
        window = (rows[:, None] + np.arange(n)) % cap  # [B, n]
        rewards = self.rewards[window, envs[:, None]]
        terminated = self.terminations[window, envs[:, None]]
        truncated = self.truncations[window, envs[:, None]]
        if n > 1:  # the rows after the step that ended the episode belong to no step of it
            ended = terminated | truncated
            after_end = np.cumsum(ended, axis=1) - ended > 0
            rewards[after_end], terminated[after_end], truncated[after_end] = 0.0, False, False
            m = np.where(ended.any(axis=1), ended.argmax(axis=1) + 1, n)  # s_{t+m} ends the window
        else:
            m = np.ones(len(flat), dtype=np.int64)
        samples = ReplaySamples(
            obs=self._stack(rows, envs),
            actions=self.actions[rows, envs],
            next_obs=self._stack((rows + m) % cap, envs),
            rewards=rewards,
            terminations=terminated.astype(np.float32),
            truncations=truncated.astype(np.float32),
            next_obs_steps=m.astype(np.int64),
            indices=flat.astype(np.int64),
            weights=weights,
        )
        return to_device(samples, self.device)

    def _stack(self, rows: np.ndarray, envs: np.ndarray) -> Any:
        """Observations ending at ``rows`` of columns ``envs``: ``[B, *obs_shape]``.

        With frame stacking, frames j = 0..k-1 come from rows ``rows - (k - 1) + j``; a frame is
        zeroed when an episode starts after it (a ``first`` row later in the stack).
        """
        k = self.frame_stack
        if k == 1:
            return self.observations[rows, envs]
        window = (rows[:, None] + np.arange(1 - k, 1)) % self.capacity  # [B, k], oldest first
        frames = self.observations[window, envs[:, None]]  # [B, k, *frame_shape]
        first = self.first[window, envs[:, None]]
        # before_start[:, j]: some frame after j (j < k - 1) starts an episode
        before_start = np.logical_or.accumulate(first[:, :0:-1], axis=1)[:, ::-1]
        frames[:, :-1][before_start] = 0
        return frames


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) of transitions and their n-step windows.

    P(i) = p_i^α / sum_j p_j^α with priority p_i = |δ_i| + ε (section 3.3); sampling is
    stratified over ``batch_size`` equal segments of the total (Appendix B.2.1); a new
    transition gets the largest priority seen so far (Algorithm 1, line 6); importance weights
    w_i = (N P(i))^-β / max w (section 3.4), with β annealed towards 1 by the caller.

    Args:
        alpha: priority exponent α (0: uniform).
        eps: ε added to |δ| so that no transition has probability 0.
        (others as :class:`ReplayBuffer`)
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        n_step: int = 1,
        frame_stack: int = 1,
        alpha: float = 0.6,
        eps: float = 1e-6,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        shared: bool = False,
    ):
        if alpha < 0 or eps <= 0:
            raise ValueError(f"alpha must be >= 0 and eps > 0, got {alpha} and {eps}")
        self.alpha, self.eps = alpha, eps
        super().__init__(capacity, num_envs, observation_space, action_space, n_step, frame_stack, device, seed, shared)
        self.max_priority[0] = 1.0
        self._initial_priority: float | None = None

    def add(self, *step: Any, columns: Any = None, initial_priority: float | None = None) -> np.ndarray:
        """:meth:`ReplayBuffer.add`; each transition that becomes sampleable gets the largest priority seen so far
        (Schaul et al. 2016, Algorithm 1, line 6) or, given, ``initial_priority`` p (0 keeps it out of sampling until
        :meth:`update_priorities` sets its own, as Ape-X's actors do: Horgan et al. 2018, section 3)."""
        self._initial_priority = initial_priority
        try:
            return super().add(*step, columns=columns)
        finally:
            self._initial_priority = None

    def _bind(self) -> None:
        super()._bind()
        self.tree = SumTree(self.capacity * self.num_envs, self.tree_storage)

    def _extra_arrays(self) -> dict:
        size = self.capacity * self.num_envs
        return {"tree_storage": (np.float64(0), (2 * SumTree.leaf_offset_of(size),)), "max_priority": (np.float64(0), (1,))}

    def _check_contents(self) -> None:
        super()._check_contents()
        leaves = self.tree.tree[self.tree.leaf_offset :]  # every leaf, those beyond the slots included
        finite = np.isfinite(leaves).all() and np.isfinite(self.max_priority[0])
        if not (finite and (leaves >= 0).all() and self.max_priority[0] > 0):
            raise ValueError("the saved replay buffer holds a negative or non-finite priority")
        if (leaves[: self.tree.size][~self._valid_flat] != 0).any() or (leaves[self.tree.size :] != 0).any():
            raise ValueError("the saved replay buffer gives a priority to a transition that cannot be sampled")
        self.tree.update(np.arange(self.tree.size), leaves[: self.tree.size].copy())  # every sum recomputed from the leaves

    def _on_valid_change(self, changed: list[tuple[int, bool]]) -> None:
        # a transition becomes sampleable with the largest priority so far (or the caller's); a stale one with 0
        slots, valid = zip(*changed)
        initial = self.max_priority[0] if self._initial_priority is None else self._initial_priority
        self.tree.update(np.array(slots), np.where(valid, initial**self.alpha, 0.0))

    def sample(self, batch_size: int, beta: float = 1.0) -> ReplaySamples:
        """Draw ``batch_size`` transitions with probability P(i), with their importance weights.

        Args:
            batch_size: B.
            beta: importance-sampling exponent β in [0, 1].

        Returns:
            :data:`ReplaySamples` with ``weights`` ``[B]`` and ``indices`` for :meth:`update_priorities`.

        Raises:
            ValueError: no transition is complete yet, or β is outside [0, 1].
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        _check_beta(beta)
        with self._lock:
            if self.counts[0] == 0:
                raise ValueError("cannot sample: no complete transition in the replay buffer yet")
            flat = self.tree.stratified_sample(batch_size, self.rng)
            probabilities = self.tree[flat] / self.tree.total
            weights = importance_weights(probabilities, int(self.counts[0]), beta)
            return self._gather(flat, weights)

    def update_priorities(
        self, indices: np.ndarray | torch.Tensor, priorities: np.ndarray | torch.Tensor, versions: np.ndarray | None = None
    ) -> None:
        """Set p_i = |priorities_i| + ε for the sampled slots ``indices`` (``[B]``), typically |δ_i|.

        Slots that are no longer sampleable (overwritten since they were sampled) are skipped;
        pass ``versions = buffer.versions.reshape(-1)[indices]`` read at sampling time to also
        skip slots rewritten and completed again in between (several processes).

        Raises:
            ValueError: a priority is NaN or infinite (a diverged loss).
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        indices = np.asarray(torch.as_tensor(indices).cpu(), dtype=np.int64)
        priorities = _priorities(priorities) + self.eps
        with self._lock:
            keep = self.valid.reshape(-1)[indices]
            if versions is not None:
                keep &= self.versions.reshape(-1)[indices] == versions
            if keep.any():
                self.tree.update(indices[keep], priorities[keep] ** self.alpha)
                self.max_priority[0] = max(self.max_priority[0], priorities[keep].max())


# --------------------------------------------------------------------------------------------
# Sequence replay


def sequence_priority(
    abs_td_errors: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor, eta: float = 0.9
) -> np.ndarray:
    """Priority of each sequence: p = η max_t |δ_t| + (1 - η) mean_t |δ_t| over its masked steps.

    Kapturowski et al. (2019), section 2.3 (η = 0.9 in R2D2).

    Args:
        abs_td_errors: |δ| ``[K, T]``.
        mask: bool ``[K, T]``, the steps that count (e.g. ``learn_mask``).
        eta: η in [0, 1].

    Returns:
        float64 ``[K]``; 0 for a sequence with no masked step.
    """
    delta = np.abs(np.asarray(torch.as_tensor(abs_td_errors).detach().cpu(), dtype=np.float64))
    mask = np.asarray(torch.as_tensor(mask).cpu(), dtype=bool)
    steps = mask.sum(axis=1)
    largest = np.where(mask, delta, 0.0).max(axis=1)
    mean = np.where(mask, delta, 0.0).sum(axis=1) / np.maximum(steps, 1)
    return eta * largest + (1.0 - eta) * mean


class SequenceBuilder:
    """Cuts each environment's steps into overlapping fixed-length sequences (R2D2, section 3).

    Sequences have length T = ``burn_in + learn_length`` and start every ``learn_length``
    steps of an episode, so consecutive ones overlap by ``burn_in`` steps and each step is in
    the learned part of exactly one sequence: the first sequence of an episode learns on all
    its steps (its stored state, zeros, is exact); a later one learns on its steps after the
    burn-in, which only warm up the recurrent state. Sequences never cross an episode end:
    one that reaches the end is padded (``mask`` False) and its observation after the last
    real step is the real final observation; a sequence whose burn-in covers the whole rest of
    the episode is not made. The state stored with a sequence is the actor's recurrent state
    before its first step, zeros at an episode start, so no state leaks across episodes.

    Args:
        num_envs: environments.
        burn_in: steps that only warm up the recurrent state (R2D2: 40).
        learn_length: steps learned on per sequence, and the period of the sequence starts
            (R2D2: 40, so sequences of 80 overlapping by 40).
        observation_space, action_space: single-env spaces.
        state_example: one env's recurrent state, an array or namedarraytuple (e.g. ``(h, c)``
            each ``[hidden]``); states are passed and stored with the env dimension first.

    Raises:
        ValueError: ``burn_in`` < 0 or ``learn_length`` <= 0.
    """

    def __init__(
        self,
        num_envs: int,
        burn_in: int,
        learn_length: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        state_example: Any,
    ):
        if burn_in < 0 or learn_length <= 0:
            raise ValueError(f"burn_in must be >= 0 and learn_length > 0, got {burn_in} and {learn_length}")
        self.num_envs, self.burn_in, self.learn_length = num_envs, burn_in, learn_length
        self.length = T = burn_in + learn_length
        ring = (num_envs, T)  # the last T steps of each env, step i at i % T
        self.obs = buffer_from_example(example_from_space(observation_space), ring)
        self.actions = buffer_from_example(example_from_space(action_space), ring)
        self.rewards = np.zeros(ring, np.float32)
        self.terminations = np.zeros(ring, bool)
        self.truncations = np.zeros(ring, bool)
        self.states = buffer_from_example(state_example, ring)
        self.steps = np.zeros(num_envs, np.int64)  # index in its episode of each env's next step
        self.template = Sequences(
            obs=buffer_from_example(example_from_space(observation_space), (T + 1,)),
            actions=buffer_from_example(example_from_space(action_space), (T,)),
            rewards=np.zeros(T, np.float32),
            terminations=np.zeros(T, bool),
            truncations=np.zeros(T, bool),
            mask=np.zeros(T, bool),
            learn_mask=np.zeros(T, bool),
            states=state_example,
            starts_episode=np.zeros((), bool),
            indices=None,
            weights=None,
        )

    def add(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        next_obs: Any,
        states: Any,
    ) -> Sequences | None:
        """Take one vector step (arrays ``[num_envs, ...]``); return the sequences it completes.

        Args:
            obs, actions, rewards, terminations, truncations: the step of each env.
            next_obs: the real next observations (final observations where episodes ended).
            states: each env's recurrent state *before* acting on ``obs``, ``[num_envs, ...]``.

        Returns:
            :data:`Sequences` with K >= 1 sequences, or None when no sequence is complete.
        """
        envs = np.arange(self.num_envs)
        slot = self.steps % self.length
        self.obs[envs, slot] = obs
        self.actions[envs, slot] = actions
        self.rewards[envs, slot] = rewards
        self.terminations[envs, slot] = terminations
        self.truncations[envs, slot] = truncations
        self.states[envs, slot] = states
        done = np.asarray(terminations, bool) | np.asarray(truncations, bool)
        T, L, B = self.length, self.learn_length, self.burn_in
        made = []
        for e in range(self.num_envs):
            i = int(self.steps[e])  # step just added
            if done[e]:
                # every sequence still open: starts s = kL <= i with s + T - 1 >= i that learn something
                for s in range(i - i % L, max(i - T, -1), -L):
                    if s + T - 1 >= i and (s == 0 or s + B <= i):
                        made.append(self._cut(e, s, i, next_obs))
            elif i + 1 >= T and (i + 1 - T) % L == 0:
                made.append(self._cut(e, i + 1 - T, i, next_obs))
        self.steps = np.where(done, 0, self.steps + 1)
        return _stack_all(made) if made else None

    def _cut(self, env: int, start: int, last: int, next_obs: Any) -> Sequences:
        """The sequence of env ``env`` from step ``start`` to ``last`` (inclusive), padded to T."""
        T = self.length
        length = last - start + 1
        slots = np.arange(start, last + 1) % T
        seq = buffer_from_example(self.template, ())  # zeros shaped like the template
        seq.obs[:length] = self.obs[env, slots]
        seq.obs[length] = next_obs[env]
        seq.actions[:length] = self.actions[env, slots]
        seq.rewards[:length] = self.rewards[env, slots]
        seq.terminations[:length] = self.terminations[env, slots]
        seq.truncations[:length] = self.truncations[env, slots]
        seq.mask[:length] = True
        seq.learn_mask[:length] = True
        if start > 0:
            seq.learn_mask[: self.burn_in] = False
            seq.states[...] = self.states[env, start % T]
        seq.starts_episode[...] = start == 0
        return seq


def _stack_all(items: list) -> Any:
    """Stack equally structured arrays / namedarraytuples along a new leading dimension."""
    if items[0] is None:
        return None
    if is_namedarraytuple(items[0]):
        return type(items[0])(*(_stack_all(list(fields)) for fields in zip(*items)))
    return np.stack(items)


class SequenceReplayBuffer(_Storage):
    """Prioritized replay of fixed-length sequences with stored recurrent state (R2D2).

    Stores the :data:`Sequences` a :class:`SequenceBuilder` makes, in a ring of ``capacity``
    sequences; samples them with probability p^α / sum p^α (Schaul et al. 2016) where p is
    the sequence priority of :func:`sequence_priority` (Kapturowski et al. 2019, section 2.3).
    In shared mode (``shared=True``) any number of actor processes may add whole sequences
    while a learner samples and updates priorities.

    Args:
        capacity: sequences kept.
        builder: the :class:`SequenceBuilder` whose sequences are stored (gives the shapes).
        alpha: priority exponent α (R2D2: 0.9).
        eps: ε added to every priority so that none is 0.
        device: torch device of sampled batches.
        seed: seed of the sampling generator.
        shared: allocate in shared memory.

    Raises:
        ValueError: ``capacity`` <= 0.
        MemoryError: the arrays would not fit in available memory.
    """

    def __init__(
        self,
        capacity: int,
        builder: SequenceBuilder,
        alpha: float = 0.9,
        eps: float = 1e-6,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        shared: bool = False,
    ):
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity, self.alpha, self.eps, self.device = capacity, alpha, eps, torch.device(device)
        self.rng = np.random.default_rng(seed)
        self._allocate(
            {
                "data": (builder.template._replace(indices=None, weights=None), (capacity,)),
                "versions": (np.int64(0), (capacity,)),
                "tree_storage": (np.float64(0), (2 * SumTree.leaf_offset_of(capacity),)),
                # [next slot, sequences stored], [largest priority seen]
                "counts": (np.int64(0), (2,)),
                "max_priority": (np.float64(1.0), (1,)),
            },
            shared,
        )
        self.max_priority[0] = 1.0
        self._bind()

    def _bind(self) -> None:
        self.tree = SumTree(self.capacity, self.tree_storage)

    def __len__(self) -> int:
        return int(self.counts[1])

    def add(self, sequences: Sequences, priorities: np.ndarray | None = None) -> None:
        """Store K sequences (oldest overwritten first), with priorities ``[K]`` or the largest seen.

        Raises:
            ValueError: a priority is NaN or infinite.
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        k = len(sequences.rewards)
        with self._lock:
            slots = (self.counts[0] + np.arange(k)) % self.capacity
            self.data[slots] = sequences._replace(indices=None, weights=None)
            self.versions[slots] += 1
            if priorities is None:
                values = np.full(k, self.max_priority[0])
            else:
                values = _priorities(priorities) + self.eps
                self.max_priority[0] = max(self.max_priority[0], values.max())
            self.tree.update(slots, values**self.alpha)
            self.counts[0] = (self.counts[0] + k) % self.capacity
            self.counts[1] = min(self.counts[1] + k, self.capacity)

    def sample(self, batch_size: int, beta: float = 1.0) -> Sequences:
        """Draw ``batch_size`` sequences with probability P(i), as torch tensors with weights ``[B]``.

        Raises:
            ValueError: the buffer is empty, or β is outside [0, 1].
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        _check_beta(beta)
        with self._lock:
            if self.counts[1] == 0:
                raise ValueError("cannot sample: the sequence replay buffer is empty")
            slots = self.tree.stratified_sample(batch_size, self.rng)
            weights = importance_weights(self.tree[slots] / self.tree.total, int(self.counts[1]), beta)
            batch = self.data[slots]._replace(indices=slots.astype(np.int64), weights=weights)
            return to_device(batch, self.device)

    def update_priorities(self, indices, priorities, versions: np.ndarray | None = None) -> None:
        """Set the priorities ``[B]`` (e.g. :func:`sequence_priority`) of sampled slots ``indices``.

        With ``versions`` (``buffer.versions[indices]`` read when sampling), slots overwritten
        since are skipped.

        Raises:
            ValueError: a priority is NaN or infinite (a diverged loss).
            LockHolderDied: (shared) a process died holding the buffer's lock (see :class:`ProcessLock`).
        """
        indices = np.asarray(torch.as_tensor(indices).cpu(), dtype=np.int64)
        values = _priorities(priorities) + self.eps
        with self._lock:
            keep = np.ones(len(indices), bool) if versions is None else self.versions[indices] == versions
            if keep.any():
                self.tree.update(indices[keep], values[keep] ** self.alpha)
                self.max_priority[0] = max(self.max_priority[0], values[keep].max())

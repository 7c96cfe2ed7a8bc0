"""Writes that a link planted in a folder cannot redirect: new files, regular files, whole-file replacements.

A folder may come from elsewhere; a link planted there under a name this project writes would send the write elsewhere.
Refusals raise :class:`UnsafePath` (one line). No torch: the launcher and the tuner use it too.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, Iterator

_KINDS = {stat.S_ISLNK: "a symbolic link", stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}


class UnsafePath(OSError):
    """A path this project will not write through; ``str()`` is the one-line message."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def kind(mode: int) -> str:
    """``"a symbolic link"``, ``"a folder"``, ``"a FIFO"``, ... of an ``lstat`` mode."""
    return next((name for test, name in _KINDS.items() if test(mode)), "a device or other special file")


def _open(path: str | os.PathLike, flags: int, mode: str) -> IO[Any]:
    """``os.open(path, flags)`` never through a link, and only of a regular file (else :class:`UnsafePath`)."""
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EEXIST, errno.EISDIR, errno.ENXIO):
            raise
        found = kind(os.lstat(path).st_mode) if os.path.lexists(path) else "in the way"
        raise UnsafePath(error.errno, f"{path} is {found}: refusing to write through it") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # a FIFO or a device, opened without blocking
        found = kind(os.fstat(descriptor).st_mode)
        os.close(descriptor)
        raise UnsafePath(errno.EINVAL, f"{path} is {found}: refusing to write through it")
    os.set_blocking(descriptor, True)
    return open(descriptor, mode, encoding=None if "b" in mode else "utf-8")


def create_new(path: str | os.PathLike, mode: str = "wb") -> IO[Any]:
    """Open the new file ``path`` for writing; anything already there (even a dangling link) is :class:`UnsafePath`."""
    return _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)


def open_regular(path: str | os.PathLike, mode: str = "a+") -> IO[Any]:
    """Open (in ``"a"`` modes, create) the regular file ``path``, never through a link; no truncation."""
    flags = (os.O_RDWR if "+" in mode else os.O_WRONLY) | (os.O_CREAT | os.O_APPEND if mode[0] == "a" else 0)
    return _open(path, flags, mode)


@contextmanager
def atomic_file(path: str | os.PathLike, permissions: int | None = None) -> Iterator[IO[bytes]]:
    """A new file ``<path>.tmp`` open for binary writing (mode bits ``permissions`` if given), flushed to disk and
    renamed over ``path`` when the block ends. An error (a full disk) leaves ``path`` as it was and no temporary
    file; whatever a killed process or a planter left at the temporary name is removed, never followed.

    Raises:
        UnsafePath: a folder at the temporary name, or a folder, FIFO or device at ``path``.
    """
    temporary = Path(f"{path}.tmp")
    if os.path.lexists(temporary):
        if stat.S_ISDIR(os.lstat(temporary).st_mode):
            raise UnsafePath(errno.EISDIR, f"{temporary} is a folder: refusing to write through it")
        os.unlink(temporary)
    try:
        with create_new(temporary) as file:
            if permissions is not None:
                os.fchmod(file.fileno(), permissions)
            yield file
            file.flush()
            os.fsync(file.fileno())
        mode = os.lstat(path).st_mode if os.path.lexists(path) else stat.S_IFREG
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise UnsafePath(errno.EINVAL, f"{path} is {kind(mode)}: refusing to replace it")
        os.replace(temporary, path)  # a link at path is replaced by the file, never written through
    except BaseException:
        with suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str, permissions: int | None = None) -> Path:
    """Write ``data`` as the whole of ``path`` through :func:`atomic_file`."""
    with atomic_file(path, permissions) as file:
        file.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


def check_tree(folder: str | os.PathLike) -> None:
    """Refuse (:class:`UnsafePath`, naming it) a link, FIFO, socket or device anywhere below ``folder``: a run
    directory holds only the files and folders this project wrote, and a planted link would redirect a later write."""
    for root, folders, files in os.walk(folder):
        for entry in (os.path.join(root, name) for name in folders + files):
            mode = os.lstat(entry).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UnsafePath(errno.EINVAL, f"{entry} is {kind(mode)}; a run folder holds only files and folders")

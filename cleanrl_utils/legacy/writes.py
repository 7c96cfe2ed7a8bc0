"""Writes that a planted link cannot redirect, and names and values that cannot escape their place.

A run directory, the launcher's log folder, the plot's output folder and the tuner's study folder
are data: someone else may have made them (a shared disk, a run directory copied from elsewhere),
and a symbolic link planted in one, named as a file this project writes (the lock file, a
checkpoint's temporary file), would send the write to a file elsewhere. So every write into such
a folder goes through these functions:

- :func:`make_folder` creates a folder and its parents below a base, refusing a part that is a
  link or not a folder;
- :func:`create_new` opens a file that must not exist yet (``O_CREAT | O_EXCL | O_NOFOLLOW``): a
  link or any other file at that name is never opened;
- :func:`open_regular` opens (or creates) a file that must be a regular file, never through a link;
- :func:`atomic_file` and :func:`write_atomic` write a whole file through a new temporary file, renamed
  over the old one (:func:`replace`), so an interrupted write (a full disk, a kill) leaves the previous
  file whole;
- :func:`check_tree` refuses a folder that holds a link, a FIFO or a device anywhere below it;
- :func:`check_name` and :func:`check_text` refuse names and values with path separators or
  control characters before they become a file name or a line of a generated script.

Refusals raise :class:`UnsafePath`, an ``OSError`` whose message is one line naming the path.
Imports nothing heavy (no torch, no gymnasium): the launcher and the tuner use it.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, Iterator

from cleanrl_utils.legacy.cli import fail


class UnsafePath(OSError):
    """A path this project will not write through: a link, a folder where a file belongs, a FIFO or device.

    ``str()`` is the one-line message (``strerror``), without the ``[Errno N]`` prefix."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def _kind(mode: int) -> str:
    """``"a symbolic link"``, ``"a folder"``, ``"a FIFO"`` ... for an ``lstat`` mode."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def make_folder(path: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """Create the folder ``path`` and its missing parents, each a real folder, never a link.

    Args:
        path: the folder.
        base: the folder ``path`` lies in (trusted as given: it may itself be a link the user
            made, e.g. ``runs -> /scratch/runs``); every part of ``path`` below it is checked.
            None: only ``path``'s last part is checked.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        UnsafePath: a part below ``base`` is a link or not a folder.
        OSError: a folder cannot be created (a read-only or full disk).
    """
    path = Path(path)
    parts = [path]
    if base is not None:
        relative = path.relative_to(base)
        parts = [Path(base).joinpath(*relative.parts[: i + 1]) for i in range(len(relative.parts))]
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    for part in parts:
        try:
            os.mkdir(part)
        except FileExistsError:
            pass
        mode = os.lstat(part).st_mode
        if not stat.S_ISDIR(mode):
            raise UnsafePath(errno.ENOTDIR, f"{part} is {_kind(mode)}, not a folder this project made")
    return path


def _refuse_link(path: Path, error: OSError) -> None:
    """Turn ``open``'s error for a link (ELOOP under ``O_NOFOLLOW``) or an existing name (EEXIST) into :class:`UnsafePath`."""
    if error.errno in (errno.ELOOP, errno.EEXIST, errno.EISDIR, errno.ENXIO):
        try:
            kind = _kind(os.lstat(path).st_mode)
        except OSError:
            kind = "in the way"
        raise UnsafePath(error.errno, f"{path} is {kind}: refusing to write through it") from None


def create_new(path: str | os.PathLike, mode: str = "wb") -> IO[Any]:
    """Open a new file ``path`` for writing; nothing at that name (a file, a link, even a dangling one) is opened.

    Args:
        path: the file; it must not exist.
        mode: ``"wb"`` or ``"w"`` (text, UTF-8).

    Raises:
        UnsafePath: something is already at ``path``.
        OSError: the file cannot be created (a read-only or full disk).
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        _refuse_link(path, error)
        raise
    return open(descriptor, mode, encoding=None if "b" in mode else "utf-8")


def open_regular(path: str | os.PathLike, mode: str = "a+") -> IO[Any]:
    """Open ``path`` (created if absent) as a regular file, never through a link.

    Args:
        path: the file.
        mode: ``"a+"``, ``"a"``, ``"ab"``, ``"r+"`` ... as ``open`` takes it (no truncation on open).

    Raises:
        UnsafePath: ``path`` is a link, a folder, a FIFO or a device.
        OSError: it cannot be opened or created.
    """
    path = Path(path)
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a FIFO does not block the open
    flags |= os.O_RDWR if "+" in mode else os.O_WRONLY if mode[0] in "aw" else os.O_RDONLY
    if mode[0] in "aw":
        flags |= os.O_CREAT | (os.O_APPEND if mode[0] == "a" else 0)
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        _refuse_link(path, error)
        raise
    file_mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(file_mode):
        os.close(descriptor)
        raise UnsafePath(errno.EINVAL, f"{path} is {_kind(file_mode)}: refusing to write through it")
    os.set_blocking(descriptor, True)
    return open(descriptor, mode, encoding=None if "b" in mode else "utf-8")


def temporary_for(path: str | os.PathLike) -> Path:
    """``<path>.tmp`` with whatever was there removed (a file left by a killed process, or a planted link: the
    link itself, never its target), ready for :func:`create_new`.

    Raises:
        UnsafePath: a folder is there.
    """
    temporary = Path(path).with_name(Path(path).name + ".tmp")
    try:
        mode = os.lstat(temporary).st_mode
    except FileNotFoundError:
        return temporary
    if stat.S_ISDIR(mode):
        raise UnsafePath(errno.EISDIR, f"{temporary} is a folder: refusing to write through it")
    os.unlink(temporary)
    return temporary


def replace(temporary: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename ``temporary`` over ``path`` (atomic), where ``path`` is absent or a regular file.

    A rename replaces a link at ``path`` by the file itself (it never writes through the link);
    a folder, FIFO or device there is refused rather than replaced.

    Raises:
        UnsafePath: ``path`` is not a regular file (``temporary`` is removed).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        os.unlink(temporary)
        raise UnsafePath(errno.EINVAL, f"{path} is {_kind(mode)}: refusing to replace it")
    os.replace(temporary, path)


@contextmanager
def atomic_file(path: str | os.PathLike, permissions: int | None = None, registry: set | None = None) -> Iterator[IO[bytes]]:
    """A new temporary file next to ``path``, open for binary writing; when the block ends it is flushed to
    disk and renamed over ``path`` (:func:`replace`).

    An error in the block or in the write (a full disk) leaves ``path`` as it was and no temporary file.

    Args:
        path: the file to write whole.
        permissions: the file's mode bits (``0o755`` for a script), else the default (``0o644`` less the umask).
        registry: a set that holds the temporary file's path while it is written
            (:data:`cleanrl_utils.faults.being_written`: a second Ctrl-C removes it).

    Raises:
        UnsafePath: something that is not a regular file is at ``path`` or its temporary name.
        OSError: the disk is full or read-only.
    """
    temporary, created = temporary_for(path), False
    try:
        with create_new(temporary, "wb") as file:  # created here, never opened through a link
            created = True
            if registry is not None:
                registry.add(temporary)
            if permissions is not None:
                os.fchmod(file.fileno(), permissions)
            yield file
            file.flush()
            os.fsync(file.fileno())
        replace(temporary, path)
    except BaseException:
        if created:
            with suppress(OSError):
                temporary.unlink(missing_ok=True)
        raise
    finally:
        if registry is not None:
            registry.discard(temporary)


def write_atomic(path: str | os.PathLike, data: bytes | str, permissions: int | None = None) -> Path:
    """Write ``data`` as the whole of ``path`` through :func:`atomic_file` (which see for ``permissions`` and errors)."""
    with atomic_file(path, permissions) as file:
        file.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


def refuse_non_regular(path: str | os.PathLike, flag: str) -> None:
    """Stop (one line naming ``flag``, exit 2) when something other than a regular file is at ``path``: a link
    (even one to a regular file), a folder, a FIFO. Nothing there, or a regular file (to be replaced whole by
    :func:`write_atomic`, never written through), passes; for checks before anything is written."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        fail(flag, f"{path} is {_kind(mode)}; refusing to write through it")


def check_tree(folder: str | os.PathLike) -> None:
    """Refuse ``folder`` when anything below it is a link, a FIFO, a socket or a device.

    A run directory holds only regular files and folders this project wrote; a link planted in
    one (as a lock file, a checkpoint, a video) would redirect a later write.

    Raises:
        UnsafePath: naming the first such entry.
    """
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            entry = os.path.join(root, name)
            mode = os.lstat(entry).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UnsafePath(errno.EINVAL, f"{entry} is {_kind(mode)}; a run folder holds only files and folders")


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a character that is not printable (a newline, a tab, an escape, NUL)."""
    return not text.isprintable()


def check_text(value: str, flag: str) -> str:
    """``value``, refused (one line naming ``flag``, exit 2) when it holds a newline or another control character.

    For values that reach a generated shell script or job definition, where a newline would start
    a new command.
    """
    if has_control_characters(str(value)):
        fail(flag, f"{value!r} holds a control character (a newline, a tab, ...)")
    return value


def check_name(value: str, flag: str) -> str:
    """``value`` as one file or folder name, refused (one line naming ``flag``, exit 2) when it is empty,
    ``.`` or ``..``, holds ``/`` or a control character, or is longer than 200 bytes."""
    check_text(value, flag)
    if value in ("", ".", "..") or "/" in value or "\0" in value:
        fail(flag, f"{value!r} is not a file name (empty, '.', '..', or with '/')")
    if len(value.encode("utf-8", "surrogateescape")) > 200:
        fail(flag, f"{value[:40]!r}... is longer than 200 bytes")
    return value

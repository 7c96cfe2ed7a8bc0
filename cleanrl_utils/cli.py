"""Command-line plumbing of the tools (launcher, tuner, plots, cloud): one-line errors, names and values that cannot
escape their place, log tails; and the C51 support check three scripts share.

Imports nothing heavy (no torch, no gymnasium), so that tools that only start other processes load in a moment. The
one-line refusals themselves (:func:`~cleanrl_utils.flags.fail` and its kin) live in :mod:`cleanrl_utils.flags`.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
import sys
from collections import deque
from contextlib import suppress
from pathlib import Path
from typing import NoReturn

from cleanrl_utils.flags import (  # noqa: F401  re-exported for the tools and the old runtime
    USAGE_ERROR,
    fail,
    flag_name,
    require,
    require_positive,
    require_range,
)
from cleanrl_utils.writes import UnsafePath, kind


def require_support(args) -> None:
    """Check the support ``[--v-min, --v-max]`` of a categorical return distribution (C51 and Rainbow; Bellemare
    et al. 2017, section 4), whose atoms and their spacing are float32: ``v_min < v_max``, both within float32's
    range and its width too, and still apart once rounded to float32 (``1e-320`` and ``-1e-320`` are both 0).

    Raises:
        SystemExit: status 2, one line naming ``--v-min`` or ``--v-max``.
    """
    import numpy as np  # here: this module imports nothing heavy

    require(args.v_min < args.v_max, "--v-max", f"{args.v_max} is not above --v-min {args.v_min}")
    largest = float(np.finfo(np.float32).max)
    require(args.v_min >= -largest, "--v-min", f"must be at least {-largest:.4g} (float32), got {args.v_min}")
    width = f"the support's width --v-max - --v-min = {args.v_max - args.v_min:g} is beyond float32's {largest:.4g}"
    require(args.v_max - args.v_min <= largest, "--v-max", width)
    with np.errstate(over="ignore"):
        require(np.float32(args.v_min) < np.float32(args.v_max), "--v-max", "is not above --v-min in float32")


def safe_name(env_id: str) -> str:
    """``env_id`` usable as part of a file or folder name: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return env_id.replace("/", "-").replace(":", "-")


def log_tail(path: str | Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a text file (undecodable bytes replaced), without newlines;
    ``["(cannot read <path>: <error>)"]`` when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return [line.rstrip("\n") for line in deque(file, maxlen=lines)]
    except OSError as error:
        return [f"(cannot read {path}: {error})"]


def printed_run_dir(log: str | Path, cwd: str | Path) -> Path | None:
    """The run directory a script printed into its log, as a line ``run directory: runs/...``
    (``cleanrl_utils.run``; a `` (resumed at step N)`` suffix is dropped), joined to ``cwd``, the
    script's working directory; the last such line counts. ``None`` when the log has no such line
    or cannot be read."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    printed = re.findall(r"^run directory: (.+?)(?: \(resumed at step \d+\))?$", text, flags=re.MULTILINE)
    return Path(cwd) / printed[-1].strip() if printed else None


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one line ``error: ... (see --help)`` (exit 2), like the rest of the project."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def refuse_non_regular(path: str | os.PathLike, flag: str) -> None:
    """Stop (one line naming ``flag``, exit 2) when something other than a regular file is at ``path``: a link
    (even one to a regular file), a folder, a FIFO. Nothing there, or a regular file (to be replaced whole by
    :func:`write_atomic`, never written through), passes; for checks before anything is written."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        fail(flag, f"{path} is {kind(mode)}; refusing to write through it")


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


def make_folder(path: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """Make the folder ``path`` and its parents; each part below ``base`` (the last part when None) must be a real
    folder, never a link (:class:`UnsafePath`)."""
    path, parts = Path(path), [Path(path)]
    if base is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        relative = path.relative_to(base).parts
        parts = [Path(base, *relative[: i + 1]) for i in range(len(relative))]
    for part in parts:
        with suppress(FileExistsError):
            os.mkdir(part)
        if not stat.S_ISDIR(os.lstat(part).st_mode):
            raise UnsafePath(errno.ENOTDIR, f"{part} is {kind(os.lstat(part).st_mode)}, not a folder this project made")
    return path

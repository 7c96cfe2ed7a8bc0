"""The smallest shared command-line plumbing: one-line errors, file-name-safe ids, log tails.

Imports nothing heavy (no torch, no gymnasium), so that tools that only start other processes
(the benchmark launcher, the tuner) load in a moment. ``cleanrl_utils.run`` re-exports these.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal, NoReturn, Union

USAGE_ERROR = 2
"""Exit status of a run stopped by bad input (the same as argparse's)."""


def fail(flag: str, message: str) -> NoReturn:
    """Stop the program with one line on stderr, ``error: <flag>: <message>``, exit status 2.

    Used for bad input before any work starts, so the user sees what to change rather than
    a traceback from deep inside the run. Within :func:`saved_arguments`, a flag whose value was
    read from a file is named as that file's field: ``error: <file>: its saved <field> ...``.
    """
    if _saved and flag.startswith("--"):
        path, given = _saved[-1]
        field = flag[2:].replace("-", "_")
        if field not in given:
            flag, message = path, f"its saved {field} {message}"
    print(f"error: {flag}: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


_saved: list[tuple[str, frozenset]] = []
"""The files whose saved arguments are being checked (:func:`saved_arguments`), innermost last."""


@contextmanager
def saved_arguments(path: str, given: typing.Iterable[str] = ()) -> Iterator[None]:
    """Within the block, :func:`fail` names a flag as the field of ``path`` it was read from, unless its field
    is in ``given`` (given on the command line): the checks of flags then check a file's saved arguments."""
    _saved.append((str(path), frozenset(given)))
    try:
        yield
    finally:
        _saved.pop()


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of the annotated type ``kind`` (int, float, bool, str, Optional, Literal; others pass).
    ``bool`` is not an ``int``, an ``int`` is a ``float``."""
    origin = typing.get_origin(kind)
    if origin is Union or type(kind).__name__ == "UnionType":  # Optional[X], X | None
        return any(_fits(value, option) for option in typing.get_args(kind))
    if origin is Literal:
        return any(value == option and type(value) is type(option) for option in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    return True


def _describe(kind: Any) -> str:
    """``float``, ``float or None``, ``one of 'sync', 'async'`` for an annotated type."""
    if typing.get_origin(kind) is Union or type(kind).__name__ == "UnionType":
        return " or ".join(_describe(option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(repr(option) for option in typing.get_args(kind))
    return "None" if kind is type(None) else getattr(kind, "__name__", str(kind))


def check_saved_types(args_class: type, saved: Any, path: str, required: typing.Iterable[str] = ()) -> dict:
    """The arguments ``saved`` in the file ``path``, checked against the fields of ``args_class``.

    Each value must be of its field's annotated type (an ``int`` where the flag is an int, a
    string or None where it is ``Optional[str]``, one of a ``Literal``'s choices); ints saved for
    float fields become floats. Fields the class does not have are left out.

    Args:
        args_class: the script's ``Args`` dataclass.
        saved: the file's ``args`` entry (a dict).
        path: the file, for the message.
        required: fields the file must hold.

    Returns:
        ``{field: value}`` for the fields of ``args_class`` that ``saved`` holds.

    Raises:
        SystemExit: (status 2, one line ``error: <path>: its saved <field> is ..., not ...``) a value of another
            type, a missing required field, or ``saved`` not a dict.
    """
    if not isinstance(saved, dict):
        fail(path, "its saved arguments are not a dict")
    hints = typing.get_type_hints(args_class)
    values = {}
    for field in dataclasses.fields(args_class):
        if field.name not in saved:
            if field.name in required:
                fail(path, f"its saved arguments lack {field.name}")
            continue
        value, kind = saved[field.name], hints.get(field.name, Any)
        if not _fits(value, kind):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            fail(path, f"its saved {field.name} is {shown} ({type(value).__name__}), not {_describe(kind)}")
        values[field.name] = float(value) if kind is float else value
    return values


def require(condition: bool, flag: str, message: str) -> None:
    """Call :func:`fail` with ``flag`` and ``message`` unless ``condition`` holds."""
    if not condition:
        fail(flag, message)


def flag_name(field: str) -> str:
    """The command-line flag of an ``Args`` field: ``num_envs`` -> ``--num-envs``."""
    return "--" + field.replace("_", "-")


def require_positive(args, names: str) -> None:
    """Fail on the first field of ``args`` named in ``names`` (space-separated) that is not a finite number > 0.

    ``require_positive(args, "num_envs learning_rate")`` refuses ``--num-envs 0`` and
    ``--learning-rate inf`` in one line naming the flag.
    """
    for name in names.split():
        value = getattr(args, name)
        require(value > 0, flag_name(name), f"must be positive, got {value}")
        require(value != float("inf"), flag_name(name), f"must be finite, got {value}")


def require_range(args, **bounds: tuple[float, float]) -> None:
    """Fail on the first field ``name=(low, high)`` of ``args`` whose value is not in ``[low, high]``.

    ``require_range(args, gamma=(0, 1))`` refuses ``--gamma 1.5`` (and ``nan``) in one line.
    """
    for name, (low, high) in bounds.items():
        value = getattr(args, name)
        require(low <= value <= high, flag_name(name), f"must be in [{low}, {high}], got {value}")


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

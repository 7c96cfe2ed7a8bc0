"""The smallest shared command-line plumbing: one-line errors, file-name-safe ids, log tails.

Imports nothing heavy (no torch, no gymnasium), so that tools that only start other processes
(the benchmark launcher, the tuner) load in a moment. ``cleanrl_utils.run`` re-exports these.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import deque
from pathlib import Path
from typing import NoReturn

USAGE_ERROR = 2
"""Exit status of a run stopped by bad input (the same as argparse's)."""


def fail(flag: str, message: str) -> NoReturn:
    """Stop the program with one line on stderr, ``error: <flag>: <message>``, exit status 2.

    Used for bad input before any work starts, so the user sees what to change rather than
    a traceback from deep inside the run.
    """
    print(f"error: {flag}: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


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

"""The smallest shared command-line plumbing: one-line errors, file-name-safe ids, log tails.

Imports nothing heavy (no torch, no gymnasium), so that tools that only start other processes
(the benchmark launcher, the tuner) load in a moment. ``cleanrl_utils.run`` re-exports these.
"""

from __future__ import annotations

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

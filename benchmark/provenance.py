"""Where a benchmark number came from: the git commit of the working tree it was measured in."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    """Output of ``git *args`` in the repository (empty when git or the repository is missing)."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()


def commit() -> str:
    """The short hash of HEAD."""
    return git("rev-parse", "--short", "HEAD")

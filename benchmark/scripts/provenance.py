"""Where a benchmark number came from: the git commit of the working tree it was measured in."""

import os
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    """Output of ``git *args`` in the repository (empty when git or the repository is missing)."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()


def commit() -> str:
    """The short hash of HEAD."""
    return git("rev-parse", "--short", "HEAD")


def cpu() -> str:
    """The CPU's model name and whether it has AVX-512 (``/proc/cpuinfo``; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    return f"{model}, {'with' if 'avx512f' in text else 'without'} AVX-512"


def describe() -> dict:
    """Commit, time, CPU and core count of this measurement, for a benchmark's json."""
    return {"commit": commit(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpu": cpu(), "cpus": os.cpu_count()}

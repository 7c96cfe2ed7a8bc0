"""The module of an env id ``module:Name``, imported with the working directory searched last; a failure says where it
looked, and a file of the working directory that a module of the same name shadows is named."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType


def import_env_module(module: str, purpose: str = "") -> ModuleType:
    """Import ``module``, the working directory searched last (``python cleanrl/x.py`` puts cleanrl/ on the path, not
    the working directory: it is appended, so a file there cannot replace a module the script imports).

    Raises:
        ValueError: one line, ``cannot import 'mod'{purpose} (looked in ...): <why>`` and :func:`shadowed`'s words.
    """
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module)
    except (ImportError, TypeError, ValueError) as error:
        raise ValueError(f"cannot import {module!r}{purpose} ({searched()}): {error}{shadowed(module)}") from None


def searched() -> str:
    """Where an import looks, in order: ``looked in /x/cleanrl, the standard library and installed packages, /w (the
    working directory)``."""
    paths = sysconfig.get_paths()
    standard = tuple(os.path.realpath(paths[key]) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    places, cwd = [], os.path.realpath(os.getcwd())
    for folder in (os.path.realpath(entry or cwd) for entry in sys.path if os.path.exists(entry or cwd)):
        place = folder + " (the working directory)" if folder == cwd else folder
        place = "the standard library and installed packages" if (folder + os.sep).startswith(standard) else place
        places += [place] * (place not in places)
    return f"looked in {', '.join(places)}"


def shadowed(module: str) -> str:
    """`` ('c51' was imported from /x/cleanrl/c51.py, earlier on the path; c51.py in the working directory /w was not:
    rename it)`` when the working directory holds a file or folder named as ``module``'s top package, which was
    imported from elsewhere; else ``""``."""
    top, cwd = module.partition(".")[0], Path.cwd()
    local = next((path for path in (cwd / f"{top}.py", cwd / top) if path.exists()), None)
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None) or next(iter(getattr(loaded, "__path__", [])), None)
    imported = Path(origin).resolve() if origin else None
    if local is None or loaded is None or imported and local.resolve() in (imported, imported.parent):
        return ""
    where, there = f"from {imported}" if imported else "built into Python", f"{local.name} in the working directory {cwd}"
    return f" ({top!r} was imported {where}, earlier on the path; {there} was not: rename it)"

"""The refusals of an env id that cannot be made, loaded only then: where an import of its module looked, a file of
the working directory that a module of the same name shadows, the registered ids an unknown id may have meant.
(:func:`import_env_module` imports a ``module:factory`` with the working directory searched last.)"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import gymnasium as gym


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
        raise ValueError(cannot_import(module, purpose, error)) from None


def cannot_import(module: str, purpose: str, error: Exception) -> str:
    """``cannot import 'mod'{purpose} (looked in ...): <error>`` and :func:`shadowed`'s words."""
    return f"cannot import {module!r}{purpose} ({searched()}): {error}{shadowed(module)}"


def unknown_env(env_id: str, id_suffix: str | None = None) -> str:
    """``unknown environment 'id'`` with the registered ids it may have meant (only those ending with ``id_suffix``),
    the extra that registers it, and :func:`shadowed`'s words for a ``module:Name`` id."""
    module, _, name = env_id.rpartition(":")
    candidates = [i for i in gym.registry if id_suffix is None or i.endswith(id_suffix)]
    close = difflib.get_close_matches(name, candidates, n=3)
    if id_suffix and not close:  # "Pong-v5", "ALE/Pong-v5" -> PongNoFrameskip-v4
        game = re.split(r"NoFrameskip|-v\d", name.removeprefix("ALE/"))[0].lower()
        close = [i for i in candidates if i[: -len(id_suffix)].lower() == game]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    if name.startswith("ALE/") or "NoFrameskip" in name:
        hint += " (Atari ids need the atari extra: pip install -e '.[atari]')"
    if name.startswith(("MiniGrid-", "BabyAI-")) and not importlib.util.find_spec("minigrid"):
        hint += " (MiniGrid ids need the minigrid extra: pip install -e '.[minigrid]')"
    if not module and name.removeprefix("Endless-").startswith(("MortarMayhem", "MysteryPath", "SearingSpotlights")):
        install = "" if importlib.util.find_spec("memory_gym") else "; pip install --no-deps -r requirements/memory_gym.txt"
        hint += f" (Memory Gym ids name their module, which registers them: --env-id memory_gym:{name}{install})"
    return f"unknown environment {env_id!r}{hint}{shadowed(module) if module else ''}"


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

"""Model and checkpoint files: tensors and plain data under a header, written atomically, checked when read.

A dict saved by ``torch.save``, read with ``torch.load(..., weights_only=True)`` (loading runs no code), with a header:
``format``, ``kind`` (``"model"`` or ``"checkpoint"``), ``script`` (its tag: a script reads only its own files),
``modules`` (each network's ``repr``: another network is refused), ``env_id`` and ``args``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from cleanrl_utils.faults import WriteFailed, first_line, free_space
from cleanrl_utils.writes import atomic_file

FORMAT = 2
MODEL_SUFFIX = ".cleanrl_model"
SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "cleanrl"
TRUSTED_ENV_MODULES = ("cleanrl_utils.envs",)  # what a file's env id may import unasked: this project's own envs


class FileRefused(ValueError):
    """A file that is not what its reader expects; the message is one line saying why."""


class FileDamaged(FileRefused):
    """A file that is empty, truncated or corrupted."""


def enjoy_command(target: str | os.PathLike, *options: str, env_id: str = "") -> str:
    """The command, quoted for pasting into a shell, that evaluates ``target`` (a run directory, model or checkpoint) with
    ``options``, ``--env-id env_id`` if it imports a module, and ``--script`` the running script if it is a copy."""
    script = Path(sys.argv[0])
    options += ("--env-id", env_id) * bool(untrusted_env_module(env_id))
    options += ("--script", str(script)) * (script.resolve() != SCRIPTS_DIR / script.name)
    return shlex.join(["python", "-m", "cleanrl_utils.enjoy", str(target), *options])


def script_name(script_file: str | os.PathLike) -> str:
    """The tag of a script's files: its file name without ``.py`` (``cleanrl/ppo.py`` -> ``"ppo"``)."""
    return Path(script_file).stem


def model_path(run_dir: str | os.PathLike, exp_name: str) -> Path:
    """``{run_dir}/{exp_name}.cleanrl_model``."""
    return Path(run_dir) / f"{exp_name}{MODEL_SUFFIX}"


def checkpoint_path(run_dir: str | os.PathLike, global_step: int) -> Path:
    """``{run_dir}/checkpoints/step_{global_step}.pt``."""
    return Path(run_dir) / "checkpoints" / f"step_{global_step}.pt"


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The step in a checkpoint's file name (``step_512.pt`` -> 512), None for another name."""
    match = re.fullmatch(r"step_(\d+)\.pt", Path(path).name)
    return int(match.group(1)) if match else None


def checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The checkpoint files of ``run_dir``, oldest first."""
    found = [file for file in Path(run_dir, "checkpoints").glob("step_*.pt") if checkpoint_step(file) is not None]
    return sorted(found, key=checkpoint_step)


def untrusted_env_module(env_id: Any) -> str | None:
    """The module an env id read from a file would import (``"pkg.mod"`` of ``"pkg.mod:Env-v0"``) unless it is one of
    :data:`TRUSTED_ENV_MODULES`, else None: a file must not choose code to import, the user names such an id."""
    module = str(env_id).rpartition(":")[0]
    return module if module and module not in TRUSTED_ENV_MODULES else None


def write_file(path: str | os.PathLike, kind: str, args: Any, content: dict, modules: dict | None = None) -> Path:
    """Write ``content`` (tensors and plain data) under the header of a ``kind`` file of the run ``args`` (whose
    ``script`` tags it; ``modules``: the networks whose ``repr`` it records) to ``path``, atomically.

    Raises:
        cleanrl_utils.faults.WriteFailed: one line (a full disk, a read-only folder); a previous file stays whole.
    """
    header = {"format": FORMAT, "kind": kind, "script": args.script, "env_id": args.env_id}
    header.update(args=dataclasses.asdict(args), modules={name: repr(m) for name, m in (modules or {}).items()})
    return write_content(path, {**header, **content})


def write_content(path: str | os.PathLike, data: dict) -> Path:
    """Write a whole file's ``data`` (header included) to ``path`` as :func:`write_file` does."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as file:
            torch.save(data, file)
    except (OSError, RuntimeError) as error:  # a full disk ("unexpected pos"), a read-only folder
        raise WriteFailed(f"cannot write {path}: {first_line(error)} ({free_space(path.parent)})") from None
    return path


def read_file(path: str | os.PathLike, kind: str | tuple[str, ...], script: str | None = None) -> dict:
    """The content of a ``kind`` file (or one of the kinds) written by ``script`` (None: any), its header checked and
    every record's CRC-32 first, with ``"path"`` added.

    Raises:
        FileRefused: one line: missing, damaged (:class:`FileDamaged`), refused by ``weights_only``, not this
            project's, another format, kind or script, or a header entry of the wrong type.
    """
    path = Path(path)
    if not path.is_file():
        raise FileRefused(f"{path}: no such file" if not path.exists() else f"{path} is not a regular file")
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        raise FileDamaged(f"{path} cannot be read as a cleanrl file (empty, truncated, or another format)") from None
    if damaged is not None:
        raise FileDamaged(f"{path} is corrupted: the checksum of its record {damaged!r} does not match its content")
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # objects weights_only refuses, a damaged pickle
        raise FileRefused(f"{path} cannot be read as a cleanrl file ({type(error).__name__}: {first_line(error)})") from None
    if not isinstance(content, dict) or "format" not in content or "kind" not in content:
        raise FileRefused(f"{path} is not a model or checkpoint file of this project")
    types = {"format": int, "kind": str, "script": str, "args": dict, "modules": dict, "state": dict, "counters": dict}
    for key, kind_of in {**types, "global_step": int, "rng": dict, "model": dict}.items():
        value, required = content.get(key), key in ("format", "kind", "script", "args")
        if (required or value is not None) and (not isinstance(value, kind_of) or isinstance(value, bool)):
            raise FileRefused(f"{path} is damaged or forged: its {key!r} is not of type {kind_of.__name__}")
    if content["format"] != FORMAT:
        raise FileRefused(f"{path} has file format {content['format']}; this code reads format {FORMAT}")
    kinds = (kind,) if isinstance(kind, str) else kind
    if content["kind"] not in kinds:
        hint = "give it to --resume or cleanrl_utils.enjoy" if content["kind"] == "checkpoint" else "use cleanrl_utils.enjoy"
        raise FileRefused(f"{path} is a {content['kind']} file, not a {' or '.join(kinds)} file ({hint})")
    if script is not None and content["script"] != script:
        raise FileRefused(f"{path} was written by {content['script']}.py, not by {script}.py")
    if content["kind"] == "checkpoint" and (not isinstance(content.get("global_step"), int) or content["global_step"] < 0):
        raise FileRefused(f"{path} is damaged or forged: its global_step is {content.get('global_step')!r}")
    return {**content, "path": str(path)}


def load_module(module: torch.nn.Module, name: str, content: dict) -> None:
    """Load the file's network ``content[name]`` into ``module``: its record (``repr``) must be ``module``'s, its
    tensors finite and of the network's names, shapes and dtypes.

    Raises:
        FileRefused: one line naming the file, the network and the first difference.
    """
    path, record = content.get("path", "the file"), content.get("modules", {}).get(name)
    if not isinstance(content.get(name), dict) or record is not None and not isinstance(record, str):
        raise FileRefused(f"{path} holds no network {name!r}, or a damaged or forged one")
    if record is not None and record != repr(module):
        ours, theirs = repr(module).splitlines(), record.splitlines()
        line = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        there, here = (lines[line].strip() if line < len(lines) else "(end)" for lines in (theirs, ours))
        raise FileRefused(f"{path}: its {name} differs from this script's: {there!r} there, {here!r} here")
    own = module.state_dict()
    for key, tensor in content[name].items():
        if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
            raise FileRefused(f"{path} is damaged or forged: its {name} holds {key!r}: {type(tensor).__name__}")
        if key in own and tensor.dtype != own[key].dtype:  # no silent cast (float64 1e300 -> inf)
            raise FileRefused(f"{path}: its {name}.{key} is {tensor.dtype}, this script's {own[key].dtype}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise FileRefused(f"{path}: its {name}.{key} holds non-finite values")
    try:
        module.load_state_dict(content[name])
    except (RuntimeError, KeyError, TypeError) as error:
        raise FileRefused(f"{path}: its {name} does not fit this script's: {str(error).splitlines()[-1].strip()}") from None

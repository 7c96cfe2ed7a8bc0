"""Model and checkpoint files: one format, one writer, one reader.

A file is a dict of tensors and plain data (numbers, strings, lists, tuples, dicts) written by
``torch.save`` and read back with ``torch.load(..., weights_only=True)``, so that loading a file
never runs code. Every file carries a header:

- ``format``: :data:`FORMAT`, the layout version;
- ``kind``: ``"model"`` (written by ``--save-model``: what evaluation needs) or ``"checkpoint"``
  (what a run needs to continue exactly: ``--checkpoint-interval``, SIGTERM, Ctrl-C);
- ``script``: the name of the script file that wrote it (``"ppo"`` for ``ppo.py``, ``"my_ppo"``
  for a copy named ``my_ppo.py``); a script reads only its own files;
- ``modules``: ``{name: repr(module)}`` of the networks in the file, so that a copy of a script
  whose network differs (another activation, another width) is told so in one line;
- ``env_id``, ``args`` (the run's arguments as a dict) and ``global_step``.

Writes are atomic: the content goes to ``<file>.tmp``, created new (never opened through a link
planted at that name), is flushed to disk (``fsync``), then renamed over ``<file>``; an interrupted
write leaves the previous file whole, and a write never goes through a link. The names of
checkpoint files, ``{run_dir}/checkpoints/step_{global_step}.pt``, are made and read here only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import zipfile
from pathlib import Path
from typing import Any, NoReturn

import torch

from cleanrl_utils.legacy.faults import WriteFailed, free_space
from cleanrl_utils.legacy.writes import atomic_file, make_folder

FORMAT = 2
"""Version of the file layout; a file of another version is refused."""

MODEL_SUFFIX = ".cleanrl_model"
"""File name ending of saved models (``{run_dir}/{exp_name}.cleanrl_model``)."""

_CHECKPOINT_NAME = re.compile(r"step_(\d+)\.pt")


from cleanrl_utils.files import FileDamaged, FileRefused  # noqa: E402  one class for both runtimes while they coexist


SCRIPTS_DIR = Path(__file__).resolve().parent.parent.parent / "cleanrl"
"""Where this repository's scripts live (``cleanrl/`` beside ``cleanrl_utils/``)."""


def script_name(script_file: str | os.PathLike) -> str:
    """The name a script's files carry: its file name without ``.py`` (``cleanrl/ppo.py`` -> ``"ppo"``)."""
    return Path(script_file).stem


def write_file(
    path: str | os.PathLike,
    kind: str,
    script: str,
    args: Any,
    content: dict,
    modules: dict[str, torch.nn.Module] | None = None,
) -> Path:
    """Write ``content`` under the header described above to ``path``, atomically.

    Args:
        path: the file (its folder is created).
        kind: ``"model"`` or ``"checkpoint"``.
        script: the writing script's name (:func:`script_name`).
        args: the run's ``Args`` dataclass; saved as a plain dict (``env_id`` also on its own).
        content: tensors and plain data; a ``global_step`` entry is kept as it is.
        modules: the networks whose ``repr`` the file records (see :func:`check_module`).

    Returns:
        ``path`` as a ``Path``.

    Raises:
        OSError: the file could not be written (the previous one, if any, is left whole).
    """
    header = {
        "format": FORMAT,
        "kind": kind,
        "script": script,
        "env_id": getattr(args, "env_id", None),
        "args": dataclasses.asdict(args),
        "modules": {name: repr(m) for name, m in (modules or {}).items()},
    }
    return write_content(path, {**header, **content})


def write_content(path: str | os.PathLike, data: dict) -> Path:
    """Write ``data`` (a whole file: header and content, see :func:`write_file`) to ``path``, atomically.

    Raises:
        cleanrl_utils.legacy.faults.WriteFailed: (one line) the file could not be written (a previous one is left whole).
    """
    path = Path(path)
    try:
        make_folder(path.parent)  # a real folder, never a link to one elsewhere
        with atomic_file(path) as file:  # a second Ctrl-C meanwhile removes the temporary
            torch.save(data, file)
    except (OSError, RuntimeError) as error:  # disk full (torch says "unexpected pos"), read-only folder: no partial file
        reason = (error.strerror if isinstance(error, OSError) else None) or str(error).strip().splitlines()[0][:200]
        raise WriteFailed(f"cannot write {path}: {reason} ({free_space(path.parent)})") from None
    return path


def read_file(path: str | os.PathLike, kind: str | tuple[str, ...], script: str | None = None) -> dict:
    """Read a file written by :func:`write_file`, checking its header.

    Args:
        path: the file.
        kind: the kind expected (``"model"`` or ``"checkpoint"``), or a tuple of the kinds accepted.
        script: the script expected to have written it (None: any).

    Returns:
        The whole dict, header included, with ``"path"`` set to ``str(path)``.

    Raises:
        FileRefused: (one-line message; :class:`FileDamaged` for the first three) empty, truncated,
            corrupted (a record's CRC-32 does not match), no such file, not a torch file, unpickling refused by
            ``weights_only``, not a file of this project, another format, another kind, or
            another script's file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileRefused(f"{path}: no such file" if not path.exists() else f"{path} is not a regular file")
    if path.stat().st_size == 0:
        raise FileDamaged(f"{path} is empty (0 bytes)")
    try:  # torch writes a zip archive with a CRC-32 of every record; check them all before reading
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        reason = "not a complete torch file: truncated, or another format"
        raise FileDamaged(f"{path} cannot be read as a cleanrl file ({reason})") from None
    if damaged is not None:
        raise FileDamaged(f"{path} is corrupted: the checksum of its record {damaged!r} does not match its content")
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, not a torch file, or objects weights_only refuses
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise FileRefused(f"{path} cannot be read as a cleanrl file ({type(error).__name__}: {reason[:200]})") from None
    if not isinstance(content, dict) or "format" not in content or "kind" not in content:
        raise FileRefused(f"{path} is not a model or checkpoint file of this project")
    _check_types(path, content, {"format": int, "kind": str, "script": str}, required=True)
    if content["format"] != FORMAT:
        raise FileRefused(f"{path} has file format {content['format']}; this code reads format {FORMAT}")
    kinds = (kind,) if isinstance(kind, str) else kind
    if content["kind"] not in kinds:
        checkpoint = content["kind"] == "checkpoint"
        hint = " (give it to --resume, or to cleanrl_utils.enjoy)" if checkpoint else " (evaluate it with cleanrl_utils.enjoy)"
        raise FileRefused(f"{path} is a {content['kind']} file, not a {' or '.join(kinds)} file{hint}")
    if script is not None and content.get("script") != script:
        raise FileRefused(f"{path} was written by {content.get('script')}.py, not by {script}.py")
    if content["kind"] == "checkpoint":
        _check_types(path, content, {"global_step": int}, required=True)
    _check_types(path, content, dict.fromkeys(("state", "args", "modules", "rng", "counters"), dict), required=False)
    if content["kind"] == "checkpoint" and content["global_step"] < 0:
        raise FileRefused(f"{path} is damaged or forged: its global_step is {content['global_step']}")
    content["path"] = str(path)
    return content


def _check_types(path: Path, content: dict, types: dict[str, type], required: bool) -> None:
    """Refuse ``content`` (one line) where an entry is not of its type (``bool`` is not an ``int``); absent
    entries are refused only when ``required``."""
    for key, kind_of in types.items():
        value = content.get(key)
        if (required or value is not None) and (not isinstance(value, kind_of) or isinstance(value, bool)):
            raise FileRefused(f"{path} is damaged or forged: its {key!r} is not of type {kind_of.__name__}")


def check_optimizer(optimizer: torch.optim.Optimizer, name: str, content: dict) -> None:
    """Load ``content[name]`` (an optimiser's state dict) into ``optimizer``, refusing values no training writes.

    Its parameter groups must hold, for each setting of this optimiser, a value of the same type
    (a number for a number), finite, and not negative for the learning rate, ε, the weight decay
    and the betas (each below 1); its per-parameter state (Adam's moments and step) finite
    tensors, scalars or of their parameter's shape, the second moments and the step not negative.
    torch's own load checks only the groups' sizes.

    Raises:
        FileRefused: (one line) naming the entry.
    """
    path, state = content.get("path", "the file"), content[name]

    def refuse(what: str) -> NoReturn:
        raise FileRefused(f"{path}: its {name}'s {what}")

    try:
        groups, per_param = state["param_groups"], state["state"]
        if len(groups) != len(optimizer.param_groups):
            refuse(f"{len(groups)} parameter groups are not this optimiser's {len(optimizer.param_groups)}")
        shapes = {}
        for group, ours in zip(groups, optimizer.param_groups):
            shapes.update(zip(group["params"], [p.shape for p in ours["params"]]))
            for key, value in group.items():
                if key == "params" or key not in ours:
                    continue
                mine = ours[key]
                numbers = value if isinstance(mine, (tuple, list)) else [value]
                if isinstance(mine, (tuple, list)) and (not isinstance(value, (tuple, list)) or len(value) != len(mine)):
                    refuse(f"{key} is {value!r}")
                if isinstance(mine, bool) or mine is None or isinstance(mine, str):
                    if type(value) is not type(mine):
                        refuse(f"{key} is {value!r}")
                    continue
                for number in numbers:
                    if isinstance(number, torch.Tensor) and number.numel() == 1 and number.is_floating_point():
                        number = number.item()
                    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                        refuse(f"{key} is {value!r}")
                    if key in ("lr", "eps", "weight_decay", "betas") and number < 0 or key == "betas" and number >= 1:
                        refuse(f"{key} is {value!r}")
        for index, entries in per_param.items():
            for key, tensor in entries.items():
                if not isinstance(tensor, torch.Tensor):
                    continue
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    refuse(f"{key} of parameter {index} holds non-finite values")
                if tensor.dim() > 0 and tensor.shape != shapes.get(index):
                    refuse(f"{key} of parameter {index} is {tuple(tensor.shape)}")
                if key in ("exp_avg_sq", "max_exp_avg_sq", "step") and bool((tensor < 0).any()):
                    refuse(f"{key} of parameter {index} holds negative values")
        optimizer.load_state_dict(state)
    except FileRefused:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise FileRefused(f"{path}: its {name} does not fit this script's optimiser ({type(error).__name__}: {error})")


def check_module(module: torch.nn.Module, name: str, content: dict) -> None:
    """Load ``content[name]`` (a state dict) into ``module``, refusing a file of another network.

    The file's record of the network (``repr``, see :func:`write_file`) must equal ``module``'s,
    and the state dict must fit it exactly.

    Raises:
        FileRefused: (one line) the file has no such network, it was saved from another
            architecture (the first differing line of the two ``repr`` is quoted), or its
            tensors do not fit (not tensors, another dtype, non-finite values, other names or shapes).
    """
    path = content.get("path", "the file")
    if name not in content:
        raise FileRefused(f"{path} holds no network {name!r}")
    saved_repr = content.get("modules", {}).get(name)
    if saved_repr is not None and not isinstance(saved_repr, str):
        raise FileRefused(f"{path} is damaged or forged: its record of {name} is not text")
    if saved_repr is not None and saved_repr != repr(module):
        ours, theirs = repr(module).splitlines(), saved_repr.splitlines()
        line = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        quote = lambda lines: lines[line].strip() if line < len(lines) else "(end)"  # noqa: E731
        raise FileRefused(f"{path}: its {name} differs from this script's: {quote(theirs)!r} there, {quote(ours)!r} here")
    state = content[name]
    if not isinstance(state, dict):
        raise FileRefused(f"{path}: its {name} is not a state dict")
    ours = module.state_dict()
    for key, tensor in state.items():
        if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
            raise FileRefused(f"{path} is damaged or forged: its {name} holds {key!r}: {type(tensor).__name__}")
        if key in ours and tensor.dtype != ours[key].dtype:  # no silent cast (float64 1e300 -> inf, complex, int)
            raise FileRefused(f"{path}: its {name}.{key} is {tensor.dtype}, this script's {ours[key].dtype}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise FileRefused(f"{path}: its {name}.{key} holds non-finite values")
    try:
        module.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError) as error:
        raise FileRefused(f"{path}: its {name} does not fit this script's: {str(error).splitlines()[-1].strip()}") from None


TRUSTED_ENV_MODULES = ("cleanrl_utils.envs",)
"""Modules a file's recorded env id may import without the user naming it: this project's own envs."""


def untrusted_env_module(env_id: Any) -> str | None:
    """The module an env id recorded in a file would import (``"pkg.mod"`` for ``"pkg.mod:Env-v0"``), unless it
    is one of :data:`TRUSTED_ENV_MODULES`; None for a plain registered id. Such an id is used only when the user
    names it (``--env-id``): a file must not choose code to import."""
    module = str(env_id).rpartition(":")[0]
    return module if module and module not in TRUSTED_ENV_MODULES else None


def model_path(run_dir: str | os.PathLike, exp_name: str) -> Path:
    """``{run_dir}/{exp_name}.cleanrl_model``: where ``--save-model`` writes a run's model when training ends."""
    return Path(run_dir) / f"{exp_name}{MODEL_SUFFIX}"


def checkpoint_path(run_dir: str | os.PathLike, global_step: int) -> Path:
    """``{run_dir}/checkpoints/step_{global_step}.pt``."""
    return Path(run_dir) / "checkpoints" / f"step_{global_step}.pt"


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The global step in a checkpoint file's name (``step_512.pt`` -> 512), None for another name."""
    match = _CHECKPOINT_NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The checkpoint files of ``run_dir``, oldest (lowest step) first."""
    files = [file for file in Path(run_dir, "checkpoints").glob("step_*.pt") if checkpoint_step(file) is not None]
    return sorted(files, key=checkpoint_step)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint with the highest global step in ``run_dir/checkpoints``, or None."""
    files = checkpoints(run_dir)
    return files[-1] if files else None

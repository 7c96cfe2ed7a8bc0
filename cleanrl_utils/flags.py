"""Command-line flags: the flags every script takes, read with tyro, and bad input refused in one line (exit 2).

A script reads its flags with one call, ``args, resumed = parse_args(Args, __file__, check_args)``: tyro parses
them (a parsing error becomes one line), ``--resume`` takes over the arguments of the run it continues, and the
script's ``check_args`` refuses bad values with :func:`require` and its kin, each naming the flag:
``error: --num-envs: must be positive, got 0`` on stderr, exit status 2, before any run directory exists.
Importing this module does not import torch, so that the launcher and the tuner start at once.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from contextlib import contextmanager
from typing import Annotated, Any, Callable, Iterator, Literal, NoReturn, Optional, Union

import tyro

USAGE_ERROR = 2
"""Exit status of a command refused for bad input (argparse's)."""

_reading: list[tuple[str, frozenset]] = []  # (file, flags given) while the saved arguments of a file are checked


def fail(flag: str, message: str) -> NoReturn:
    """Stop with one line on stderr, ``error: <flag>: <message>``, exit status 2.

    While a checkpoint's or model's saved arguments are checked (:func:`saved_arguments`), a flag not given on the
    command line is named as the file's field instead: ``error: <file>: its saved <field> <message>``.
    """
    if _reading and flag.startswith("--") and flag[2:].replace("-", "_") not in _reading[-1][1]:
        flag, message = _reading[-1][0], f"its saved {flag[2:].replace('-', '_')} {message}"
    print(f"error: {flag}: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


@contextmanager
def saved_arguments(path: str, given: typing.Iterable[str] = ()) -> Iterator[None]:
    """Within the block, :func:`fail` names a flag outside ``given`` as the field of the file ``path``."""
    _reading.append((str(path), frozenset(given)))
    try:
        yield
    finally:
        _reading.pop()


def require(condition: bool, flag: str, message: str) -> None:
    """:func:`fail` with ``flag`` and ``message`` unless ``condition`` holds."""
    if not condition:
        fail(flag, message)


def flag_name(field: str) -> str:
    """The flag of an ``Args`` field: ``num_envs`` -> ``--num-envs``."""
    return "--" + field.replace("_", "-")


def require_positive(args: Any, names: str) -> None:
    """Refuse the first field of ``args`` named in ``names`` (space-separated) that is not a finite number > 0."""
    for name in names.split():
        value = getattr(args, name)
        require(0 < value < float("inf"), flag_name(name), f"must be a positive finite number, got {value}")


def require_range(args: Any, **bounds: tuple[float, float]) -> None:
    """Refuse the first field ``name=(low, high)`` of ``args`` outside ``[low, high]`` (NaN included)."""
    for name, (low, high) in bounds.items():
        value = getattr(args, name)
        require(low <= value <= high, flag_name(name), f"must be in [{low}, {high}], got {value}")


@dataclasses.dataclass
class RunArgs:
    """Flags every script takes; a script's ``Args`` adds its algorithm's hyperparameters."""

    exp_name: Annotated[str, tyro.conf.arg(help_behavior_hint="(default: the script's file name)")] = ""
    """name of this experiment, part of the run directory name"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, train on CUDA when it is available"""
    track: bool = False
    """if toggled, mirror the logs to Weights & Biases"""
    wandb_project_name: str = "cleanRL"
    """Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """Weights & Biases entity (team); None means your default"""
    capture_video: bool = False
    """if toggled, record videos of env 0's episodes into `{run_dir}/videos`"""
    save_model: bool = False
    """if toggled, save the model to `{run_dir}/{exp_name}.cleanrl_model`, then evaluate it"""
    eval_episodes: int = 10
    """episodes of each evaluation: the saved model's (--save-model), and the periodic ones (--eval-interval, if any)"""
    checkpoint_interval: int = 0
    """environment steps between checkpoints in `{run_dir}/checkpoints/` (0: only on SIGTERM or Ctrl-C)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory"""
    torch_threads: int = 1
    """CPU threads for torch"""
    env_timeout: float = 600.0
    """seconds an env in a worker process (--env-mode async) may take to answer a step before the run stops"""
    script: tyro.conf.Suppress[str] = ""
    """the name of the script file that runs (filled in; not a flag)"""


RESUMABLE_WITH_OTHER_VALUES = frozenset(
    "resume env_timeout checkpoint_interval checkpoint_buffer track wandb_project_name wandb_entity cuda backend "
    "device_ids torch_threads env_mode capture_video save_model eval_episodes".split()
)
"""Flags a resumed run may set anew (left out, they keep the checkpoint's values); any other flag given with
another value than the checkpoint's is refused."""


def parse_args(
    args_class: type, script_file: str, check: Callable[[Any], None] | None = None, argv: list[str] | None = None
) -> tuple[Any, dict | None]:
    """The script's arguments, from the command line or (``--resume``) from the run it continues, checked.

    Args:
        args_class: the script's ``Args``, a dataclass deriving from :class:`RunArgs`.
        script_file: the script's ``__file__``; its name (``ppo`` for ``ppo.py``, ``my_ppo`` for a copy) is the
            default ``--exp-name`` and the tag of its files.
        check: the script's own checks, ``check(args)``; it may fill in computed fields.
        argv: the command line (default ``sys.argv[1:]``).

    Returns:
        ``(args, checkpoint)``: with ``--resume``, the checkpoint read (:func:`cleanrl_utils.checkpoint.load`),
        else None.

    Raises:
        SystemExit: status 2, one line naming the flag (or the checkpoint's field), before anything is written.
    """
    from cleanrl_utils.files import script_name

    argv = sys.argv[1:] if argv is None else argv
    args = _tyro_cli(args_class, argv)
    args.script = script_name(script_file)
    args.exp_name = args.exp_name or args.script
    given, checkpoint = given_flags(argv, args_class), None
    if args.resume:
        from cleanrl_utils.checkpoint import resumed_args

        args, checkpoint = resumed_args(args, given)
    with saved_arguments(checkpoint["path"], given) if checkpoint else _nothing():
        check_run_args(args)
        if check is not None:
            check(args)
    return args, checkpoint


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def check_run_args(args: Any) -> None:
    """Refuse bad values of the :class:`RunArgs` flags, and a float flag (any field) that is NaN or infinite."""
    name = args.exp_name
    fine = name.strip() == name != "" and "/" not in name and name.isprintable()
    require(fine, "--exp-name", f"{name!r} must be a printable name without '/' or surrounding spaces")
    require(len(name.encode(errors="surrogateescape")) <= 150, "--exp-name", "must be at most 150 bytes")
    require(0 <= args.seed < 2**31, "--seed", f"must be in [0, 2**31), got {args.seed}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(args.torch_threads > 0, "--torch-threads", f"must be positive, got {args.torch_threads}")
    require(0 < args.env_timeout <= 1e7, "--env-timeout", f"must be in (0, 1e7] seconds, got {args.env_timeout}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        require(not isinstance(value, float) or abs(value) < float("inf"), flag_name(field.name), f"is {value}")


def _tyro_cli(args_class: type, argv: list[str]) -> Any:
    """``tyro.cli``, with its parsing errors (a box of several lines) said in one line, exit 2."""
    import contextlib
    import io

    description = (sys.modules["__main__"].__doc__ or "").strip().split("\n")[0] or None
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = tyro.cli(args_class, args=argv, description=description)
    except SystemExit as exit:
        if exit.code != USAGE_ERROR or not said.getvalue().strip():
            sys.stderr.write(said.getvalue())
            raise
        lines = [line.strip(" │╭╮╰╯|+") for line in said.getvalue().splitlines()[1:]]  # below the box's title
        lines = lines[next((i for i, line in enumerate(lines) if line.strip("─-= ")), 0) :]
        message = " ".join(lines[: next((i for i, line in enumerate(lines) if not line.strip("─-= ")), len(lines))])
        flag = re.search(r"--[\w-]+", message)
        guess = next((lines[i + 1].split()[0] for i, line in enumerate(lines[:-1]) if line == "Perhaps you meant:"), None)
        fail(flag.group(0) if flag else "arguments", f"{message}{f'; did you mean {guess}?' if guess else ''} (see --help)")
    sys.stderr.write(said.getvalue())
    return args


def flag_spellings(args_class: type) -> dict[str, str]:
    """Every spelling of every flag of ``args_class`` mapped to its field: ``--num-envs``, ``--num_envs``, the
    ``--no-`` forms, and aliases given with ``tyro.conf.arg(aliases=...)`` (ddp_ppo.py's ``--local-num-envs``)."""
    try:
        hints = typing.get_type_hints(args_class, include_extras=True)
    except Exception:  # annotations that do not resolve outside their module
        hints = {}
    spellings = {}
    for field in dataclasses.fields(args_class):
        names = {field.name, field.name.replace("_", "-")}
        for meta in getattr(hints.get(field.name), "__metadata__", ()):
            names |= {alias.lstrip("-") for alias in getattr(meta, "aliases", None) or ()}
        for name in names:
            spellings[f"--{name}"] = spellings[f"--no-{name}"] = field.name
    return spellings


def given_flags(argv: list[str], args_class: type) -> set[str]:
    """The fields of ``args_class`` whose flag ``argv`` gives, in any spelling (``--name=value`` included)."""
    spellings = flag_spellings(args_class)
    return {spellings[token.split("=", 1)[0]] for token in argv if token.split("=", 1)[0] in spellings}


def check_saved_types(args_class: type, saved: Any, path: str, required: typing.Iterable[str] = ()) -> dict:
    """The arguments ``saved`` in the file ``path`` that ``args_class`` has, each checked to be of its field's type
    (an int for an int flag, not a bool; a float or an int, made a float, for a float flag; one of a Literal's
    choices; None where Optional).

    Raises:
        SystemExit: status 2, one line ``error: <path>: its saved <field> is ..., not ...``, or a ``required``
            field missing.
    """
    if not isinstance(saved, dict):
        fail(path, "its saved arguments are not a dict")
    hints, values = typing.get_type_hints(args_class), {}
    for field in dataclasses.fields(args_class):
        if field.name not in saved:
            require(field.name not in required, path, f"its saved arguments lack {field.name}")
            continue
        value, kind = saved[field.name], hints.get(field.name, Any)
        if not _fits(value, kind):
            fail(path, f"its saved {field.name} is {repr(value)[:60]} ({type(value).__name__}), not {_describe(kind)}")
        values[field.name] = float(value) if kind is float else value
    return values


def _options(kind: Any) -> tuple | None:
    """The options of a Union (``Optional[X]``, ``X | None``), else None."""
    return typing.get_args(kind) if typing.get_origin(kind) is Union or type(kind).__name__ == "UnionType" else None


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of the annotated type ``kind``: bool is not an int, an int is a float."""
    if _options(kind) is not None:
        return any(_fits(value, option) for option in _options(kind))
    if typing.get_origin(kind) is Literal:
        return any(value == option and type(value) is type(option) for option in typing.get_args(kind))
    if kind in (int, float, bool, str, type(None)):
        exact = {int: (int,), float: (int, float), bool: (bool,), str: (str,), type(None): (type(None),)}[kind]
        return isinstance(value, exact) and (kind is bool or not isinstance(value, bool))
    return True


def _describe(kind: Any) -> str:
    """``float``, ``float or None``, ``one of 'sync', 'async'`` for an annotated type."""
    if _options(kind) is not None:
        return " or ".join(_describe(option) for option in _options(kind))
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(kind)))
    return "None" if kind is type(None) else getattr(kind, "__name__", str(kind))

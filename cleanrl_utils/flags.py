"""Command-line flags: the flags every script takes, read with tyro, and bad input refused in one line (exit 2).

``args, resumed = parse_args(Args, __file__, check_args)``: tyro parses the flags (its errors become one line),
``--resume`` takes over the arguments of the run it continues, and the script's ``check_args`` refuses bad values
with :func:`require` and its kin, naming the flag (``error: --num-envs: must be positive, got 0``) before any run
directory exists. Imports no torch, so that the launcher and the tuner start at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, NoReturn, Optional

import tyro

USAGE_ERROR = 2  # the exit status of a command refused for bad input (argparse's)


def fail(flag: str, message: str) -> NoReturn:
    """Stop with ``error: <flag>: <message>`` on stderr, exit 2."""
    print(f"error: {flag}: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


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
    """env steps between checkpoints, the two newest kept, and one at the last step (0: only on SIGTERM or Ctrl-C)"""
    resume: Optional[str] = None
    """continue the run of this checkpoint file, or of the latest checkpoint in this run directory"""
    torch_threads: int = 1
    """CPU threads for torch"""
    env_timeout: float = 600.0
    """seconds an env worker process (--env-mode async) may take to answer a step before the run stops"""
    script: tyro.conf.Suppress[str] = ""
    """the name of the script file that runs (filled in; not a flag)"""


def parse_args(args_class: type, script_file: str, check: Callable | None = None, argv: list | None = None) -> tuple:
    """``(args, checkpoint)``: the script's ``Args`` (a dataclass deriving from :class:`RunArgs`) from ``argv`` (the
    command line) or, with ``--resume``, from the run it continues, whose checkpoint it returns (else None); checked
    by :func:`check_run_args` and the script's ``check(args)``, which may fill in computed fields. The name of
    ``script_file`` (``ppo`` for ``ppo.py``, ``my_ppo`` for a copy) is the default ``--exp-name`` and the files' tag.

    Raises:
        SystemExit: status 2, one line naming the flag (or the checkpoint's field), before anything is written.
    """
    argv = sys.argv[1:] if argv is None else argv
    if any(token.lower().endswith(("true", "false")) for token in argv):  # CleanRL's --track True: read as --track
        from cleanrl_utils.spellings import cleanrl_booleans

        argv = cleanrl_booleans(args_class, argv)
    args = _tyro_cli(args_class, argv)
    args.script = Path(script_file).stem
    args.exp_name = args.exp_name or args.script
    if args.resume:  # the run it continues: its arguments, checked (and by check), and its checkpoint
        from cleanrl_utils.resume import resumed_args

        return resumed_args(args, argv, check)
    check_run_args(args)
    if check is not None:
        check(args)
    return args, None


def check_run_args(args: Any) -> None:
    """Refuse bad values of the :class:`RunArgs` flags, and a float flag (any field) that is NaN or infinite."""
    name = args.exp_name
    fine = name.strip() == name != "" and "/" not in name and name.isprintable()
    require(fine, "--exp-name", f"{name!r} must be a non-empty printable name without '/' or surrounding spaces")
    require(len(name.encode(errors="surrogateescape")) <= 150, "--exp-name", "must be at most 150 bytes")
    require(0 <= args.seed < 2**31, "--seed", f"must be in [0, 2**31), got {args.seed}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(args.torch_threads > 0, "--torch-threads", f"must be positive, got {args.torch_threads}")
    require(0 < args.env_timeout <= 1e7, "--env-timeout", f"must be in (0, 1e7] seconds, got {args.env_timeout}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        finite = not isinstance(value, float) or abs(value) < float("inf")  # NaN too
        require(finite, flag_name(field.name), f"must be finite, got {value}")


def _tyro_cli(args_class: type, argv: list[str], saved: str | None = None) -> Any:
    """``tyro.cli``, with its parsing errors (a box of several lines) said in one line, exit 2 (naming the file
    ``saved`` whose saved arguments ``argv`` are)."""
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
        where = f"{saved}: its saved {flag.group(0)[2:].replace('-', '_')}" if saved and flag else saved
        hint = f"; did you mean {guess}?" if guess else "" if saved else " (see --help)"
        fail(where or (flag.group(0) if flag else "arguments"), f"{message}{hint}")
    sys.stderr.write(said.getvalue())
    return args


def saved_args(args_class: type, saved: Any, path: str, required: tuple[str, ...] = ()) -> Any:
    """The ``args_class`` of the arguments ``saved`` in the file ``path``, read as flags are (by tyro): a value of
    another type (a bool for an int, text for a number, a choice not a Literal's) is refused as its flag would be.

    Raises:
        SystemExit: status 2, one line ``error: <path>: its saved <field>: ...``, or a ``required`` field missing.
    """
    require(isinstance(saved, dict), path, "its saved arguments are not a dict")
    missing = [name for name in required if name not in saved]
    require(not missing, path, f"its saved arguments lack {', '.join(missing)}")
    hints, argv, computed = typing.get_type_hints(args_class, include_extras=True), [], {}
    for field in dataclasses.fields(args_class):
        if field.name in saved and tyro.conf.Suppress in getattr(hints[field.name], "__metadata__", ()):
            computed[field.name] = saved[field.name]  # not a flag: kept as saved when of its default's type
        if field.name not in saved or field.name in computed:
            continue
        value, flag = saved[field.name], flag_name(field.name)
        kind = type(field.default)  # a bool or text flag: tyro would read any value as one
        not_kind = f"its saved {field.name} is {value!r}, not a {kind.__name__}"
        require(kind not in (bool, str) or type(value) is kind, path, not_kind)
        if kind is bool:
            argv.append(flag if value else f"--no-{flag[2:]}")
        elif typing.get_origin(typing.get_type_hints(args_class)[field.name]) is list:  # ddp_ppo.py's --device-ids
            require(isinstance(value, list), path, f"its saved {field.name} is {value!r}, not a list")
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    args = _tyro_cli(args_class, argv, path)
    for name, value in computed.items():
        if type(value) is type(getattr(args, name)):
            setattr(args, name, value)
    return args

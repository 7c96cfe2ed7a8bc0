"""Run plumbing every script shares: flags, checks, the run directory, trackers, progress, checkpoints, models.

A script uses it in three calls and a few methods (see ``cleanrl/ppo.py``)::

    args, resumed = parse_args(Args, __file__, check_args)  # flags and --resume; bad input stops here
    run = start_run(args, resumed)  # run directory, TensorBoard (and W&B), seeding, torch threads, device
    signal.signal(signal.SIGTERM, run.stop)  # only records the signal: the loop checkpoints, then exits
    state = dict(agent=agent, optimizer=optimizer, envs=envs)  # what a checkpoint holds, declared once
    ...
    run.log_episodes(global_step, infos)  # episodic returns to TensorBoard, progress to the terminal
    if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after a signal
        run.save_checkpoint(state, global_step, iteration=iteration)
    if run.stop_signal:  # after SIGTERM or Ctrl-C: close the envs and the run, exit 143 or 130
        run.exit(envs)
    ...
    run.save_model({"agent": agent}, evaluate)  # with --save-model: the model file, then its evaluation
    run.close()

Conventions:

- a script is its file: its name (``ppo`` for ``ppo.py``, ``my_ppo`` for a copy) is the default
  ``--exp-name`` and the tag in its model and checkpoint files (:mod:`cleanrl_utils.legacy.files`);
- run directory ``runs/{env_id}__{exp_name}__{seed}__{unix_time}/`` holding the TensorBoard
  events, ``args.json`` (the resolved arguments), ``checkpoints/``, videos and the saved model;
- TensorBoard tags ``charts/episodic_return``, ``charts/episodic_length``, ``charts/SPS``,
  ``charts/learning_rate`` and ``losses/<name>``; ``eval/episodic_return`` after ``--save-model``;
- bad input stops before any work with one line on stderr naming the flag, exit status 2.
"""

from __future__ import annotations

import atexit
import dataclasses
import difflib
import json
import os
import random
import re
import secrets
import shutil
import signal
import sys
import threading
import time
import warnings
from collections import deque
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, Callable, NoReturn, Optional

import gymnasium as gym
import numpy as np
import torch
import tyro

from cleanrl_utils.legacy import checkpoint as checkpoints
from cleanrl_utils.legacy.cli import (
    USAGE_ERROR,
    fail,
    flag_name,
    require,
    require_positive,
    require_range,
    safe_name,
    saved_arguments,
)
from cleanrl_utils.legacy.faults import (
    STOP_SIGNALS,
    EnvFault,
    check_parameters,
    first_line,
    free_space,
    one_line_faults,
    stop_now,
    time_limit,
)
from cleanrl_utils.legacy.files import SCRIPTS_DIR, checkpoint_path, model_path, script_name, untrusted_env_module, write_file
from cleanrl_utils.legacy.files import checkpoints as checkpoint_files
from cleanrl_utils.legacy.vector import register_dm_control
from cleanrl_utils.legacy.writes import UnsafePath, check_tree, open_regular, write_atomic


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
    """seconds to make an env, and for an env in a subprocess (--env-mode async, or alternating, where the script has
    them) to answer a reset or step, before the run stops"""
    script: tyro.conf.Suppress[str] = ""
    """the name of the script file that runs (filled in; not a flag)"""


def parse_args(
    args_class: type, script_file: str, check: Callable[[Any], None] | None = None, argv: list[str] | None = None
) -> tuple[Any, dict | None]:
    """Read the flags, take over the arguments of a run given to ``--resume``, and check them all.

    Args:
        args_class: the script's ``Args`` (a dataclass deriving from :class:`RunArgs`).
        script_file: the script's ``__file__``: its name is the run's identity (see the module docstring).
        check: the script's own checks, ``check(args)``; it may fill in computed fields.
        argv: the command line (default ``sys.argv[1:]``).

    Returns:
        ``(args, checkpoint)``: the checkpoint dict with ``--resume``, else None.

    Raises:
        SystemExit: status 2 with one line on stderr naming the flag, for bad input; nothing
            has been written yet.
    """
    argv = sys.argv[1:] if argv is None else argv
    _keep_running_without_a_reader()
    _warn_once()
    description = (sys.modules.get("__main__").__doc__ or "").strip().split("\n")[0] or None
    _warn_repeated_flags(argv, checkpoints.flag_spellings(args_class))
    args = _tyro_cli(args_class, argv, description)
    args.script = script_name(script_file)
    args.exp_name = args.exp_name or args.script
    args, resumed = checkpoints.resume_args(args, args.script, argv)
    args.script = script_name(script_file)
    given = checkpoints.given_flags(argv, type(args))
    # resumed: a value read from the checkpoint is refused naming the file and its field, not a flag
    with saved_arguments(resumed["path"], given) if resumed is not None else nullcontext():
        check_run_args(args)
        if check is not None:
            check(args)
    return args, resumed


def _warn_repeated_flags(argv: list[str], spellings: dict[str, str]) -> None:
    """One line on stderr for each flag given twice (``--seed 1 --seed 2``, ``--cuda --no-cuda``,
    ``--num-envs 2 --num_envs=4``, a flag and its alias): the last one given is used, as in any command
    line (so a launcher or a test may append an override), but not silently."""
    seen: dict[str, str] = {}
    tokens = argv[: argv.index("--")] if "--" in argv else argv
    for index, token in enumerate(tokens):
        name = spellings.get(token.split("=", 1)[0]) if token.startswith("--") else None
        if name is None:
            continue
        value = tokens[index + 1 : index + 2] if "=" not in token else []  # what it was given with, as said
        given = " ".join([token] + [v for v in value if not v.startswith("--")])
        if name in seen:
            print(f"warning: {flag_name(name)} given twice ({seen[name]}, then {given}): {given} is used", file=sys.stderr)
        seen[name] = given


def check_run_args(args: Any) -> None:
    """The checks of the flags every script takes (:class:`RunArgs`), and that no float flag is NaN or infinite.

    Used on the command line's flags (:func:`parse_args`) and on the arguments saved in a
    checkpoint or model (with :func:`cleanrl_utils.cli.saved_arguments`, whose messages name the
    file and the field).

    Raises:
        SystemExit: status 2 with one line on stderr naming the flag (or the file's field).
    """
    require(
        "/" not in args.exp_name and args.exp_name.strip() == args.exp_name != "" and args.exp_name.isprintable(),
        "--exp-name",
        f"{args.exp_name!r} must be a non-empty printable name without '/' or surrounding spaces",
    )
    try:
        name_bytes = len(args.exp_name.encode())
    except UnicodeEncodeError:  # bytes that are not UTF-8, passed through by the shell
        fail("--exp-name", f"{args.exp_name!r} is not valid UTF-8")
    require(name_bytes <= 150, "--exp-name", f"must be at most 150 bytes (a file name holds 255), got {name_bytes}")
    require(0 <= args.seed < 2**31, "--seed", f"must be in [0, 2**31), got {args.seed}")
    require(args.checkpoint_interval >= 0, "--checkpoint-interval", f"must be >= 0, got {args.checkpoint_interval}")
    require(args.torch_threads > 0, "--torch-threads", f"must be positive, got {args.torch_threads}")
    require_positive(args, "env_timeout")
    require(args.env_timeout <= 1e7, "--env-timeout", f"must be at most 1e7 seconds, got {args.env_timeout}")
    for field in dataclasses.fields(args):  # no flag takes NaN or infinity (learning rates, coefficients, ...)
        value = getattr(args, field.name)
        if isinstance(value, float) and not np.isfinite(value):
            fail(flag_name(field.name), f"must be a finite number, got {value}")
    require(not args.save_model or args.eval_episodes > 0, "--eval-episodes", "must be positive with --save-model")


class _Unbroken:
    """A text stream that, once its reader is gone (``| head`` exited), drops what it is given instead of
    raising BrokenPipeError: the run goes on, its output is lost, its files are not."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()

    def _drop(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _keep_running_without_a_reader() -> None:
    """Wrap stdout in :class:`_Unbroken` when it is a file descriptor (a pipe, a terminal), once."""
    try:
        sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured (tests) or closed
        return
    if not isinstance(sys.stdout, _Unbroken):
        sys.stdout = _Unbroken(sys.stdout)


def _warn_once() -> None:
    """Show each warning (its category and text) once in this process, once.

    Python's ``"once"`` filter (gymnasium's, for its deprecation warnings: a ``-v4`` MuJoCo env is out of date)
    forgets what it showed whenever the filters change, as every ``warnings.catch_warnings`` block (in torch,
    tyro ...) changes them: the same warning came again for the flags' check, the training envs and the
    evaluation env. This remembers them in ``warnings.showwarning``, whatever the filters do.
    """
    show = warnings.showwarning
    if getattr(show, "once", False):
        return
    shown: set[tuple[type, str]] = set()

    def show_once(message, category, filename, lineno, file=None, line=None):
        if (category, str(message)) not in shown:
            shown.add((category, str(message)))
            show(message, category, filename, lineno, file, line)

    show_once.once = True
    warnings.showwarning = show_once


def _tyro_cli(args_class: type, argv: list[str], description: str | None) -> Any:
    """``tyro.cli``, with its parsing errors (a boxed message of several lines) said in one line, exit 2."""
    import contextlib
    import io

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = tyro.cli(args_class, args=argv, description=description)
    except SystemExit as exit:
        if exit.code == USAGE_ERROR and said.getvalue().strip():
            lines = [line.strip(" │╭╮╰╯|+") for line in said.getvalue().splitlines()[1:]]  # below the box's title
            section: list[str] = []
            for line in lines:  # the box's first section: the message
                if not line.strip("─-= "):
                    if section:
                        break
                    continue
                section.append(line)
            message = " ".join(section) or "cannot parse the command line"
            flag = re.search(r"--[\w-]+", message)
            guess = next((lines[i + 1].split()[0] for i, line in enumerate(lines[:-1]) if line == "Perhaps you meant:"), None)
            hint = f"; did you mean {guess}?" if guess else ""
            fail(flag.group(0) if flag else "arguments", f"{message}{hint} (see --help)")
        sys.stderr.write(said.getvalue())
        raise
    sys.stderr.write(said.getvalue())
    return args


def check_env(
    args: Any,
    action_spaces: type | tuple[type, ...],
    observation_spaces: type | tuple[type, ...],
    obs_ndim: int | None = None,
    bounded_actions: bool = False,
    id_suffix: str | None = None,
    flatten: bool = False,
) -> tuple:
    """Check, before any work, that ``args.env_id`` exists and has spaces the script supports.

    Creates one environment to read its spaces, then closes it.

    Args:
        args: the run's ``Args``: ``env_id`` is a gymnasium id such as ``"CartPole-v1"``, or
            ``"package.module:Env-v0"`` (the module is imported to register it); ``script``
            names the script in the messages.
        action_spaces: accepted ``gymnasium.spaces`` class(es) for the action space.
        observation_spaces: accepted class(es) for the observation space.
        obs_ndim: if given, the number of dimensions observations must have (1: flat vectors).
        bounded_actions: require a 1-D Box action space with finite bounds (for scripts that
            rescale their actions into the bounds).
        id_suffix: if given, an unknown id is answered with suggestions among the ids ending
            with it only (the Atari scripts: ``"NoFrameskip-v4"``, so ``Breakout-v5`` gets
            ``BreakoutNoFrameskip-v4``), matched by spelling or else by the game's name.
        flatten: the script flattens Dict observations into one vector (``gymnasium.wrappers.FlattenObservation``
            in its ``make_env``, for dm_control's): a Dict whose entries are all Boxes of at most one
            dimension is checked as the flat Box it becomes; a Dict holding anything else (an image) is refused.

    ``dm_control/<domain>-<task>-v0`` ids are registered here when asked for
    (:func:`cleanrl_utils.legacy.vector.register_dm_control`).

    Returns:
        ``(observation_space, action_space)``, e.g. to size a replay buffer before the run starts (with
        ``flatten``, the flat Box of a Dict).

    Raises:
        SystemExit: (status 2, one line on stderr) for an unknown id or an unsupported space.
    """
    env_id, script = args.env_id, f"{args.script}.py" if args.script else "this script"
    action_spaces = action_spaces if isinstance(action_spaces, tuple) else (action_spaces,)
    observation_spaces = observation_spaces if isinstance(observation_spaces, tuple) else (observation_spaces,)
    import importlib
    import importlib.util

    module, _, name = env_id.rpartition(":")
    if name not in gym.registry and not module:
        try:  # Atari ids are registered by ale-py, which only the Atari scripts import
            import ale_py

            gym.register_envs(ale_py)
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
        except ImportError:
            pass
    if module:  # "package.module:Env-v0": importing the module registers the env
        if os.getcwd() not in sys.path and "" not in sys.path:  # `python cleanrl/x.py` puts cleanrl/ there, not here
            sys.path.append(os.getcwd())  # a module in the current directory, after the installed ones
        try:
            importlib.import_module(module)
        except (ImportError, TypeError, ValueError) as error:  # TypeError: a relative name (".mod")
            where = "looked in the current directory and on PYTHONPATH"
            fail("--env-id", f"cannot import {module!r} to register {name!r} ({where}): {error}")
    missing_extra = ""
    try:  # dm_control's ids are registered by Shimmy, which only the processes that use them import
        register_dm_control(name)
    except ModuleNotFoundError as error:
        missing_extra = f" ({error})"
    if name not in gym.registry:
        candidates = [i for i in gym.registry if id_suffix is None or i.endswith(id_suffix)]
        close = difflib.get_close_matches(name, candidates, n=3)
        if id_suffix and not close:  # "Pong-v5", "ALE/Pong-v5" -> PongNoFrameskip-v4
            game = re.split(r"NoFrameskip|-v\d", name.removeprefix("ALE/"))[0].lower()
            close = [i for i in candidates if i[: -len(id_suffix)].lower() == game]
        suggestion = f"; did you mean {', '.join(close)}?" if close else ""
        if name.startswith("ALE/") or "NoFrameskip" in name:
            suggestion += " (Atari ids need the atari extra: pip install -e '.[atari]')"
        if name.startswith(("MiniGrid-", "BabyAI-")) and importlib.util.find_spec("minigrid") is None:
            suggestion += " (MiniGrid ids need the minigrid extra: pip install -e '.[minigrid]')"
        fail("--env-id", f"unknown environment {env_id!r}{suggestion}{missing_extra}")
    try:
        with time_limit(args.env_timeout, f"creating {env_id}"):
            env = gym.make(env_id)
            action_space, observation_space = env.action_space, env.observation_space
            env.close()
    except Exception as error:  # a missing extra (ale-py, mujoco), a broken env, one that hangs
        fail("--env-id", f"cannot create {env_id!r}: {type(error).__name__}: {error}")
    accepted = " or ".join(space.__name__ for space in action_spaces)
    require(
        isinstance(action_space, action_spaces),
        "--env-id",
        f"{env_id} has action space {action_space}; {script} supports {accepted} only",
    )
    starts = np.asarray(getattr(action_space, "start", 0))  # Discrete(n, start=1): the scripts' actions are 0..n-1
    require(
        not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) or not starts.any(),
        "--env-id",
        f"{env_id} has action space {action_space}, whose actions start at {starts.tolist()}; {script} acts with "
        f"actions from 0 (wrap the env to shift them: gymnasium.wrappers.TransformAction)",
    )
    if flatten and isinstance(observation_space, gym.spaces.Dict):
        for key, entry in observation_space.spaces.items():
            require(
                isinstance(entry, gym.spaces.Box) and len(entry.shape) <= 1,
                "--env-id",
                f"{env_id} has the observation entry {key!r} {entry}; {script} flattens Dicts of vectors only",
            )
        observation_space = gym.spaces.flatten_space(observation_space)
    accepted = " or ".join(space.__name__ for space in observation_spaces)
    require(
        isinstance(observation_space, observation_spaces),
        "--env-id",
        f"{env_id} has observation space {observation_space}; {script} supports {accepted} only",
    )
    if obs_ndim is not None:
        require(
            len(observation_space.shape) == obs_ndim,
            "--env-id",
            f"{env_id} has observations of shape {observation_space.shape}; {script} supports "
            f"{obs_ndim}-dimensional observations only",
        )
    if bounded_actions:
        require(
            len(action_space.shape) == 1,
            "--env-id",
            f"{env_id} has actions of shape {action_space.shape}; {script} supports 1-dimensional actions only",
        )
        require(
            bool(np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))),
            "--env-id",
            f"{env_id} has unbounded actions {action_space}; {script} rescales actions into finite bounds",
        )
    return observation_space, action_space


def check_atari_or_vector_env(args: Any, make_env: Callable[[], gym.Env]) -> tuple[gym.Space, gym.Space, bool]:
    """:func:`check_env` for the scripts that take an Atari game or a task with flat observations (the asynchronous
    ones): stop with one line unless ``args.env_id`` is an Atari NoFrameskip game or has 1-D Box observations, with
    Discrete actions.

    Args:
        args: the run's ``Args`` (as :func:`check_env`).
        make_env: makes one env of the script's own preprocessing (a ``make_env(...)`` thunk); called for an Atari
            game only, whose spaces are those after the preprocessing.

    Returns:
        ``(observation_space, action_space, atari)``.

    Raises:
        SystemExit: (status 2, one line on stderr) for an unknown id, unsupported spaces, or a game that skips frames
            itself.
    """
    observation_space, action_space = check_env(args, gym.spaces.Discrete, gym.spaces.Box)
    with gym.make(args.env_id) as env:
        atari, frameskip = hasattr(env.unwrapped, "ale"), env.spec.kwargs.get("frameskip", 1)
    if not atari:
        shape, only = observation_space.shape, f"{args.script}.py supports Atari games and 1-dimensional observations only"
        require(len(shape) == 1, "--env-id", f"{args.env_id} has observations of shape {shape}; {only}")
        return observation_space, action_space, False
    require(frameskip == 1, "--env-id", f"{args.env_id} skips frames itself; take its NoFrameskip-v4 id")
    with make_env() as probe:
        return probe.observation_space, probe.action_space, True


def seed_everything(seed: int, torch_deterministic: bool) -> None:
    """Seed python's, numpy's and torch's global generators; ask cuDNN for determinism.

    On CPU, the same seed then gives the same numbers run after run.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def start_run(args: Any, resumed: dict | None = None, runs_dir: str | os.PathLike = "runs", record: bool = True) -> Run:
    """Create (or, resuming, reopen) the run directory; start TensorBoard (and W&B); seed; pick the device.

    Args:
        args: the checked ``Args`` from :func:`parse_args`.
        resumed: the checkpoint :func:`parse_args` returned with ``--resume``: its run directory
            is reused, TensorBoard events logged after its ``global_step`` by the interrupted
            process are dropped (``purge_step``), so the curves continue without a fold, and the
            W&B run is resumed.
        runs_dir: parent folder of new run directories.
        record: False for a process that takes part in a run another process records (a rank
            other than 0 of a distributed run): it seeds and picks the device, and gets a
            :class:`Run` without directory that writes nothing (see :attr:`Run.records`).

    Returns:
        The started :class:`Run`. With ``args.track`` the W&B run is started first, with
        ``sync_tensorboard=True``, so every TensorBoard scalar reaches W&B under the same tag;
        its files go to ``./wandb`` (or ``$WANDB_DIR``). ``WANDB_MODE=offline`` keeps the run on
        disk. Runs started in the same second get distinct directories.
    """
    from torch.utils.tensorboard import SummaryWriter

    if not record:
        run = Run(args, None, _NoWriter(), _seed_and_device(args), resumed)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else None
        one_line_faults(args.script, None, lambda: None, rank)  # a Fault: one line (rank 0 names the checkpoint)
        return _stop_on_hangup(run)
    config = dataclasses.asdict(args)
    one_line_faults(args.script, lambda: None, lambda: None)  # from here: TensorBoard's thread says nothing itself
    if resumed is not None:  # continue the checkpoint's run, in its directory
        directory, flag, created = Path(resumed["path"]).parent.parent, "--resume", False
        try:  # a link planted in it (as the lock file, a temporary file, a video) would redirect a write
            check_tree(directory)
        except OSError as error:
            fail(flag, str(error) if isinstance(error, UnsafePath) else f"cannot read {directory}: {error.strerror or error}")
    else:
        flag, created = "runs", True
        try:
            Path(runs_dir).mkdir(parents=True, exist_ok=True)
            stamp = int(time.time())
            while True:  # a run started in the same second as another gets the next free second
                directory = Path(runs_dir) / f"{safe_name(args.env_id)}__{args.exp_name}__{args.seed}__{stamp}"
                try:
                    directory.mkdir()  # atomic: two runs never share a directory
                    break
                except FileExistsError:
                    stamp += 1
        except OSError as error:  # a read-only or full working directory
            fail("runs", f"cannot create a run directory in {Path(runs_dir).resolve()}: {error.strerror or error}")
    with _set_up_in(directory, flag, created):  # a full disk: one line; a new run directory is removed
        lock = _lock_run(directory, flag)
        if created:
            write_atomic(directory / "args.json", json.dumps(config, indent=2) + "\n")
    if args.track:
        import wandb

        wandb_id = resumed.get("wandb_id") if resumed is not None else None
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=config,
            name=directory.name,
            save_code=True,
            **({"id": wandb_id, "resume": "allow"} if wandb_id else {}),
        )
    suffix = f".{secrets.token_hex(4)}"
    with _set_up_in(directory, flag, created):
        writer = SummaryWriter(  # the events file's name ends in a random suffix: no link can be planted at it
            str(directory), purge_step=resumed["global_step"] + 1 if resumed is not None else None, filename_suffix=suffix
        )
        table = "\n".join(f"|{key}|{value}|" for key, value in config.items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        writer.flush()  # the first write reaches the disk now, or fails here
    run = Run(args, directory, writer, _seed_and_device(args), resumed)
    run.lock, run.events_suffix = lock, suffix  # the lock is held until the run is over (Run.close, or the exit)
    resuming = f" (resumed at step {resumed['global_step']})" if resumed is not None else ""
    print(f"run directory: {directory}{resuming}", flush=True)  # the first line of a run, before the script's own
    one_line_faults(args.script, lambda: run.last_checkpoint, run.writer.close)  # a Fault: one line, not a traceback
    return _stop_on_hangup(run)


@contextmanager
def _set_up_in(directory: Path, flag: str, created: bool):
    """Stop with one line naming ``flag`` (exit 2) where setting up ``directory`` fails to write (a full or
    read-only disk, a link in the way); a directory this process ``created`` is removed first."""
    try:
        yield
    except OSError as error:
        if created:
            shutil.rmtree(directory, ignore_errors=True)
        reason = str(error) if isinstance(error, UnsafePath) else error.strerror or str(error)
        fail(flag, f"cannot write in {directory}: {reason} ({free_space(directory)})")


def _lock_run(directory: Path, flag: str):
    """Lock ``{directory}/run.lock`` for this process: two processes never write one run.

    The lock file is opened only as a regular file, never through a link (:func:`cleanrl_utils.writes.open_regular`).
    It holds the pid of its holder and is removed when the run is over (:func:`_unlock`: when :meth:`Run.close`
    ends it, or when the process exits), so no ``run.lock`` outlives its process but one killed at once
    (SIGKILL, a second Ctrl-C), whose lock the kernel releases anyway.

    Raises:
        SystemExit: (status 2, one line naming ``flag``) another live process holds it.
        OSError: the directory cannot be written (read-only, full; :class:`~cleanrl_utils.writes.UnsafePath`:
            a link or another kind of file is at ``run.lock``).
    """
    import fcntl

    while True:
        lock = open_regular(directory / "run.lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            fail(flag, f"{directory} is in use by another process (pid {lock.read().strip() or '?'}); one process per run")
        if _is_at(lock, directory / "run.lock"):
            break
        lock.close()  # its holder removed it as its run ended, after this process opened it: lock the file there now
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    atexit.register(_unlock, directory, lock, os.getpid())
    return lock


def _is_at(file: Any, path: Path) -> bool:
    """Whether the open ``file`` is the file at ``path`` (not one removed, or replaced by another)."""
    try:
        return os.path.samestat(os.fstat(file.fileno()), os.stat(path, follow_symlinks=False))
    except OSError:
        return False


def _unlock(directory: Path, lock: Any, pid: int) -> None:
    """Remove ``{directory}/run.lock`` and release it, once the run of process ``pid`` that locked it is over.

    Removed while still locked, so no other process has locked that file meanwhile; one that opened it before
    locks it only after, sees it is no longer at its path, and locks a new one (:func:`_lock_run`). Nothing is
    done in another process (a forked child) or twice.
    """
    if os.getpid() != pid or lock.closed:
        return
    if _is_at(lock, directory / "run.lock"):
        try:
            (directory / "run.lock").unlink()
        except OSError:  # a read-only folder now: the file stays, the lock goes with the process
            pass
    lock.close()


def _stop_on_hangup(run: Run) -> Run:
    """SIGHUP (the terminal or ssh session closed) stops the run as SIGTERM does, with a checkpoint
    (exit 129), unless it is ignored (``nohup``)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
        signal.signal(signal.SIGHUP, run.stop)
    return run


def _seed_and_device(args: Any) -> torch.device:
    """Seed the global generators, set torch's threads; the device: CUDA when available and ``--cuda``."""
    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    return torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")


class _NoWriter:
    """The writer of a :class:`Run` that records nothing: every ``SummaryWriter`` method does nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class Run:
    """A started run: its arguments, directory, TensorBoard writer, device, and the plumbing the loop calls.

    Attributes:
        args: the run's ``Args``.
        directory: ``runs/{env_id}__{exp_name}__{seed}__{unix_time}``; None for a run that does not record.
        writer: a ``torch.utils.tensorboard.SummaryWriter`` on ``directory`` (mirrored to W&B with ``--track``).
        device: ``cuda`` when available and ``--cuda``, else ``cpu``.
        resumed: the checkpoint this run continues (``--resume``), or None.
        stop_signal: the signal number received by :meth:`stop`, or None.
        records: False for a run started with ``start_run(..., record=False)``: no directory, a
            writer and progress that write nothing; its :meth:`save_checkpoint` captures the state
            (so that the collectives a state object's ``state_dict`` makes take place) and writes
            nothing, its :meth:`save_model` does nothing.
    """

    def __init__(self, args: Any, directory: Path | None, writer: Any, device: torch.device, resumed: dict | None):
        self.args, self.directory, self.writer, self.device, self.resumed = args, directory, writer, device, resumed
        self.records = directory is not None
        self.events_suffix: str | None = None  # the name ending of the events file this process writes
        self.lock: Any = None  # the open, locked run.lock (:func:`_lock_run`)
        self.video_dir = str(directory / "videos") if self.records else ""
        self.stop_signal: int | None = None
        self.stop_reported = False  # the stop has been said (by finish, or by close after training ended)
        self.last_checkpoint: Path | None = Path(resumed["path"]) if resumed is not None else None
        start_step = resumed["global_step"] if resumed is not None else 0
        stream = None if self.records else open(os.devnull, "w")
        self.progress = Progress(planned_steps(args), start_step=start_step, stream=stream)
        interval = args.checkpoint_interval
        self.next_checkpoint = (start_step // interval + 1) * interval if interval > 0 else None

    # ---- signals and checkpoints

    def stop(self, signum: int, frame: Any = None) -> None:
        """Signal handler: ask for a checkpoint at the loop's next safe point, after which the script calls :meth:`exit`.

        Install it for SIGTERM (Slurm's time limit, ``timeout``, a container stop, a spot
        instance reclaimed) and SIGINT (Ctrl-C): it only records the signal in
        :attr:`stop_signal`, which makes :meth:`checkpoint_due` true. A second Ctrl-C stops at
        once, exit 130 (:func:`cleanrl_utils.legacy.faults.stop_now`). :func:`start_run` installs it for
        SIGHUP (the terminal closed) itself, unless SIGHUP is ignored (``nohup``).
        """
        if self.stop_signal == signal.SIGINT and signum == signal.SIGINT:
            stop_now("stopped at once by a second Ctrl-C", 128 + signal.SIGINT)
        self.stop_signal = signum

    def checkpoint_due(self, global_step: int) -> bool:
        """Whether to write a checkpoint now: ``--checkpoint-interval`` steps passed, or :meth:`stop` was called."""
        return self.stop_signal is not None or (self.next_checkpoint is not None and global_step >= self.next_checkpoint)

    def save_checkpoint(self, state: dict[str, Any], global_step: int, **counters: Any) -> Path | None:
        """Write ``{run_dir}/checkpoints/step_{global_step}.pt``: ``state`` captured, the counters and the random generators.

        Keeps the two most recent checkpoints. A run that does not record captures ``state`` (so
        that the collectives a state object makes take place) and writes nothing (returns None).

        Args:
            state: the script's checkpoint state (see :mod:`cleanrl_utils.legacy.checkpoint`).
            global_step: environment steps so far.
            counters: plain numbers and tensors the loop needs to continue (``iteration=...``).

        Raises:
            OSError: the file could not be written (the previous checkpoints are kept).
        """
        self.writer.flush()
        content = {
            "state": checkpoints.capture(state),
            "rng": checkpoints.rng_state(),
            "global_step": global_step,
            "counters": counters,
            "wandb_id": self.wandb_id,
        }
        modules = {name: value for name, value in state.items() if isinstance(value, torch.nn.Module)}
        check_parameters(modules, f"checkpoint at step {global_step}")
        if self.next_checkpoint is not None:
            while self.next_checkpoint <= global_step:
                self.next_checkpoint += self.args.checkpoint_interval
        if not self.records:
            return None
        path = checkpoint_path(self.directory, global_step)
        self.last_checkpoint = write_file(path, "checkpoint", self.args.script, self.args, content, modules)
        for old in checkpoint_files(self.directory)[:-2]:
            old.unlink()
        for stale in path.parent.glob("*.tmp"):  # left by a process killed while writing (SIGKILL, power loss)
            stale.unlink(missing_ok=True)
        return self.last_checkpoint

    def exit(self, *envs: Any) -> NoReturn:
        """End the run after :meth:`stop`: close ``envs`` and the run, exit with 128 + the signal's number.

        143 after SIGTERM, 130 after Ctrl-C. Call it once the checkpoint is written; it prints
        where the checkpoint is and how to resume (:meth:`finish`).
        """
        sys.exit(self.finish(*envs))

    def finish(self, *envs: Any) -> int:
        """Close ``envs`` and the run; the exit status: 0, or 128 + the signal's number after :meth:`stop`.

        After a stop it prints where the checkpoint is and how to resume.
        """
        self.progress.close()  # the last progress line before the stop's message
        if self.stop_signal and self.records:
            name = signal.Signals(self.stop_signal).name
            print(f"{name}: checkpoint written to {self.last_checkpoint}; resume with: {self.resume_command()}", flush=True)
        self.stop_reported = True
        for vector_env in envs:
            vector_env.close()
        self.close()
        return 128 + self.stop_signal if self.stop_signal else 0

    def resume_command(self) -> str:
        """The command that resumes this run: ``python <script> --resume <run dir>`` (with ``--env-id`` where the
        id imports a module, see :func:`cleanrl_utils.legacy.files.untrusted_env_module`); under torchrun, its flags."""
        flags = f"--resume {self.directory}"
        if untrusted_env_module(self.args.env_id):
            flags += f" --env-id {self.args.env_id}"
        if "TORCHELASTIC_RUN_ID" in os.environ:  # launched by torchrun: the same launch, with these flags
            return f"the same torchrun command, with the script's flags {flags}"
        return f"python {sys.argv[0]} {flags}"

    def restore(self, state: dict[str, Any], steps_per_iteration: int | None = None) -> dict[str, Any]:
        """Load the random generators and then the resumed checkpoint into ``state``'s objects, in place
        (an object may then set generators of its own: :class:`cleanrl_utils.legacy.checkpoint.PerRank`).

        Returns:
            The checkpoint's counters (``global_step`` and those given to :meth:`save_checkpoint`),
            ``"obs"``: the observation the restored envs act on next, and ``"missing"``: the
            names of the entries of ``state`` the checkpoint does not hold (left as they are): only
            those of :data:`OPTIONAL_STATE` (the replay buffer, saved with ``--checkpoint-buffer``)
            may be missing.

        Args:
            state: the script's checkpoint state (networks, optimisers, generators, envs, buffer).
            steps_per_iteration: the steps of one iteration of a rollout script's loop (its
                ``batch_size``): given, the saved ``global_step`` must be a multiple of it and the
                saved ``iteration`` counter its quotient. Whether given or not, a vector env of
                ``state`` must have made ``global_step / num_envs`` vector steps.

        Raises:
            SystemExit: (status 2, one line naming ``--resume``) the checkpoint does not fit
                this script's state (another network, another number of envs), or its counters
                disagree. The events file this process opened is removed first.
        """
        try:
            counters = self._restore(state, steps_per_iteration)
        except SystemExit:  # refused: the events file this process opened goes, so that its purge step
            self._discard_events()  # hides none of the interrupted process's events after the checkpoint
            raise
        return counters

    def _discard_events(self) -> None:
        self.writer.close()
        if self.events_suffix:
            for events in self.directory.glob(f"events.out.tfevents.*{self.events_suffix}"):
                events.unlink(missing_ok=True)

    def _restore(self, state: dict[str, Any], steps_per_iteration: int | None) -> dict[str, Any]:
        saved = self.resumed
        try:
            checkpoints.set_rng_state(saved["rng"])
            modules = saved.get("modules", {})
            obs, missing = checkpoints.restore(state, {**saved["state"], "path": saved["path"], "modules": modules})
        except ValueError as error:  # another network (one line already)
            fail("--resume", str(error))
        except Exception as error:  # a damaged or forged file: its generators, tensors or env logs do not fit
            reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            fail("--resume", f"{saved['path']} does not fit this run ({reason})")
        absent = [name for name in missing if name not in OPTIONAL_STATE]  # a network, a generator, statistics ...
        if absent:  # left as they are, the run would go on from fresh ones, silently another run
            fail("--resume", f"{saved['path']} is damaged or forged: it holds no {absent[0]!r}")
        # a counter the script reads later and finds missing is refused too: the events file goes then as well
        values = {"global_step": saved["global_step"], **saved.get("counters", {})}
        counters = _Counters(saved["path"], values, on_refuse=self._discard_events)
        counters.check(self.args.total_timesteps, steps_per_iteration)
        step = counters["global_step"]
        for value in state.values():  # the vector steps the saved envs made (counted by this project's envs)
            made = getattr(getattr(value, "unwrapped", None), "steps", None)
            if isinstance(value, gym.vector.VectorEnv) and made is not None and made * value.num_envs != step:
                counters._refuse(f"its global_step {step} is not the {made} vector steps of its envs")
        counters.update(obs=obs, missing=missing)
        return counters

    # ---- logging

    def log_episodes(self, global_step: int, infos: dict) -> None:
        """Write the episodes that ended this step to TensorBoard and report progress.

        Reads the statistics ``gym.wrappers.RecordEpisodeStatistics`` puts in each ended env's
        last info (``infos["final_info"]["episode"]``, same-step autoreset) or, from a vector
        ``RecordEpisodeStatistics``, in ``infos["episode"]``; tags ``charts/episodic_return`` and
        ``charts/episodic_length``.
        """
        if infos:  # most steps have no info at all: nothing ended
            for returns, lengths in _ended_episodes(infos):
                for episodic_return, episodic_length in zip(returns, lengths):
                    self.writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    self.writer.add_scalar("charts/episodic_length", episodic_length, global_step)
                self.progress.episodes(returns)
        self.progress.update(global_step)

    def sps(self, global_step: int) -> int:
        """Environment steps per second of this process's loop (from its first env step; see :class:`Progress`)."""
        return self.progress.sps(global_step)

    # ---- the saved model

    def save_model(self, models: dict[str, Any], evaluate: Callable[..., np.ndarray]) -> Path | None:
        """Write ``{run_dir}/{exp_name}.cleanrl_model`` and evaluate it with the script's ``evaluate``.

        Args:
            models: what evaluation needs: networks (their state dicts and ``repr`` are saved),
                tensors and plain data (normalisation statistics).
            evaluate: the script's ``evaluate(model_path, eval_episodes, env_id=..., capture_video=...,
                video_dir=..., device=...)``; its returns are logged as ``eval/episodic_return``
                (mean) and ``eval/episodic_return_std`` at the last step. SIGTERM, Ctrl-C or SIGHUP
                during the evaluation ends it and the run (exit 128 + the signal); the model is kept.

        Returns:
            The model file's path; None, with nothing written or evaluated, for a run that does not record.
        """
        self.progress.close()
        if not self.records:
            return None
        modules = {name: value for name, value in models.items() if isinstance(value, torch.nn.Module)}
        check_parameters(models, "the model")
        content = {name: value.state_dict() if name in modules else value for name, value in models.items()}
        path = write_file(
            model_path(self.directory, self.args.exp_name),
            "model",
            self.args.script,
            self.args,
            {**content, "global_step": self.progress.step},
            modules,
        )
        print(f"model saved to {path}")
        if self.stop_signal:  # a signal after the loop's last check: training is complete, the evaluation skipped
            print(f"{signal.Signals(self.stop_signal).name}: evaluation skipped; the model is saved at {path}", flush=True)
            self.stop_reported = True
            self.close()
            sys.exit(128 + self.stop_signal)
        with _stopped_by_signals(self, f"evaluation stopped; the model is saved at {path}"):
            returns = evaluate(
                str(path),
                self.args.eval_episodes,
                env_id=self.args.env_id,
                capture_video=self.args.capture_video,
                video_dir=str(self.directory / "videos-eval"),
                device=str(self.device),
            )
        self.writer.add_scalar("eval/episodic_return", returns.mean(), self.progress.step)
        self.writer.add_scalar("eval/episodic_return_std", returns.std(), self.progress.step)
        print(f"evaluation over {len(returns)} episodes: {returns.mean():.1f} ± {returns.std():.1f}")
        return path

    def summary(self) -> str:
        """The closing lines of a run that ran to its end: its last step and recent return, what its directory
        holds, and the commands that plot it (and evaluate its model, or else its last checkpoint)."""
        progress, directory = self.progress, self.directory
        if progress.returns:
            recent = f"mean return of its last {len(progress.returns)} episodes {progress.mean_return:.2f}"
        else:
            recent = "no episode ended"
        held = ["TensorBoard events"]
        saved = checkpoint_files(directory)
        if saved:
            held.append(f"checkpoints {', '.join(file.name for file in saved)}")
        model = model_path(directory, self.args.exp_name)  # written by save_model (a finished run is not resumed)
        if model.exists():
            held.append(f"the model {model.name}")
        lines = [
            f"run finished at step {progress.step}: {recent}",
            f"{directory} holds {', '.join(held)}",
            f"plot it: python -m cleanrl_utils.plot {directory} --out plots",
        ]
        # enjoy finds a script of cleanrl/ by the name the file records; a copy elsewhere is named to it
        script = Path(sys.argv[0])
        in_repository = script.resolve() == SCRIPTS_DIR / script.name
        options = "--eval-episodes 10" if in_repository else f"--script {script} --eval-episodes 10"
        if model.exists():
            lines.append(f"evaluate it again: python -m cleanrl_utils.enjoy {directory} {options}")
        elif saved:  # no model (no --save-model): its last checkpoint's networks are evaluated as one
            lines.append(f"evaluate its last checkpoint: python -m cleanrl_utils.enjoy {saved[-1]} {options}")
        return "\n".join(lines)

    @property
    def wandb_id(self) -> str | None:
        """The W&B run's id (saved in checkpoints, so a resumed run continues it), None untracked."""
        if not self.args.track:
            return None
        import wandb

        return wandb.run.id if wandb.run is not None else None

    def close(self) -> None:
        """End the progress output, flush and close the writer; upload videos and finish the W&B run if tracked.

        A stop signal that came after the loop's last check is said (the run is complete), and
        SIGTERM and SIGHUP are ignored from here on: a run that has finished exits 0.
        """
        self.progress.close()
        if self.stop_signal and not self.stop_reported:
            name = signal.Signals(self.stop_signal).name
            print(f"{name} arrived after training had ended: the run is complete", flush=True)
            self.stop_reported = True
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.writer.close()
        if self.records and not self.stop_signal:
            print(self.summary(), flush=True)
        if self.args.track and self.records:
            import wandb

            for video in sorted(self.directory.glob("videos*/*.mp4")):  # training and evaluation
                wandb.log({f"{video.parent.name}/{video.stem}": wandb.Video(str(video), format="mp4")})
            wandb.finish()
        if self.lock is not None:  # the run is over: its directory is free
            _unlock(self.directory, self.lock, os.getpid())


class _Stopped(BaseException):
    """Raised by :func:`_stopped_by_signals`'s handler."""


@contextmanager
def _stopped_by_signals(run: Run, what: str):
    """Within the block, SIGTERM, SIGINT and SIGHUP end the run at once (no checkpoint is due): ``what`` is
    said on stderr, the run closed, exit 128 + the signal (in the main thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Stopped(signum)

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        if previous[signum] is not signal.SIG_IGN:
            signal.signal(signum, handler)
    try:
        yield
    except _Stopped as stopped:
        print(f"{signal.Signals(stopped.args[0]).name}: {what}", file=sys.stderr, flush=True)
        run.close()
        sys.exit(128 + stopped.args[0])
    finally:
        for signum, handler_before in previous.items():
            signal.signal(signum, handler_before)


OPTIONAL_STATE = ("replay_buffer",)
"""The entries of a script's checkpoint state a checkpoint may lack (:meth:`Run.restore` refuses any other)."""


class _Counters(dict):
    """A checkpoint's counters (:meth:`Run.restore`), checked like flags: a missing or mistyped one is one line."""

    def __init__(self, path: str, counters: dict, on_refuse: Callable[[], None] = lambda: None) -> None:
        super().__init__(counters)
        self.path, self.on_refuse = path, on_refuse

    def _refuse(self, what: str) -> NoReturn:
        self.on_refuse()
        fail("--resume", f"{self.path} is damaged or forged: {what}")

    def __missing__(self, key: str) -> Any:
        self._refuse(f"it has no {key!r} counter")

    def tensor(self, key: str, shape: tuple[int, ...], values: tuple[float, ...] | None = None) -> torch.Tensor:
        """The counter ``key`` (a recurrent state, the episode starts of the live rollout): a finite float32
        tensor of ``shape``, its entries among ``values`` if given; one line naming it otherwise."""
        value = self[key]
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or tuple(value.shape) != tuple(shape):
            found = f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            self._refuse(f"its {key!r} is {found}, where this run needs torch.float32 {list(shape)}")
        if not torch.isfinite(value).all():
            self._refuse(f"its {key!r} is not finite")
        if values is not None and not torch.isin(value, torch.tensor(values, dtype=value.dtype)).all():
            self._refuse(f"its {key!r} holds values other than {', '.join(map(str, values))}")
        return value

    def check(self, total_timesteps: int, steps_per_iteration: int | None = None) -> None:
        """Refuse counters that are not numbers, tensors or tuples of them, a ``global_step`` outside
        ``[0, total_timesteps]``, a negative integer, an ``iteration`` beyond ``global_step``, and
        (``steps_per_iteration`` given) a ``global_step`` not a multiple of it or an ``iteration``
        other than their quotient."""
        step = self["global_step"]
        for key, value in self.items():
            values = value if isinstance(value, (tuple, list)) else (value,)
            if not all(isinstance(v, (int, float, torch.Tensor)) for v in values):
                self._refuse(f"its {key!r} counter is {type(value).__name__}")
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                self._refuse(f"its {key!r} counter is {value}")
        if not isinstance(step, int) or step > total_timesteps:
            self._refuse(f"its global_step {step} is beyond --total-timesteps")
        iteration = self.get("iteration", 0)
        if not isinstance(iteration, int) or iteration > step:
            self._refuse(f"its iteration {iteration} is beyond its step {step}")
        if steps_per_iteration is not None:
            if step % steps_per_iteration:
                self._refuse(f"its global_step {step} is not a multiple of the {steps_per_iteration} steps of an iteration")
            if "iteration" in self and iteration * steps_per_iteration != step:
                self._refuse(f"its iteration {iteration} does not make its global_step {step} ({steps_per_iteration} each)")


def _ended_episodes(infos: dict) -> list[tuple[list[float], list[int]]]:
    """``(returns, lengths)`` lists of the episodes that ended in a vector step, from wherever they are.

    Raises:
        EnvFault: the statistics are not those of ``RecordEpisodeStatistics`` (an env's own ``episode`` info,
            of other types), naming the env and what is there.
    """
    ended_episodes = []
    for source in (infos, infos.get("final_info")):
        if not source or "_episode" not in source:
            continue
        ended = np.zeros(0, dtype=np.int64)
        try:
            ended = np.asarray(source["_episode"]).nonzero()[0]
            if len(ended):
                returns, lengths = np.asarray(source["episode"]["r"])[ended], np.asarray(source["episode"]["l"])[ended]
                if returns.dtype.kind not in "iuf" or lengths.dtype.kind not in "iu":
                    raise TypeError(f"returns {returns.tolist()!r:.80}, lengths {lengths.tolist()!r:.80}")
                ended_episodes.append((returns.tolist(), lengths.tolist()))
        except (TypeError, KeyError, IndexError, ValueError) as error:
            raise EnvFault(
                f"env {int(ended[0]) if len(ended) else 0}'s episode statistics (info 'episode') are not the "
                f"numbers of gymnasium's RecordEpisodeStatistics: {first_line(error)}"
            ) from None
    return ended_episodes


def episode_returns(infos: dict) -> list[float]:
    """The returns of the episodes that ended in a vector step (see :meth:`Run.log_episodes`)."""
    return [r for returns, _ in _ended_episodes(infos) for r in returns]


def planned_steps(args: Any) -> int:
    """The environment steps a run will make: ``num_iterations * batch_size`` where the script rounds
    ``--total-timesteps`` to whole rollouts (the PPO family's computed fields), else ``total_timesteps``."""
    rollouts, rollout = getattr(args, "num_iterations", 0), getattr(args, "batch_size", 0)
    return rollouts * rollout if rollouts and rollout else args.total_timesteps


class Progress:
    """Progress output: a tqdm bar on a terminal, plain periodic lines otherwise.

    Both show the global step, steps per second and the mean return of the last
    ``window`` episodes.

    Args:
        total: total environment steps of the run.
        interval: seconds between plain lines (and between bar refreshes).
        stream: where to write; a bar is used when ``stream.isatty()``.
        window: number of recent episodes in the mean return.
        start_step: the global step the run starts from (a resumed run's checkpoint step).
    """

    def __init__(self, total: int, interval: float = 10.0, stream=None, window: int = 20, start_step: int = 0):
        self.total = total
        self.start_step = start_step  # a resumed run starts here; SPS counts the steps of this process
        self.interval = interval
        self.stream = stream if stream is not None else sys.stdout
        self.returns: deque[float] = deque(maxlen=window)
        self.start: float | None = None  # the clock starts at the first update: set-up is not counted
        self.last_print = self.last_update = time.perf_counter()
        self.step = start_step
        self.printed_step = -1
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start_step, unit="step", file=self.stream, mininterval=0.5)

    def episodes(self, returns: list[float]) -> None:
        """Add the returns of episodes that just ended."""
        self.returns.extend(returns)

    @property
    def mean_return(self) -> float:
        """Mean return of the recent episodes (nan before the first one ends)."""
        return float(np.mean(self.returns)) if self.returns else float("nan")

    def sps(self, global_step: int) -> int:
        """Steps per second from the first update (the loop's first env step) to now. Asked at the step the
        run has reached (a script logging its SPS after an update), it also moves the final line's clock to now,
        so that the line :meth:`close` prints counts the last update."""
        if self.start is None:
            return 0
        now = time.perf_counter()
        if global_step == self.step:
            self.last_update = now
        return int((global_step - self.start_step) / max(now - self.start, 1e-9))

    def update(self, global_step: int) -> None:
        """Report that the run has reached ``global_step``; prints at most every interval."""
        now = self.last_update = time.perf_counter()
        if self.start is None:  # the first env step of the loop: the clock and the print interval start here, so
            # that a set-up longer than the interval (a resume replaying its envs) prints no line reading "SPS 0"
            self.start, self.start_step, self.last_print = now, global_step, now
        if self.bar is not None:
            self.bar.update(global_step - self.step)
            self.step = global_step
            if now - self.last_print >= 0.5:
                self.bar.set_postfix_str(f"return={self.mean_return:.1f}", refresh=False)
                self.last_print = now
            return
        self.step = global_step
        if now - self.last_print >= self.interval:
            self.last_print = now
            self._line(now)

    def _line(self, now: float) -> None:
        self.printed_step = self.step
        sps = int((self.step - self.start_step) / max(now - (self.start or now), 1e-9))
        percent = 100.0 * self.step / self.total
        recent = f"return (last {len(self.returns)}) {self.mean_return:.1f}" if self.returns else "no episode ended yet"
        print(f"step {self.step}/{self.total} ({percent:.0f}%) | SPS {sps} | {recent}", file=self.stream, flush=True)

    def close(self) -> None:
        """Close the bar, or print the final line if the last one printed is out of date."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.printed_step != self.step:
            self._line(self.last_update)  # as of the last step: closing the envs is not counted


__all__ = [
    "RunArgs",
    "parse_args",
    "check_run_args",
    "check_env",
    "check_atari_or_vector_env",
    "seed_everything",
    "start_run",
    "Run",
    "Progress",
    "episode_returns",
    "USAGE_ERROR",
    "fail",
    "flag_name",
    "require",
    "require_positive",
    "require_range",
]

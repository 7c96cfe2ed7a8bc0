"""Checkpoint state: what a run needs to continue exactly where it stopped, as tensors and plain data.

A script declares its checkpoint state once, as a dict of the objects that change while it
trains (``{"agent": agent, "optimizer": optimizer, "envs": envs, "rng": rng}``); :func:`capture`
turns it into tensors and plain data and :func:`restore` loads a capture back into the same
objects, in place. Besides that state a checkpoint holds the script's counters (``global_step``,
``iteration``, ...) and the states of python's, numpy's and torch's global random generators
(:func:`rng_state`). The file itself is written and read by :mod:`cleanrl_utils.legacy.files`; when to
write one (every ``--checkpoint-interval`` steps, and after SIGTERM or Ctrl-C) is decided by
:class:`cleanrl_utils.legacy.run.Run`.

What :func:`capture` and :func:`restore` understand, by type:

- ``torch.nn.Module``, ``torch.optim.Optimizer``, and any object with ``state_dict`` /
  ``load_state_dict`` (replay buffers, normalisation statistics): their state dicts;
- ``numpy.random.Generator`` and ``torch.Generator``: their states;
- ``torch.Tensor`` (a learnt temperature ``log α``): its value, copied back in place;
- ``gymnasium.vector.VectorEnv``: every sub-env's replay log and the episode statistics
  (:func:`cleanrl_utils.legacy.vector.envs_state`); restoring replays them in the fresh envs, and the
  observation to act on next is returned.

Sources: the format follows PyTorch's serialization notes ("Saving and loading a general
checkpoint").
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import typing
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.legacy.cli import check_saved_types, fail, flag_name
from cleanrl_utils.legacy.files import FileDamaged, FileRefused, model_path, read_file, untrusted_env_module
from cleanrl_utils.legacy.files import checkpoints as checkpoint_files
from cleanrl_utils.legacy.vector import envs_state, restore_envs


def rng_state() -> dict:
    """The states of python's ``random``, numpy's legacy global generator and torch's CPU generator.

    Returns:
        ``{"python": tuple, "numpy": dict, "torch": uint8 tensor}`` (and ``"cuda"``: a list of
        uint8 tensors when CUDA is initialised), all loadable with ``weights_only=True``.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the generators saved by :func:`rng_state`."""
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    numpy = state["numpy"]
    np.random.set_state(
        (numpy["name"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def capture(state: dict[str, Any]) -> dict[str, Any]:
    """Each object of a script's checkpoint ``state`` as tensors and plain data (see the module docstring).

    Raises:
        TypeError: an object of a type this module does not know.
    """
    captured = {}
    for name, value in state.items():
        if isinstance(value, gym.vector.VectorEnv):
            captured[name] = envs_state(value)
        elif isinstance(value, np.random.Generator):
            captured[name] = value.bit_generator.state
        elif isinstance(value, torch.Generator):
            captured[name] = value.get_state()
        elif isinstance(value, torch.Tensor):
            captured[name] = value.detach().clone().cpu()
        elif hasattr(value, "state_dict"):
            captured[name] = value.state_dict()
        else:
            raise TypeError(f"checkpoint state {name!r}: cannot save a {type(value).__name__}")
    return captured


def restore(state: dict[str, Any], saved: dict[str, Any]) -> tuple[Any, list[str]]:
    """Load the capture ``saved`` (from :func:`capture`) into the objects of ``state``, in place.

    An entry of ``state`` that ``saved`` lacks is left as it is (a replay buffer the checkpoint
    was written without, for one) and named in the returned list.

    Returns:
        ``(obs, missing)``: the observation ``[num_envs, ...]`` the restored vector env acts on
        next (None when ``state`` holds no vector env), and the names of the entries not restored.

    Raises:
        cleanrl_utils.legacy.files.FileRefused: (one line) a network's weights do not fit this script's network.
        ValueError: the saved envs or buffer do not fit (another number of envs, another capacity).
    """
    from cleanrl_utils.legacy.files import check_module, check_optimizer

    obs, missing = None, []
    for name, value in state.items():
        if name not in saved:
            missing.append(name)
        elif isinstance(value, gym.vector.VectorEnv):
            obs = restore_envs(value, saved[name])
        elif isinstance(value, np.random.Generator):
            value.bit_generator.state = saved[name]
        elif isinstance(value, torch.Generator):
            value.set_state(saved[name])
        elif isinstance(value, torch.Tensor):
            with torch.no_grad():
                value.copy_(saved[name])
        elif isinstance(value, torch.nn.Module):
            check_module(value, name, saved)
        elif isinstance(value, torch.optim.Optimizer):
            check_optimizer(value, name, saved)
        else:
            value.load_state_dict(saved[name])
    return obs, missing


class PerRank:
    """Checkpoint state that each process (rank) of a ``torch.distributed`` group holds its own of.

    In a distributed script the networks and optimiser are the same on every rank, but each rank
    steps its own envs and draws from its own generators. Put those in a ``PerRank`` inside the
    checkpoint state, ``state = dict(agent=agent, optimizer=optimizer, ranks=PerRank(envs=envs))``,
    and call ``run.save_checkpoint(state, ...)`` on every rank (rank 0's :class:`~cleanrl_utils.legacy.run.Run`
    writes the file, the others' write nothing): the checkpoint then holds every rank's capture
    of these objects and of its global random generators (:func:`rng_state`), and
    ``run.restore(state)`` gives each rank its own back.

    Args:
        objects: the rank's objects, as in a checkpoint state (a vector env, generators, ...).

    Attributes:
        obs: after :meth:`load_state_dict`: the observation the restored vector env acts on next.
    """

    def __init__(self, **objects: Any):
        self.objects, self.obs = objects, None

    def state_dict(self) -> list[dict] | None:
        """``[rank 0's capture, rank 1's, ...]`` on rank 0, None on the others.

        A collective call (``gather_object``): every rank of the group makes it at the same point.
        """
        import torch.distributed as dist

        mine = {"state": capture(self.objects), "rng": rng_state()}
        gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        return gathered

    def load_state_dict(self, saved: list[dict]) -> None:
        """Restore this rank's entry of ``saved`` (from :meth:`state_dict`) and its global random generators.

        Raises:
            ValueError: ``saved`` was written by another number of ranks.
        """
        import torch.distributed as dist

        if len(saved) != dist.get_world_size():
            raise ValueError(f"the checkpoint was written by {len(saved)} ranks, this run has {dist.get_world_size()}")
        mine = saved[dist.get_rank()]
        self.obs, _ = restore(self.objects, mine["state"])
        set_rng_state(mine["rng"])


RESUMABLE_WITH_OTHER_VALUES = (
    "resume",
    "env_timeout",
    "checkpoint_interval",
    "checkpoint_buffer",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "cuda",
    "backend",  # ddp_ppo.py: the machines a resumed run lands on may differ
    "device_ids",
    "torch_threads",
    "env_mode",
    "capture_video",
    "save_model",
    "eval_episodes",
)
"""Flags a resumed run may set differently from its checkpoint (left out, they keep the
checkpoint's values); every other flag comes from the checkpoint."""


REQUIRED_ARGS = ("env_id", "exp_name", "seed", "total_timesteps")
"""Saved arguments a checkpoint or model must hold: what names and seeds its run (a missing one would be
replaced by the flag's default, silently another run)."""


def flag_spellings(args_class: type) -> dict[str, str]:
    """Every spelling of the flag of every field of ``args_class`` (a dataclass), mapped to the field:
    ``--name``, ``--name-with-dashes``, their ``--no-`` forms, and the aliases given with
    ``tyro.conf.arg(aliases=...)`` (ddp_ppo.py's ``--local-num-envs`` for ``num_envs``)."""
    try:
        hints = typing.get_type_hints(args_class, include_extras=True)
    except Exception:  # annotations that do not resolve outside their module: the fields' own types
        hints = {field.name: field.type for field in dataclasses.fields(args_class)}
    spellings = {}
    for field in dataclasses.fields(args_class):
        names = {field.name, field.name.replace("_", "-")}
        for meta in getattr(hints.get(field.name), "__metadata__", ()):
            names |= {alias.lstrip("-") for alias in getattr(meta, "aliases", None) or ()}
        for name in names:
            spellings[f"--{name}"] = spellings[f"--no-{name}"] = field.name
    return spellings


def given_flags(argv: Sequence[str], args_class: type) -> set[str]:
    """The fields of ``args_class`` whose flag appears in ``argv`` in any of its spellings (:func:`flag_spellings`:
    ``--name``, ``--name=value``, ``--no-name``, an alias)."""
    spellings = flag_spellings(args_class)
    tokens = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    return {spellings[token] for token in tokens if token in spellings}


def load_checkpoint(path: str, script: str) -> dict:
    """The checkpoint at ``path`` written by ``script``: a file, or a run directory's latest checkpoint
    (when that one cannot be read, damaged by a crash or a full disk, the one before it, said on stderr).

    Raises:
        cleanrl_utils.legacy.files.FileRefused: (one line) nothing there, not ``script``'s checkpoint, or
            damaged (every checkpoint of the run directory).
    """

    candidates = checkpoint_files(path) if Path(path).is_dir() else [Path(path)]
    if not candidates:
        raise FileRefused(f"{path} has no checkpoints (looked in {Path(path) / 'checkpoints'})")
    while True:  # in a run directory, a damaged newest checkpoint (a crash, a full disk) falls back to the one before
        path = candidates.pop()
        try:
            content = read_file(path, "checkpoint", script)
            break
        except FileDamaged as error:
            if not candidates:
                raise
            print(f"--resume: {error}; resuming from {candidates[-1].name} instead", file=sys.stderr, flush=True)
    path = Path(path)
    if path.parent.name != "checkpoints" or not (path.parent.parent / "args.json").is_file():
        raise FileRefused(
            f"{path} is not in a run directory (<run>/checkpoints/{path.name} next to <run>/args.json), "
            f"where the resumed run would write; put it back in its run's checkpoints/ folder"
        )
    try:
        recorded = json.loads((path.parent.parent / "args.json").read_text())
    except (OSError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise FileRefused(f"{path.parent.parent / 'args.json'} cannot be read: {error}") from None
    saved, run = content.get("args", {}), path.parent.parent
    recorded = recorded if isinstance(recorded, dict) else {}
    differ = [key for key in ("env_id", "exp_name", "seed") if recorded.get(key) != saved.get(key)]
    if differ:  # a checkpoint copied or linked into another run's folder
        verb = "differ" if len(differ) > 1 else "differs"
        raise FileRefused(f"{path} belongs to another run than {run} (its {', '.join(differ)} {verb} from args.json)")
    return content


def resume_args(args: Any, script: str, argv: Sequence[str] | None = None) -> tuple[Any, dict | None]:
    """With ``--resume``, the arguments of the checkpoint's run and the checkpoint; else ``(args, None)``.

    The resumed run continues with the checkpoint's arguments, except the flags in
    :data:`RESUMABLE_WITH_OTHER_VALUES` given on the command line, which take the given value
    (so a plain ``--resume`` keeps writing checkpoints at the run's ``--checkpoint-interval``,
    and ``--checkpoint-interval 0`` turns them off). Any other flag given with a value other
    than the checkpoint's is refused, rather than silently ignored.

    Args:
        args: the parsed ``Args``.
        script: the script's name (``"ppo"``), checked against the checkpoint's.
        argv: the command-line arguments ``args`` were parsed from (default ``sys.argv[1:]``).

    Raises:
        SystemExit: (status 2, one line naming ``--resume`` or the flag) for a missing or
            foreign checkpoint, or a flag that contradicts it.
    """
    if not args.resume:
        return args, None
    try:
        checkpoint = load_checkpoint(args.resume, script)
    except FileRefused as error:
        fail("--resume", str(error))
    fields = [field.name for field in dataclasses.fields(args)]
    # each saved value of the type of its flag (a damaged or forged file: one line naming the field)
    saved = check_saved_types(type(args), checkpoint.get("args"), checkpoint["path"], required=REQUIRED_ARGS)
    unknown = sorted(set(checkpoint["args"]) - set(fields))
    if unknown:
        fail("--resume", f"the checkpoint has arguments this {script}.py does not know: {', '.join(unknown)}")
    given = given_flags(sys.argv[1:] if argv is None else argv, type(args))
    module = untrusted_env_module(saved.get("env_id", ""))
    if module and "env_id" not in given:  # "module:Env-v0" would import module: the user names it, not the file
        fail(
            "--env-id",
            f"the checkpoint's env id {saved['env_id']!r} imports the module {module!r}; "
            f"name it yourself to allow that: --resume {args.resume} --env-id {saved['env_id']}",
        )
    for name in fields:
        if name in RESUMABLE_WITH_OTHER_VALUES or name not in saved or name not in given:
            continue
        if getattr(args, name) != saved[name]:
            fail(
                flag_name(name),
                f"{getattr(args, name)!r} differs from the resumed run's {saved[name]!r}; "
                f"leave it out to continue the run as it was started",
            )
    run_dir = Path(checkpoint["path"]).parent.parent  # {run}/checkpoints/step_N.pt
    model = model_path(run_dir, saved.get("exp_name", script))
    if model.exists():  # written once, when training ended: resuming would train the end again and write it anew
        fail(
            "--resume",
            f"{run_dir} has finished: its model {model} exists and resuming would overwrite it; "
            f"evaluate it with python -m cleanrl_utils.enjoy {run_dir}, or move it away to train the run's end again",
        )
    values = {}
    for name in fields:
        if name == "resume" or name not in saved or (name in RESUMABLE_WITH_OTHER_VALUES and name in given):
            values[name] = getattr(args, name)
        else:
            values[name] = saved[name]
    return type(args)(**values), checkpoint

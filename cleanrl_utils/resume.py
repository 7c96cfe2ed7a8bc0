"""Exact resume: the run a ``--resume`` continues, its arguments and its checkpoint loaded back in place.

Loaded only by a resumed run (and the tools that read checkpoints): what :mod:`cleanrl_utils.checkpoint` captured
goes back into the same objects, the envs are replayed (:class:`~cleanrl_utils.wrappers.ReplayableEnv`), and flags
given anew are checked against the checkpoint's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import sys
import typing
from pathlib import Path
from typing import Any, Callable, NoReturn

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils import files
from cleanrl_utils.checkpoint import set_rng_state
from cleanrl_utils.faults import first_line
from cleanrl_utils.flags import check_run_args, fail, flag_name, saved_args
from cleanrl_utils.wrappers import ReplayableEnv, call_envs

OPTIONAL_STATE = ("replay_buffer",)  # what a checkpoint may lack: the replay of a run without --checkpoint-buffer


RESUMABLE_WITH_OTHER_VALUES = frozenset(
    "resume env_timeout checkpoint_interval checkpoint_buffer track wandb_project_name wandb_entity cuda backend "
    "device_ids torch_threads env_mode capture_video save_model eval_episodes total_timesteps".split()
)
"""Flags a resumed run may set anew (left out, they keep the checkpoint's values); another flag given with another
value than the checkpoint's is refused. ``--total-timesteps`` trains a run longer (or less long), finished or not: every
schedule that depends on it takes, from the resumed step on, its value for the new total (as SB3's
``learn(reset_num_timesteps=False)``)."""


def restore_run(run: Any, state: dict[str, Any], steps_per_iteration: int | None = None) -> dict[str, Any]:
    """Load the checkpoint ``run.resumed`` into ``state``'s objects in place (:func:`restore`), and the global
    generators: its counters (a :class:`Counters`), ``"obs"`` (what the restored envs act on next) and ``"missing"``
    (entries it lacks: :data:`OPTIONAL_STATE`). ``steps_per_iteration``: a rollout script's batch, of which
    ``global_step`` must be ``iteration`` times. What :meth:`cleanrl_utils.run.Run.restore` does.

    Raises:
        SystemExit: status 2, one line naming ``--resume`` (the run's events file of this process removed first).
    """
    saved, step = run.resumed, run.resumed["global_step"]

    def refuse(error: Exception) -> NoReturn:
        run.writer.close()
        for events in run.directory.glob(f"events.out.tfevents.*{run.events_suffix}") if run.records else ():
            events.unlink()
        refused = isinstance(error, files.FileRefused)  # its one line names the file already
        fail("--resume", str(error) if refused else f"{saved['path']} does not fit this run: {first_line(error)}")

    counters = Counters({"global_step": step, **saved.get("counters", {})}, refuse)
    try:
        set_rng_state(saved["rng"])
        obs, missing = restore(state, saved)
        lacking = [name for name in missing if name not in OPTIONAL_STATE]
        negative = any(isinstance(v, int) and v < 0 for v in counters.values())
        whole = all(type(counters.get(name, 0)) is int for name in ("global_step", "iteration"))
        if lacking or negative or not whole or step > run.args.total_timesteps:
            raise ValueError(f"it lacks {lacking}" if lacking else f"its counters {counters} do not fit this run")
        if steps_per_iteration and counters.get("iteration", step // steps_per_iteration) * steps_per_iteration != step:
            raise ValueError(f"its iteration does not make its global_step {step} ({steps_per_iteration} steps each)")
    except Exception as error:  # a damaged or forged file, one of another network
        refuse(error)
    trained = saved.get("model_step")  # the step of the run's model, read by check_not_finished
    if run.records and trained is not None:  # a finished run trained longer: its model is of its old end, kept aside
        model = files.model_path(run.directory, run.args.exp_name)
        kept = model.parent / "earlier_models" / f"{model.stem}.step_{trained}{model.suffix}"
        try:
            kept.parent.mkdir(exist_ok=True)
            os.replace(model, kept)
        except OSError as error:
            refuse(files.FileRefused(f"cannot keep {model} aside in earlier_models/: {first_line(error)}"))
        print(f"training longer: the model of step {trained} is kept as {kept}", flush=True)
    counters.update(obs=obs, missing=missing)
    return counters


class Counters(dict):
    """The counters of a resumed checkpoint (``global_step``, ``iteration``, ...): one the script reads that the file
    lacks is refused in one line by ``refuse``, not a ``KeyError``."""

    def __init__(self, values: dict, refuse: Any) -> None:
        super().__init__(values)
        self.refuse = refuse

    def __missing__(self, key: str) -> None:
        self.refuse(ValueError(f"it holds no {key!r} counter"))


def restore(state: dict[str, Any], saved: dict[str, Any]) -> tuple[Any, list[str]]:
    """Load a checkpoint's content ``saved`` (its ``"state"`` from :func:`capture`) into ``state``'s objects in place.

    Returns:
        ``(obs, missing)``: the observation ``[num_envs, ...]`` the restored vector env acts on next (None without one),
        and the entries of ``state`` the checkpoint lacks (left as they are).

    Raises:
        cleanrl_utils.files.FileRefused: one line: a network or optimiser state that does not fit.
        ValueError, KeyError, TypeError: saved envs, generators or a buffer that do not fit.
    """
    obs, missing, content = None, [], {**saved["state"], "path": saved["path"], "modules": saved.get("modules", {})}
    for name, value in state.items():
        if name not in saved["state"]:
            missing.append(name)
        elif isinstance(value, gym.vector.VectorEnv):
            obs = restore_envs(value, content[name])
        elif isinstance(value, np.random.Generator):
            value.bit_generator.state = content[name]
        elif isinstance(value, torch.Generator):
            value.set_state(content[name])
        elif isinstance(value, torch.Tensor):
            with torch.no_grad():
                value.copy_(content[name])
        elif isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
            (files.load_module if isinstance(value, torch.nn.Module) else load_optimizer)(value, name, content)
        else:
            value.load_state_dict(content[name])
    return obs, missing


def make_generator(state: dict) -> np.random.Generator | np.random.RandomState:
    """A numpy generator in the state :func:`cleanrl_utils.wrappers.generator_state` returned (``ValueError``: one that
    does not fit)."""
    if "RandomState" in state:
        generator = np.random.RandomState()
        generator.set_state(unplain(state["RandomState"]))
        return generator
    if not hasattr(np.random, str(state.get("bit_generator"))):
        raise ValueError(f"unknown numpy bit generator {state.get('bit_generator')!r}")
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def unplain(value: Any) -> Any:
    """The inverse of :func:`cleanrl_utils.wrappers._plain`."""
    if isinstance(value, dict) and set(value) == {"ndarray", "dtype"}:
        return np.asarray(value["ndarray"], dtype=value["dtype"])
    return {key: unplain(item) for key, item in value.items()} if isinstance(value, dict) else value


def replay(env: ReplayableEnv, log: dict) -> tuple:
    """Replay ``log`` (:meth:`ReplayableEnv.replay_log`) in the fresh ``env``: ``(observation, info)`` of its last call.

    Raises:
        ValueError: an empty log, or a generator state that does not fit.
    """
    if not log["events"]:
        raise ValueError("empty replay log: the env was never reset")
    env.replay_generator = None if log["start"] is None else make_generator(log["start"])
    result = None
    for event in log["events"]:
        if event[0] == "reset":
            result = env.reset(seed=event[1], options=unplain(event[2]))
        else:
            result = env.step(unplain(event[1]))
    return result[0], result[-1]


def restore_envs(envs: gym.vector.VectorEnv, state: dict) -> Any:
    """Replay every env of a fresh ``envs`` into the state :func:`cleanrl_utils.wrappers.envs_state` saved: the
    observation ``[num_envs, ...]`` the run acts on next (``ValueError``: another number of envs, or an empty log)."""
    if len(state["logs"]) != envs.num_envs:
        raise ValueError(f"the checkpoint has {len(state['logs'])} envs, this run {envs.num_envs}")
    observations = [obs for obs, _ in call_envs(envs, "restore", state["logs"])]
    empty = gym.vector.utils.create_empty_array(envs.single_observation_space, n=envs.num_envs)
    return gym.vector.utils.concatenate(envs.single_observation_space, observations, empty)


def load_optimizer(optimizer: torch.optim.Optimizer, name: str, content: dict) -> None:
    """Load the file's optimiser state ``content[name]`` into ``optimizer``, refusing what no training writes: a setting
    of another kind than this optimiser's, or (a number) not finite or negative (betas below 1); per-parameter tensors
    (Adam's moments and step) that are not finite, not of their parameter's shape, or (second moments, steps) negative.

    Raises:
        FileRefused: one line naming the file and the entry.
    """
    path, state = content.get("path", "the file"), content[name]
    try:
        for group, own in zip(state["param_groups"], optimizer.param_groups, strict=True):
            for key, value in ((key, value) for key, value in group.items() if key != "params" and key in own):
                if isinstance(own[key], (bool, str)) or own[key] is None:
                    fine = type(value) is type(own[key])
                else:  # numbers: finite, not negative, betas below 1
                    values = value if isinstance(value, (tuple, list)) else [value]
                    fine = all(type(v) in (int, float) and 0 <= v < (1 if key == "betas" else float("inf")) for v in values)
                if not fine:
                    raise files.FileRefused(f"{path}: its {name}'s {key} is {value!r}")
        indices = [index for group in state["param_groups"] for index in group["params"]]
        shapes = dict(zip(indices, (p.shape for group in optimizer.param_groups for p in group["params"]), strict=True))
        for index, entries in state["state"].items():
            for key, tensor in entries.items():
                if not isinstance(tensor, torch.Tensor) or not bool(torch.isfinite(tensor).all()):
                    raise files.FileRefused(f"{path}: its {name}'s {key} of parameter {index} is not a finite tensor")
                if tensor.dim() > 0 and tensor.shape != shapes[index]:
                    raise files.FileRefused(f"{path}: its {name}'s {key} of parameter {index} is not of its shape")
                if key in ("exp_avg_sq", "max_exp_avg_sq", "step") and bool((tensor < 0).any()):
                    raise files.FileRefused(f"{path}: its {name}'s {key} of parameter {index} is negative")
        optimizer.load_state_dict(state)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        if isinstance(error, files.FileRefused):
            raise
        raise files.FileRefused(f"{path}: its {name} does not fit this script's optimiser: {error!r:.200}") from None


def load(path: str, script: str) -> dict:
    """The checkpoint ``script`` wrote at ``path`` (a file, or a run directory's newest), which must lie in
    ``<run>/checkpoints/`` beside the ``<run>/args.json`` of its own run.

    Raises:
        cleanrl_utils.files.FileRefused: one line.
    """
    found = files.checkpoints(path) if Path(path).is_dir() else [Path(path)]
    if not found:
        where = f"looked in {Path(path) / 'checkpoints'}; a run keeps them with --checkpoint-interval"
        raise files.FileRefused(f"{path} has no checkpoints ({where})")
    content = files.read_file(found[-1], "checkpoint", script)
    run = Path(content["path"]).parent.parent
    try:
        recorded = (
            json.loads((run / "args.json").read_text()) if run.joinpath("checkpoints") == Path(content["path"]).parent else 0
        )
    except (OSError, ValueError, RecursionError):
        recorded = 0
    if not isinstance(recorded, dict):
        raise files.FileRefused(f"{content['path']} is not in a run directory (<run>/checkpoints/ beside <run>/args.json)")
    differ = [key for key in ("env_id", "exp_name", "seed") if recorded.get(key) != content["args"].get(key)]
    if differ:  # a checkpoint copied or linked into another run's folder
        raise files.FileRefused(f"{content['path']} belongs to another run than {run} (its {', '.join(differ)} differ)")
    return content


def flag_spellings(args_class: type) -> dict[str, str]:
    """Every spelling of every flag of ``args_class`` mapped to its field: ``--num-envs``, ``--num_envs``, the
    ``--no-`` forms, and aliases of ``tyro.conf.arg(aliases=...)`` (ddp_ppo.py's ``--local-num-envs``)."""
    hints, spellings = typing.get_type_hints(args_class, include_extras=True), {}
    for field in dataclasses.fields(args_class):
        names = {field.name, field.name.replace("_", "-")}
        for meta in getattr(hints.get(field.name), "__metadata__", ()):
            names |= {alias.lstrip("-") for alias in getattr(meta, "aliases", None) or ()}
        spellings.update({f"--{prefix}{name}": field.name for name in names for prefix in ("", "no-")})
    return spellings


def given_flags(argv: list[str], args_class: type) -> set[str]:
    """The fields of ``args_class`` whose flag ``argv`` gives, in any spelling (``--name=value`` included)."""
    spellings = flag_spellings(args_class)
    return {spellings[token.split("=", 1)[0]] for token in argv if token.split("=", 1)[0] in spellings}


def resumed_args(args: Any, argv: list[str], check: Callable | None = None) -> tuple[Any, dict]:
    """The arguments of the run ``args.resume`` names, and its checkpoint: the checkpoint's values, but for the flags of
    :data:`RESUMABLE_WITH_OTHER_VALUES` given in ``argv`` and the fields it lacks; checked by
    :func:`~cleanrl_utils.flags.check_run_args` and the script's ``check`` (which fills in computed fields).

    Raises:
        SystemExit: status 2, one line: no such checkpoint, another script's, damaged, a saved value of another
            type; a flag given with another value; an env id that imports a module the user did not name; a
            finished run, unless ``--total-timesteps`` trains it longer from a checkpoint at its end; a total below
            the checkpoint's step or that trains no step past it.
    """
    try:
        checkpoint = load(args.resume, args.script)
    except files.FileRefused as error:
        fail("--resume", str(error))
    fields, saved = {field.name for field in dataclasses.fields(args)}, checkpoint["args"]
    given = given_flags(argv, type(args))
    unknown = sorted(set(saved) - fields)
    if unknown:
        fail("--resume", f"the checkpoint has arguments this {args.script}.py does not know: {', '.join(unknown)}")
    resumed = saved_args(type(args), saved, checkpoint["path"], ("env_id", "exp_name", "seed"))
    module = files.untrusted_env_module(resumed.env_id)
    if module and "env_id" not in given:  # the user names what is imported, not the file
        again = shlex.join(["--resume", args.resume, "--env-id", resumed.env_id])
        fail(
            "--env-id", f"the checkpoint's env id {resumed.env_id!r} imports the module {module!r}; name it yourself: {again}"
        )
    for name in sorted((given - RESUMABLE_WITH_OTHER_VALUES - {"resume"}) & set(saved)):
        if getattr(args, name) != getattr(resumed, name):
            why = "leave it out to continue the run as it was started"
            fail(flag_name(name), f"{getattr(args, name)!r} differs from the resumed run's {getattr(resumed, name)!r}; {why}")
    run, step, longer = Path(checkpoint["path"]).parent.parent, checkpoint["global_step"], "total_timesteps" in given
    if longer and args.total_timesteps < step:
        fail("--total-timesteps", f"{args.total_timesteps} is below step {step}, where {run} was checkpointed")
    for name in (given & RESUMABLE_WITH_OTHER_VALUES) | (fields - set(saved)) | {"resume", "script"}:
        setattr(resumed, name, getattr(args, name))
    check_run_args(resumed)
    if check is not None:
        check(resumed)
    checkpoint["model_step"] = check_not_finished(resumed, run, step, longer)  # kept aside by restore_run
    return resumed, checkpoint


def check_not_finished(args: Any, run: Path, step: int, longer: bool) -> int | None:
    """Refuse to resume the run ``run`` from its checkpoint at ``step`` if the run has ended there: its model is at that
    step or past it, or (a run without ``--save-model``) the checkpoint is at the last step ``args`` trains to. With
    ``--total-timesteps`` (``longer``) a run goes on from a checkpoint at its end, to a last step past it. Returns the
    step of the run's model (None: it has none).

    Raises:
        SystemExit: status 2, one line naming ``--resume`` (with the command that evaluates the run) or
            ``--total-timesteps``.
    """
    n = getattr(args, "num_envs", 1)  # the last step, as Run.total: whole rollouts, or whole vector steps
    end = getattr(args, "num_iterations", 0) * getattr(args, "batch_size", 0) or args.total_timesteps // n * n
    model, trained = files.model_path(run, args.exp_name), None
    if model.exists():  # written when training ended
        try:
            trained = files.read_file(model, "model", args.script).get("global_step", 0)
        except files.FileRefused as error:
            fail("--resume", str(error))
    evaluate = files.enjoy_command(run if trained is not None else files.checkpoints(run)[-1], env_id=args.env_id)
    if trained is not None and trained > step:  # stopped, resumed and finished with no checkpoint at its end
        none = f"its newest checkpoint is at step {step}: none at its end (runs with --checkpoint-interval have one)"
        if not longer:
            fail("--resume", f"{run} has finished at step {trained} (not to be trained longer: {none}): {evaluate}")
        fail("--total-timesteps", f"{run} has finished at step {trained}, cannot go on from there: {none}")
    if step >= end and (trained is not None or not args.save_model):  # at its end (a model to write: not yet finished)
        if not longer:
            fail("--resume", f"{run} has finished at step {step} (add --total-timesteps above it to train longer): {evaluate}")
        whole = f"{args.total_timesteps} trains {end} steps (whole rollouts or vector steps)"
        fail("--total-timesteps", f"{whole}, not above step {step}, where {run} was checkpointed")
    return trained


def say_how_to_resume(run: Any) -> None:
    """A last progress line of ``run`` (a :class:`cleanrl_utils.run.Run` stopped by a signal), then where its checkpoint
    is and the command, quoted for pasting, that resumes from it."""
    run.progress(force=True)
    resume = ["--resume", str(run.directory)]
    resume += ["--env-id", run.args.env_id] * bool(files.untrusted_env_module(run.args.env_id))
    if "TORCHELASTIC_RUN_ID" in os.environ:  # launched by torchrun: the same launch, with these flags
        command = f"the same torchrun command, with the script's flags {shlex.join(resume)}"
    else:
        command = shlex.join(["python", sys.argv[0], *resume])
    name = signal.Signals(run.stop_signal).name
    if run.records:
        print(f"{name}: checkpoint written to {run.last_checkpoint}; resume with: {command}", flush=True)

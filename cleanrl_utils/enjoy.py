"""Evaluate a saved model or checkpoint with its script: ``python -m cleanrl_utils.enjoy FILE [--script SCRIPT]``.

The script is the file you name with ``--script`` (a copy of a script anywhere, say
``~/exp/my_ppo.py``), or else the script in this repository's ``cleanrl/`` whose name the
model file records (``ppo`` -> ``cleanrl/ppo.py``). Nothing read from the model file chooses a
path: a recorded name that is not one of the files in ``cleanrl/`` is refused. The script's
``evaluate()`` then checks that the model is its own (same script name, same networks), builds
its evaluation environment and acts with its evaluation policy (greedy or deterministic by
default; see the README's "Saved models and evaluation"). Prints the mean ± std of the
episodic returns and, with ``--capture-video``, records every episode.

A checkpoint (``runs/<run>/checkpoints/step_N.pt``) is evaluated the same way: it holds the model that
``--save-model`` would have written at that step, entry for entry (:func:`model_of_checkpoint`), and the
script's ``evaluate()`` runs on that; ``--export OUT`` also writes it as the model file ``OUT``.

Script-specific evaluation options (``epsilon`` of the DQN family, ``deterministic`` of the
policy-gradient scripts, ...) are passed with ``--option NAME=VALUE`` and checked against the
script's ``evaluate`` signature.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import shlex
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from cleanrl_utils.cli import fail
from cleanrl_utils.evals import OptionRefused
from cleanrl_utils.faults import WriteFailed
from cleanrl_utils.files import MODEL_SUFFIX, SCRIPTS_DIR, FileRefused, checkpoints, read_file, write_content


def find_model(path: Path) -> Path:
    """The model or checkpoint file at ``path``, or the only ``*.cleanrl_model`` in the run directory ``path``.

    Raises:
        FileNotFoundError: nothing there, or a directory without exactly one model file.
    """
    if path.is_file():
        return path
    if path.is_dir():
        models = sorted(path.glob(f"*{MODEL_SUFFIX}"))
        if len(models) == 1:
            return models[0]
        if models:
            raise FileNotFoundError(f"{path} holds {len(models)} {MODEL_SUFFIX} files; give the file itself")
        latest = (checkpoints(path) or [None])[-1]
        hint = f", or give a checkpoint: {shlex.quote(str(latest))}" if latest else ""
        raise FileNotFoundError(f"{path} holds no {MODEL_SUFFIX} file (train with --save-model{hint})")
    raise FileNotFoundError(f"no such file or directory: {path}")


CHECKPOINT_NAMES = {"obs_norm": "normalization"}
"""Entries of a model that a checkpoint written before checkpoints held their model (see :func:`model_of_checkpoint`)
holds under another name: a normalising script's observation statistics (``obs_norm``), part of its ``normalization``."""


def model_of_checkpoint(checkpoint: dict) -> dict:
    """The model file content (header and entries) that ``--save-model`` would have written at a checkpoint's step.

    A checkpoint holds that model (its ``"model"``: the entries and their networks' records, as the script gives
    them to ``run.save_model``), taken as it is. One written before it did: every network of its state, every tensor of
    its state, and the entries of :data:`CHECKPOINT_NAMES` (training-only entries too: target networks, generators).

    Args:
        checkpoint: a checkpoint's content, as read by :func:`cleanrl_utils.files.read_file`.

    Returns:
        ``kind`` ``"model"``, the checkpoint's ``format``, ``script``, ``env_id``, ``args`` and ``global_step``, the
        model's entries and ``modules`` (its networks' records). Names in the file are only keys here.

    Raises:
        cleanrl_utils.files.FileRefused: (one line) the checkpoint holds no network, or a damaged model.
    """
    path = checkpoint.get("path", "the checkpoint")
    header = {key: checkpoint[key] for key in ("format", "script", "env_id", "args", "global_step") if key in checkpoint}
    if "model" in checkpoint:
        model = checkpoint["model"]
        entries, modules = (model.get(key) if isinstance(model, dict) else None for key in ("entries", "modules"))
        if not isinstance(entries, dict) or not isinstance(modules, dict) or not set(modules) <= set(entries):
            raise FileRefused(f"{path} is damaged or forged: its model is not entries and their networks' records")
        if not any(isinstance(entries[name], dict) for name in modules):
            raise FileRefused(f"{path} holds no network to evaluate")
        return {**entries, **header, "kind": "model", "modules": modules}
    state, records = checkpoint.get("state") or {}, checkpoint.get("modules") or {}
    networks = {name: value for name, value in state.items() if name in records and isinstance(value, dict)}
    if not networks:
        raise FileRefused(f"{path} holds no network to evaluate")
    tensors = {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}
    renamed = {name: state[saved] for name, saved in CHECKPOINT_NAMES.items() if isinstance(state.get(saved), dict)}
    modules = {name: records[name] for name in networks}
    return {**tensors, **renamed, **networks, **header, "kind": "model", "modules": modules}


def script_file(recorded: str, script: Path | None, scripts_dir: Path = SCRIPTS_DIR) -> Path:
    """The script to evaluate with: ``script`` when given, else the file of ``scripts_dir`` named ``recorded``.

    ``recorded`` (read from the model file) is only compared with the names of the files in
    ``scripts_dir``; it never becomes part of a path.

    Raises:
        FileNotFoundError: ``script`` is not a ``.py`` file, or no script of ``scripts_dir`` has that name.
    """
    if script is not None:
        if not script.is_file() or script.suffix != ".py":
            raise FileNotFoundError(f"{script} is not a python file")
        return script
    known = {path.stem: path for path in scripts_dir.glob("*.py") if path.name != "__init__.py"}
    if recorded not in known:
        raise FileNotFoundError(
            f"the model was saved by {recorded!r}, which is not a script in {scripts_dir}; name its file with --script"
        )
    return known[recorded]


def load_script(path: Path) -> ModuleType:
    """Import the script at ``path`` as a module (its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location(f"cleanrl_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_options(options: list[str], evaluate) -> dict:
    """``["epsilon=0.05", "deterministic=false"]`` -> keyword arguments of ``evaluate``.

    A value is read as the type of the option's default in ``evaluate``'s signature: a bool
    from ``true``/``false``/``yes``/``no``/``1``/``0`` (any case), a number from a number, a
    probability (``epsilon``) in [0, 1]; an option without a typed default takes a Python
    literal, or else the text.

    Raises:
        ValueError: (one line) an option without ``=``, a name ``evaluate`` does not take, or a
            value that is not of the option's type.
    """
    parameters = inspect.signature(evaluate).parameters
    fixed = {"model_path", "eval_episodes", "options", "env_id", "capture_video", "video_dir", "seed", "device"}
    allowed = [name for name, p in parameters.items() if name not in fixed and p.kind != p.VAR_KEYWORD]
    booleans = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    kwargs = {}
    for option in options:
        name, sep, text = option.partition("=")
        if not sep:
            raise ValueError(f"{option!r} is not NAME=VALUE")
        if name not in allowed:
            raise ValueError(f"this script's evaluate takes no option {name!r}; it takes: {', '.join(allowed) or 'none'}")
        default = parameters[name].default
        if isinstance(default, bool):
            if text.lower() not in booleans:
                raise ValueError(f"{name} takes true or false, got {text!r}")
            kwargs[name] = booleans[text.lower()]
        elif isinstance(default, (int, float)):
            try:
                kwargs[name] = type(default)(text) if isinstance(default, float) else int(text)
            except ValueError:
                raise ValueError(f"{name} takes a number, got {text!r}") from None
            if name == "epsilon" and not 0.0 <= kwargs[name] <= 1.0:
                raise ValueError(f"epsilon is a probability in [0, 1], got {text}")
        else:
            try:
                kwargs[name] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                kwargs[name] = text
    return kwargs


def main(argv: list[str] | None = None) -> np.ndarray:
    parser = argparse.ArgumentParser(prog="python -m cleanrl_utils.enjoy", description=__doc__.split("\n")[0])
    parser.add_argument(
        "model", type=Path, help="a .cleanrl_model file, a run directory holding one, or a checkpoint file (step_N.pt)"
    )
    parser.add_argument(
        "--script",
        type=Path,
        default=None,
        help="the script file to evaluate with (default: the one in cleanrl/ the model names)",
    )
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes to run (default 10)")
    parser.add_argument("--env-id", default=None, help="environment; the one the model was trained on by default")
    parser.add_argument("--seed", type=int, default=None, help="seed of the evaluation env (default: training seed + 100000)")
    parser.add_argument("--capture-video", action="store_true", help="record every episode into --video-dir")
    parser.add_argument("--video-dir", default="videos-enjoy", help="where videos go (default videos-enjoy)")
    parser.add_argument("--device", default="cpu", help="torch device of the network (default cpu)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an option of the script's evaluate(), e.g. epsilon=0.05 or deterministic=False",
    )
    parser.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="OUT",
        help=f"with a checkpoint: also write its networks as the model file OUT (a new file, e.g. step_N{MODEL_SUFFIX})",
    )
    args = parser.parse_args(argv)
    if args.eval_episodes < 1:
        fail("--eval-episodes", f"must be positive, got {args.eval_episodes}")
    if args.seed is not None and not 0 <= args.seed < 2**31:
        fail("--seed", f"must be in [0, 2**31), got {args.seed}")
    if args.capture_video:
        try:
            Path(args.video_dir).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            fail("--video-dir", f"cannot create {args.video_dir!r}: {error.strerror or error}")
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        fail("--device", str(error).splitlines()[0])
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("--device", f"{args.device!r}: this torch has no CUDA device")
    try:
        given = find_model(args.model)
        content = read_file(given, ("model", "checkpoint"))
        from_checkpoint = content["kind"] == "checkpoint"
        if from_checkpoint:
            content = model_of_checkpoint(content)
    except (FileNotFoundError, FileRefused) as error:
        fail("model", str(error))
    if not from_checkpoint:  # a model file: evaluated as it is
        if args.export is not None:
            fail("--export", f"{given} is a model file already; --export takes a checkpoint")
        return _evaluate(args, given, given, content["script"])
    if args.export is not None and (args.export.exists() or args.export.is_symlink()):
        fail("--export", f"{args.export} exists; give a new file")
    with tempfile.TemporaryDirectory(prefix="cleanrl-enjoy-") as folder:  # a checkpoint's networks as a model file
        model = args.export or Path(folder) / f"{given.stem}{MODEL_SUFFIX}"
        try:
            write_content(model, content)
        except WriteFailed as error:
            fail("--export", str(error))
        if args.export is not None:
            print(f"model written to {model}", flush=True)
        return _evaluate(args, given, model, content["script"])


def _evaluate(args: argparse.Namespace, given: Path, model: Path, recorded: str) -> np.ndarray:
    """Evaluate the model file ``model`` (``given``, or made from the checkpoint ``given``) with the script
    :func:`script_file` picks for the ``recorded`` name; print and return the returns."""
    try:
        module = load_script(script_file(recorded, args.script))
    except FileNotFoundError as error:
        fail("--script", str(error))
    try:
        options = parse_options(args.option, module.evaluate)
    except ValueError as error:
        fail("--option", str(error))
    try:
        returns = module.evaluate(
            str(model),
            args.eval_episodes,
            env_id=args.env_id,
            capture_video=args.capture_video,
            video_dir=args.video_dir,
            seed=args.seed,
            device=args.device,
            **options,
        )
    except FileRefused as error:  # named as given, not as the temporary model file of a checkpoint
        fail("model", str(error).replace(str(model), str(given)))
    except OptionRefused as error:  # eval_agent=5 for a two-agent env, ...
        fail("--option", str(error))
    except ModuleNotFoundError as error:  # the model's env needs an extra (dm_control's ids: shimmy)
        fail("--env-id" if args.env_id else "model", str(error))
    except Exception as error:  # an --env-id whose spaces do not fit the model's networks
        if args.env_id is None:
            raise
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        fail("--env-id", f"{args.env_id} does not fit the model ({type(error).__name__}: {reason})")
    print(
        f"{Path(module.__file__).name}, {given}: {args.eval_episodes} episodes, "
        f"return {returns.mean():.2f} ± {returns.std():.2f}"
    )
    return returns


if __name__ == "__main__":
    main()

"""Evaluate a saved model of any script: ``python -m cleanrl_utils.enjoy runs/<run> --eval-episodes 10``.

The model file names the script that saved it (``save_model`` stores ``"script"``); this
command loads that script's file by path (``cleanrl/<script>.py``, so no script is imported as
a package module and none imports this one, see DESIGN.md) and calls its ``evaluate``, which
builds the script's own evaluation environment and acts with its evaluation policy (greedy or
deterministic by default; see the README's "Saved models and evaluation"). Prints the mean ±
std of the episodic returns and, with ``--capture-video``, records every episode.

Script-specific evaluation options (``epsilon`` of the DQN family, ``deterministic`` of the
policy-gradient scripts, ...) are passed with ``--option NAME=VALUE`` and checked against the
script's ``evaluate`` signature.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import numpy as np

from cleanrl_utils.cli import fail

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "cleanrl"
"""Where the scripts live (``cleanrl/`` beside ``cleanrl_utils/``)."""


def find_model(path: Path) -> Path:
    """The model file at ``path``, or the only ``*.cleanrl_model`` in the run directory ``path``.

    Raises:
        FileNotFoundError: nothing there, or a directory without exactly one model file.
    """
    if path.is_file():
        return path
    if path.is_dir():
        models = sorted(path.glob("*.cleanrl_model"))
        if len(models) == 1:
            return models[0]
        raise FileNotFoundError(
            f"{path} holds {len(models)} .cleanrl_model files; give the file itself"
            if models
            else f"{path} holds no .cleanrl_model file (train with --save-model)"
        )
    raise FileNotFoundError(f"no such file or directory: {path}")


def saved_script(model: Path) -> str:
    """The name of the script that saved ``model`` (``"ppo"``).

    Raises:
        ValueError: the file is not a model saved by a cleanrl script.
    """
    import torch

    try:
        content = torch.load(model, map_location="cpu", weights_only=True)
    except Exception as error:  # not a torch file, or one with objects weights_only refuses
        raise ValueError(f"{model} is not a model saved by a cleanrl script ({type(error).__name__})") from None
    if not isinstance(content, dict) or not isinstance(content.get("script"), str) or "model" not in content:
        raise ValueError(f"{model} is not a model saved by a cleanrl script")
    return content["script"]


def load_script(script: str, scripts_dir: Path = SCRIPTS_DIR) -> ModuleType:
    """Import ``{scripts_dir}/{script}.py`` by path (its ``__main__`` block does not run).

    Raises:
        FileNotFoundError: no such script.
    """
    path = scripts_dir / f"{script}.py"
    if not path.is_file():
        raise FileNotFoundError(f"the model was saved by {script}.py, which is not in {scripts_dir}")
    spec = importlib.util.spec_from_file_location(f"cleanrl_script_{script}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_options(options: list[str], evaluate) -> dict:
    """``["epsilon=0.05", "deterministic=False"]`` -> keyword arguments of ``evaluate``.

    Values are Python literals (numbers, True/False, None, quoted strings); anything else is
    taken as a string.

    Raises:
        ValueError: an option without ``=``, or a name ``evaluate`` does not take.
    """
    parameters = inspect.signature(evaluate).parameters
    fixed = {"model_path", "eval_episodes", "env_id", "capture_video", "video_dir", "seed", "device"}
    allowed = [name for name in parameters if name not in fixed]
    kwargs = {}
    for option in options:
        name, sep, text = option.partition("=")
        if not sep:
            raise ValueError(f"{option!r} is not NAME=VALUE")
        if name not in allowed:
            raise ValueError(f"this script's evaluate takes no option {name!r}; it takes: {', '.join(allowed) or 'none'}")
        try:
            kwargs[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            kwargs[name] = text
    return kwargs


def main(argv: list[str] | None = None) -> np.ndarray:
    parser = argparse.ArgumentParser(prog="python -m cleanrl_utils.enjoy", description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path, help="a .cleanrl_model file, or a run directory holding one")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes to run (default 10)")
    parser.add_argument("--env-id", default=None, help="environment; the one the model was trained on by default")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the evaluation env; the training seed + 100000 by default (as at the end of training)",
    )
    parser.add_argument("--capture-video", action="store_true", help="record every episode into --video-dir")
    parser.add_argument("--video-dir", default="videos-enjoy", help="where videos go (default videos-enjoy)")
    parser.add_argument("--device", default="cpu", help="torch device of the network (default cpu)")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a script-specific option of its evaluate(), e.g. epsilon=0.05 or deterministic=False",
    )
    args = parser.parse_args(argv)
    if args.eval_episodes < 1:
        fail("--eval-episodes", f"must be positive, got {args.eval_episodes}")
    try:
        model = find_model(args.model)
        script = saved_script(model)
        module = load_script(script)
    except (FileNotFoundError, ValueError) as error:
        fail("model", str(error))
    try:
        options = parse_options(args.option, module.evaluate)
    except ValueError as error:
        fail("--option", str(error))
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
    print(f"{script}.py, {model}: {args.eval_episodes} episodes, return {returns.mean():.2f} ± {returns.std():.2f}")
    return returns


if __name__ == "__main__":
    main()

"""Evaluation of saved models: a model file opened for the script that wrote it, and whole episodes played.

A script's ``evaluate()`` opens its model with :class:`Evaluation`, loads the weights into its own networks and
gives its policy to :meth:`Evaluation.run`; ``python -m cleanrl_utils.enjoy`` calls that ``evaluate()``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.files import FileRefused, load_module, read_file, script_name, untrusted_env_module
from cleanrl_utils.flags import RunArgs, check_run_args, saved_args
from cleanrl_utils.wrappers import SAME_STEP


class OptionRefused(ValueError):
    """An option of a script's ``evaluate()`` out of its range (``cleanrl_utils.enjoy`` says it in one line)."""


def run_episodes(envs: gym.vector.VectorEnv, policy: Callable, num_episodes: int, seed: int | None = None, on_done=None):
    """The returns, float64 ``[num_episodes]`` in the order the episodes ended, of ``policy`` (observations
    ``[num_envs, ...]`` -> actions) in ``envs``, a same-step-autoreset vector env of ``RecordEpisodeStatistics`` envs
    (or a vector ``RecordEpisodeStatistics``); ``seed`` of the first reset; ``on_done(ended [num_envs])`` after each
    step (to reset a recurrent state).

    Raises:
        ValueError: ``num_episodes`` is not positive.
    """
    if num_episodes <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    returns: list[float] = []
    obs, _ = envs.reset(seed=seed)
    while len(returns) < num_episodes:
        obs, _, terminations, truncations, infos = envs.step(np.asarray(policy(obs)))
        if on_done is not None:
            on_done(np.logical_or(terminations, truncations))
        for source in (infos, infos.get("final_info", {})):
            if "_episode" in source:
                returns.extend(np.asarray(source["episode"]["r"], dtype=np.float64)[source["_episode"]].tolist())
    return np.asarray(returns[:num_episodes], dtype=np.float64)


class Evaluation:
    """A model file (``--save-model``'s ``.cleanrl_model``) opened for evaluation by the script that wrote it.

    The file is checked to be this script's model, its saved arguments as flags are (against the script's ``Args``),
    and the evaluation env is made by the script's own ``make_env(env_id, 0, capture_video, video_dir,
    training=False, video_episodes=...)``: whole episodes, no replay log, a video of each episode if asked.

    ``env_id``: the model's when None (one that imports a module must be named); ``seed``: of the env and of a
    sampling policy (the training seed + 100000 when None); ``make_envs``: instead of ``make_env``, for a script whose
    envs are a vector env of their own (EnvPool, Procgen), ``make_envs(env_id, seed, capture_video, video_dir,
    training=False, video_episodes=..., **env_args)``; ``env_args``: saved arguments ``make_env`` takes too.
    Attributes: ``model`` (the file's content), ``envs``, ``seed``, ``device``.

    Raises:
        cleanrl_utils.files.FileRefused: one line: not this script's model, or saved arguments that make no env.
        SystemExit: status 2, one line naming the file and the field: a saved argument of another type or range.
    """

    def __init__(
        self,
        script_file: str,
        model_path: str,
        eval_episodes: int,
        make_env: Callable | None,
        env_id: Optional[str] = None,
        capture_video: bool = False,
        video_dir: str = "videos",
        seed: Optional[int] = None,
        device: str = "cpu",
        make_envs: Optional[Callable] = None,
        env_args: tuple[str, ...] = (),
    ):
        script = script_name(script_file)
        self.model = read_file(model_path, "model", script)
        maker = getattr(make_env or make_envs, "func", make_env or make_envs)  # a functools.partial's function
        args_class = getattr(maker, "__globals__", {}).get("Args")  # the script's own Args
        args_class = args_class if dataclasses.is_dataclass(args_class) else RunArgs
        args = saved_args(args_class, self.model["args"], model_path, ("env_id", "seed"))
        args.exp_name = args.exp_name or script
        check_run_args(args)
        self.model["args"] = {**self.model["args"], **dataclasses.asdict(args)}
        self.eval_episodes, self.device = eval_episodes, torch.device(device)
        self.seed = args.seed + 100_000 if seed is None else seed
        if env_id is None and untrusted_env_module(args.env_id):
            raise FileRefused(f"{model_path} records the env id {args.env_id!r}, which imports a module; name it: --env-id")
        env_id = env_id or args.env_id
        kwargs = {name: self.model["args"].get(name) for name in env_args}
        if not all(isinstance(value, (str, int, float, bool)) for value in kwargs.values()):
            raise FileRefused(f"{model_path} records {kwargs}, not plain values")
        kwargs.update(training=False, video_episodes=lambda episode: episode < eval_episodes)
        if make_envs is None:
            thunk = make_env(env_id, 0, capture_video, video_dir, **kwargs)
            self.envs = gym.vector.SyncVectorEnv([thunk], autoreset_mode=SAME_STEP)
            return
        try:
            self.envs = make_envs(env_id, self.seed, capture_video, video_dir, **kwargs)
        except ValueError as error:
            raise FileRefused(f"{model_path}: its saved {', '.join(env_args)} make no env: {error}") from None

    def saved_size(self, name: str, low: int, high: int) -> int:
        """The saved argument ``name``, an integer in ``[low, high]`` (a network size, checked before it is built);
        else :class:`~cleanrl_utils.files.FileRefused`, one line."""
        value = self.model["args"].get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise FileRefused(f"{self.model['path']}: its saved {name} must be in [{low}, {high}], got {value!r}")
        return value

    def load(self, module: torch.nn.Module, name: str) -> torch.nn.Module:
        """``module`` with the file's weights ``name`` (checked to be this network's), on the device, in eval mode."""
        load_module(module, name, self.model)
        return module.to(self.device).eval()

    def load_state(self, obj: Any, name: str) -> Any:
        """``obj`` (with ``load_state_dict``: observation statistics) given the file's entry ``name``; a missing entry,
        or one ``obj`` refuses, is :class:`~cleanrl_utils.files.FileRefused`, one line."""
        try:
            obj.load_state_dict(self.model[name])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise FileRefused(f"{self.model['path']}: its {name!r} is missing or does not fit: {error!s:.200}") from None
        return obj

    def run(self, policy: Callable, on_done: Optional[Callable] = None) -> np.ndarray:
        """The returns ``[eval_episodes]`` of ``policy`` (see :func:`run_episodes`); the envs are closed after."""
        try:
            with torch.inference_mode():
                return run_episodes(self.envs, policy, self.eval_episodes, seed=self.seed, on_done=on_done)
        finally:
            self.envs.close()

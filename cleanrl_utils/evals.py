"""Evaluation of saved models: a model file opened for the script that wrote it, and whole episodes played.

Each script's ``evaluate()`` opens its model with :class:`Evaluation` (the file is checked to be this script's
model; the evaluation env is built by the script's own ``make_env``), loads the weights into its own networks and
hands its evaluation policy to :meth:`Evaluation.run`. ``python -m cleanrl_utils.enjoy`` calls that ``evaluate()``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.env_checks import register_dm_control
from cleanrl_utils.files import FileRefused, load_module, read_file, script_name, untrusted_env_module
from cleanrl_utils.flags import RunArgs, check_run_args, check_saved_types, saved_arguments
from cleanrl_utils.wrappers import SAME_STEP


class OptionRefused(ValueError):
    """An option of a script's ``evaluate()`` out of its range (``cleanrl_utils.enjoy`` says it in one line)."""


def run_episodes(
    envs: gym.vector.VectorEnv,
    policy: Callable[[Any], Any],
    num_episodes: int,
    seed: int | None = None,
    on_done: Optional[Callable[[np.ndarray], None]] = None,
) -> np.ndarray:
    """The returns, float64 ``[num_episodes]`` in the order the episodes ended, of ``policy`` (observations
    ``[num_envs, ...]`` to actions ``[num_envs, ...]``) in ``envs``, a same-step-autoreset vector env whose envs
    record their episodes (``gym.wrappers.RecordEpisodeStatistics``). ``seed``: of the first reset (env i gets
    seed + i); ``on_done(ended [num_envs] bool)`` after each step (to reset a recurrent state).

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
        final = infos.get("final_info", {})
        if "_episode" in final:
            returns.extend(np.asarray(final["episode"]["r"], dtype=np.float64)[final["_episode"]].tolist())
        elif "_episode" in infos:  # a vector RecordEpisodeStatistics
            returns.extend(np.asarray(infos["episode"]["r"], dtype=np.float64)[infos["_episode"]].tolist())
    return np.asarray(returns[:num_episodes], dtype=np.float64)


class Evaluation:
    """A model file opened for evaluation by the script that wrote it.

    Args:
        script_file: the evaluating script's ``__file__``; the model must carry its name.
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: the whole episodes :meth:`run` plays.
        make_env: the script's ``make_env(env_id, idx, capture_video, video_dir, training=False,
            video_episodes=...)``: an evaluation env (whole episodes, no replay log) that records each episode.
        env_id: the env; the model's when None (one whose id imports a module must be named).
        capture_video, video_dir: record the evaluation episodes there.
        seed: of the env and of a sampling policy; the training seed + 100000 when None.
        device: of the networks.
        make_envs: instead of ``make_env``, for a script whose envs are one vector env of their own (EnvPool,
            Procgen): ``make_envs(env_id, seed, capture_video, video_dir, training=False, video_episodes=..., **env_args)``.
        env_args: names of saved arguments ``make_env`` (or ``make_envs``) also takes, so that the evaluation env is
            built as the training envs were (plain strings, numbers or booleans).

    Attributes:
        model: the file's content; envs: the evaluation vector env; seed, device: as resolved.

    Raises:
        cleanrl_utils.files.FileRefused: one line: not a model of this script, or saved arguments that make no env.
        SystemExit: status 2, one line naming the file and the field: a saved argument of the wrong type or range.
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
        args_class = getattr(make_env or make_envs, "__globals__", {}).get("Args")  # the script's own Args
        args_class = args_class if dataclasses.is_dataclass(args_class) else RunArgs
        values = check_saved_types(args_class, self.model["args"], self.model["path"], ("env_id", "seed"))
        init = {field.name for field in dataclasses.fields(args_class) if field.init}
        with saved_arguments(self.model["path"]):
            check_run_args(args_class(**{"exp_name": script, **{k: v for k, v in values.items() if k in init}}))
        self.model["args"] = {**self.model["args"], **values}
        self.eval_episodes, self.device = eval_episodes, torch.device(device)
        self.seed = self.model["args"]["seed"] + 100_000 if seed is None else seed
        recorded = self.model["args"]["env_id"]
        if env_id is None and untrusted_env_module(recorded):
            module = untrusted_env_module(recorded)
            raise FileRefused(f"{model_path} records the env id {recorded!r}, which imports {module!r}; name it: --env-id")
        env_id = env_id or recorded
        register_dm_control(env_id)
        env_kwargs = {name: self.model["args"].get(name) for name in env_args}
        for name, value in env_kwargs.items():
            if not isinstance(value, (str, int, float, bool)):
                raise FileRefused(f"{model_path} records {name} = {value!r}, not a plain value")
        episodes = dict(training=False, video_episodes=lambda episode: episode < eval_episodes, **env_kwargs)
        if make_envs is not None:
            try:
                self.envs = make_envs(env_id, self.seed, capture_video, video_dir, **episodes)
            except ValueError as error:
                raise FileRefused(f"{model_path}: its saved {', '.join(env_args)} make no env: {error}") from None
        else:
            thunk = make_env(env_id, 0, capture_video, video_dir, **episodes)
            self.envs = gym.vector.SyncVectorEnv([thunk], autoreset_mode=SAME_STEP)

    def saved_size(self, name: str, low: int, high: int) -> int:
        """The saved argument ``name``, an integer in ``[low, high]`` (a network size, checked before it is built).

        Raises:
            cleanrl_utils.files.FileRefused: one line: missing, not an integer, or out of range.
        """
        value = self.model["args"].get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise FileRefused(f"{self.model['path']}: its saved {name} must be in [{low}, {high}], got {value!r}")
        return value

    def load(self, module: torch.nn.Module, name: str) -> torch.nn.Module:
        """``module`` with the file's weights ``name`` (checked to be this network's), on the device, in eval mode."""
        load_module(module, name, self.model)
        return module.to(self.device).eval()

    def load_state(self, obj: Any, name: str) -> Any:
        """``obj`` (an object with ``load_state_dict``, such as observation statistics) given the file's entry ``name``.

        Raises:
            cleanrl_utils.files.FileRefused: one line: no such entry, or one ``obj`` refuses.
        """
        if not isinstance(self.model.get(name), dict):
            raise FileRefused(f"{self.model['path']} holds no {name!r}")
        try:
            obj.load_state_dict(self.model[name])
        except (ValueError, KeyError, TypeError) as error:
            raise FileRefused(f"{self.model['path']}: its {name!r} does not fit: {str(error)[:200]}") from None
        return obj

    def run(self, policy: Callable[[Any], Any], on_done: Optional[Callable[[np.ndarray], None]] = None) -> np.ndarray:
        """The returns ``[eval_episodes]`` of ``policy`` (see :func:`run_episodes`); the envs are closed after."""
        try:
            with torch.inference_mode():
                return run_episodes(self.envs, policy, self.eval_episodes, seed=self.seed, on_done=on_done)
        finally:
            self.envs.close()

"""Evaluation of saved models: open a model file for the script that wrote it, run whole episodes.

Each script's ``evaluate()`` opens its model file with :class:`Evaluation` (the file is checked
to be this script's model, the evaluation env is built with the script's own ``make_env``),
loads the weights into its own networks and hands its evaluation policy to
:meth:`Evaluation.run`. ``python -m cleanrl_utils.enjoy`` calls that ``evaluate()``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.legacy.cli import check_saved_types, saved_arguments
from cleanrl_utils.legacy.files import FileRefused, check_module, read_file, script_name, untrusted_env_module
from cleanrl_utils.legacy.run import RunArgs, check_run_args, episode_returns
from cleanrl_utils.legacy.vector import SAME_STEP, register_dm_control, vector_env


from cleanrl_utils.evals import OptionRefused  # noqa: E402  one class for both runtimes while they coexist


def run_episodes(
    envs,
    policy: Callable[[Any], np.ndarray],
    num_episodes: int,
    seed: int | None = None,
    on_done: Optional[Callable[[np.ndarray], None]] = None,
) -> np.ndarray:
    """Run ``policy`` in ``envs`` until ``num_episodes`` episodes have ended.

    Args:
        envs: a gymnasium vector env with same-step autoreset whose envs record their episodes
            (``gym.wrappers.RecordEpisodeStatistics``), or a vector ``RecordEpisodeStatistics``.
        policy: maps a batch of observations ``[num_envs, *obs_shape]`` to actions
            ``[num_envs, *action_shape]`` (numpy in, numpy or CPU tensor out).
        num_episodes: how many episodes to collect; must be positive.
        seed: seed of the first reset (sub-env i gets seed + i).
        on_done: called after each step with the bool mask ``[num_envs]`` of envs whose episode
            ended (terminated or truncated), e.g. to reset a recurrent policy's state.

    Returns:
        Episodic returns, float64 ``[num_episodes]``, in the order the episodes ended.

    Raises:
        ValueError: ``num_episodes`` is not positive.
    """
    if num_episodes <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    returns: list[float] = []
    obs, _ = envs.reset(seed=seed)
    while len(returns) < num_episodes:
        actions = policy(obs)
        obs, _, terminations, truncations, infos = envs.step(np.asarray(actions))
        if on_done is not None:
            on_done(np.logical_or(terminations, truncations))
        returns.extend(episode_returns(infos))
    return np.asarray(returns[:num_episodes], dtype=np.float64)


def _init_fields(args_class: type) -> set[str]:
    """The fields of a dataclass its constructor takes."""
    return {field.name for field in dataclasses.fields(args_class) if field.init}


class Evaluation:
    """A model file opened for evaluation by the script that wrote it.

    Args:
        script_file: the evaluating script's ``__file__``; the model must carry its name.
        model_path: a ``.cleanrl_model`` file written with ``--save-model``.
        eval_episodes: number of whole episodes :meth:`run` plays.
        make_env: the script's ``make_env(env_id, idx, capture_video, video_dir, training=False,
            video_episodes=...)``: an evaluation env plays whole episodes (no episodic life on
            Atari), keeps no replay log, and records a video of each of the ``eval_episodes``.
        env_id: environment; the one the model was trained on when None.
        capture_video: record the evaluation episodes into ``video_dir``.
        video_dir: where videos go.
        seed: seed of the evaluation env (and of a sampling policy); None means the training
            seed + 100000, as the evaluation at the end of training uses.
        device: torch device of the networks.
        make_envs: instead of ``make_env``, for a script whose envs are one vector env of their own
            (EnvPool's, Procgen's): ``make_envs(env_id, seed, capture_video, video_dir, training=False,
            video_episodes=..., **env_args)`` returns the evaluation vector env, seeded when made.
        env_args: names of the model's recorded arguments that ``make_env`` (``make_envs``) also takes, passed as
            keywords, so that the evaluation env is built as the training envs were (for one,
            ``("action_mask",)``: where the action mask comes from). Their values are plain
            strings, numbers or booleans; ``make_env`` checks them.

    Attributes:
        model: the file's content (:func:`cleanrl_utils.legacy.files.read_file`).
        envs: the evaluation vector env (one env, same-step autoreset).
        seed, device: as resolved.

    Raises:
        cleanrl_utils.legacy.files.FileRefused: (one line) not a model file of this script.
        SystemExit: (status 2, one line naming the file and the field) a saved argument of the wrong type
            or out of its range (checked as the flag is: :meth:`_checked_args`).
    """

    def __init__(
        self,
        script_file: str,
        model_path: str,
        eval_episodes: int,
        make_env: Callable,
        env_id: Optional[str] = None,
        capture_video: bool = False,
        video_dir: str = "videos",
        seed: Optional[int] = None,
        device: str = "cpu",
        make_envs: Optional[Callable] = None,
        env_args: tuple[str, ...] = (),
    ):
        self.model = read_file(model_path, "model", script_name(script_file))
        self.model["args"] = self._checked_args(make_env or make_envs, script_name(script_file))
        self.eval_episodes = eval_episodes
        self.seed = self.model["args"]["seed"] + 100_000 if seed is None else seed
        self.device = torch.device(device)
        recorded = self.model["env_id"] = self.model["args"]["env_id"]
        if env_id is None and untrusted_env_module(recorded):  # "module:Env-v0" would import module
            raise FileRefused(
                f"{self.model['path']} records the env id {recorded!r}, which imports the module "
                f"{untrusted_env_module(recorded)!r}; name it yourself to allow that (enjoy: --env-id {recorded})"
            )
        env_id, video_episodes = env_id or self.model["env_id"], lambda episode: episode < eval_episodes
        register_dm_control(env_id)  # a fresh process (the evaluation tool) has not registered the dm_control ids
        recorded_args = {name: self.model["args"].get(name) for name in env_args}
        for name, value in recorded_args.items():
            if not isinstance(value, (str, int, float, bool)):
                raise FileRefused(f"{self.model['path']} records {name} = {value!r}, not a plain value")
        if make_envs is not None:  # EnvPool's or Procgen's envs: one vector env, seeded when made
            try:
                self.envs = make_envs(
                    env_id, self.seed, capture_video, video_dir, training=False, video_episodes=video_episodes, **recorded_args
                )
            except ValueError as error:  # the recorded arguments make no env (a level count out of range, ...)
                raise FileRefused(f"{self.model['path']}: its saved {', '.join(env_args)} make no env: {error}") from None
        else:
            env_fn = make_env(
                env_id, 0, capture_video, video_dir, training=False, video_episodes=video_episodes, **recorded_args
            )
            self.envs: gym.vector.VectorEnv = vector_env([env_fn], "sync", SAME_STEP)

    def _checked_args(self, make_env: Callable, script: str) -> dict:
        """The model's saved arguments, checked as flags are: each of its field's type in the script's ``Args``
        (found beside ``make_env``), and the checks every script's flags get (:func:`cleanrl_utils.legacy.run.check_run_args`).

        Raises:
            SystemExit: (status 2, one line ``error: <file>: its saved <field> ...``) a value of another type or
                out of its range, or a missing ``env_id`` or ``seed`` (all evaluation needs of the run's names).
        """
        path, saved = self.model["path"], self.model.get("args")
        args_class = getattr(make_env, "__globals__", {}).get("Args")  # the Args of the script that defines make_env
        if args_class is None or not dataclasses.is_dataclass(args_class):  # a script without Args: the run's own checks
            args_class = RunArgs
        values = check_saved_types(args_class, saved, path, required=("env_id", "seed"))
        known = {"exp_name": script, **{name: value for name, value in values.items() if name in _init_fields(args_class)}}
        with saved_arguments(path):
            check_run_args(args_class(**known))
        return {**saved, **values}

    def saved_size(self, name: str, low: int, high: int) -> int:
        """The model's saved argument ``name``, an integer in ``[low, high]`` (a size a network is built with,
        checked before it is built: a forged 10**7 quantiles or atoms would allocate gigabytes first).

        Raises:
            FileRefused: (one line) it is missing, not an integer, or out of range.
        """
        value = self.model["args"].get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise FileRefused(f"{self.model['path']}: its saved {name} must be in [{low}, {high}], got {value!r}")
        return value

    def load(self, module: torch.nn.Module, name: str) -> torch.nn.Module:
        """``module`` with the file's weights ``name`` (checked to be this network's), on the device, in eval mode."""
        check_module(module, name, self.model)
        return module.to(self.device).eval()

    def load_state(self, obj: Any, name: str) -> Any:
        """``obj`` (with a ``load_state_dict``, such as an observation normalisation) given the file's entry ``name``.

        Raises:
            FileRefused: (one line naming the file and the entry) the file holds no such entry, or ``obj`` refuses it
                (its ``load_state_dict`` raised ``ValueError``, ``KeyError`` or ``TypeError``).
        """
        path = self.model.get("path", "the file")
        if not isinstance(self.model.get(name), dict):
            raise FileRefused(f"{path} holds no {name!r}")
        try:
            obj.load_state_dict(self.model[name])
        except (ValueError, KeyError, TypeError) as error:
            raise FileRefused(f"{path}: its {name!r} does not fit: {str(error).splitlines()[0] if str(error) else error!r}")
        return obj

    def run(self, policy: Callable[[Any], Any], on_done: Optional[Callable[[np.ndarray], None]] = None) -> np.ndarray:
        """Episodic returns ``[eval_episodes]`` (float64) of ``policy`` (see :func:`run_episodes`); closes the envs."""
        try:
            with torch.inference_mode():
                return run_episodes(self.envs, policy, self.eval_episodes, seed=self.seed, on_done=on_done)
        finally:
            self.envs.close()

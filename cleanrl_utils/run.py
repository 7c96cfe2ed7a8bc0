"""Run plumbing every script shares: input checks, seeding, the run directory, trackers,
progress output, episode logging and model files.

None of this is algorithm logic; it is kept here so that each script reads as its algorithm.

Conventions (see DESIGN.md):

- run directory ``runs/{env_id}__{exp_name}__{seed}__{unix_time}/`` holding the TensorBoard
  events, ``args.json`` (the resolved arguments), videos and the saved model;
- TensorBoard tags ``charts/episodic_return``, ``charts/episodic_length``, ``charts/SPS``,
  ``charts/learning_rate`` and ``losses/<name>``;
- bad input stops before any work with one line on stderr naming the flag, exit status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import json
import os
import random
import re
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.cli import USAGE_ERROR, fail, require, safe_name  # noqa: F401  (re-exported)


def require_positive(args: Any, *names: str) -> None:
    """Fail on the first of the fields ``names`` of ``args`` that is not > 0.

    Field ``num_envs`` is reported as flag ``--num-envs``.
    """
    for name in names:
        value = getattr(args, name)
        require(value > 0, flag_name(name), f"must be positive, got {value}")


def flag_name(field: str) -> str:
    """The command-line flag of an ``Args`` field: ``num_envs`` -> ``--num-envs``."""
    return "--" + field.replace("_", "-")


def check_env(
    env_id: str,
    action_spaces: tuple[type, ...],
    observation_spaces: tuple[type, ...],
    script: str,
    obs_ndim: int | None = None,
    bounded_actions: bool = False,
    id_suffix: str | None = None,
) -> tuple:
    """Check, before any work, that ``env_id`` exists and has spaces the script supports.

    Creates one environment to read its spaces, then closes it; returns
    ``(observation_space, action_space)``, e.g. to size a replay buffer before the run starts.

    Args:
        env_id: a gymnasium id such as ``"CartPole-v1"``.
        action_spaces: accepted ``gymnasium.spaces`` classes for the action space.
        observation_spaces: accepted classes for the observation space.
        script: the script's file name, used in the message.
        obs_ndim: if given, the number of dimensions observations must have (1: flat vectors).
        bounded_actions: require a 1-D Box action space with finite bounds (for scripts that
            rescale their actions into the bounds).
        id_suffix: if given, an unknown id is answered with suggestions among the ids ending
            with it only (the Atari scripts: ``"NoFrameskip-v4"``, so ``Breakout-v5`` gets
            ``BreakoutNoFrameskip-v4``), matched by spelling or else by the game's name.

    Raises:
        SystemExit: (status 2, one line on stderr) for an unknown id or an unsupported space.
    """
    import importlib

    import gymnasium as gym

    module, _, name = env_id.rpartition(":")
    if name not in gym.registry and not module:
        try:  # Atari ids are registered by ale-py, which only the Atari scripts import
            import ale_py

            gym.register_envs(ale_py)
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
        except ImportError:
            pass
    if module:  # "package.module:Env-v0": importing the module registers the env
        try:
            importlib.import_module(module)
        except ImportError as error:
            fail("--env-id", f"cannot import {module!r} to register {name!r}: {error}")
    if name not in gym.registry:
        candidates = [i for i in gym.registry if id_suffix is None or i.endswith(id_suffix)]
        close = difflib.get_close_matches(name, candidates, n=3)
        if id_suffix and not close:  # "Pong-v5", "ALE/Pong-v5" -> PongNoFrameskip-v4
            game = re.split(r"NoFrameskip|-v\d", name.removeprefix("ALE/"))[0].lower()
            close = [i for i in candidates if i[: -len(id_suffix)].lower() == game]
        suggestion = f"; did you mean {', '.join(close)}?" if close else ""
        if name.startswith("ALE/") or "NoFrameskip" in name:
            suggestion += " (Atari ids need the atari extra: pip install -e '.[atari]')"
        fail("--env-id", f"unknown environment {env_id!r}{suggestion}")
    try:
        env = gym.make(env_id)
    except Exception as error:  # a missing extra (ale-py, mujoco) or a broken env
        fail("--env-id", f"cannot create {env_id!r}: {type(error).__name__}: {error}")
    action_space, observation_space = env.action_space, env.observation_space
    env.close()
    accepted = " or ".join(space.__name__ for space in action_spaces)
    require(
        isinstance(action_space, action_spaces),
        "--env-id",
        f"{env_id} has action space {action_space}; {script} supports {accepted} only",
    )
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


def seed_everything(seed: int, torch_deterministic: bool) -> None:
    """Seed python's, numpy's and torch's global generators; ask cuDNN for determinism.

    On CPU, the same seed then gives the same numbers run after run.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


@dataclasses.dataclass
class Run:
    """A started run: its name, directory and TensorBoard writer.

    Attributes:
        name: ``{env_id}__{exp_name}__{seed}__{unix_time}``.
        directory: ``runs/<name>``; holds events, ``args.json``, videos and models.
        writer: a ``torch.utils.tensorboard.SummaryWriter`` on ``directory``; with
            ``--track`` its scalars are mirrored to Weights & Biases.
        tracked: whether a Weights & Biases run was started.
    """

    name: str
    directory: Path
    writer: Any
    tracked: bool

    @property
    def video_dir(self) -> Path:
        """Where ``--capture-video`` writes env 0's training episodes."""
        return self.directory / "videos"

    @property
    def wandb_id(self) -> str | None:
        """The W&B run's id (saved in checkpoints, so a resumed run continues it), None untracked."""
        if not self.tracked:
            return None
        import wandb

        return wandb.run.id if wandb.run is not None else None

    def close(self) -> None:
        """Flush and close the writer; upload videos and finish the W&B run if tracked."""
        self.writer.close()
        if self.tracked:
            import wandb

            for video in sorted(self.directory.glob("videos*/*.mp4")):  # training and evaluation
                wandb.log({f"{video.parent.name}/{video.stem}": wandb.Video(str(video), format="mp4")})
            wandb.finish()


def start_run(args: Any, runs_dir: str | os.PathLike = "runs", resume: dict | None = None) -> Run:
    """Create the run directory, save the resolved arguments, start TensorBoard (and W&B).

    Args:
        args: the script's ``Args`` dataclass; must have ``env_id``, ``exp_name``, ``seed``,
            ``track``, ``wandb_project_name`` and ``wandb_entity``.
        runs_dir: parent folder of run directories.
        resume: a checkpoint from :func:`cleanrl_utils.checkpoint.load_checkpoint` to continue:
            its run directory is reused, TensorBoard events logged after the checkpoint's
            ``global_step`` by the interrupted process are dropped (``purge_step``), so the
            curves continue without a fold, and the W&B run (``wandb_id``) is resumed.

    Returns:
        The started :class:`Run`. With ``args.track`` the W&B run is started first, with
        ``sync_tensorboard=True``, so every TensorBoard scalar reaches W&B under the same tag.
        Its files go to ``./wandb`` (or ``$WANDB_DIR``), never inside the run directory that
        W&B watches for TensorBoard events. ``WANDB_MODE=offline`` keeps the run on disk
        (``wandb sync`` uploads it later). Runs started in the same second get distinct
        directories: the later one takes the next free second in its name.
    """
    from torch.utils.tensorboard import SummaryWriter

    require(
        "/" not in args.exp_name and args.exp_name.strip() == args.exp_name != "",
        "--exp-name",
        f"{args.exp_name!r} must be a non-empty name without '/' or surrounding spaces",
    )
    config = dataclasses.asdict(args)
    if resume is not None:  # continue the checkpoint's run, in its directory
        directory = Path(resume["path"]).parent.parent
        name = directory.name
    else:
        Path(runs_dir).mkdir(parents=True, exist_ok=True)
        stamp = int(time.time())
        while True:  # a run started in the same second as another gets the next free second
            name = f"{safe_name(args.env_id)}__{args.exp_name}__{args.seed}__{stamp}"
            directory = Path(runs_dir) / name
            try:
                directory.mkdir()  # atomic: two runs never share a directory
                break
            except FileExistsError:
                stamp += 1
        (directory / "args.json").write_text(json.dumps(config, indent=2) + "\n")
    if args.track:
        import wandb

        wandb_id = resume.get("wandb_id") if resume is not None else None
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=config,
            name=name,
            save_code=True,
            **({"id": wandb_id, "resume": "allow"} if wandb_id else {}),
        )
    purge_step = resume["global_step"] + 1 if resume is not None else None
    writer = SummaryWriter(str(directory), purge_step=purge_step)
    print(f"run directory: {directory}" + (f" (resumed at step {resume['global_step']})" if resume else ""), flush=True)
    table = "\n".join(f"|{key}|{value}|" for key, value in config.items())
    writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
    return Run(name=name, directory=directory, writer=writer, tracked=args.track)


def log_episodes(writer: Any, infos: dict, global_step: int) -> list[float]:
    """Write the episodes that ended this step to TensorBoard and return their returns.

    Reads the statistics that ``gymnasium.wrappers.vector.RecordEpisodeStatistics`` puts in
    ``infos["episode"]`` (``"r"`` return, ``"l"`` length) for the envs flagged in
    ``infos["_episode"]``; tags ``charts/episodic_return`` and ``charts/episodic_length``.
    """
    if "_episode" not in infos:
        return []
    finished = infos["_episode"].nonzero()[0]
    returns = infos["episode"]["r"][finished].tolist()
    lengths = infos["episode"]["l"][finished].tolist()
    for episodic_return, episodic_length in zip(returns, lengths):
        writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        writer.add_scalar("charts/episodic_length", episodic_length, global_step)
    return returns


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
        self.start = time.perf_counter()
        self.last_print = self.start
        self.step = start_step
        self.printed_step = -1
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start_step, unit="step", file=self.stream, mininterval=0.5)

    def episodes(self, returns: Sequence[float]) -> None:
        """Add the returns of episodes that just ended."""
        self.returns.extend(returns)

    @property
    def mean_return(self) -> float:
        """Mean return of the recent episodes (nan before the first one ends)."""
        return float(np.mean(self.returns)) if self.returns else float("nan")

    def update(self, global_step: int) -> None:
        """Report that the run has reached ``global_step``; prints at most every interval."""
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.update(global_step - self.step)
            self.step = global_step
            if now - self.last_print >= 0.5:
                self.bar.set_postfix_str(f"return={self.mean_return:.1f}", refresh=False)
                self.last_print = now
            return
        self.step = global_step
        if now - self.last_print >= self.interval or global_step >= self.total:
            self.last_print = now
            self._line(now)

    def _line(self, now: float) -> None:
        self.printed_step = self.step
        sps = int((self.step - self.start_step) / max(now - self.start, 1e-9))
        percent = 100.0 * self.step / self.total
        recent = f"return (last {len(self.returns)}) {self.mean_return:.1f}" if self.returns else "no episode ended yet"
        print(
            f"step {self.step}/{self.total} ({percent:.0f}%) | SPS {sps} | {recent}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        """Close the bar, or print the final line if the last one printed is out of date."""
        if self.bar is not None:
            self.bar.close()
        elif self.printed_step != self.step:
            self._line(time.perf_counter())


def save_model(path: str | os.PathLike, script: str, args: Any, state_dict: dict) -> None:
    """Save a trained model with the metadata needed to load it back.

    The file holds tensors and plain values only (``torch.load(weights_only=True)`` reads it):
    ``{"script": script, "env_id": ..., "args": dataclasses.asdict(args), "model": state_dict}``.
    It is written to a temporary file and renamed, so it is never half-written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    content = {
        "script": script,
        "env_id": args.env_id,
        "args": dataclasses.asdict(args),
        "model": state_dict,
    }
    temporary = path.with_name(path.name + ".tmp")
    torch.save(content, temporary)
    os.replace(temporary, path)


def load_model(path: str | os.PathLike, script: str) -> dict:
    """Load a file written by :func:`save_model`, checking that ``script`` wrote it.

    Returns:
        The saved dictionary (``script``, ``env_id``, ``args``, ``model``).

    Raises:
        ValueError: the file is not a model saved by ``script``.
        FileNotFoundError: no file at ``path``.
    """
    content = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(content, dict) or "model" not in content:
        raise ValueError(f"{path} is not a model file saved by a cleanrl script")
    if content.get("script") != script:
        raise ValueError(
            f"{path} was saved by {content.get('script')!r}, not {script!r}; evaluate it with that script's evaluate()"
        )
    return content


def make_vector_env(env_fns: Sequence, env_mode: str = "sync", episode_statistics: bool = True):
    """Vectorise ``env_fns`` in one process (``"sync"``) or in subprocesses (``"async"``).

    Async subprocesses start from a ``forkserver`` (a fresh interpreter that imports the
    running script once), so ``env_fns`` must be picklable by cloudpickle (closures are).

    Without a display, rendering is set up headless (``SDL_VIDEODRIVER=dummy`` for pygame,
    ``MUJOCO_GL=egl`` for MuJoCo; variables already set are kept). Both modes use gymnasium's
    same-step autoreset: when a sub-env's episode ends, the
    observation returned is the first of the next episode and the real final observation is
    in ``infos["final_obs"][i]`` (flagged by ``infos["_final_obs"]``). Episode statistics are
    added by ``RecordEpisodeStatistics`` (``infos["episode"]``, ``infos["_episode"]``); pass
    ``episode_statistics=False`` when each env records its own (Atari: the game score, below
    episodic life and reward clipping), which the vector env then reports under the same keys.

    Raises:
        ValueError: ``env_mode`` is neither ``"sync"`` nor ``"async"``.
    """
    import gymnasium as gym

    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless rgb_array rendering, no SDL noise
        os.environ.setdefault("MUJOCO_GL", "egl")  # MuJoCo renders off-screen through EGL (no X server)
    same_step = gym.vector.AutoresetMode.SAME_STEP
    # each env records a replay log of its state, for checkpoints (cleanrl_utils/checkpoint.py)
    subprocess = env_mode == "async"
    env_fns = [functools.partial(_replayable, env_fn, index, subprocess) for index, env_fn in enumerate(env_fns)]
    if env_mode == "sync":
        envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=same_step)
    elif env_mode == "async":
        # subprocesses are forked from a fresh "forkserver" process, not from this one: a fork of a
        # process whose torch/OpenMP/OpenCV thread pools are running can crash the child (seen as
        # an EOFError on the worker's pipe in a long pytest process)
        envs = gym.vector.AsyncVectorEnv(env_fns, autoreset_mode=same_step, context="forkserver")
    else:
        raise ValueError(f"env_mode must be 'sync' or 'async', got {env_mode!r}")
    if episode_statistics:
        return gym.wrappers.vector.RecordEpisodeStatistics(envs)
    return _EpisodesFromFinalInfo(envs)


def _replayable(env_fn, index: int, subprocess: bool = False):
    """``env_fn()`` wrapped in a :class:`~cleanrl_utils.checkpoint.ReplayableEnv` with its index."""
    from cleanrl_utils.checkpoint import ReplayableEnv

    # in an async subprocess (started from a forkserver, not forked from the script), import the
    # module that defined env_fn first: what it registers on import (ale_py's game ids) is needed
    module = getattr(env_fn, "__module__", None)
    if subprocess and module and module != "__main__" and module not in sys.modules:
        try:
            importlib.import_module(module)
        except ImportError:  # loaded from a file under another name (cleanrl_utils.enjoy): nothing to redo
            pass
    return ReplayableEnv(env_fn(), index)


class _EpisodesFromFinalInfo(gym.vector.VectorWrapper):
    """Same-step autoreset puts the info of an episode's last step (with the ``episode`` statistics
    of a per-env ``RecordEpisodeStatistics``) under ``infos["final_info"]``; copy them to the top,
    where :func:`log_episodes` and the vector ``RecordEpisodeStatistics`` put them."""

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        final = infos.get("final_info")
        if final is not None and "_episode" in final:
            infos["episode"], infos["_episode"] = final["episode"], final["_episode"]
        return obs, rewards, terminations, truncations, infos


def real_next_obs(next_obs: Any, infos: dict) -> Any:
    """The real next observations of a vector step, ``[num_envs, *obs_shape]``.

    With same-step autoreset (see :func:`make_vector_env`), ``next_obs[i]`` of an env whose
    episode just ended is already the first observation of its next episode; the one that
    ended the episode is ``infos["final_obs"][i]``. This returns ``next_obs`` with those
    entries replaced (a copy when any are; ``next_obs`` itself otherwise), which is what a
    TD target or a truncation bootstrap must use as s'.

    Args:
        next_obs: the vector env's observations: an array, or for Dict / Tuple spaces a dict /
            tuple of arrays (each ``[num_envs, ...]``, replaced field by field).
        infos: the vector env's infos of the same step.
    """
    if "_final_obs" not in infos:
        return next_obs
    ended = np.flatnonzero(infos["_final_obs"])
    finals = [infos["final_obs"][i] for i in ended]

    def replace(batch: Any, values: list) -> Any:
        if isinstance(batch, dict):
            return {key: replace(field, [value[key] for value in values]) for key, field in batch.items()}
        if isinstance(batch, tuple):
            return tuple(replace(field, [value[j] for value in values]) for j, field in enumerate(batch))
        real = batch.copy()
        for i, value in zip(ended, values):
            real[i] = value
        return real

    return replace(next_obs, finals)

"""Checkpoints: what a run needs to continue exactly where it stopped, in tensors and plain data.

A checkpoint is one file written atomically (a temporary file renamed into place, so an
interrupted write never leaves a half-written checkpoint) and read with
``torch.load(..., weights_only=True)``: tensors, numbers, strings, lists, tuples and dicts
only. It holds whatever the script puts in (networks, optimisers, the global step, the
learning-rate schedule position, normalisation statistics, optionally the replay buffer) plus
what this module gathers:

- the random number generators of python, numpy's legacy global state and torch
  (:func:`rng_state`, :func:`set_rng_state`);
- the environments' states, as a replay log per env (:class:`ReplayableEnv`): the state of
  the base env's random generator at the last real reset and every reset/step call since.
  Replaying the log in a fresh env rebuilds the exact state of the env and of every wrapper
  in its stack (frame stacks, time limits, episode statistics, episodic-life bookkeeping),
  for any env whose dynamics depend only on its actions and its ``np_random`` (the classic
  control and MuJoCo tasks, and the ALE games without sticky actions that the Atari scripts
  take). An episode is replayed at most once, so restoring costs at most one episode of
  environment steps per env.

Sources: the format follows PyTorch's serialization notes ("Saving and loading a general
checkpoint"); the replay idea is the one of deterministic simulators, e.g. the ALE's own
``cloneState`` being a seed plus actions in early versions (Bellemare et al. 2013,
"The Arcade Learning Environment", JAIR 47).
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

FORMAT = 1
"""Version of the checkpoint layout; a file of another version is refused."""


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


def generator_state(generator: np.random.Generator) -> dict:
    """A numpy ``Generator``'s bit-generator state as plain data (ints, strings, dicts)."""
    return generator.bit_generator.state


def make_generator(state: dict) -> np.random.Generator:
    """A numpy ``Generator`` in the state returned by :func:`generator_state`.

    Raises:
        ValueError: the state names a bit generator numpy does not have.
    """
    try:
        bit_generator = getattr(np.random, state["bit_generator"])()
    except AttributeError:
        raise ValueError(f"unknown numpy bit generator {state['bit_generator']!r}") from None
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _plain(value: Any) -> Any:
    """``value`` (an action, a seed, reset options) as plain python data."""
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _unplain(value: Any) -> Any:
    """Inverse of :func:`_plain` (arrays come back with their dtype, values exactly)."""
    if isinstance(value, dict) and set(value) == {"ndarray", "dtype"}:
        return np.asarray(value["ndarray"], dtype=value["dtype"])
    if isinstance(value, dict):
        return {key: _unplain(item) for key, item in value.items()}
    return value


class ReplayableEnv(gym.Wrapper):
    """Record what is needed to rebuild this env's exact state: a replay log since the last real reset.

    Wrap the outermost layer of each env (``make_vector_env`` does, with the env's index).
    The log holds the base env's ``np_random`` state just before the base env's last reset
    (a "real" reset: an episodic-life wrapper's reset after a lost life is not one), and every ``reset``/``step`` call on this wrapper since, with its arguments. The base
    env's ``reset`` is observed by shadowing it on the instance; nothing else changes.

    Args:
        env: the env with all its wrappers.
        index: the env's index in its vector env (picks its log in :meth:`restore`).
    """

    def __init__(self, env: gym.Env, index: int = 0):
        super().__init__(env)
        self.index = index
        self._start: dict | None = None  # base env's np_random state just before the last real reset
        self._events: list = []
        self._reset_start: dict | None = None  # set by a real reset during the current call
        self._replay_start: dict | None = None  # while restoring: the generator state to reset with
        base = env.unwrapped
        original_reset = base.reset

        def observed_reset(*args, **kwargs):
            if self._replay_start is not None:  # restoring: the generator as it was at the recorded reset
                base.np_random = make_generator(self._replay_start)
                self._replay_start = None
            if self._reset_start is None:  # the first real reset of this call (a no-op reset may reset again)
                self._reset_start = generator_state(base.np_random)
            return original_reset(*args, **kwargs)

        base.reset = observed_reset  # the wrappers below call base.reset: an instance attribute wins

    def _record(self, event: list, call):
        self._reset_start = None
        result = call()
        if self._reset_start is not None:  # this call reset the base env: the log starts again here
            self._start, self._events = self._reset_start, []
        self._events.append(event)
        return result

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset as the wrapped env does, and record it."""
        return self._record(["reset", seed, options], lambda: self.env.reset(seed=seed, options=options))

    def step(self, action):
        """Step as the wrapped env does, and record the action."""
        recorded = action.copy() if isinstance(action, np.ndarray) else action  # the caller may reuse its array
        return self._record(["step", recorded], lambda: self.env.step(action))

    def replay_log(self) -> dict:
        """``{"start": generator state or None, "events": [["reset", seed, options] | ["step", action], ...]}``."""
        return {"start": self._start, "events": [_plain(event) for event in self._events]}

    def restore(self, logs: list[dict]):
        """Rebuild the state recorded in ``logs[self.index]`` by replaying it in this (fresh) env.

        Returns:
            ``(observation, info)`` of the last replayed call: the observation the run would
            act on next.

        Raises:
            ValueError: the log is empty (the env was never reset).
        """
        log = logs[self.index]
        events = log["events"]
        if not events:
            raise ValueError("empty replay log: the env was never reset")
        observation, info = None, {}
        for number, event in enumerate(events):
            if number == 0:  # the first call resets the base env: with the recorded generator state
                self._replay_start = log["start"]
            if event[0] == "reset":
                observation, info = self.reset(seed=event[1], options=_unplain(event[2]))
            else:
                observation, _, _, _, info = self.step(_unplain(event[1]))
        return observation, info


def envs_state(envs: gym.vector.VectorEnv) -> dict:
    """The replay logs of every sub-env of ``envs`` (sync or async), and the vector-level
    episode statistics when ``envs`` records them, as plain data."""
    state = {"logs": list(envs.unwrapped.call("replay_log"))}
    statistics = _episode_statistics(envs)
    if statistics is not None:
        state["episode_returns"] = torch.tensor(statistics.episode_returns)
        state["episode_lengths"] = torch.tensor(statistics.episode_lengths)
    return state


def restore_envs(envs: gym.vector.VectorEnv, state: dict) -> Any:
    """Replay every sub-env of a freshly made ``envs`` into the state saved by :func:`envs_state`.

    Returns:
        The batched observation ``[num_envs, ...]`` the run acts on next (the sub-envs'
        observations after their replay, stacked as the vector env stacks them).

    Raises:
        ValueError: the number of saved envs differs from ``envs.num_envs``.
    """
    logs = state["logs"]
    if len(logs) != envs.num_envs:
        raise ValueError(f"the checkpoint has {len(logs)} envs, this run {envs.num_envs}")
    results = envs.unwrapped.call("restore", logs)
    statistics = _episode_statistics(envs)
    if statistics is not None and "episode_returns" in state:
        statistics.episode_returns[:] = state["episode_returns"].numpy()
        statistics.episode_lengths[:] = state["episode_lengths"].numpy()
    observations = [observation for observation, _ in results]
    return gym.vector.utils.concatenate(
        envs.single_observation_space,
        observations,
        gym.vector.utils.create_empty_array(envs.single_observation_space, n=envs.num_envs),
    )


def _episode_statistics(envs):
    """The vector-level ``RecordEpisodeStatistics`` wrapper of ``envs``, if any."""
    layer = envs
    while isinstance(layer, gym.vector.VectorWrapper):
        if isinstance(layer, gym.wrappers.vector.RecordEpisodeStatistics):
            return layer
        layer = layer.env
    return None


def save_checkpoint(path: str | os.PathLike, script: str, args: Any, content: dict) -> Path:
    """Write ``content`` with the script's name, arguments and RNG states to ``path``, atomically.

    Args:
        path: the checkpoint file (its folder is created).
        script: the writing script's name (``"ppo"``); :func:`load_checkpoint` checks it.
        args: the run's ``Args`` dataclass (saved as a plain dict).
        content: tensors and plain data: ``global_step`` (int) and whatever the script needs
            (``"model"``, ``"optimizer"`` state dicts, ``"envs"`` from :func:`envs_state`, …).

    Returns:
        ``path`` as a ``Path``.
    """
    import dataclasses

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = {"format": FORMAT, "script": script, "args": dataclasses.asdict(args), "rng": rng_state(), **content}
    temporary = path.with_name(path.name + ".tmp")
    torch.save(checkpoint, temporary)
    with open(temporary, "rb") as file:
        os.fsync(file.fileno())
    os.replace(temporary, path)
    return path


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint with the highest global step in ``run_dir/checkpoints``, or None."""
    files = list(Path(run_dir, "checkpoints").glob("step_*.pt"))
    if not files:
        return None
    return max(files, key=lambda file: int(file.stem.removeprefix("step_")))


def load_checkpoint(path: str | os.PathLike, script: str) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` for ``script``.

    ``path`` may be a checkpoint file or a run directory (its latest checkpoint is taken).

    Raises:
        FileNotFoundError: no such file, or a run directory without checkpoints.
        ValueError: not a checkpoint, another format version, or written by another script.
    """
    path = Path(path)
    if path.is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no checkpoints (looked in {path / 'checkpoints'})")
        path = latest
    content = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(content, dict) or "format" not in content or "script" not in content:
        raise ValueError(f"{path} is not a cleanrl checkpoint")
    if content["format"] != FORMAT:
        raise ValueError(f"{path} has checkpoint format {content['format']}, this code reads {FORMAT}")
    if content["script"] != script:
        raise ValueError(f"{path} was written by {content['script']}.py, not {script}.py")
    content["path"] = str(path)
    return content


RESUMABLE_WITH_OTHER_VALUES = (
    "resume",
    "checkpoint_interval",
    "checkpoint_buffer",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "cuda",
    "torch_threads",
    "env_mode",
    "capture_video",
    "save_model",
    "eval_episodes",
)
"""Flags a resumed run may set differently from its checkpoint (left out, they keep the
checkpoint's values); every other flag comes from the checkpoint."""


def given_flags(argv: Sequence[str], fields: Sequence[str]) -> set[str]:
    """The ``Args`` fields whose flag appears in ``argv`` (``--name``, ``--name=value`` or ``--no-name``)."""
    tokens = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    return {
        name
        for name in fields
        if f"--{name.replace('_', '-')}" in tokens
        or f"--no-{name.replace('_', '-')}" in tokens
        or f"--{name}" in tokens
        or f"--no-{name}" in tokens
    }


def resume_args(args: Any, script: str, argv: Sequence[str] | None = None) -> tuple[Any, dict | None]:
    """With ``--resume``, the arguments of the checkpoint's run and the checkpoint; else ``(args, None)``.

    The resumed run continues with the checkpoint's arguments, except the flags in
    :data:`RESUMABLE_WITH_OTHER_VALUES` given on the command line, which take the given value
    (so a plain ``--resume`` keeps writing checkpoints at the run's ``--checkpoint-interval``,
    and ``--checkpoint-interval 0`` or ``--no-checkpoint-buffer`` turn them off). Any other
    flag given with a value other than the checkpoint's is refused, rather than silently ignored.

    Args:
        args: the parsed ``Args``.
        script: the script's name (``"ppo"``), checked against the checkpoint's.
        argv: the command-line arguments ``args`` were parsed from (default ``sys.argv[1:]``):
            which flags were given.

    Raises:
        SystemExit: (status 2, one line naming ``--resume`` or the flag) for a missing or
            foreign checkpoint, or a flag that contradicts it.
    """
    from cleanrl_utils.run import fail, flag_name

    if not args.resume:
        return args, None
    try:
        checkpoint = load_checkpoint(args.resume, script)
    except (OSError, ValueError, RuntimeError) as error:
        fail("--resume", str(error))
    saved = checkpoint["args"]
    fields = [field.name for field in dataclasses.fields(args)]
    unknown = sorted(set(saved) - set(fields))
    if unknown:
        fail("--resume", f"the checkpoint has arguments this {script}.py does not know: {', '.join(unknown)}")
    given = given_flags(sys.argv[1:] if argv is None else argv, fields)
    for name in fields:
        if name in RESUMABLE_WITH_OTHER_VALUES or name not in saved or name not in given:
            continue
        if getattr(args, name) != saved[name]:
            fail(
                flag_name(name),
                f"{getattr(args, name)!r} differs from the resumed run's {saved[name]!r}; "
                f"leave it out to continue the run as it was started",
            )
    values = {}
    for name in fields:
        if name == "resume" or name not in saved or (name in RESUMABLE_WITH_OTHER_VALUES and name in given):
            values[name] = getattr(args, name)
        else:
            values[name] = saved[name]
    return type(args)(**values), checkpoint


class Checkpointer:
    """When to write checkpoints, and a SIGTERM that writes one before the run exits.

    A checkpoint is due once ``global_step`` reaches the next multiple of ``interval`` (0:
    never), and always after SIGTERM (a spot instance reclaimed, a job scheduler's time
    limit): the handler only sets a flag; the script writes the checkpoint at its next safe
    point (the end of a rollout or of a step) and exits with status 143 (128 + SIGTERM).
    Files: ``{run_dir}/checkpoints/step_{global_step}.pt``; the ``keep`` most recent are kept.

    Args:
        run_dir: the run directory.
        script: the script's name, stored in the file.
        args: the run's ``Args``.
        interval: environment steps between checkpoints (0: only on SIGTERM).
        start_step: the global step the run starts from (a resumed run's).
        keep: how many checkpoint files to keep (older ones are deleted).
        writer: the run's TensorBoard writer, flushed before each checkpoint so that the
            events up to the checkpoint's step are on disk when the checkpoint is.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        script: str,
        args: Any,
        interval: int,
        start_step: int = 0,
        keep: int = 2,
        writer: Any = None,
    ):
        self.directory = Path(run_dir) / "checkpoints"
        self.script, self.args, self.interval, self.keep, self.writer = script, args, interval, keep, writer
        self.next_step = (start_step // interval + 1) * interval if interval > 0 else None
        self.stop_requested = False
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        self.stop_requested = True

    def due(self, global_step: int) -> bool:
        """Whether a checkpoint should be written now (the interval reached, or SIGTERM received)."""
        return self.stop_requested or (self.next_step is not None and global_step >= self.next_step)

    def save(self, global_step: int, content: dict) -> Path:
        """Write ``content`` (with ``global_step``) as ``step_{global_step}.pt``; prune old files; exit if asked.

        Raises:
            SystemExit: status 143 after writing, when SIGTERM was received.
        """
        if self.writer is not None:
            self.writer.flush()
        path = save_checkpoint(
            self.directory / f"step_{global_step}.pt", self.script, self.args, {**content, "global_step": global_step}
        )
        if self.interval > 0:
            while self.next_step <= global_step:
                self.next_step += self.interval
        files = sorted(self.directory.glob("step_*.pt"), key=lambda file: int(file.stem.removeprefix("step_")))
        for old in files[: -self.keep]:
            old.unlink()
        if self.stop_requested:
            print(f"SIGTERM: checkpoint written to {path}; resume with --resume {path.parent.parent}", flush=True)
            sys.exit(128 + signal.SIGTERM)
        return path

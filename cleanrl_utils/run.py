"""A started run: its directory and trackers, stop signals, faults, checkpoints, progress and the saved model.

``run = start_run(args, resumed)`` makes ``runs/{env_id}__{exp_name}__{seed}__{unix_time}/`` (TensorBoard events,
``args.json``, ``checkpoints/``, videos, the model). The script installs ``run.stop`` for its stop signals, opens
``with run.stop_on_fault(envs):`` around its loop, and calls the methods below where a reader sees them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import random
import secrets
import shlex
import shutil
import signal
import sys
import time
import warnings
from collections import deque
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils import checkpoint, files
from cleanrl_utils.faults import EnvFault, Fault, check_parameters, first_line, free_space
from cleanrl_utils.flags import fail
from cleanrl_utils.writes import check_tree, open_regular, write_atomic


def seed_everything(seed: int, torch_deterministic: bool) -> None:
    """Seed python's, numpy's and torch's global generators; ask cuDNN for determinism."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def start_run(args: Any, resumed: dict | None = None, runs_dir: str = "runs", record: bool = True) -> Run:
    """Make the run directory (resuming the checkpoint ``resumed``: check it and reopen it, dropping the events logged
    after the checkpoint) and lock it; start W&B (``--track``) and TensorBoard; seed; set torch's threads; pick the
    device. ``record`` False: a process of a run another one records (a rank but 0), which writes nothing.

    Raises:
        SystemExit: status 2, one line: no W&B API key; the directory cannot be made or written, holds a link, or is locked.
    """
    from torch.utils.tensorboard import SummaryWriter

    # multiprocessing's resource tracker ignores SIGINT and SIGTERM, not SIGHUP: started with SIGHUP held back, so
    # that a closed terminal's SIGHUP to the process group reaches this process, not the tracker of its env workers
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if not record:
        return Run(args, None, device, resumed)
    if args.track:  # logged in to W&B before the run directory is made: no API key is one line
        from cleanrl_utils.tracking import wandb_login

        wandb_login()
    config, directory = dataclasses.asdict(args), Path(resumed["path"]).parent.parent if resumed else None
    try:
        if resumed:
            check_tree(directory)  # a link planted in it would redirect a write
        else:
            Path(runs_dir).mkdir(parents=True, exist_ok=True)
            name, stamp = f"{args.env_id.replace('/', '-').replace(':', '-')}__{args.exp_name}__{args.seed}", int(time.time())
            while True:  # a run started in the same second as another takes the next free second
                directory = Path(runs_dir) / f"{name}__{stamp}"
                try:
                    directory.mkdir()
                    break
                except FileExistsError:
                    stamp += 1
            write_atomic(directory / "args.json", json.dumps(config, indent=2) + "\n")
        run = Run(args, directory, device, resumed)
    except OSError as error:  # a full or read-only disk, a link in the way
        fail("--resume" if resumed else "runs", f"cannot write in {directory or runs_dir}: {first_line(error)}")
    if args.track:
        import wandb

        again = {"id": resumed["wandb_id"], "resume": "allow"} if resumed and resumed.get("wandb_id") else {}
        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=config,
                   name=directory.name, save_code=True, **again)  # fmt: skip
    try:  # the events file's name ends at random: no link can be planted at it
        run.writer = SummaryWriter(str(directory), purge_step=resumed["global_step"] + 1 if resumed else None,
                                   filename_suffix=run.events_suffix)  # fmt: skip
        run.writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config.items()))
        run.writer.flush()
    except OSError as error:
        if not resumed:
            shutil.rmtree(directory, ignore_errors=True)
        fail("--resume" if resumed else "runs", f"cannot write in {directory}: {first_line(error)} ({free_space(directory)})")
    print(f"run directory: {directory}" + (f" (resumed at step {resumed['global_step']})" if resumed else ""), flush=True)
    return run


class _NoWriter:  # the writer of a run that records nothing: every SummaryWriter method does nothing
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class Run:
    """A started run: ``args``, ``directory``, ``writer`` (TensorBoard, mirrored to W&B with ``--track``), ``device``,
    ``resumed`` (the checkpoint it continues), ``last_checkpoint``, ``stop_signal`` (recorded by :meth:`stop`)."""

    def __init__(self, args: Any, directory: Path | None, device: torch.device, resumed: dict | None):
        self.args, self.directory, self.device, self.resumed, self.writer = args, directory, device, resumed, _NoWriter()
        self.records, self.envs, self.stop_signal = directory is not None, (), None
        self.events_suffix = f".{secrets.token_hex(4)}"  # the events file's name ends at random: no link planted at it
        self.video_dir, self.lock = str(directory / "videos") if self.records else "", self._lock() if self.records else None
        self.last_checkpoint = Path(resumed["path"]) if resumed else None
        self.step = self.start_step = self.printed_step = resumed["global_step"] if resumed else 0
        interval, n = args.checkpoint_interval, getattr(args, "num_envs", 1)  # the last step: whole rollouts or n-env steps
        self.next_checkpoint = (self.step // interval + 1) * interval if interval > 0 else None
        self.total = getattr(args, "num_iterations", 0) * getattr(args, "batch_size", 0) or args.total_timesteps // n * n
        self.returns: deque[float] = deque(maxlen=20)  # the last episodes' returns, for the progress lines
        self.start: float | None = None  # the clock starts at the loop's first step
        self.started = self.last_print = time.monotonic()  # the wall time the closing summary gives

    def _lock(self) -> Any:
        """``run.lock`` in the directory, locked for this process and holding its pid: one process per run."""
        while True:
            lock = open_regular(self.directory / "run.lock", "a+")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                fail("--resume", f"{self.directory} is in use by another process (pid {lock.read().strip() or '?'})")
            with contextlib.suppress(OSError):  # its holder removes it at the end of its run: lock the one there now
                if os.path.samestat(os.fstat(lock.fileno()), os.lstat(self.directory / "run.lock")):
                    lock.truncate(0)
                    lock.write(f"{os.getpid()}\n")
                    lock.flush()
                    return lock
            lock.close()

    # ---- stop signals and faults

    def stop(self, signum: int, frame: Any = None) -> None:
        """Stop signals' handler: the loop checkpoints, then :meth:`exit`; a second Ctrl-C exits 130 at once (a hung env)."""
        if signum == signal.SIGINT == self.stop_signal:
            print(self._line("stopped at once by a second Ctrl-C"), file=sys.stderr, flush=True)
            from cleanrl_utils.workers import kill_workers

            kill_workers(self.envs)
            os._exit(128 + signal.SIGINT)
        self.stop_signal = signum

    def _line(self, what: str) -> str:
        return f"{self.args.script}.py: {what}; last checkpoint: {self.last_checkpoint or 'none'}"

    @contextlib.contextmanager
    def stop_on_fault(self, *envs: gym.vector.VectorEnv) -> Iterator[None]:
        """Within the block, a :class:`~cleanrl_utils.faults.Fault`, or a worker of the async ``envs`` that died or did
        not answer within ``--env-timeout``, ends the run in one line (``<script>.py: <what>; last checkpoint:
        <file>``), exit 1. Any error kills the workers (they ignore stop signals); others keep their traceback."""
        self.envs = envs
        with warnings.catch_warnings():  # gymnasium's report of a worker's error: the line below says it
            warnings.filterwarnings("ignore", ".*ERROR: (Received the following error|Traceback|Raising the last)")
            try:
                yield
            except BaseException as error:
                from cleanrl_utils.workers import kill_workers, worker_fault  # loaded when an error ends the run

                what = str(error) if isinstance(error, Fault) else worker_fault(self.envs, error, self.args.env_timeout)
                kill_workers(self.envs)
                if what is None:
                    raise
                print(self._line(what), file=sys.stderr, flush=True)
                self.writer.close()
                self._unlock()
                raise SystemExit(1) from None

    # ---- checkpoints

    def checkpoint_due(self, global_step: int) -> bool:
        """Whether to checkpoint now: every ``--checkpoint-interval`` steps, at the last step, or after :meth:`stop`."""
        due = self.next_checkpoint is not None and global_step >= min(self.next_checkpoint, self.total)
        return self.stop_signal is not None or due

    def save_checkpoint(
        self, state: dict[str, Any], global_step: int, model: dict | None = None, **counters: Any
    ) -> Path | None:
        """Write ``{run_dir}/checkpoints/step_{global_step}.pt`` (``state`` captured, the ``counters`` the loop needs,
        the global generators) and keep the two newest; a run that does not record only captures ``state``. ``model``:
        what the script gives :meth:`save_model`, held as that file would hold it now (``enjoy --export`` writes it;
        its networks' tensors are those of ``state``, stored once).

        Raises:
            cleanrl_utils.faults.NonFinite, cleanrl_utils.faults.WriteFailed: nothing written, the previous ones kept.
        """
        self.writer.flush()
        content = {"state": checkpoint.capture(state), "rng": checkpoint.rng_state(), "global_step": global_step}
        wandb_run = sys.modules["wandb"].run if self.args.track else None
        content.update(counters=counters, wandb_id=wandb_run.id if wandb_run else None)
        if model is not None:
            records = {name: repr(value) for name, value in model.items() if isinstance(value, torch.nn.Module)}
            content["model"] = {"entries": checkpoint.model_content(model), "modules": records}
        modules = {name: value for name, value in state.items() if isinstance(value, torch.nn.Module)}
        check_parameters(modules, f"the checkpoint at step {global_step}")
        while self.next_checkpoint is not None and self.next_checkpoint <= global_step:
            self.next_checkpoint += self.args.checkpoint_interval
        if self.records:
            path = files.checkpoint_path(self.directory, global_step)
            self.last_checkpoint = files.write_file(path, "checkpoint", self.args, content, modules)
            for old in files.checkpoints(self.directory)[:-2]:
                old.unlink()
        return self.last_checkpoint

    def restore(self, state: dict[str, Any], steps_per_iteration: int | None = None) -> dict[str, Any]:
        """Load the resumed checkpoint into ``state``'s objects in place, and the global generators: the counters,
        ``"obs"`` and ``"missing"`` (:func:`cleanrl_utils.resume.restore_run`, loaded by a resumed run only).

        Raises:
            SystemExit: status 2, one line naming ``--resume`` (this process's events file removed first).
        """
        from cleanrl_utils.resume import restore_run

        return restore_run(self, state, steps_per_iteration)

    def exit(self, *envs: Any) -> NoReturn:
        """After :meth:`stop` and the checkpoint: say how to resume, close ``envs`` and the run, exit 128 + the signal."""
        from cleanrl_utils.resume import say_how_to_resume  # loaded when a run stops early

        say_how_to_resume(self)
        for vector_env in envs:
            vector_env.close()
        self.close()
        sys.exit(128 + self.stop_signal)

    # ---- logging and progress

    def log_episodes(self, global_step: int, infos: dict) -> None:
        """Log the episodes that ended in this vector step (``RecordEpisodeStatistics``' info, in ``final_info`` under
        same-step autoreset) with :meth:`log_episode`; a progress line every 10 s.

        Raises:
            cleanrl_utils.faults.EnvFault: statistics that are not ``RecordEpisodeStatistics``' numbers.
        """
        for source in (infos, infos.get("final_info")) if infos else ():
            if source and "_episode" in source:
                try:
                    ended = np.flatnonzero(source["_episode"])
                    returns = np.asarray(source["episode"]["r"], dtype=np.float64)[ended].tolist()
                    lengths = np.asarray(source["episode"]["l"], dtype=np.int64)[ended].tolist()
                except (TypeError, KeyError, IndexError, ValueError) as error:
                    raise EnvFault(f"the episode statistics (info 'episode') are not RecordEpisodeStatistics': {error}")
                for episodic_return, episodic_length in zip(returns, lengths):
                    self.log_episode(global_step, episodic_return, episodic_length)
        self.progress(global_step)

    def log_episode(self, global_step: int, episodic_return: float, episodic_length: int) -> None:
        """One ended episode as ``charts/episodic_return`` and ``charts/episodic_length`` (and in the progress lines)."""
        self.writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        self.writer.add_scalar("charts/episodic_length", episodic_length, global_step)
        self.returns.append(episodic_return)

    def progress(self, global_step: int | None = None, force: bool = False) -> None:
        """The run has reached ``global_step``: a progress line if 10 s have passed since the last one (``force``: now,
        if the last one is out of date)."""
        now = time.monotonic()
        if global_step is not None:
            self.start, self.start_step = (now, global_step) if self.start is None else (self.start, self.start_step)
            self.step = global_step
        if self.records and (now - self.last_print >= 10.0 or force and self.printed_step != self.step):
            recent = f"return (last {len(self.returns)}) {np.mean(self.returns):.1f}" if self.returns else "no episode yet"
            where = f"step {self.step}/{self.total} ({100 * self.step / self.total:.0f}%)"
            print(f"{where} | SPS {self.sps(self.step)} | {recent}", flush=True)
            self.last_print, self.printed_step = now, self.step

    def sps(self, global_step: int) -> int:
        """Environment steps per second of this process's loop, from its first step."""
        return 0 if self.start is None else int((global_step - self.start_step) / max(time.monotonic() - self.start, 1e-9))

    # ---- the model and the end

    def save_model(self, models: dict[str, Any], evaluate: Callable[..., np.ndarray]) -> Path | None:
        """Write ``{run_dir}/{exp_name}.cleanrl_model`` (``models``: :func:`~cleanrl_utils.checkpoint.model_content`) and log
        the score of the script's ``evaluate`` on it as ``eval/episodic_return`` (mean) and ``eval/episodic_return_std``.

        A fault (:class:`~cleanrl_utils.faults.WriteFailed`, :class:`~cleanrl_utils.faults.NonFinite`: nothing written;
        an env's in the evaluation) ends the run in one line, exit 1, as :meth:`stop_on_fault` says.
        """
        self.progress(force=True)
        if not self.records:
            return None
        with self.stop_on_fault():  # a fault writing or evaluating the model ends the run in one line, as in training
            modules = {name: value for name, value in models.items() if isinstance(value, torch.nn.Module)}
            check_parameters(models, "the model")
            content = checkpoint.model_content(models)
            path = files.model_path(self.directory, self.args.exp_name)
            files.write_file(path, "model", self.args, {**content, "global_step": self.step}, modules)
            print(f"model saved to {path}")
            videos = str(self.directory / "videos-eval")
            options = dict(env_id=self.args.env_id, device=str(self.device), capture_video=self.args.capture_video)
            returns = evaluate(str(path), self.args.eval_episodes, **options, video_dir=videos)
            self.writer.add_scalar("eval/episodic_return", returns.mean(), self.step)
            self.writer.add_scalar("eval/episodic_return_std", returns.std(), self.step)
            print(f"evaluation over {len(returns)} episodes: {returns.mean():.1f} ± {returns.std():.1f}")
        return path

    def summary(self) -> str:
        """The closing lines of a finished run: its last return and wall time, its files, and the commands (quoted for
        pasting) that plot and evaluate it."""
        saved, model = files.checkpoints(self.directory), files.model_path(self.directory, self.args.exp_name)
        held = ["TensorBoard events"] + [f"checkpoints {', '.join(f.name for f in saved)}"] * bool(saved)
        recent = f"mean return of its last {len(self.returns)} episodes {np.mean(self.returns or [0]):.2f}"
        wall = round(time.monotonic() - self.started)  # this process's, from start_run
        since = f" since the resume at step {self.resumed['global_step']}" if self.resumed else ""
        lines = [
            f"run finished at step {self.step}: {recent if self.returns else 'no episode ended'}; "
            f"wall time {wall // 3600}:{wall // 60 % 60:02d}:{wall % 60:02d}{since}",
            f"{self.directory} holds {', '.join(held + [f'the model {model.name}'] * model.exists())}",
            f"plot it: {shlex.join(['python', '-m', 'cleanrl_utils.plot', str(self.directory), '--out', 'plots'])}",
        ]
        if model.exists() or saved:
            what, target = ("evaluate it again", self.directory) if model.exists() else ("evaluate it", saved[-1])
            lines.append(f"{what}: {files.enjoy_command(target, '--eval-episodes', '10', env_id=self.args.env_id)}")
        return "\n".join(lines)

    def close(self) -> None:
        """Close the writer; print a finished run's summary; upload the videos to W&B; remove and release the lock."""
        self.progress(force=True)
        self.writer.close()
        if self.records and (not self.stop_signal or self.step >= self.total):  # a signal in the final evaluation too
            print(self.summary(), flush=True)
        if self.args.track and self.records:
            wandb = sys.modules["wandb"]
            for video in sorted(self.directory.glob("videos*/*.mp4")):
                wandb.log({f"{video.parent.name}/{video.stem}": wandb.Video(str(video), format="mp4")})
            wandb.finish()
        self._unlock()

    def _unlock(self) -> None:
        if self.lock is not None and not self.lock.closed:
            Path(self.directory, "run.lock").unlink(missing_ok=True)  # while still locked: no one else holds that file
            self.lock.close()

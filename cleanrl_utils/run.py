"""A started run: its directory and trackers, stop signals, faults, checkpoints, progress and the saved model.

A script uses it in a few visible calls (see ``cleanrl/ppo.py``)::

    run = start_run(args, resumed)  # run directory, TensorBoard (and W&B), seeding, torch threads, device
    signal.signal(signal.SIGTERM, run.stop)  # only records the signal: the loop checkpoints, then exits 143
    with run.stop_on_fault(envs):  # a Fault ends the run in one line; any error ends the env workers
        state = dict(agent=agent, optimizer=optimizer, envs=envs)  # what a checkpoint holds, declared once
        ...
        run.log_episodes(global_step, infos)  # episodic returns to TensorBoard, progress to the terminal
        if run.checkpoint_due(global_step):  # every --checkpoint-interval steps, and after a stop signal
            run.save_checkpoint(state, global_step, iteration=iteration)
        if run.stop_signal:
            run.exit(envs)  # closes the envs and the run; exit 143 after SIGTERM, 130 after Ctrl-C
    run.save_model({"agent": agent}, evaluate)  # with --save-model: the model file, then its evaluation

The run directory is ``runs/{env_id}__{exp_name}__{seed}__{unix_time}/``: TensorBoard events, ``args.json``,
``checkpoints/``, videos and the model. TensorBoard tags: ``charts/episodic_return``, ``charts/episodic_length``,
``charts/SPS``, ``charts/learning_rate``, ``losses/<name>``, and ``eval/episodic_return`` after ``--save-model``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import multiprocessing
import os
import random
import secrets
import shlex
import signal
import sys
import time
from collections import deque
from contextlib import contextmanager
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils import checkpoint
from cleanrl_utils.faults import EnvFault, Fault, check_parameters, describe_exit, first_line, free_space
from cleanrl_utils.files import SCRIPTS_DIR, checkpoint_path, checkpoints, model_path, untrusted_env_module, write_file
from cleanrl_utils.flags import fail
from cleanrl_utils.writes import UnsafePath, check_tree, open_regular, write_atomic

OPTIONAL_STATE = ("replay_buffer",)
"""Entries of a checkpoint state a checkpoint may lack (an off-policy run without ``--checkpoint-buffer``)."""


def seed_everything(seed: int, torch_deterministic: bool) -> None:
    """Seed python's, numpy's and torch's global generators; ask cuDNN for determinism."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def start_run(args: Any, resumed: dict | None = None, runs_dir: str = "runs", record: bool = True) -> Run:
    """Create (or, resuming, reopen and lock) the run directory; start TensorBoard (and W&B); seed; pick the device.

    Args:
        args: the checked ``Args`` from :func:`cleanrl_utils.flags.parse_args`.
        resumed: the checkpoint ``parse_args`` returned with ``--resume``: its directory is reused, and the events the
            interrupted process logged after the checkpoint are dropped (``purge_step``), so curves continue without a
            fold; the W&B run is resumed.
        record: False for a process that takes part in a run another one records (a rank other than 0): it seeds and
            picks the device, and its run writes nothing.

    Raises:
        SystemExit: status 2, one line: the directory cannot be created or written, holds a link, or another live
            process holds it.
    """
    from torch.utils.tensorboard import SummaryWriter

    # multiprocessing's resource tracker (async env workers and actors use it) ignores SIGINT and SIGTERM but not
    # SIGHUP: started here with SIGHUP held back, so that a closed terminal's SIGHUP to the group reaches this process
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if not record:
        return Run(args, None, _NoWriter(), device, resumed)
    created, flag = resumed is None, "--resume" if resumed else "runs"
    try:
        if created:
            Path(runs_dir).mkdir(parents=True, exist_ok=True)
            stamp = int(time.time())
            while True:  # a run started in the same second as another gets the next free second
                directory = (
                    Path(runs_dir)
                    / f"{args.env_id.replace('/', '-').replace(':', '-')}__{args.exp_name}__{args.seed}__{stamp}"
                )
                try:
                    directory.mkdir()
                    break
                except FileExistsError:
                    stamp += 1
        else:
            directory = Path(resumed["path"]).parent.parent
            check_tree(directory)  # a link planted in it would redirect a write
        lock = _lock(directory, flag)
        if created:
            write_atomic(directory / "args.json", json.dumps(dataclasses.asdict(args), indent=2) + "\n")
        if args.track:
            import wandb

            wandb_id = resumed.get("wandb_id") if resumed else None
            wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                sync_tensorboard=True,
                name=directory.name,
                config=dataclasses.asdict(args),
                save_code=True,
                **({"id": wandb_id, "resume": "allow"} if wandb_id else {}),
            )
        suffix = f".{secrets.token_hex(4)}"  # a random file name: no link can be planted at it
        purge = resumed["global_step"] + 1 if resumed else None
        writer = SummaryWriter(str(directory), purge_step=purge, filename_suffix=suffix)
        table = "\n".join(f"|{key}|{value}|" for key, value in dataclasses.asdict(args).items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        writer.flush()
    except OSError as error:  # a full or read-only disk, a link in the way
        if created and "directory" in locals():
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
        reason = str(error) if isinstance(error, UnsafePath) else error.strerror or str(error)
        fail(flag, f"cannot set up the run directory in {Path(runs_dir).resolve()}: {reason} ({free_space(runs_dir)})")
    run = Run(args, directory, writer, device, resumed)
    run.lock, run.events_suffix = lock, suffix
    print(f"run directory: {directory}" + (f" (resumed at step {resumed['global_step']})" if resumed else ""), flush=True)
    return run


def _lock(directory: Path, flag: str) -> Any:
    """``{directory}/run.lock``, locked for this process (two processes never write one run), holding its pid.

    Raises:
        SystemExit: status 2, one line naming ``flag``: another live process holds it.
    """
    while True:
        lock = open_regular(directory / "run.lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            fail(flag, f"{directory} is in use by another process (pid {lock.read().strip() or '?'}); one process per run")
        try:  # its holder removed it as its run ended, after this process opened it: lock the new one
            if os.path.samestat(os.fstat(lock.fileno()), os.stat(directory / "run.lock", follow_symlinks=False)):
                break
        except OSError:
            pass
        lock.close()
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


class _NoWriter:
    """The writer of a run that records nothing: every ``SummaryWriter`` method does nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class Run:
    """A started run (see the module docstring).

    Attributes:
        args: the run's ``Args``.
        directory: the run directory; None for a run that does not record (``records`` False).
        writer: a ``torch.utils.tensorboard.SummaryWriter`` on ``directory`` (mirrored to W&B with ``--track``).
        device: ``cuda`` when available and ``--cuda``, else ``cpu``.
        resumed: the checkpoint this run continues, or None.
        stop_signal: the signal :meth:`stop` recorded, or None.
        last_checkpoint: the last checkpoint written or resumed from, or None.
    """

    def __init__(self, args: Any, directory: Path | None, writer: Any, device: torch.device, resumed: dict | None):
        self.args, self.directory, self.writer, self.device, self.resumed = args, directory, writer, device, resumed
        self.records, self.lock, self.events_suffix, self.envs = directory is not None, None, "", ()
        self.video_dir = str(directory / "videos") if self.records else ""
        self.stop_signal: int | None = None
        self.last_checkpoint = Path(resumed["path"]) if resumed else None
        step = resumed["global_step"] if resumed else 0
        total = getattr(args, "num_iterations", 0) * getattr(args, "batch_size", 0) or args.total_timesteps
        self.progress = Progress(total, start_step=step, stream=sys.stdout if self.records else open(os.devnull, "w"))
        interval = args.checkpoint_interval
        self.next_checkpoint = (step // interval + 1) * interval if interval > 0 else None

    # ---- stop signals and faults

    def stop(self, signum: int, frame: Any = None) -> None:
        """A signal handler (SIGTERM: a scheduler's time limit, a container stop; SIGINT: Ctrl-C) that only records
        the signal: :meth:`checkpoint_due` is then true, and the script calls :meth:`exit` once the checkpoint is
        written. A second Ctrl-C stops at once (exit 130), killing the env workers: a hung sync env is left so."""
        if signum == signal.SIGINT and self.stop_signal == signal.SIGINT:
            print(self._line("stopped at once by a second Ctrl-C"), file=sys.stderr, flush=True)
            self._kill_workers()
            os._exit(128 + signal.SIGINT)
        self.stop_signal = signum

    def _line(self, what: str) -> str:
        return f"{self.args.script}.py: {what}; last checkpoint: {self.last_checkpoint or 'none'}"

    @contextmanager
    def stop_on_fault(self, *envs: gym.vector.VectorEnv) -> Iterator[None]:
        """Within the block, a :class:`~cleanrl_utils.faults.Fault`, an env worker of ``envs`` that died or did not
        answer within ``--env-timeout``, ends the run in one line on stderr, ``<script>.py: <what>; last checkpoint:
        <file>``, exit 1, with the TensorBoard events flushed. Any error kills the workers of ``envs`` (which ignore
        stop signals), so the process ends; other errors keep their traceback.
        """
        import warnings

        self.envs = envs
        with warnings.catch_warnings():  # gymnasium's report of a worker's error: the line below says it
            warnings.filterwarnings("ignore", ".*ERROR: (Received the following error|Traceback|Raising the last)")
            try:
                yield
            except BaseException as error:
                what = self._fault(error)
                self._kill_workers()
                if what is None:
                    raise
                print(self._line(what), file=sys.stderr, flush=True)
                self.writer.close()
                raise SystemExit(1) from None

    def _fault(self, error: BaseException) -> str | None:
        """What went wrong, said in one line, or None for an error that keeps its traceback."""
        if isinstance(error, Fault):
            return str(error)
        workers = [(i, p) for e in self.envs if isinstance(e, gym.vector.AsyncVectorEnv) for i, p in enumerate(e.processes)]
        if isinstance(error, multiprocessing.TimeoutError):
            pipes = [pipe for e in self.envs for pipe in getattr(e, "parent_pipes", [])]
            late = next((i for i, pipe in enumerate(pipes) if pipe is not None and not pipe.poll(0)), None)
            return f"env {late if late is not None else '?'}: no answer within --env-timeout {self.args.env_timeout:g} s"
        if isinstance(error, (EOFError, BrokenPipeError, ConnectionResetError)) and workers:
            for _, process in workers:
                process.join(1.0)
            index, dead = next(((i, p) for i, p in workers if p.exitcode is not None), (None, None))
            if dead is None:
                return f"lost contact with an env worker ({type(error).__name__})"
            return f"env {index}: its worker process (pid {dead.pid}) died: {describe_exit(dead.exitcode)}"
        return None

    def _kill_workers(self) -> None:
        for envs in self.envs:  # gymnasium's close would wait for a pending step of a dead worker: kill them all
            if isinstance(envs, gym.vector.AsyncVectorEnv) and not envs.closed:
                for process in envs.processes:
                    process.kill()
                    process.join()
                for pipe in envs.parent_pipes:
                    if pipe is not None:
                        pipe.close()
                envs.closed = True

    # ---- checkpoints

    def checkpoint_due(self, global_step: int) -> bool:
        """Whether to write a checkpoint now: ``--checkpoint-interval`` steps passed, or :meth:`stop` was called."""
        return self.stop_signal is not None or (self.next_checkpoint is not None and global_step >= self.next_checkpoint)

    def save_checkpoint(self, state: dict[str, Any], global_step: int, **counters: Any) -> Path | None:
        """Write ``{run_dir}/checkpoints/step_{global_step}.pt``: ``state`` captured, the counters (plain numbers and
        tensors the loop needs to continue: ``iteration=...``) and the global random generators; keep the two newest.
        A run that does not record captures ``state`` (so that the collectives of a distributed state take place).

        Raises:
            cleanrl_utils.faults.NonFinite: a network holds non-finite values (nothing is written).
            cleanrl_utils.faults.WriteFailed: the file could not be written (the previous ones are kept).
        """
        self.writer.flush()
        content = {"state": checkpoint.capture(state), "rng": checkpoint.rng_state(), "global_step": global_step}
        content.update(counters=counters, wandb_id=self._wandb_id())
        modules = {name: value for name, value in state.items() if isinstance(value, torch.nn.Module)}
        check_parameters(modules, f"the checkpoint at step {global_step}")
        while self.next_checkpoint is not None and self.next_checkpoint <= global_step:
            self.next_checkpoint += self.args.checkpoint_interval
        if not self.records:
            return None
        self.last_checkpoint = write_file(
            checkpoint_path(self.directory, global_step), "checkpoint", self.args, content, modules
        )
        for old in checkpoints(self.directory)[:-2]:
            old.unlink()
        for stale in self.last_checkpoint.parent.glob("*.tmp"):  # left by a process killed while writing
            stale.unlink(missing_ok=True)
        return self.last_checkpoint

    def restore(self, state: dict[str, Any], steps_per_iteration: int | None = None) -> dict[str, Any]:
        """Load the resumed checkpoint into ``state``'s objects, in place, and the global random generators.

        Args:
            steps_per_iteration: a rollout script's ``batch_size``: the saved ``global_step`` must be a multiple of
                it, and the saved ``iteration`` their quotient.

        Returns:
            The counters (``global_step`` and those given to :meth:`save_checkpoint`), ``"obs"``: the observation the
            restored envs act on next, and ``"missing"``: the entries of ``state`` the checkpoint lacks (only
            :data:`OPTIONAL_STATE` may be missing).

        Raises:
            SystemExit: status 2, one line naming ``--resume``: the checkpoint does not fit this run. The events file
                this process opened is removed first (its purge step would hide the interrupted run's events).
        """
        saved, step = self.resumed, self.resumed["global_step"]
        try:
            checkpoint.set_rng_state(saved["rng"])
            obs, missing = checkpoint.restore(state, saved)
            counters = {"global_step": step, **saved.get("counters", {})}
            problems = [f"it holds no {name!r}" for name in missing if name not in OPTIONAL_STATE]
            if step > self.args.total_timesteps or any(isinstance(v, int) and v < 0 for v in counters.values()):
                problems.append(f"its counters {counters} do not fit --total-timesteps {self.args.total_timesteps}")
            if steps_per_iteration and counters.get("iteration", step // steps_per_iteration) * steps_per_iteration != step:
                problems.append(f"its iteration does not make its global_step {step} ({steps_per_iteration} steps each)")
            if problems:
                raise ValueError(problems[0])
        except Exception as error:  # a damaged or forged file, or one of another network
            self.writer.close()
            for events in self.directory.glob(f"events.out.tfevents.*{self.events_suffix}"):
                events.unlink(missing_ok=True)
            fail("--resume", f"{saved['path']} does not fit this run: {first_line(error)}")
        return {**counters, "obs": obs, "missing": missing}

    def exit(self, *envs: Any) -> NoReturn:
        """End the run after :meth:`stop`, the checkpoint written: say where it is and how to resume, close ``envs``
        and the run, exit 128 + the signal (143 after SIGTERM, 130 after Ctrl-C)."""
        self.progress.close()
        name = signal.Signals(self.stop_signal).name
        print(f"{name}: checkpoint written to {self.last_checkpoint}; resume with: {self.resume_command()}", flush=True)
        for vector_env in envs:
            vector_env.close()
        self.close()
        sys.exit(128 + self.stop_signal)

    def resume_command(self) -> str:
        """``python <script> --resume <run dir>`` (with ``--env-id`` where the id imports a module), shell-quoted."""
        flags = ["--resume", str(self.directory)]
        if untrusted_env_module(self.args.env_id):
            flags += ["--env-id", self.args.env_id]
        if "TORCHELASTIC_RUN_ID" in os.environ:
            return f"the same torchrun command, with the script's flags {shlex.join(flags)}"
        return shlex.join(["python", sys.argv[0], *flags])

    def _wandb_id(self) -> str | None:
        if not self.args.track:
            return None
        import wandb

        return wandb.run.id if wandb.run is not None else None

    # ---- logging

    def log_episodes(self, global_step: int, infos: dict) -> None:
        """Write the returns and lengths of the episodes that ended in this vector step (the statistics of
        ``gym.wrappers.RecordEpisodeStatistics``, in ``infos["final_info"]`` under same-step autoreset, or in
        ``infos`` from a vector wrapper) to ``charts/episodic_return`` and ``charts/episodic_length``; report progress.

        Raises:
            cleanrl_utils.faults.EnvFault: statistics that are not ``RecordEpisodeStatistics``' numbers.
        """
        for source in (infos, infos.get("final_info")) if infos else ():
            if source and "_episode" in source:
                ended = np.flatnonzero(source["_episode"])
                try:
                    returns = np.asarray(source["episode"]["r"], dtype=np.float64)[ended].tolist()
                    lengths = np.asarray(source["episode"]["l"], dtype=np.int64)[ended].tolist()
                except (TypeError, KeyError, IndexError, ValueError) as error:
                    raise EnvFault(f"the episode statistics (info 'episode') are not RecordEpisodeStatistics': {error}")
                for episodic_return, episodic_length in zip(returns, lengths):
                    self.writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    self.writer.add_scalar("charts/episodic_length", episodic_length, global_step)
                self.progress.returns.extend(returns)
        self.progress.update(global_step)

    def sps(self, global_step: int) -> int:
        """Environment steps per second of this process's loop, from its first step."""
        return self.progress.sps(global_step)

    # ---- the model

    def save_model(self, models: dict[str, Any], evaluate: Callable[..., np.ndarray]) -> Path | None:
        """Write ``{run_dir}/{exp_name}.cleanrl_model`` (``models``: networks by name, and
        tensors and plain data evaluation needs) and score it with the script's ``evaluate``, logged as
        ``eval/episodic_return`` (mean) and ``eval/episodic_return_std``. A run that does not record writes nothing.

        Raises:
            cleanrl_utils.faults.WriteFailed, cleanrl_utils.faults.NonFinite: one line (no file is written).
        """
        self.progress.close()
        if not self.records:
            return None
        modules = {name: value for name, value in models.items() if isinstance(value, torch.nn.Module)}
        check_parameters(models, "the model")
        content = {name: value.state_dict() if name in modules else value for name, value in models.items()}
        path = write_file(
            model_path(self.directory, self.args.exp_name),
            "model",
            self.args,
            {**content, "global_step": self.progress.step},
            modules,
        )
        print(f"model saved to {path}")
        returns = evaluate(
            str(path),
            self.args.eval_episodes,
            env_id=self.args.env_id,
            capture_video=self.args.capture_video,
            video_dir=str(self.directory / "videos-eval"),
            device=str(self.device),
        )
        self.writer.add_scalar("eval/episodic_return", returns.mean(), self.progress.step)
        self.writer.add_scalar("eval/episodic_return_std", returns.std(), self.progress.step)
        print(f"evaluation over {len(returns)} episodes: {returns.mean():.1f} ± {returns.std():.1f}")
        return path

    def summary(self) -> str:
        """The closing lines of a finished run: its last step and recent return, what its directory holds, and the
        commands (shell-quoted) that plot it and evaluate its model or last checkpoint."""
        progress, directory = self.progress, self.directory
        recent = f"mean return of its last {len(progress.returns)} episodes {progress.mean_return:.2f}"
        saved, model = checkpoints(directory), model_path(directory, self.args.exp_name)
        held = ["TensorBoard events"] + [f"checkpoints {', '.join(f.name for f in saved)}"] * bool(saved)
        held += [f"the model {model.name}"] * model.exists()
        script = Path(sys.argv[0])
        options = ["--eval-episodes", "10"] if script.resolve() == SCRIPTS_DIR / script.name else ["--script", str(script)]
        lines = [
            f"run finished at step {progress.step}: {recent if progress.returns else 'no episode ended'}",
            f"{directory} holds {', '.join(held)}",
            f"plot it: {shlex.join(['python', '-m', 'cleanrl_utils.plot', str(directory), '--out', 'plots'])}",
        ]
        if model.exists() or saved:
            what = "evaluate it again" if model.exists() else "evaluate its last checkpoint"
            target = str(directory) if model.exists() else str(saved[-1])
            lines.append(f"{what}: {shlex.join(['python', '-m', 'cleanrl_utils.enjoy', target, *options])}")
        return "\n".join(lines)

    def close(self) -> None:
        """Close the progress output and the writer; print the summary of a finished run; upload the videos and
        finish W&B when tracked; remove and release the run's lock."""
        self.progress.close()
        self.writer.close()
        if self.records and not self.stop_signal:
            print(self.summary(), flush=True)
        if self.args.track and self.records:
            import wandb

            for video in sorted(self.directory.glob("videos*/*.mp4")):
                wandb.log({f"{video.parent.name}/{video.stem}": wandb.Video(str(video), format="mp4")})
            wandb.finish()
        if self.lock is not None and not self.lock.closed:
            Path(self.directory, "run.lock").unlink(missing_ok=True)  # removed while still locked
            self.lock.close()


class Progress:
    """Progress on the terminal: a tqdm bar on a terminal, else a line every ``interval`` seconds (step, steps per
    second, mean return of the last ``window`` episodes).

    Args:
        total: the run's environment steps.
        start_step: the step it starts from (a resumed run's checkpoint step).
        stream: where to write.
    """

    def __init__(self, total: int, start_step: int = 0, stream: Any = None, interval: float = 10.0, window: int = 20):
        self.total, self.start_step, self.step, self.interval = total, start_step, start_step, interval
        self.stream = stream or sys.stdout
        self.returns: deque[float] = deque(maxlen=window)
        self.start: float | None = None  # the clock starts at the loop's first step, not at set-up
        self.last_print = self.last_update = time.monotonic()
        self.printed_step, self.bar = -1, None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start_step, unit="step", file=self.stream, mininterval=0.5)

    @property
    def mean_return(self) -> float:
        """The mean return of the recent episodes (nan before one ends)."""
        return float(np.mean(self.returns)) if self.returns else float("nan")

    def sps(self, global_step: int) -> int:
        """Steps per second from the loop's first step to now (0 before it)."""
        now = time.monotonic()
        if global_step == self.step:
            self.last_update = now
        return 0 if self.start is None else int((global_step - self.start_step) / max(now - self.start, 1e-9))

    def update(self, global_step: int) -> None:
        """The run has reached ``global_step``; print at most every ``interval`` seconds."""
        now = self.last_update = time.monotonic()
        if self.start is None:
            self.start, self.start_step, self.last_print = now, global_step, now
        if self.bar is not None:
            self.bar.update(global_step - self.step)
            if now - self.last_print >= 0.5:
                self.bar.set_postfix_str(f"return={self.mean_return:.1f}", refresh=False)
                self.last_print = now
        elif now - self.last_print >= self.interval:
            self.last_print = now
            self.step = global_step
            self._line(now)
        self.step = global_step

    def _line(self, now: float) -> None:
        self.printed_step = self.step
        sps = int((self.step - self.start_step) / max(now - (self.start or now), 1e-9))
        recent = f"return (last {len(self.returns)}) {self.mean_return:.1f}" if self.returns else "no episode ended yet"
        print(
            f"step {self.step}/{self.total} ({100 * self.step / self.total:.0f}%) | SPS {sps} | {recent}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        """Close the bar, or print the last line if the one printed is out of date."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.printed_step != self.step:
            self._line(self.last_update)

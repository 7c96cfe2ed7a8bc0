"""Run one script inside a cloud job, keeping its run directory in S3 so that a retried job resumes.

``python -m cleanrl_utils.cloud_run [--bucket B --prefix P] [--grid-json GRID] -- python cleanrl/ppo.py ...``

1. With ``--grid-json`` (an array job), the command is entry ``$AWS_BATCH_JOB_ARRAY_INDEX`` of
   the grid ``{"command", "env_ids", "seeds", "extra"}``, rebuilt with the benchmark launcher's
   :func:`cleanrl_utils.benchmark.make_jobs`; the S3 prefix becomes ``P/<env>__seed<seed>``.
2. With a bucket, every object under ``s3://B/P/runs/`` is downloaded to ``./runs``. If a run
   directory there has a checkpoint (``runs/<name>/checkpoints/step_*.pt``), the command gets
   ``--resume runs/<name>`` (the one with the checkpoint written last, by global step).
3. The command runs as a child process. SIGTERM and SIGINT are forwarded to it: every script
   then writes a checkpoint and exits with status 143.
4. Every ``--sync-interval`` seconds, and once more after the child has exited, files of
   ``./runs`` that are new or changed (size or modification time) are uploaded to
   ``s3://B/P/runs/``; checkpoints the script pruned are deleted there too.
5. When the run exits 0, ``runs/.cloud_run_finished`` is written (and uploaded): a job started
   again with the same prefix then downloads it and exits 0 without running anything.
6. The exit status is the child's (128 + signal when a signal ended it), or 1 when the last
   upload failed after a successful run.

Only boto3 is needed (the ``cloud`` extra); ``AWS_ENDPOINT_URL`` points it elsewhere (tests).
Bad input (a grid whose entries are not lists of strings and integers, a control character in
one of them, ...) stops with one line ``error: <flag>: <message>``, exit status 2, before
anything runs. An object whose key would not lie inside ``./runs`` (``..``, an absolute path) is
skipped with a warning, and folders below ``./runs`` are made with
:func:`cleanrl_utils.cli.make_folder` (never through a link).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from cleanrl_utils.benchmark import make_jobs
from cleanrl_utils.cli import OneLineParser, fail, make_folder, require, safe_name

RUNS = Path("runs")
"""Run directories, relative to the working directory (the scripts' default)."""
FINISHED = ".cloud_run_finished"
"""Written in ``runs/`` (and uploaded) when the run exited 0: a later attempt of the job does nothing."""


def checkpoint_step(path: Path) -> int:
    """``runs/x/checkpoints/step_384.pt`` -> 384."""
    return int(path.stem.removeprefix("step_"))


def resumable_run(runs: Path = RUNS) -> Path | None:
    """The run directory under ``runs`` holding the checkpoint with the highest step, or None.

    A job's prefix holds its own run only, so there is at most one candidate in practice.
    """
    checkpoints = [p for p in runs.glob("*/checkpoints/step_*.pt") if re.fullmatch(r"step_\d+", p.stem)]
    if not checkpoints:
        return None
    return max(checkpoints, key=lambda p: (checkpoint_step(p), p.stat().st_mtime)).parent.parent


class S3Sync:
    """Mirror of ``./runs`` at ``s3://bucket/prefix/runs/``.

    Args:
        bucket: the bucket name.
        prefix: key prefix without a trailing ``/`` (``""`` for the bucket's root).
        client: a boto3 S3 client (default: ``boto3.client("s3")``).
        runs: the local runs folder.
    """

    def __init__(self, bucket: str, prefix: str, client: Any = None, runs: Path = RUNS):
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.bucket, self.client, self.runs = bucket, client, runs
        self.base = f"{prefix.strip('/')}/runs/" if prefix.strip("/") else "runs/"
        self.sent: dict[Path, tuple[int, int]] = {}  # file -> (size, mtime_ns) when uploaded
        self.lock = threading.Lock()

    def download(self) -> int:
        """Download every object under the prefix into ``runs``; returns how many files.

        An object whose key is not a relative path inside ``runs`` (``..`` or an empty part, an
        absolute path, a folder marker ending in ``/``, a control character) is skipped with a
        line on stderr.
        """
        count = 0
        self.runs.mkdir(exist_ok=True)
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.base):
            for item in page.get("Contents", []):
                relative = item["Key"][len(self.base) :]
                parts = relative.split("/")
                if not relative:  # the prefix itself (a folder marker)
                    continue
                if not relative.isprintable() or any(part in ("", ".", "..") for part in parts):
                    print(f"cloud_run: skipped s3 key {item['Key']!r}: not a file inside runs/", file=sys.stderr, flush=True)
                    continue
                target = self.runs.joinpath(*parts)
                make_folder(target.parent, self.runs)
                self.client.download_file(self.bucket, item["Key"], str(target))
                stat = target.stat()
                self.sent[target] = (stat.st_size, stat.st_mtime_ns)
                count += 1
        return count

    def upload(self) -> int:
        """Upload new or changed files of ``runs`` (a checkpoint's ``.tmp`` is skipped); delete pruned checkpoints.

        Returns:
            How many files were uploaded.
        """
        with self.lock:
            count = 0
            present = set()
            for path in sorted(p for p in self.runs.rglob("*") if p.is_file() and not p.name.endswith(".tmp")):
                present.add(path)
                try:
                    stat = path.stat()
                except FileNotFoundError:  # pruned while we walked
                    continue
                if self.sent.get(path) == (stat.st_size, stat.st_mtime_ns):
                    continue
                self.client.upload_file(str(path), self.bucket, self.base + path.relative_to(self.runs).as_posix())
                self.sent[path] = (stat.st_size, stat.st_mtime_ns)
                count += 1
            for path in [p for p in self.sent if p not in present and p.parent.name == "checkpoints"]:
                self.client.delete_object(Bucket=self.bucket, Key=self.base + path.relative_to(self.runs).as_posix())
                del self.sent[path]
            return count


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The wrapper's flags, and the command after ``--``."""
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    parser = OneLineParser(
        prog="python -m cleanrl_utils.cloud_run",
        description="Run a script in a cloud job: resume its run from S3, sync it back, forward SIGTERM.",
    )
    parser.add_argument("--bucket", default="", help="S3 bucket of run directories ('' = no S3)")
    parser.add_argument("--prefix", default="", help="key prefix of this job's runs (s3://BUCKET/PREFIX/runs/)")
    parser.add_argument(
        "--grid-json",
        default=None,
        help='array job: {"command": [...], "env_ids": [...], "seeds": [...], '
        '"extra": [...]}; the child runs entry $AWS_BATCH_JOB_ARRAY_INDEX',
    )
    parser.add_argument("--array-index", type=int, default=None, help="grid entry (default $AWS_BATCH_JOB_ARRAY_INDEX)")
    parser.add_argument("--sync-interval", type=float, default=300.0, help="seconds between uploads (default 300)")
    return parser.parse_args(argv), command


def pick_command(args: argparse.Namespace, command: list[str]) -> tuple[list[str], str]:
    """The command to run and its S3 prefix (the grid entry's, for an array job).

    Raises:
        SystemExit: (status 2) a grid and a command both or neither given, a bad grid or index.
    """
    if args.grid_json is None:
        require(bool(command), "--", "give the command after --, e.g. -- python cleanrl/ppo.py --env-id CartPole-v1")
        return command, args.prefix
    require(not command, "--grid-json", "give either a grid or a command after --, not both")
    try:
        grid = json.loads(args.grid_json)
        words = {key: grid[key] for key in ("command", "env_ids")} | {"extra": grid.get("extra", [])}
        for key, value in words.items():  # lists of one-line strings: they become the run's argv and S3 prefix
            if not (isinstance(value, list) and all(isinstance(v, str) and v.isprintable() for v in value)):
                raise TypeError(f"{key} must be a list of strings without control characters, got {value!r}"[:200])
        if not (isinstance(grid["seeds"], list) and all(type(s) is int for s in grid["seeds"])):
            raise TypeError(f"seeds must be a list of integers, got {grid['seeds']!r}"[:200])
        require(bool(words["command"]), "--grid-json", "the grid's command is empty")
        jobs = make_jobs(words["command"], words["env_ids"], grid["seeds"], words["extra"])
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        fail("--grid-json", f"not a grid {{command, env_ids, seeds, extra}}: {error!r}"[:300])
    index = args.array_index
    if index is None:
        raw = os.environ.get("AWS_BATCH_JOB_ARRAY_INDEX")
        require(
            raw is not None and raw.isdigit(),
            "--array-index",
            "not given and AWS_BATCH_JOB_ARRAY_INDEX is not set (not an array job child?)",
        )
        index = int(raw)
    require(0 <= index < len(jobs), "--array-index", f"{index} outside the grid's 0-{len(jobs) - 1}")
    job = jobs[index]
    name = f"{safe_name(job.env_id)}__seed{job.seed}"
    return list(job.argv), f"{args.prefix.strip('/')}/{name}".strip("/")


def main(argv: Sequence[str] | None = None, s3_client: Any = None) -> int:
    """Command-line entry; returns the exit status (see the module docstring).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        s3_client: a boto3 S3 client (default: ``boto3.client("s3")``).
    """
    args, command = parse_args(sys.argv[1:] if argv is None else argv)
    require(args.sync_interval > 0, "--sync-interval", f"must be positive, got {args.sync_interval}")
    require(args.bucket != "" or args.prefix == "", "--prefix", "only with --bucket")
    command, prefix = pick_command(args, command)
    if any(token == "--resume" or token.startswith("--resume=") for token in command):
        fail("--", "the command must not have --resume; cloud_run adds it when S3 holds a checkpoint")

    sync = None
    if args.bucket:
        sync = S3Sync(args.bucket, prefix, s3_client)
        try:
            count = sync.download()
        except OSError as error:  # UnsafePath: a link in ./runs where a downloaded folder goes
            fail("--prefix", f"cannot download s3://{args.bucket}/{sync.base} into {RUNS}/: {error}")
        print(f"cloud_run: {count} files from s3://{args.bucket}/{sync.base}", flush=True)
        if (RUNS / FINISHED).exists():
            print(
                f"cloud_run: the run finished in an earlier attempt (s3://{args.bucket}/{sync.base}{FINISHED}); nothing to do",
                flush=True,
            )
            return 0
        run_dir = resumable_run()
        if run_dir is not None:
            command = [*command, "--resume", str(run_dir)]

    print(f"cloud_run: {shlex.join(command)}", flush=True)
    child = subprocess.Popen(command)
    forwarded = []

    def forward(signum, frame):
        forwarded.append(signum)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    stop = threading.Event()

    def periodic():
        while not stop.wait(args.sync_interval):
            try:
                sync.upload()
            except Exception as error:  # a failed periodic upload is retried at the next one
                print(f"cloud_run: upload failed, retrying later: {error}", file=sys.stderr, flush=True)

    uploader = threading.Thread(target=periodic, daemon=True) if sync else None
    try:
        if uploader:
            uploader.start()
        while True:
            try:
                status = child.wait()
                break
            except InterruptedError:
                continue
    finally:
        stop.set()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if uploader:
        uploader.join()
    status = 128 - status if status < 0 else status
    if sync:
        if status == 0:
            RUNS.mkdir(exist_ok=True)
            (RUNS / FINISHED).write_text(" ".join(command) + "\n")
        try:
            count = sync.upload()
            print(f"cloud_run: {count} files to s3://{args.bucket}/{sync.base}", flush=True)
        except Exception as error:
            print(f"cloud_run: final upload failed: {error}", file=sys.stderr, flush=True)
            status = status or 1
    if forwarded:
        print(f"cloud_run: forwarded {', '.join(signal.Signals(s).name for s in forwarded)}; run exited {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

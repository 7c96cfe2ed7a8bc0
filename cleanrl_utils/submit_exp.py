"""Submit a sweep (every environment x seed) to AWS Batch, one job per run or one array job.

The grid is the benchmark launcher's (:func:`cleanrl_utils.benchmark.make_jobs`, same flags:
``--env-ids --command --num-seeds --start-seed --extra`` and arguments after ``--``). Each run
becomes a container command ``python -m cleanrl_utils.cloud_run --bucket B --prefix SWEEP/RUN -- <run>``
(``SWEEP`` = ``--sweep-id``, new for each submission unless given; ``RUN`` = ``<env>__seed<seed>``);
:mod:`cleanrl_utils.cloud_run` pulls the run's directory from S3, resumes from its latest
checkpoint when there is one, and pushes the directory back while the run goes and at its end.
A spot reclamation therefore costs at most the steps since the last checkpoint: the job's
retry strategy retries on a status reason ``Host EC2*`` (the instance went away) and exits on
anything else, and the retried attempt resumes from S3.

Where jobs go comes from the Terraform outputs (``terraform output -json > outputs.json``;
keys ``region``, ``job_queues``, ``job_definitions``, ``checkpoint_bucket``, ``log_group``,
``wandb_secret_arn``, ``job_role_arn``, ``execution_role_arn``; see terraform/README.md), or from
explicit ``--region --job-queue --job-definition``. Resources (``--vcpus --memory --gpus``),
``--attempts`` and ``--timeout`` override the job definition's only when given. With ``--image``
a job definition ``<definition>-<sweep id>`` is registered first, for this sweep's jobs only: a
copy of the newest revision of the job definition (read with ``describe_job_definitions``, also
in a dry run) with that image, the given resources, the W&B API key as a secret reference
(``secrets: [{name: WANDB_API_KEY, valueFrom: <ARN>}]``; a key in plain text is never
accepted), the awslogs log group and the job and execution roles. Before submitting, the
bucket is checked (``head_bucket``).

``--dry-run`` prints, as JSON, the exact keyword arguments of every boto3
``register_job_definition`` / ``submit_job`` call, and calls nothing.

Run:
    terraform -chdir=terraform output -json > outputs.json
    python -m cleanrl_utils.submit_exp --terraform-outputs outputs.json --env-ids CartPole-v1 Acrobot-v1 \\
        --command "python cleanrl/ppo.py" --num-seeds 3 --spot --dry-run -- --total-timesteps 500000 \\
        --checkpoint-interval 50000

Bad input (no env ids, a script that does not exist, a missing or malformed outputs file,
numbers out of range, a secret that is not an ARN, a control character in any value that reaches
a job definition or a job, a name that is not a queue, definition, region or log group name, ...)
stops before anything is submitted with one line ``error: <flag>: <message>`` on stderr, exit
status 2. The ``aws`` commands printed to watch the jobs are quoted for the shell.

Source: the request shapes are those of the AWS Batch API reference (RegisterJobDefinition,
SubmitJob, RetryStrategy/EvaluateOnExit, ArrayProperties, JobTimeout), as boto3 takes them.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from cleanrl_utils.benchmark import Job, check_args, make_jobs, plural
from cleanrl_utils.cli import OneLineParser, fail, require, safe_name

QUEUE_KEYS = ("cpu_spot", "cpu_on_demand", "gpu_spot", "gpu_on_demand")
"""Keys of the Terraform output ``job_queues``."""
SECRET_ARN = re.compile(r"arn:aws[a-z-]*:(secretsmanager|ssm):[a-z0-9-]+:\d{12}:(secret:|parameter/)\S+")
"""What a secret reference must look like: a Secrets Manager secret or an SSM parameter ARN."""
SECRET_ENV = "WANDB_API_KEY"
"""Environment variable the W&B key reaches the job under."""
MIN_TIMEOUT = 60
"""AWS Batch refuses an attemptDurationSeconds below 60."""
MAX_ATTEMPTS = 10
"""AWS Batch allows 1 to 10 attempts."""
MAX_ARRAY = 10_000
"""AWS Batch array jobs have 2 to 10,000 children."""
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}")
"""An AWS region name: ``us-east-1``, ``eu-central-2``, ``us-gov-west-1``."""
BATCH_NAME = re.compile(r"(arn:aws[a-z-]*:batch:[a-z0-9-]+:\d{12}:[a-z-]+/)?[A-Za-z0-9_-]{1,128}(:\d+)?")
"""A job queue or job definition: a name (a definition may add ``:revision``) or its ARN."""
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
"""An S3 bucket name."""
BUCKET_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""One segment of an S3 key, the part of the bucket the jobs write."""
LOG_GROUP = re.compile(r"[A-Za-z0-9_./#-]{1,512}")
"""A CloudWatch Logs group name."""
ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}")
"""An IAM role ARN."""


def read_outputs(path: str) -> dict[str, Any]:
    """The values of ``terraform output -json``: ``{"name": {"value": v, ...}}`` -> ``{"name": v}``.

    Raises:
        SystemExit: (status 2) the file is missing, not JSON, or not in that shape.
    """
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        write = f"terraform -chdir=terraform output -json > {shlex.quote(str(path))}"
        fail("--terraform-outputs", f"{path} does not exist; write it with: {write}")
    except (OSError, ValueError, RecursionError) as error:
        fail("--terraform-outputs", f"cannot read {path} as JSON: {error}")
    if not isinstance(raw, dict) or not all(isinstance(v, dict) and "value" in v for v in raw.values()):
        fail(
            "--terraform-outputs",
            f'{path} is not the output of \'terraform output -json\' (expected {{"name": {{"value": ...}}, ...}})',
        )
    return {name: entry["value"] for name, entry in raw.items()}


def output_text(outputs: dict[str, Any], key: str, pattern: re.Pattern, what: str, subkey: str | None = None) -> str | None:
    """The text output ``key`` (``outputs[key][subkey]`` with ``subkey``), or None when absent.

    Raises:
        SystemExit: (status 2, flag ``--terraform-outputs``) it is not a string matching ``pattern``
            (a list where a name belongs, a control character, ...).
    """
    value = outputs.get(key)
    name = key
    if subkey is not None:
        require(value is None or isinstance(value, dict), "--terraform-outputs", f"{key} must be an object, got {value!r}")
        value, name = (value or {}).get(subkey), f"{key}.{subkey}"
    if value is None:
        return None
    require(
        isinstance(value, str) and value.isprintable() and pattern.fullmatch(value) is not None,
        "--terraform-outputs",
        f"{name} must be {what}, got {value!r}",
    )
    return value


def run_name(job: Job) -> str:
    """The run's name in S3 and in job names: ``CartPole-v1__seed1`` (``/`` and ``:`` become ``-``)."""
    return f"{safe_name(job.env_id)}__seed{job.seed}"


def job_name(prefix: str, name: str) -> str:
    """A Batch job name: letters, digits, ``-`` and ``_`` only, at most 128 characters."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"{prefix}-{name}")[:128]


def resource_requirements(vcpus: int | None, memory: int | None, gpus: int | None) -> list[dict[str, str]]:
    """Batch ``resourceRequirements`` for the values given (None: left to the job definition):
    VCPU, MEMORY (MiB), and GPU when ``gpus`` > 0 (values are strings)."""
    given = [("VCPU", vcpus), ("MEMORY", memory), ("GPU", gpus if gpus else None)]
    return [{"type": kind, "value": str(value)} for kind, value in given if value is not None]


def retry_strategy(attempts: int) -> dict[str, Any]:
    """Retry when the instance went away (status reason ``Host EC2*``: spot reclamation), exit otherwise."""
    return {
        "attempts": attempts,
        "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "RETRY"}, {"onReason": "*", "action": "EXIT"}],
    }


def wrapped(argv: Sequence[str], bucket: str, prefix: str) -> list[str]:
    """The container command: ``argv`` run by :mod:`cleanrl_utils.cloud_run` (syncing with S3 when ``bucket``)."""
    sync = ["--bucket", bucket, "--prefix", prefix] if bucket else []
    return ["python", "-m", "cleanrl_utils.cloud_run", *sync, "--", *argv]


COPIED_CONTAINER_KEYS = (
    "command",
    "resourceRequirements",
    "secrets",
    "logConfiguration",
    "jobRoleArn",
    "executionRoleArn",
    "environment",
    "linuxParameters",
    "ulimits",
    "user",
    "readonlyRootFilesystem",
)
"""What a job definition registered with ``--image`` copies from the definition it is based on."""


def job_definition_spec(
    base: dict[str, Any],
    name: str,
    image: str,
    vcpus: int | None,
    memory: int | None,
    gpus: int | None,
    attempts: int | None,
    timeout: int | None,
    secret_arn: str | None,
    log_group: str | None,
    region: str,
    job_role_arn: str | None,
    execution_role_arn: str | None,
) -> dict[str, Any]:
    """Keyword arguments of boto3 ``batch.register_job_definition`` for job definition ``name``: the
    definition ``base`` (as ``describe_job_definitions`` returns it: the Terraform one) with
    ``image``, and the resources, attempts and timeout that are given (not None) in place of its own."""
    container: dict[str, Any] = {
        key: base["containerProperties"][key] for key in COPIED_CONTAINER_KEYS if key in base.get("containerProperties", {})
    }
    container["image"] = image
    container.setdefault("command", ["python", "-m", "cleanrl_utils.cloud_run", "--help"])  # every job overrides it
    resources = {r["type"]: r["value"] for r in container.get("resourceRequirements", [])}
    resources.update({r["type"]: r["value"] for r in resource_requirements(vcpus, memory, gpus)})
    container["resourceRequirements"] = [{"type": kind, "value": value} for kind, value in resources.items()]
    if secret_arn:
        container["secrets"] = [{"name": SECRET_ENV, "valueFrom": secret_arn}]
    if log_group:
        container["logConfiguration"] = {
            "logDriver": "awslogs",
            "options": {"awslogs-group": log_group, "awslogs-region": region, "awslogs-stream-prefix": "cleanrl"},
        }
    if job_role_arn:
        container["jobRoleArn"] = job_role_arn
    if execution_role_arn:
        container["executionRoleArn"] = execution_role_arn
    spec: dict[str, Any] = {
        "jobDefinitionName": name,
        "type": "container",
        "containerProperties": container,
        "propagateTags": True,
        "tags": {"project": "cleanrl"},
    }
    if attempts is not None or "retryStrategy" in base:
        spec["retryStrategy"] = retry_strategy(attempts) if attempts is not None else base["retryStrategy"]
    if timeout is not None or "timeout" in base:
        spec["timeout"] = {"attemptDurationSeconds": timeout} if timeout is not None else base["timeout"]
    return spec


def submit_specs(
    jobs: Sequence[Job],
    queue: str,
    definition: str,
    bucket: str,
    prefix: str,
    array: bool,
    vcpus: int | None,
    memory: int | None,
    gpus: int | None,
    attempts: int | None,
    timeout: int | None,
    bucket_prefix: str = "",
) -> list[dict[str, Any]]:
    """Keyword arguments of each boto3 ``batch.submit_job`` call: one per run, or one array job.

    ``prefix`` is the sweep id (job names, tags); ``bucket_prefix`` the part of the bucket the
    jobs may write (Terraform's ``checkpoint_prefix``, ``runs``). One job per run: the command is
    the run wrapped by cloud_run with S3 prefix ``{bucket_prefix}/{prefix}/{run name}``. Array
    job: the command is ``cloud_run --grid-json GRID`` and child ``AWS_BATCH_JOB_ARRAY_INDEX`` = i
    runs ``jobs[i]`` (cloud_run rebuilds the grid with :func:`cleanrl_utils.benchmark.make_jobs`),
    its S3 prefix also ``{bucket_prefix}/{prefix}/{run name}``. Resources, attempts and timeout
    that are None are not overridden: the job definition's apply.
    """
    s3_prefix = f"{bucket_prefix}/{prefix}" if bucket_prefix else prefix
    common: dict[str, Any] = {
        "jobQueue": queue,
        "jobDefinition": definition,
        "propagateTags": True,
        "tags": {"project": "cleanrl", "sweep": prefix},
    }
    if attempts is not None:
        common["retryStrategy"] = retry_strategy(attempts)
    if timeout is not None:
        common["timeout"] = {"attemptDurationSeconds": timeout}
    resources = {"resourceRequirements": resource_requirements(vcpus, memory, gpus)} if (vcpus or memory or gpus) else {}
    if array:
        grid = grid_of(jobs)
        sync = ["--bucket", bucket, "--prefix", s3_prefix] if bucket else []
        command = ["python", "-m", "cleanrl_utils.cloud_run", *sync, "--grid-json", json.dumps(grid, separators=(",", ":"))]
        return [
            {
                "jobName": job_name(prefix, "array"),
                **common,
                "arrayProperties": {"size": len(jobs)},
                "containerOverrides": {"command": command, **resources},
            }
        ]
    return [
        {
            "jobName": job_name(prefix, run_name(job)),
            **common,
            "containerOverrides": {"command": wrapped(job.argv, bucket, f"{s3_prefix}/{run_name(job)}"), **resources},
        }
        for job in jobs
    ]


def grid_of(jobs: Sequence[Job]) -> dict[str, Any]:
    """The grid in the form cloud_run's ``--grid-json`` takes: command, env ids, seeds, extra arguments.

    Raises:
        ValueError: ``jobs`` is not a full grid made by :func:`make_jobs` (it cannot be rebuilt).
    """
    env_ids = list(dict.fromkeys(job.env_id for job in jobs))
    seeds = list(dict.fromkeys(job.seed for job in jobs))
    first = jobs[0].argv
    cut = first.index("--env-id")
    command, extra = list(first[:cut]), list(first[cut + 4 :])
    if [j.argv for j in make_jobs(command, env_ids, seeds, extra)] != [j.argv for j in jobs]:
        raise ValueError("the jobs are not a full env x seed grid")
    return {"command": command, "env_ids": env_ids, "seeds": seeds, "extra": extra}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the flags; arguments after a ``--`` are passed to every run (as for the launcher)."""
    argv = list(argv)
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    parser = OneLineParser(
        prog="python -m cleanrl_utils.submit_exp",
        description="Submit every environment x seed of a command to AWS Batch (one job per run, or one array job).\n"
        "Arguments after -- are passed to every run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n"
        "  python -m cleanrl_utils.submit_exp --terraform-outputs outputs.json --env-ids CartPole-v1 \\\n"
        '      --command "python cleanrl/ppo.py" --num-seeds 3 --spot --dry-run -- --checkpoint-interval 50000',
    )
    grid = parser.add_argument_group("grid (as python -m cleanrl_utils.benchmark)")
    grid.add_argument("--env-ids", nargs="*", default=[], metavar="ENV_ID", help="environment ids (--env-id of each run)")
    grid.add_argument(
        "--command",
        default="",
        help='the command, e.g. "python cleanrl/ppo.py" (a path inside the image, relative to its workdir)',
    )
    grid.add_argument("--num-seeds", type=int, default=3, help="seeds per environment (default 3)")
    grid.add_argument("--start-seed", type=int, default=1, help="first seed (default 1); seeds are consecutive")
    grid.add_argument("--extra", default="", help="arguments for every run, as one string (or put them after --)")
    grid.add_argument("--track", action="store_true", help="pass --track to every run (W&B; the key comes from the secret)")
    where = parser.add_argument_group("where")
    where.add_argument(
        "--terraform-outputs",
        default=None,
        metavar="FILE",
        help="the JSON of 'terraform output -json' (queues, definitions, bucket, secret, roles)",
    )
    where.add_argument("--region", default=None, help="AWS region (default: the outputs' region)")
    where.add_argument(
        "--job-queue", default=None, help="job queue name (default: the outputs' queue for --spot/--on-demand, CPU/GPU)"
    )
    where.add_argument("--job-definition", default=None, help="job definition name (default: the outputs' cpu or gpu one)")
    where.add_argument(
        "--wandb-secret-arn",
        default=None,
        help="ARN of the W&B key in Secrets Manager or SSM (default: the outputs' wandb_secret_arn); only with --image",
    )
    market = where.add_mutually_exclusive_group()
    market.add_argument("--spot", dest="spot", action="store_true", default=True, help="spot queue (default)")
    market.add_argument("--on-demand", dest="spot", action="store_false", help="on-demand queue")
    where.add_argument(
        "--bucket",
        default=None,
        help="S3 bucket for run directories and checkpoints (default: the "
        "outputs' checkpoint_bucket; '' = no S3, runs do not survive a retry)",
    )
    where.add_argument(
        "--bucket-prefix",
        default=None,
        help="the part of the bucket the jobs write, "
        "s3://BUCKET/BUCKET_PREFIX/SWEEP_ID/... (default: the outputs' checkpoint_prefix, the only "
        "prefix the Terraform job role may write; none without outputs)",
    )
    where.add_argument("--job-name-prefix", default="cleanrl", help="start of the sweep id (default cleanrl)")
    where.add_argument(
        "--sweep-id",
        default=None,
        help="names the jobs and the S3 prefix s3://BUCKET/BUCKET_PREFIX/SWEEP_ID/<env>__seed<seed>/ "
        "(default PREFIX-<UTC time>, a new one per submission; give an earlier id to continue that sweep's runs)",
    )
    job = parser.add_argument_group("each job")
    job.add_argument(
        "--image",
        default=None,
        help="first register job definition <definition>-<sweep id>: the job "
        "definition's copy with this image URI (the sweep's jobs use it; other submissions are unaffected)",
    )
    job.add_argument("--vcpus", type=int, default=None, help="vCPUs of each run (default: the job definition's)")
    job.add_argument("--memory", type=int, default=None, help="memory of each run in MiB (default: the job definition's)")
    job.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs of each run (default: the job definition's; > 0 picks the GPU queue and definition)",
    )
    job.add_argument(
        "--attempts",
        type=int,
        default=None,
        help=f"attempts per run, 1-{MAX_ATTEMPTS} (default: the job definition's); retried only when the instance went away",
    )
    job.add_argument(
        "--timeout", type=int, default=None, help=f"seconds per attempt (>= {MIN_TIMEOUT}; default: the job definition's)"
    )
    job.add_argument(
        "--array", action="store_true", help="one array job (child i runs grid entry i) instead of one job per run"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the boto3 calls as JSON; submit nothing")
    args = parser.parse_args(argv)
    args.passthrough = passthrough
    return args


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Check every flag and fill the defaults from the Terraform outputs; nothing is submitted yet.

    Returns:
        ``{"jobs", "region", "queue", "definition", "bucket", "definition_spec", "submits", "log_group",
        "s3_root"}``; ``definition_spec`` is None, or (``--image``) a function of the definition
        to copy (as ``describe_job_definitions`` gives it) returning the register call's arguments.

    Raises:
        SystemExit: (status 2, one line on stderr) on bad input.
    """
    # the launcher's own checks of the grid flags (env ids, seeds, command, script exists, ...)
    grid_args = argparse.Namespace(
        env_ids=args.env_ids,
        num_seeds=args.num_seeds,
        start_seed=args.start_seed,
        command=args.command,
        extra=args.extra,
        passthrough=args.passthrough,
        workers=None,
        slurm=False,
        slurm_dry_run=False,
    )
    command, extra = check_args(grid_args)
    if args.track and "--track" not in extra:
        extra.append("--track")
    for token in [*command, *extra]:
        if SECRET_ENV in token or token.lower().startswith("--wandb-api-key") or token.lower().startswith("--wandb_api_key"):
            fail(
                "--command" if token in command else "--extra",
                f"{SECRET_ENV} must not be given in a command; the job gets it from the secret (--wandb-secret-arn)",
            )
    require(args.vcpus is None or args.vcpus >= 1, "--vcpus", f"must be at least 1, got {args.vcpus}")
    require(args.memory is None or args.memory >= 128, "--memory", f"must be at least 128 (MiB), got {args.memory}")
    require(args.gpus is None or args.gpus >= 0, "--gpus", f"must be >= 0, got {args.gpus}")
    require(
        args.attempts is None or 1 <= args.attempts <= MAX_ATTEMPTS,
        "--attempts",
        f"must be 1-{MAX_ATTEMPTS}, got {args.attempts}",
    )
    require(
        args.timeout is None or args.timeout >= MIN_TIMEOUT,
        "--timeout",
        f"must be at least {MIN_TIMEOUT} s (AWS Batch's minimum), got {args.timeout}",
    )
    require(
        re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", args.job_name_prefix) is not None,
        "--job-name-prefix",
        f"{args.job_name_prefix!r}: letters, digits, '-' and '_' only, at most 64 characters",
    )
    if args.sweep_id is None:  # a new sweep never resumes the runs of an earlier one
        args.sweep_id = f"{args.job_name_prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    require(
        re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,79}", args.sweep_id) is not None,
        "--sweep-id",
        f"{args.sweep_id!r}: letters, digits, '-' and '_' only, at most 80 characters",
    )

    # every value below reaches an AWS call, a job definition or a printed shell command: checked by form
    outputs = read_outputs(args.terraform_outputs) if args.terraform_outputs else {}
    kind = "gpu" if (args.gpus or 0) > 0 else "cpu"
    region = args.region or output_text(outputs, "region", REGION, "an AWS region name")
    require(bool(region), "--region", "give --region or --terraform-outputs (with a 'region' output)")
    require(REGION.fullmatch(region) is not None, "--region", f"{region!r} is not an AWS region name (e.g. us-east-1)")
    queue = args.job_queue
    if queue is None:
        key = f"{kind}_{'spot' if args.spot else 'on_demand'}"
        queue = output_text(outputs, "job_queues", BATCH_NAME, "a job queue name or ARN", key)
        require(bool(queue), "--job-queue", f"give --job-queue or --terraform-outputs with job_queues.{key}")
    require(BATCH_NAME.fullmatch(queue) is not None, "--job-queue", f"{queue!r} is not a job queue name or ARN")
    definition = args.job_definition
    if definition is None:
        definition = output_text(outputs, "job_definitions", BATCH_NAME, "a job definition name or ARN", kind)
        require(
            bool(definition), "--job-definition", f"give --job-definition or --terraform-outputs with job_definitions.{kind}"
        )
    require(
        BATCH_NAME.fullmatch(definition) is not None, "--job-definition", f"{definition!r} is not a job definition name or ARN"
    )
    if args.bucket is None:
        bucket = output_text(outputs, "checkpoint_bucket", BUCKET, "an S3 bucket name") or ""
    else:
        bucket = args.bucket
    require(
        bucket == "" or BUCKET.fullmatch(bucket) is not None,
        "--bucket",
        f"{bucket!r} is not an S3 bucket name (give the name, not an s3:// URL)",
    )
    # the jobs' IAM role may write only s3://bucket/<checkpoint_prefix>/* (terraform/iam.tf)
    if args.bucket_prefix is None:
        bucket_prefix = output_text(outputs, "checkpoint_prefix", BUCKET_PREFIX, "one S3 key segment") or ""
    else:
        bucket_prefix = args.bucket_prefix
    require(
        bucket_prefix == "" or BUCKET_PREFIX.fullmatch(bucket_prefix) is not None,
        "--bucket-prefix",
        f"{bucket_prefix!r}: one path segment (letters, digits, '.', '_', '-')",
    )
    log_group = output_text(outputs, "log_group", LOG_GROUP, "a CloudWatch Logs group name")
    roles = [output_text(outputs, key, ROLE_ARN, "an IAM role ARN") for key in ("job_role_arn", "execution_role_arn")]
    secret_arn = args.wandb_secret_arn or output_text(outputs, "wandb_secret_arn", SECRET_ARN, "a secret's ARN")
    if args.wandb_secret_arn is not None:
        require(args.image is not None, "--wandb-secret-arn", "only with --image (a new job definition revision)")
    if secret_arn is not None:
        require(
            SECRET_ARN.fullmatch(secret_arn) is not None and secret_arn.isprintable(),
            "--wandb-secret-arn",
            "must be the ARN of a Secrets Manager secret or SSM parameter (arn:aws:secretsmanager:... or "
            "arn:aws:ssm:...); a key in plain text is never accepted",
        )
    if args.track and args.image is not None:
        require(
            secret_arn is not None,
            "--track",
            "needs the W&B key's secret: --wandb-secret-arn or the outputs' wandb_secret_arn",
        )

    seeds = list(range(args.start_seed, args.start_seed + args.num_seeds))
    jobs = make_jobs(command, args.env_ids, seeds, extra)
    if args.array:
        require(
            2 <= len(jobs) <= MAX_ARRAY, "--array", f"an array job has 2-{MAX_ARRAY} children; the grid has {len(jobs)} runs"
        )

    spec = None
    if args.image is not None:
        require(
            args.image.strip() == args.image != "" and " " not in args.image and args.image.isprintable(),
            "--image",
            f"{args.image!r} is not an image URI",
        )

        def spec(base: dict[str, Any]) -> dict[str, Any]:  # the new definition, from the one it copies
            return job_definition_spec(
                base,
                job_name(definition, args.sweep_id),
                args.image,
                args.vcpus,
                args.memory,
                args.gpus,
                args.attempts,
                args.timeout,
                secret_arn,
                log_group,
                region,
                *roles,
            )

    submits = submit_specs(
        jobs,
        queue,
        definition,
        bucket,
        args.sweep_id,
        args.array,
        args.vcpus,
        args.memory,
        args.gpus,
        args.attempts,
        args.timeout,
        bucket_prefix,
    )
    s3_root = f"s3://{bucket}/{bucket_prefix + '/' if bucket_prefix else ''}{args.sweep_id}/"
    return {
        "jobs": jobs,
        "region": region,
        "queue": queue,
        "definition": definition,
        "bucket": bucket,
        "definition_spec": spec,
        "submits": submits,
        "log_group": log_group,
        "s3_root": s3_root if bucket else None,
    }


def latest_definition(client: Any, name: str) -> dict[str, Any]:
    """The newest ACTIVE revision of job definition ``name``, as ``describe_job_definitions`` gives it.

    Raises:
        SystemExit: (status 2, one line) there is none.
    """
    found = client.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")["jobDefinitions"]
    if not found:
        fail("--job-definition", f"no active job definition {name!r} to base --image on (terraform apply makes it)")
    return max(found, key=lambda d: d["revision"])


def main(argv: Sequence[str] | None = None, client: Any = None) -> int:
    """Command-line entry; returns the exit status (0 submitted or dry run, 1 an AWS call failed).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        client: a boto3 Batch client (default: one for the resolved region).
    """
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plan = resolve(args)
    jobs, submits, spec = plan["jobs"], plan["submits"], plan["definition_spec"]
    summary = (
        f"{len(jobs)} runs ({plural(len(args.env_ids), 'env')} x {plural(args.num_seeds, 'seed')}) "
        f"{'as one array job' if args.array else 'as ' + plural(len(submits), 'job')} on queue {plan['queue']}, "
        f"sweep {args.sweep_id}, S3 {plan['s3_root'] or 'off (runs cannot resume after a retry)'}"
    )
    from botocore.exceptions import BotoCoreError, ClientError

    if client is None and (spec is not None or not args.dry_run):
        import boto3

        client = boto3.client("batch", region_name=plan["region"])
    if spec is not None:  # (dry run too) read the definition the new one copies; nothing is changed
        try:
            spec = spec(latest_definition(client, plan["definition"]))
        except (BotoCoreError, ClientError) as error:
            fail("--job-definition", f"cannot read {plan['definition']!r}: {error}")
    if plan["bucket"] and not args.dry_run:  # a job must not find out at its end that its bucket is missing
        import boto3

        try:
            boto3.client("s3", region_name=plan["region"]).head_bucket(Bucket=plan["bucket"])
        except (BotoCoreError, ClientError) as error:
            fail("--bucket", f"cannot reach bucket {plan['bucket']!r} (missing, or no access): {error}")
    if args.dry_run:
        calls = [{"call": "register_job_definition", "kwargs": spec}] if spec else []
        calls += [{"call": "submit_job", "kwargs": s} for s in submits]
        print(json.dumps({"region": plan["region"], "calls": calls}, indent=2))
        print(f"dry run: {summary}; nothing submitted", file=sys.stderr)
        return 0

    ids = []
    try:
        definition = plan["definition"]
        if spec is not None:
            registered = client.register_job_definition(**spec)
            definition = registered["jobDefinitionArn"]
            print(f"registered {registered['jobDefinitionName']}:{registered['revision']} ({args.image})")
        for submit in submits:
            response = client.submit_job(**{**submit, "jobDefinition": definition})
            ids.append(response["jobId"])
            print(f"submitted {response['jobName']}: {response['jobId']}")
    except (BotoCoreError, ClientError) as error:
        print(
            f"AWS Batch refused a call: {error}" + (f" ({len(ids)} jobs were submitted: {' '.join(ids)})" if ids else ""),
            file=sys.stderr,
        )
        return 1
    print(summary)
    print("watch:")
    region = shlex.quote(plan["region"])
    print(f"  aws batch describe-jobs --region {region} --jobs {shlex.join(ids[:100])}" + (" ..." if len(ids) > 100 else ""))
    if plan["log_group"]:
        print(f"  aws logs tail {shlex.quote(plan['log_group'])} --region {region} --follow")
    return 0


if __name__ == "__main__":
    sys.exit(main())

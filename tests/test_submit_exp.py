"""submit_exp against moto's mocked AWS Batch, and cloud_run against moto's mocked S3.

moto's in-process mock (``mock_aws``) patches botocore in this process only, so cloud_run's
``main()`` is called in the test process (the script it wraps is its child process, as in a
job) rather than started as a subprocess; that also lets the test send the job's SIGTERM to
cloud_run itself and check that it is forwarded. moto's "simple" Batch backend
(``use_docker: False``) records jobs without running containers.

moto's ``describe_jobs`` keeps a job's command, timeout and array size but not its per-job
retry strategy or resource overrides, so those are checked on the request parameters as
boto3 built them for the mock (``before-parameter-build`` event).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from cleanrl_utils import cloud_run, submit_exp

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cleanrl/wandb-api-key-AbCdEf"
PLAIN_KEY = "0123456789abcdef0123456789abcdef01234567"  # what a W&B key looks like; must appear nowhere


@pytest.fixture
def aws(monkeypatch):
    """Fake credentials (never real ones) and moto's Batch, IAM and S3 for the test."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws(config={"batch": {"use_docker": False}}):
        yield


@pytest.fixture
def batch(aws, tmp_path, monkeypatch):
    """A mocked Batch with the four queues and two definitions, its outputs.json, and a request recorder."""
    monkeypatch.chdir(ROOT)  # the grid's scripts are checked relative to the working directory
    client = boto3.client("batch", region_name=REGION)
    role = boto3.client("iam").create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    environment = client.create_compute_environment(
        computeEnvironmentName="cleanrl-ce", type="UNMANAGED", state="ENABLED", serviceRole=role
    )["computeEnvironmentArn"]
    queues = {key: f"cleanrl-{key.replace('_', '-')}" for key in submit_exp.QUEUE_KEYS}
    for name in queues.values():
        client.create_job_queue(
            jobQueueName=name,
            state="ENABLED",
            priority=1,
            computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
        )
    for kind in ("cpu", "gpu"):
        client.register_job_definition(
            jobDefinitionName=f"cleanrl-{kind}",
            type="container",
            containerProperties={
                "image": f"old:{kind}",
                "command": ["true"],
                "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}],
            },
        )
    outputs = {
        "region": REGION,
        "ecr_repository_url": "123456789012.dkr.ecr.us-east-1.amazonaws.com/cleanrl",
        "job_queues": queues,
        "job_definitions": {"cpu": "cleanrl-cpu", "gpu": "cleanrl-gpu"},
        "checkpoint_bucket": "cleanrl-runs-test",
        "checkpoint_prefix": "runs",
        "log_group": "/aws/batch/cleanrl",
        "wandb_secret_arn": SECRET,
        "job_role_arn": "arn:aws:iam::123456789012:role/cleanrl-job",
        "execution_role_arn": "arn:aws:iam::123456789012:role/cleanrl-execution",
    }
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="cleanrl-runs-test")
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({k: {"value": v, "type": "string", "sensitive": False} for k, v in outputs.items()}))
    sent: list[tuple[str, dict]] = []
    client.meta.events.register(
        "before-parameter-build.batch.*", lambda model, params, **_: sent.append((model.name, json.loads(json.dumps(params))))
    )
    return {"client": client, "outputs": str(path), "queues": queues, "sent": sent}


def submitted(client, queue: str) -> list[dict]:
    """Every job on ``queue`` (array children left out), described."""
    ids = [j["jobId"] for j in client.list_jobs(jobQueue=queue)["jobSummaryList"] if ":" not in j["jobId"]]
    return client.describe_jobs(jobs=ids)["jobs"] if ids else []


GRID = ["--env-ids", "CartPole-v1", "Acrobot-v1", "--command", "python cleanrl/ppo.py", "--num-seeds", "2"]


def test_one_job_per_run(batch, capsys):
    client = batch["client"]
    status = submit_exp.main(
        [
            *GRID,
            "--terraform-outputs",
            batch["outputs"],
            "--image",
            "repo/cleanrl:cpu-abc1234",
            "--vcpus",
            "2",
            "--memory",
            "4096",
            "--attempts",
            "4",
            "--timeout",
            "3600",
            "--track",
            "--sweep-id",
            "sweep1",
            "--",
            "--total-timesteps",
            "50000",
        ],
        client=client,
    )
    assert status == 0
    out = capsys.readouterr().out
    jobs = submitted(client, batch["queues"]["cpu_spot"])
    assert len(jobs) == 4 and all(j["jobName"] in out and j["jobId"] in out for j in jobs)
    assert "aws batch describe-jobs" in out and "aws logs tail /aws/batch/cleanrl" in out
    expected = {(env, seed) for env in ("CartPole-v1", "Acrobot-v1") for seed in (1, 2)}
    seen = set()
    for job in jobs:
        command = job["container"]["command"]
        wrapper, run = command[: command.index("--") + 1], command[command.index("--") + 1 :]
        env, seed = run[run.index("--env-id") + 1], int(run[run.index("--seed") + 1])
        seen.add((env, seed))
        assert wrapper == [
            "python",
            "-m",
            "cleanrl_utils.cloud_run",
            "--bucket",
            "cleanrl-runs-test",
            "--prefix",
            f"runs/sweep1/{env}__seed{seed}",
            "--",
        ]  # the job role may write only runs/*
        assert run == [
            "python",
            "cleanrl/ppo.py",
            "--env-id",
            env,
            "--seed",
            str(seed),
            "--total-timesteps",
            "50000",
            "--track",
        ]
        assert job["timeout"] == {"attemptDurationSeconds": 3600}
        assert job["jobDefinition"].endswith("job-definition/cleanrl-cpu-sweep1:1")  # the sweep's own definition
    assert seen == expected
    # the registered revision: image, resources, retries, timeout, secret reference, logs, roles
    definition = client.describe_job_definitions(jobDefinitionName="cleanrl-cpu-sweep1", status="ACTIVE")["jobDefinitions"]
    new = max(definition, key=lambda d: d["revision"])
    terraforms = client.describe_job_definitions(jobDefinitionName="cleanrl-cpu", status="ACTIVE")["jobDefinitions"]
    assert [d["containerProperties"]["image"] for d in terraforms] == ["old:cpu"]  # later submissions unaffected
    container = new["containerProperties"]
    assert container["image"] == "repo/cleanrl:cpu-abc1234"
    assert {r["type"]: r["value"] for r in container["resourceRequirements"]} == {"VCPU": "2", "MEMORY": "4096"}
    assert container["secrets"] == [{"name": "WANDB_API_KEY", "valueFrom": SECRET}]
    assert not any(e["name"] == "WANDB_API_KEY" for e in container.get("environment", []))
    assert container["jobRoleArn"].endswith("role/cleanrl-job")
    assert container["executionRoleArn"].endswith("role/cleanrl-execution")
    assert container["logConfiguration"]["options"]["awslogs-group"] == "/aws/batch/cleanrl"
    retry = {
        "attempts": 4,
        "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "RETRY"}, {"onReason": "*", "action": "EXIT"}],
    }
    assert new["retryStrategy"]["attempts"] == 4
    assert [
        (e.get("onStatusReason"), e.get("onReason"), e["action"].upper()) for e in new["retryStrategy"]["evaluateOnExit"]
    ] == [("Host EC2*", None, "RETRY"), (None, "*", "EXIT")]
    assert new["timeout"] == {"attemptDurationSeconds": 3600}
    # what each submit_job request carried (moto does not keep these per job)
    submits = [body for name, body in batch["sent"] if name == "SubmitJob"]
    assert len(submits) == 4
    for body in submits:
        assert body["retryStrategy"] == retry
        assert body["containerOverrides"]["resourceRequirements"] == [
            {"type": "VCPU", "value": "2"},
            {"type": "MEMORY", "value": "4096"},
        ]
        assert body["jobQueue"] == "cleanrl-cpu-spot"


def test_array_job_gpu_on_demand(batch, capsys):
    client = batch["client"]
    status = submit_exp.main(
        [
            *GRID,
            "--terraform-outputs",
            batch["outputs"],
            "--gpus",
            "1",
            "--on-demand",
            "--array",
            "--bucket",
            "",
            "--extra=--cuda",
        ],
        client=client,
    )
    assert status == 0
    jobs = submitted(client, batch["queues"]["gpu_on_demand"])
    assert len(jobs) == 1 and jobs[0]["arrayProperties"]["size"] == 4
    assert jobs[0]["jobDefinition"].endswith("job-definition/cleanrl-gpu:1")  # no --image: the existing definition
    command = jobs[0]["container"]["command"]
    assert command[:4] == ["python", "-m", "cleanrl_utils.cloud_run", "--grid-json"]  # no bucket: no S3 flags
    grid = json.loads(command[4])
    assert grid == {
        "command": ["python", "cleanrl/ppo.py"],
        "env_ids": ["CartPole-v1", "Acrobot-v1"],
        "seeds": [1, 2],
        "extra": ["--cuda"],
    }
    body = next(body for name, body in batch["sent"] if name == "SubmitJob")
    assert {"type": "GPU", "value": "1"} in body["containerOverrides"]["resourceRequirements"]
    # each child rebuilds its run from the grid
    args, rest = cloud_run.parse_args(command[3:] + ["--array-index", "3", "--prefix", "p"])
    assert cloud_run.pick_command(args, rest) == (
        ["python", "cleanrl/ppo.py", "--env-id", "Acrobot-v1", "--seed", "2", "--cuda"],
        "p/Acrobot-v1__seed2",
    )


def test_dry_run_submits_nothing(batch, capsys):
    client = batch["client"]
    status = submit_exp.main(
        [*GRID, "--terraform-outputs", batch["outputs"], "--image", "repo/cleanrl:cpu-abc1234", "--dry-run"], client=client
    )
    assert status == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert [c["call"] for c in plan["calls"]] == ["register_job_definition"] + ["submit_job"] * 4
    assert plan["calls"][0]["kwargs"]["containerProperties"]["secrets"] == [{"name": "WANDB_API_KEY", "valueFrom": SECRET}]
    command = plan["calls"][1]["kwargs"]["containerOverrides"]["command"]
    assert command[:6] == ["python", "-m", "cleanrl_utils.cloud_run", "--bucket", "cleanrl-runs-test", "--prefix"]
    assert re.fullmatch(
        r"runs/cleanrl-\d{8}-\d{6}/CartPole-v1__seed1", command[6]
    )  # a new sweep id: never an old sweep's runs
    assert "nothing submitted" in captured.err
    assert [name for name, _ in batch["sent"]] == ["DescribeJobDefinitions"]  # read the definition to copy, nothing else
    assert all(submitted(client, q) == [] for q in batch["queues"].values())
    definitions = client.describe_job_definitions(jobDefinitionName="cleanrl-cpu")["jobDefinitions"]
    assert [d["revision"] for d in definitions] == [1]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--command", "python cleanrl/no_such_script.py"], "--command: script 'cleanrl/no_such_script.py' does not exist"),
        (
            ["--terraform-outputs", "/nonexistent/outputs.json"],
            "--terraform-outputs: /nonexistent/outputs.json does not exist",
        ),
        (["--vcpus", "0"], "--vcpus: must be at least 1"),
        (["--memory", "64"], "--memory: must be at least 128"),
        (["--attempts", "11"], "--attempts: must be 1-10"),
        (["--timeout", "30"], "--timeout: must be at least 60"),
        (["--num-seeds", "0"], "--num-seeds: must be in [1, 100000], got 0"),
        (["--image", "img", "--wandb-secret-arn", PLAIN_KEY], "--wandb-secret-arn: must be the ARN"),
        (["--extra", f"WANDB_API_KEY={PLAIN_KEY}"], "--extra: WANDB_API_KEY must not be given"),
        (["--extra", f"--wandb-api-key {PLAIN_KEY}"], "--extra: WANDB_API_KEY must not be given"),
        (["--bucket", "no-such-bucket-here"], "--bucket: cannot reach bucket 'no-such-bucket-here'"),
        (["--bucket", "s3://bucket"], "--bucket: 's3://bucket' is not an S3 bucket name"),
        (["--env-ids", "CartPole-v1", "--num-seeds", "1", "--array"], "--array: an array job has 2-10000 children"),
        (["--env-ids", "CartPole-v1\ntouch pwned"], "--env-ids: 'CartPole-v1\\ntouch pwned' holds a control character"),
        (["--extra", "--note 'a\rb'"], "--extra: 'a\\rb' holds a control character"),
        (["--", "--note", "a\x1b[2J"], "--extra: 'a\\x1b[2J' holds a control character"),
        (["--image", "repo/cleanrl:cpu\x1b[2J"], "--image: 'repo/cleanrl:cpu\\x1b[2J' is not an image URI"),
        (["--region", "us-east-1; touch pwned"], "--region: 'us-east-1; touch pwned' is not an AWS region name"),
        (["--job-queue", "cleanrl-cpu-spot\n"], "--job-queue: 'cleanrl-cpu-spot\\n' is not a job queue name"),
        (["--job-definition", "cleanrl-cpu x"], "--job-definition: 'cleanrl-cpu x' is not a job definition name"),
    ],
)
def test_bad_input(batch, capsys, flags, message):
    argv = [*GRID, "--terraform-outputs", batch["outputs"], *flags]
    with pytest.raises(SystemExit) as stop:
        submit_exp.main(argv, client=batch["client"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert PLAIN_KEY not in capsys.readouterr().out
    assert batch["sent"] == []


def test_bad_outputs_file(batch, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"region": "us-east-1"}')  # values, not terraform output -json
    with pytest.raises(SystemExit) as stop:
        submit_exp.main([*GRID, "--terraform-outputs", str(bad)], client=batch["client"])
    assert stop.value.code == 2 and "is not the output of 'terraform output -json'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        submit_exp.main(GRID, client=batch["client"])  # neither outputs nor --region
    assert "error: --region:" in capsys.readouterr().err


def events_steps(run_dir: Path, tag: str) -> list[int]:
    """Steps of ``tag`` in every TensorBoard events file of ``run_dir`` (a resumed run adds a file)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = []
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        if tag in accumulator.Tags()["scalars"]:
            steps += [e.step for e in accumulator.Scalars(tag)]
    return steps


def test_cloud_run_resumes_from_s3_after_sigterm(aws, tmp_path, monkeypatch, capfd):
    """A real tiny PPO run is stopped by SIGTERM; a fresh job in an empty directory resumes it from S3."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="cleanrl-runs-test")
    run = [
        sys.executable,
        str(ROOT / "cleanrl" / "ppo.py"),
        "--env-id",
        "CartPole-v1",
        "--seed",
        "1",
        "--total-timesteps",
        "2048",
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--checkpoint-interval",
        "256",
        "--torch-threads",
        "1",
    ]
    argv = ["--bucket", "cleanrl-runs-test", "--prefix", "sweep/CartPole-v1__seed1", "--sync-interval", "600", "--", *run]

    first = tmp_path / "attempt1"
    first.mkdir()
    monkeypatch.chdir(first)

    returned = threading.Event()

    def terminate_after_first_checkpoint():  # what Batch does when the spot instance is reclaimed
        deadline = time.monotonic() + 300  # generous: under load, start-up alone can take a minute
        while not list(first.glob("runs/*/checkpoints/step_*.pt")) and time.monotonic() < deadline:
            if returned.wait(0.05):
                return  # the run ended (failed) before its first checkpoint: the asserts below say so
        os.kill(os.getpid(), signal.SIGTERM)  # to cloud_run (in this process), which forwards it

    def ignore(signum, frame):  # a SIGTERM after cloud_run restored the handler must not kill pytest
        pass

    pytest_handler = signal.signal(signal.SIGTERM, ignore)
    killer = threading.Thread(target=terminate_after_first_checkpoint)
    killer.start()
    try:
        status = cloud_run.main(argv, s3_client=s3)
        handler_after = signal.getsignal(signal.SIGTERM)
    finally:
        returned.set()
        killer.join()
        signal.signal(signal.SIGTERM, pytest_handler)
    captured = capfd.readouterr()
    out = captured.out
    assert status == 143, out + captured.err
    assert "forwarded SIGTERM" in out and "SIGTERM: checkpoint written" in out
    assert handler_after is ignore  # cloud_run put the previous handler back
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="cleanrl-runs-test", Prefix="sweep/")["Contents"]]
    local_checkpoints = sorted(p.name for p in first.glob("runs/*/checkpoints/step_*.pt"))
    remote_checkpoints = sorted(k.rsplit("/", 1)[1] for k in keys if "/checkpoints/" in k)
    assert remote_checkpoints == local_checkpoints  # the checkpoint written on SIGTERM is uploaded, pruned ones deleted
    stopped_at = max(int(name.removeprefix("step_").removesuffix(".pt")) for name in local_checkpoints)
    assert stopped_at < 2048
    assert any(
        k.startswith("sweep/CartPole-v1__seed1/runs/CartPole-v1__ppo__1__") and "events.out.tfevents" in k for k in keys
    )

    second = tmp_path / "attempt2"  # the retried attempt: a fresh container, nothing on disk
    second.mkdir()
    monkeypatch.chdir(second)
    status = cloud_run.main(argv, s3_client=s3)
    out = capfd.readouterr().out
    assert status == 0, out
    run_dirs = [p for p in (second / "runs").iterdir() if p.is_dir()]
    assert len(run_dirs) == 1
    assert f"--resume runs/{run_dirs[0].name}" in out
    assert f"(resumed at step {stopped_at})" in out
    steps = events_steps(run_dirs[0], "charts/learning_rate")
    assert max(steps) == 2048 and min(steps) < stopped_at  # one curve from the start to the full step count
    assert len(steps) == len(set(steps))  # no step logged twice (purge_step dropped the interrupted tail)
    final_keys = [o["Key"] for o in s3.list_objects_v2(Bucket="cleanrl-runs-test", Prefix="sweep/")["Contents"]]
    assert len([k for k in final_keys if "events.out.tfevents" in k]) == 2
    # the job started once more (same prefix): the finished run is not run again
    third = tmp_path / "attempt3"
    third.mkdir()
    monkeypatch.chdir(third)
    assert cloud_run.main(argv, s3_client=s3) == 0
    out = capfd.readouterr().out
    assert "the run finished in an earlier attempt" in out and "--resume" not in out
    keys_after = [o["Key"] for o in s3.list_objects_v2(Bucket="cleanrl-runs-test", Prefix="sweep/")["Contents"]]
    assert sorted(keys_after) == sorted(final_keys)


def test_cloud_run_bad_input(capsys, monkeypatch):
    monkeypatch.delenv("AWS_BATCH_JOB_ARRAY_INDEX", raising=False)
    cases = [
        ([], "error: --: give the command after --"),
        (["--grid-json", "{}"], "error: --grid-json: not a grid"),
        (
            ["--grid-json", '{"command": ["python", "x.py"], "env_ids": ["A-v0"], "seeds": [1]}'],
            "error: --array-index: not given and AWS_BATCH_JOB_ARRAY_INDEX is not set",
        ),
        (["--prefix", "p", "--", "true"], "error: --prefix: only with --bucket"),
        (["--", "python", "x.py", "--resume", "runs/x"], "error: --: the command must not have --resume"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as stop:
            cloud_run.main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err


def test_cloud_run_without_bucket_passes_status(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cloud_run.main(["--", sys.executable, "-c", "import sys; sys.exit(7)"]) == 7


def test_cloud_run_uploads_while_the_run_goes(aws, tmp_path, monkeypatch):
    """The child waits until its file is in S3 (it exits 0 then, 3 after 10 s): only a periodic upload lets it pass."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="cleanrl-runs-test")
    monkeypatch.chdir(tmp_path)
    child = (
        "import pathlib, sys, time\n"
        "run = pathlib.Path('runs/r'); run.mkdir(parents=True); (run / 'a.txt').write_text('1')\n"
        "for _ in range(200):\n"
        "    if (run / 'seen').exists(): sys.exit(0)\n"
        "    time.sleep(0.05)\n"
        "sys.exit(3)\n"
    )

    def mark_when_uploaded():
        for _ in range(200):
            if s3.list_objects_v2(Bucket="cleanrl-runs-test", Prefix="p/runs/r/a.txt").get("KeyCount"):
                (tmp_path / "runs" / "r" / "seen").write_text("")
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=mark_when_uploaded)
    watcher.start()
    status = cloud_run.main(
        ["--bucket", "cleanrl-runs-test", "--prefix", "p", "--sync-interval", "0.2", "--", sys.executable, "-c", child],
        s3_client=s3,
    )
    watcher.join()
    assert status == 0
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="cleanrl-runs-test", Prefix="p/")["Contents"]}
    assert keys == {"p/runs/r/a.txt", "p/runs/r/seen", "p/runs/.cloud_run_finished"}  # and the final upload took the rest


def test_job_definition_values_apply_unless_given(batch, capsys):
    """Without --vcpus/--memory/--gpus/--attempts/--timeout nothing is overridden: Terraform's job
    definition decides; --image copies that definition (its resources too) with the new image."""
    client = batch["client"]
    client.register_job_definition(
        jobDefinitionName="cleanrl-cpu",
        type="container",
        timeout={"attemptDurationSeconds": 7200},
        retryStrategy={"attempts": 5},
        containerProperties={
            "image": "repo:cpu-latest",
            "command": ["true"],
            "resourceRequirements": [{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": "8192"}],
        },
    )
    assert submit_exp.main([*GRID, "--terraform-outputs", batch["outputs"], "--sweep-id", "s2"], client=client) == 0
    for name, body in batch["sent"]:
        if name == "SubmitJob":
            assert "retryStrategy" not in body and "timeout" not in body
            assert "resourceRequirements" not in body["containerOverrides"]
    batch["sent"].clear()
    capsys.readouterr()
    assert (
        submit_exp.main(
            [
                *GRID,
                "--terraform-outputs",
                batch["outputs"],
                "--sweep-id",
                "s3",
                "--image",
                "repo:cpu-abc",
                "--memory",
                "16384",
                "--dry-run",
            ],
            client=client,
        )
        == 0
    )
    spec = json.loads(capsys.readouterr().out)["calls"][0]["kwargs"]
    assert spec["jobDefinitionName"] == "cleanrl-cpu-s3" and spec["containerProperties"]["image"] == "repo:cpu-abc"
    assert spec["containerProperties"]["resourceRequirements"] == [
        {"type": "VCPU", "value": "4"},
        {"type": "MEMORY", "value": "16384"},
    ]
    assert spec["timeout"] == {"attemptDurationSeconds": 7200} and spec["retryStrategy"]["attempts"] == 5


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("job_queues", ["cleanrl-cpu-spot"], "job_queues must be an object"),
        ("job_queues", {"cpu_spot": "q\ntouch pwned"}, "job_queues.cpu_spot must be a job queue name or ARN"),
        ("job_definitions", {"cpu": 5}, "job_definitions.cpu must be a job definition name or ARN"),
        ("region", 5, "region must be an AWS region name"),
        ("checkpoint_bucket", ["b"], "checkpoint_bucket must be an S3 bucket name"),
        ("checkpoint_prefix", "../runs", "checkpoint_prefix must be one S3 key segment"),
        ("log_group", "/aws/batch/cleanrl\nx", "log_group must be a CloudWatch Logs group name"),
        ("job_role_arn", "arn:aws:iam::123456789012:role/x y", "job_role_arn must be an IAM role ARN"),
        ("wandb_secret_arn", SECRET + "\x1b", "wandb_secret_arn must be a secret's ARN"),
    ],
)
def test_outputs_values_are_checked(batch, tmp_path, capsys, key, value, message):
    """A value of the outputs file that reaches a job definition, an AWS call or a printed command is
    checked by form: one line naming the file's flag, never a traceback, nothing sent."""
    outputs = json.loads(Path(batch["outputs"]).read_text())
    outputs[key]["value"] = value
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(outputs))
    with pytest.raises(SystemExit) as stop:
        submit_exp.main([*GRID, "--terraform-outputs", str(path), "--image", "repo/cleanrl:cpu"], client=batch["client"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --terraform-outputs: {message}") and err.count("\n") == 1, err
    assert batch["sent"] == []


def test_cloud_run_refuses_odd_grids(capsys):
    command = '"command": ["python", "x.py"]'
    cases = [
        f'{{{command}, "env_ids": [5], "seeds": [1]}}',  # an env id that is not a string
        f'{{{command}, "env_ids": ["A-v0\\ntouch pwned"], "seeds": [1]}}',
        f'{{{command}, "env_ids": ["A-v0"], "seeds": [1e400]}}',  # infinite
        f'{{{command}, "env_ids": ["A-v0"], "seeds": [true]}}',
        '{"command": "python x.py", "env_ids": ["A-v0"], "seeds": [1]}',  # a string, not a list
        f'{{{command}, "env_ids": ["A-v0"], "seeds": [1], "extra": {{"a": 1}}}}',
        "[" * 100_000,  # nested deeper than the JSON reader recurses
        "[]",
    ]
    for grid in cases:
        with pytest.raises(SystemExit) as stop:
            cloud_run.main(["--grid-json", grid, "--array-index", "0"])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --grid-json: not a grid") and err.count("\n") == 1, (grid[:80], err)


def test_cloud_run_downloads_only_into_runs(aws, tmp_path, monkeypatch, capsys):
    """S3 keys are data: one that names a path outside ./runs is skipped, and a link in ./runs stops the job."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="cleanrl-runs-test")
    outside = tmp_path / "outside"
    keys = ["p/runs/r/ok.txt", "p/runs/" + str(outside / "abs.txt"), "p/runs/r/../../up.txt", "p/runs/r//x", "p/runs/a\nb"]
    for key in keys:
        s3.put_object(Bucket="cleanrl-runs-test", Key=key, Body=b"data")
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.chdir(job)
    assert cloud_run.S3Sync("cleanrl-runs-test", "p", s3).download() == 1
    assert (job / "runs" / "r" / "ok.txt").read_bytes() == b"data"
    assert not outside.exists() and not (tmp_path / "up.txt").exists()
    assert sorted(p.relative_to(job).as_posix() for p in job.rglob("*")) == ["runs", "runs/r", "runs/r/ok.txt"]
    assert capsys.readouterr().err.count("not a file inside runs/") == 4

    second = tmp_path / "job2"  # a link where a downloaded folder goes: one line, nothing written through it
    (second / "runs").mkdir(parents=True)
    outside.mkdir()
    (second / "runs" / "r").symlink_to(outside)
    monkeypatch.chdir(second)
    with pytest.raises(SystemExit) as stop:
        cloud_run.main(["--bucket", "cleanrl-runs-test", "--prefix", "p", "--", "true"], s3_client=s3)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if not line.startswith("cloud_run: skipped")] == err[-1:], err  # the skips, one error
    assert err[-1].startswith("error: --prefix: cannot download") and "runs/r is a symbolic link" in err[-1], err
    assert list(outside.iterdir()) == []

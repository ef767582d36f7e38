#!/usr/bin/env bash
# Build Steward's images: steward-{informer,manager,controller-job,controller-replicaset,
# controller-replicationcontroller,controller-deployment,controller-endpoint,controller-endpointslice,controller-daemonset,
# controller-horizontalpodautoscaling,controller-garbagecollector,controller-namespace,
# controller-serviceaccount,controller-serviceaccount-token,
# controller-legacy-service-account-token-cleaner,controller-root-ca-cert-publisher,
# controller-clusterrole-aggregation,controller-csrapproving,controller-csrsigning,
# controller-csrcleaner,controller-bootstrapsigner,controller-tokencleaner,
# controller-nodelifecycle,controller-taint-eviction-controller,controller-podgc,
# controller-ttl,controller-ttl-after-finished,controller-resourcequota,controller-cronjob,
# controller-disruption,controller-statefulset}:TAG
# (TAG: the first argument, else $STEWARD_IMAGE_TAG, else dev).
#
#   deploy/images/build.sh [TAG] [BUILDER FLAGS...]      the default (`make images` runs it)
#     Without a daemon or registry: `python -m steward.images` (tools/src/steward/images/)
#     builds every image into one OCI image-layout archive, reproducibly (same inputs, same
#     digests), with mmdebstrap (a Debian bookworm base with its python3.11, built once per
#     machine and cached) and umoci; needs root, mmdebstrap and umoci (`make node-packages`)
#     and the Python environment (`make venv`). It prints the images as containerd names
#     them (docker.io/library/steward-informer:TAG …), their digests and sizes, and the
#     archive's path, for a node's containerd to import:
#       ctr -n k8s.io images import <archive>
#     Builder flags (python -m steward.images --help): --pause (registry.k8s.io/pause:3.10.2
#     from Steward's pause program too; `make images` passes it), --no-cache, --output PATH,
#     --import SOCKET (import into that containerd), --json.
#
#   deploy/images/build.sh --engine[=docker|podman] [TAG]
#     deploy/images/Dockerfile, one target per service, with docker (its daemon running),
#     else podman; the images are tagged ${STEWARD_IMAGE_PREFIX:-steward}-<service>:TAG in
#     that engine's store. For machines with an engine; the same venvs in the same layers
#     (the stage `venv`, shared by every target and built once, then each target's own),
#     another base (python:3.11-slim-bookworm), not byte-for-byte reproducible.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

engine=""
case "${1:-}" in
  --engine) engine="auto"; shift ;;
  --engine=*) engine="${1#--engine=}"; shift ;;
esac

tag="${STEWARD_IMAGE_TAG:-dev}"
if [[ $# -gt 0 && "$1" != -* ]]; then
  tag="$1"
  shift
fi

if [[ -z "$engine" ]]; then
  python="${root}/.venv/bin/python"
  if [[ ! -x "$python" ]]; then
    echo "deploy/images/build.sh: error: no Python environment at ${root}/.venv (run \`make venv\`)" >&2
    exit 1
  fi
  cd "$root"
  exec "$python" -m steward.images --tag "$tag" "$@"
fi

prefix="${STEWARD_IMAGE_PREFIX:-steward}"
case "$engine" in
  auto) candidates=(docker podman) ;;
  docker | podman) candidates=("$engine") ;;
  *)
    echo "deploy/images/build.sh: error: --engine is docker or podman, not ${engine}" >&2
    exit 2
    ;;
esac
# The first engine that is installed and answers (a docker CLI without a daemon does not).
engine=""
for candidate in "${candidates[@]}"; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" info >/dev/null 2>&1; then
    engine="$candidate"
    break
  fi
done
if [[ -z "$engine" ]]; then
  echo "deploy/images/build.sh: error: no running container engine (${candidates[*]}); without one, run deploy/images/build.sh without --engine" >&2
  exit 1
fi

for target in informer manager controller-job controller-replicaset \
  controller-replicationcontroller controller-deployment \
  controller-endpoint controller-endpointslice controller-daemonset \
  controller-horizontalpodautoscaling controller-garbagecollector controller-namespace \
  controller-serviceaccount \
  controller-serviceaccount-token \
  controller-legacy-service-account-token-cleaner \
  controller-root-ca-cert-publisher \
  controller-clusterrole-aggregation \
  controller-csrapproving \
  controller-csrsigning \
  controller-csrcleaner \
  controller-nodelifecycle \
  controller-taint-eviction-controller \
  controller-podgc \
  controller-ttl \
  controller-ttl-after-finished \
  controller-resourcequota \
  controller-cronjob \
  controller-disruption \
  controller-statefulset \
  controller-bootstrapsigner \
  controller-tokencleaner; do
  image="${prefix}-${target}:${tag}"
  echo "building ${image} with ${engine}" >&2
  DOCKER_BUILDKIT=1 "$engine" build \
    --file "${root}/deploy/images/Dockerfile" \
    --target "$target" \
    --tag "$image" \
    "$root"
done

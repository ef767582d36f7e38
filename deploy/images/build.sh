#!/usr/bin/env bash
# Build Steward's images (deploy/images/Dockerfile, one target per service) with docker,
# else podman. Usage: deploy/images/build.sh [TAG]   (default tag: dev; $STEWARD_IMAGE_TAG)
# Images: ${STEWARD_IMAGE_PREFIX:-steward}-{informer,manager,controller-job,
#   controller-replicaset,controller-deployment}:TAG
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tag="${1:-${STEWARD_IMAGE_TAG:-dev}}"
prefix="${STEWARD_IMAGE_PREFIX:-steward}"

# The first engine that is installed and answers (a docker CLI without a daemon does not).
engine=""
for candidate in docker podman; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" info >/dev/null 2>&1; then
    engine="$candidate"
    break
  fi
done
if [[ -z "$engine" ]]; then
  echo "deploy/images/build.sh: error: no running container engine (need docker with its daemon, or podman)" >&2
  exit 1
fi

for target in informer manager controller-job controller-replicaset controller-deployment; do
  image="${prefix}-${target}:${tag}"
  echo "building ${image} with ${engine}" >&2
  DOCKER_BUILDKIT=1 "$engine" build \
    --file "${root}/deploy/images/Dockerfile" \
    --target "$target" \
    --tag "$image" \
    "$root"
done

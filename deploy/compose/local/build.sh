#!/usr/bin/env bash
# Builds the compose stack's balancer, Prometheus and PostgreSQL from Debian's packages (no image
# registry needed), on the local base that `make image` makes; reused when already built.
set -euo pipefail
cd "$(dirname "$0")"
# The debootstrap base of `make image` where there is one, else Debian's own image (pulled).
base=${ARENGINE_LOCAL_BASE:-arengine-base:bookworm}
docker image inspect "$base" >/dev/null 2>&1 || base=debian:bookworm-slim
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0
for name in nginx prometheus postgres; do
  if [ -z "${ARENGINE_REBUILD:-}" ] && docker image inspect "arengine-$name:local" >/dev/null 2>&1; then
    continue
  fi
  docker build -q --network host --build-arg "BASE=$base" -f "$name.Dockerfile" -t "arengine-$name:local" . >/dev/null
  echo "build: arengine-$name:local" >&2
done

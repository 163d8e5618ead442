"""One long recording in every format people have, over HTTP, side by side in one run.

    python -m loadtests.recordings loadtests/out/35min-44k.wav --minutes 35 --rate 44100 \
        --channels 2
    python -m loadtests.formats loadtests/out/35min-44k.wav

Encodes the recording with Debian's ffmpeg (16 kHz mono WAV, 44.1 kHz stereo MP3, M4A/AAC,
WebM/Opus, MP4 with a video track, WMA), starts one server, posts each file (the timed ones
`--runs` times, alternating, best kept) and prints a Markdown table: end-to-end seconds, the ratio
to the 16 kHz WAV, and frame F1 (10 ms frames) of the speech tags against the recording's known
speech intervals (`<file>.speech.json`, written by `loadtests.recordings`). Beside each timed
compressed file, in the same alternation: FFmpeg decoding it alone to what the speech model reads,
`ffmpeg -threads 1 -i FILE -ac 1 -ar 16000 -f f32le -y /dev/null` (the issue's floor), and the
ratio of the two (below 1.0: the whole request took less than decoding alone), best against
best and for each run (that run's request against that run's FFmpeg).
`--server-flag=--no-parallel-decoding` passes a flag to `arengine serve` (there: one child per
request, not parts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from loadtests.server import running_server

VIDEO = ["-f", "lavfi", "-i", "testsrc=size=64x48:rate=1", "-map", "1:v", "-map", "0:a",
         "-shortest", "-c:v", "libx264", "-preset", "ultrafast"]  # fmt: skip
ENCODINGS = {
    "16k.wav": ["-ar", "16000", "-ac", "1", "-c:a", "pcm_s16le"],
    "44k.mp3": ["-c:a", "libmp3lame", "-b:a", "128k"],
    "44k.m4a": ["-c:a", "aac", "-b:a", "128k"],
    "browser.webm": ["-c:a", "libopus", "-b:a", "48k"],
    "video.mp4": [*VIDEO, "-c:a", "aac", "-b:a", "96k"],
    "call.wma": ["-c:a", "wmav2", "-b:a", "64k"],
}
TIMED = ("16k.wav", "44k.mp3", "44k.m4a", "browser.webm")


def ffmpeg_alone(path: Path) -> float:
    """Wall seconds for FFmpeg's command line to decode `path` to 16 kHz mono float32 alone."""
    started = time.perf_counter()
    command = ["ffmpeg", "-v", "error", "-threads", "1", "-i", str(path), "-ac", "1", "-ar",
               "16000", "-f", "f32le", "-y", "/dev/null"]  # fmt: skip
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def encode(source: Path, out: Path) -> dict[str, Path]:
    paths = {}
    for name, args in ENCODINGS.items():
        path = out / f"{source.stem}-{name}"
        if not path.exists():
            command = ["ffmpeg", "-v", "error", "-y", "-i", str(source), *args, str(path)]
            subprocess.run(command, check=True)
        paths[name] = path
    return paths


def post(url: str, path: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    with path.open("rb") as body:
        response = httpx.post(url + "/v1/recognize", files={"file": body}, timeout=7200)
    response.raise_for_status()
    return time.perf_counter() - started, response.json()


def frame_f1(tags: list[dict[str, Any]], truth: list[list[float]], seconds: float) -> float:
    def mask(intervals: list[tuple[float, float]]) -> np.ndarray:
        out = np.zeros(int(seconds * 100) + 1, bool)
        for start, end in intervals:
            out[int(start * 100) : int(end * 100)] = True
        return out

    ours = mask([(t["start"], t["end"]) for t in tags])
    theirs = mask([(start, end) for start, end in truth])
    return float(2 * (ours & theirs).sum() / (ours.sum() + theirs.sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a WAV written by loadtests.recordings")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument(
        "--server-flag", action="append", default=[], help="passed to `arengine serve`"
    )
    options = parser.parse_args()
    truth = json.loads(options.source.with_name(options.source.name + ".speech.json").read_text())
    paths = encode(options.source, options.source.parent)
    best: dict[str, float] = {}
    alone: dict[str, float] = {}
    ratios: dict[str, list[float]] = {}
    """Each run's end-to-end seconds over ffmpeg's alone in the same round: the target holds
    in every run, not only for the best of each."""
    answers: dict[str, dict[str, Any]] = {}
    with running_server(options.port, *options.server_flag) as (_, url):
        post(url, paths["16k.wav"])  # warm the server's caches and the page cache
        for _ in range(options.runs):
            for name in TIMED:
                seconds, answers[name] = post(url, paths[name])
                best[name] = min(best.get(name, float("inf")), seconds)
                if name != "16k.wav":
                    floor = ffmpeg_alone(paths[name])
                    alone[name] = min(alone.get(name, float("inf")), floor)
                    ratios.setdefault(name, []).append(seconds / floor)
        for name in ENCODINGS:
            if name not in answers:
                best[name], answers[name] = post(url, paths[name])
    wav = best["16k.wav"]
    print(
        "| file | audio | decoder | end to end s | x WAV | ffmpeg alone s | / ffmpeg alone "
        "| each run / ffmpeg | speech F1 | F1 - WAV's |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    reference = None
    for name in ENCODINGS:
        audio = answers[name]["audio"]
        f1 = frame_f1(answers[name]["tags"], truth, audio["duration_s"])
        reference = f1 if reference is None else reference
        cells = [
            name,
            f"{audio['format']} {audio['subtype']} {audio['sample_rate']} Hz x{audio['channels']}",
            audio["decoder"],
            f"{best[name]:.2f}",
            f"{best[name] / wav:.2f}",
            f"{alone[name]:.2f}" if name in alone else "",
            f"{best[name] / alone[name]:.2f}" if name in alone else "",
            ", ".join(f"{ratio:.2f}" for ratio in ratios.get(name, [])),
            f"{f1:.4f}",
            f"{f1 - reference:+.4f}",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

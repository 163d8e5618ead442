"""Decoding alone, one file: in the process, in one child, and in parts by a child each.

    python -m loadtests.parts_decode loadtests/out/35min-44k.mp3 [--parts 2] [--runs 3]

The speech model's segments (its plan, 16 kHz) from `decode` + `Segmenter` on one thread: in the
process, in one forked child, and in `--parts` parts by a child each (`parts.PartDecoding`). No
model runs: what is timed is decoding only. Alternating, best of `--runs`; wall seconds, and CPU
seconds of the process and its children (the fork server's children count in its own, which
`cpu_seconds` does not see: the CPU column is the server process's share).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from arengine.audio import child
from arengine.audio.decode import decode
from arengine.audio.segments import Segmenter, SegmentPlan
from arengine.audio.validation import AudioLimits, probe
from arengine.kinds.speech.network import CONTEXT, WINDOW
from arengine.types import AudioInfo
from loadtests.thread_sweep import cpu_seconds

LIMITS = AudioLimits(
    max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
RATE = 16000
CAP = 2**40
SEGMENT_PLAN = SegmentPlan(hop=WINDOW, context=CONTEXT, segment_frames=938, preroll_frames=62)
"""The speech model's default: 30 s segments, 2 s pre-roll (`models/speech/manifest.toml`)."""


def segments(path: Path, info: AudioInfo, plan: SegmentPlan, in_child: bool, parts: int) -> int:
    decoding = decode(path, info, RATE, CAP, None, in_child, parts)
    try:
        return sum(1 for _ in Segmenter(decoding, plan))
    finally:
        decoding.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    path: Path = options.path
    info = probe(path, LIMITS)
    child.start()
    best: dict[str, tuple[float, float]] = {}
    steps: dict[str, Callable[[], int]] = {
        "in process, 1 thread": lambda: segments(path, info, SEGMENT_PLAN, False, 1),
        "1 child": lambda: segments(path, info, SEGMENT_PLAN, True, 1),
        f"{options.parts} parts (a child each)": lambda: segments(
            path, info, SEGMENT_PLAN, True, options.parts
        ),
    }
    counts = set()
    for _ in range(options.runs):
        for name, step in steps.items():
            cpu, wall = cpu_seconds(os.getpid()), time.perf_counter()
            counts.add(step())
            wall, cpu = time.perf_counter() - wall, cpu_seconds(os.getpid()) - cpu
            if wall < best.get(name, (float("inf"), 0.0))[0]:
                best[name] = (wall, cpu)
    assert len(counts) == 1, f"the ways gave different segment counts: {counts}"
    audio = f"{info.format} {info.sample_rate} Hz x{info.channels}"
    print(f"{path.name}: {audio}, {counts.pop()} segments")
    print("| decoding | wall s | CPU s |")
    print("|---|---|---|")
    for name, (wall, cpu) in best.items():
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()

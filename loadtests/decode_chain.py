"""Where one file's decoding time goes, step by step, in one process on one core.

    python -m loadtests.decode_chain loadtests/out/35min-44k.mp3 [--rate 16000]

Times, one after the other: PyAV's demux and decode alone; plus `to_ndarray` per frame;
arengine's `read_blocks` (float32 blocks, its checks and caps); plus the mono mix; plus the
resampling to `--rate` (the engine's whole decoding chain). Compare with the decoder without
Python: `ffmpeg -threads 1 -i FILE -f null -`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import av
import numpy as np

from arengine.audio.decode import read_blocks, to_mono
from arengine.audio.tee import Tee
from arengine.audio.validation import AudioLimits, probe

LIMITS = AudioLimits(
    max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


def _frames(path: Path) -> Iterator[av.AudioFrame]:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        for packet in container.demux(stream):
            yield from stream.codec_context.decode(packet)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--rate", type=int, default=16000)
    args = parser.parse_args()
    path: Path = args.path
    info = probe(path, LIMITS)

    def chain(mono: bool, rate: int | None) -> Iterator[np.ndarray]:
        blocks = read_blocks(path, info, 2**62)
        if not mono:
            return blocks
        if rate is None:
            return to_mono(blocks)
        return Tee(to_mono(blocks), info.sample_rate, [rate]).reader(0)

    steps: list[tuple[str, Callable[[], int]]] = [
        ("PyAV demux and decode", lambda: sum(f.samples for f in _frames(path))),
        ("+ to_ndarray per frame", lambda: sum(f.to_ndarray().shape[-1] for f in _frames(path))),
        ("arengine read_blocks", lambda: sum(len(b) for b in chain(False, None))),
        ("+ mono", lambda: sum(len(b) for b in chain(True, None))),
        (f"+ resampled to {args.rate} Hz", lambda: sum(len(b) for b in chain(True, args.rate))),
    ]
    print(f"{path.name}: {info.format} {info.subtype}, {info.sample_rate} Hz, {info.channels} ch")
    print("| step | wall s | CPU s | samples out |")
    print("|---|---|---|---|")
    for label, step in steps:
        cpu, wall = time.process_time(), time.perf_counter()
        count = step()
        print(
            f"| {label} | {time.perf_counter() - wall:.2f} | {time.process_time() - cpu:.2f} "
            f"| {count} |"
        )


if __name__ == "__main__":
    main()

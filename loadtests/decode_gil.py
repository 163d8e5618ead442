"""How much of decoding holds the GIL: py-spy's GIL samples; a Python thread's progress beside it.

    python -m loadtests.decode_gil loadtests/out/35min-44k.mp3 [--rate 16000] [--py-spy]

The engine's decoding chain (`decode.decode` to one model rate, every block taken) runs on one
thread. Alone: its wall and CPU seconds. Beside a pure-Python thread that counts: the chain's wall
time and the counter's rate against its rate alone (what a thread holding the GIL leaves to the
others). With `--py-spy`, the chain also runs in a child process under `py-spy record --gil`
(py-spy must be in the venv: `pip install py-spy`): the share of the wall time in which a thread
held the GIL, and which part of the chain held it. With `--parts N`, the file is decoded in N
parts by a forked child each (`parts.PartDecoding`; 1: one child), and the process reads their
samples and resamples them.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe

LIMITS = AudioLimits(
    max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
STAGES = (
    ("resampling (soxr)", ("resample_chunk",)),
    ("decoding (demux, decode, to float32 mono blocks)", ("_ffmpeg_blocks", "_ffmpeg_frames")),
    ("the channel mean and checks", ("to_mono",)),
    ("reading the children's pipes", ("_read", "_finish")),
)


PARTS = [0]
"""`--parts`: 0 decodes in the process; more, in that many parts by a forked child each."""


def chain(path: Path, rate: int) -> int:
    """Decode `path` to `rate` the engine's way; the samples out."""
    info = probe(path, LIMITS)
    decoding = decode(path, info, rate, 2**62, None, PARTS[0] > 0, max(1, PARTS[0]))
    try:
        return sum(len(block) for block in decoding)
    finally:
        decoding.close()


def beside_counter(path: Path, rate: int) -> tuple[float, float]:
    """The chain's wall seconds beside a counting thread, and the counter's rate (per s)."""
    count, stop = [0], threading.Event()

    def counter() -> None:
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=counter)
    thread.start()
    started = time.perf_counter()
    chain(path, rate)
    wall = time.perf_counter() - started
    stop.set()
    thread.join()
    return wall, count[0] / wall


def counter_alone(seconds: float = 1.0) -> float:
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        count += 1
    return count / (time.perf_counter() - started)


def py_spy(path: Path, rate: int, sampling: int) -> None:
    spy = str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "raw.txt"
        child = [sys.executable, "-m", "loadtests.decode_gil", str(path), "--rate", str(rate),
                 "--parts", str(PARTS[0])]  # fmt: skip
        record = ["record", "--gil", "--format", "raw", "-r", str(sampling), "-o", str(raw)]
        done = subprocess.run(
            [spy, *record, "--", *child, "--child"],
            check=True,
            capture_output=True,
            text=True,
        )
        wall = next(
            float(line.split()[-1]) for line in done.stdout.splitlines() if "chain wall" in line
        )
        stages: collections.Counter[str] = collections.Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if "chain" not in stack:
                stages["start-up and imports"] += int(count)
                continue
            name = next(
                (label for label, keys in STAGES if any(key in stack for key in keys)), "other"
            )
            stages[name] += int(count)
    held = sum(samples for name, samples in stages.items() if name != "start-up and imports")
    print(
        f"  py-spy --gil at {sampling} Hz: the chain ran {wall:.2f} s and held the GIL"
        f" {held / sampling:.2f} s ({held / sampling / wall:.0%})"
    )
    for name, samples in stages.most_common():
        print(f"    {name}: {samples / sampling:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--rate", type=int, default=16000)
    parser.add_argument("--py-spy", action="store_true", help="also sample the GIL with py-spy")
    parser.add_argument("--sampling", type=int, default=200, help="py-spy samples per second")
    parser.add_argument(
        "--parts", type=int, default=0, help="decode in N parts, a forked child each (1: one child)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    PARTS[0] = options.parts
    path, rate = options.path, options.rate
    if options.child:
        started = time.perf_counter()
        chain(path, rate)
        print(f"chain wall {time.perf_counter() - started}")
        return
    chain(path, rate)  # the page cache and the libraries
    cpu, started = time.process_time(), time.perf_counter()
    samples = chain(path, rate)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    alone = np.median([counter_alone() for _ in range(3)])
    beside, rate_beside = beside_counter(path, rate)
    print(f"{path.name} to {rate} Hz: {samples} samples")
    print(f"  alone: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(
        f"  beside a counting thread: {beside:.2f} s wall ({beside / wall:.1f}x); the counter ran"
        f" at {rate_beside / alone:.0%} of its rate alone"
    )
    if options.py_spy:
        py_spy(path, rate, options.sampling)


if __name__ == "__main__":
    main()

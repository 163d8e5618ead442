"""Latency of 5-second clips alone, and while long recordings are being processed.

    python -m loadtests.short_under_load loadtests/out/2h.wav --clips 40 --long-clients 2

Starts a real `arengine serve` on 127.0.0.1, posts `--clips` 5-second clips one after another
(alone), then again while `--long-clients` clients keep posting the long recording; prints
p50/p95/p99 for both phases. Bounded: a fixed number of clips, against loopback only.

The loaded phase's first clip is also on a row of its own. With `--loaded-first` the loaded
phase comes first, so that clip is the server's first: the engine pool batches on every thread
until it has served a clip (`CLIP_MEMORY_S`), and its latency is what a clip after five minutes
without one waits.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from loadtests.recordings import phrases
from loadtests.server import start_server


def percentiles(values: list[float]) -> str:
    p50, p95, p99 = np.percentile(np.array(values) * 1000, [50, 95, 99])
    return f"{p50:.0f} | {p95:.0f} | {p99:.0f}"


def post(url: str, path: Path) -> float:
    with path.open("rb") as body:
        started = time.perf_counter()
        response = httpx.post(url + "/v1/recognize", files={"file": body}, timeout=3600)
    response.raise_for_status()
    return time.perf_counter() - started


def _under_load(
    url: str, clip: Path, long: Path, long_clients: int, clips: int
) -> tuple[list[float], list[float]]:
    """`clips` clips' latencies while `long_clients` clients keep posting `long`, and the long
    recordings' own times."""
    stop = threading.Event()
    long_done: list[float] = []

    def long_client() -> None:
        while not stop.is_set():
            long_done.append(post(url, long))

    threads = [threading.Thread(target=long_client) for _ in range(long_clients)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    loaded = []
    for _ in range(clips):
        loaded.append(post(url, clip))
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    return loaded, long_done


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("long", type=Path)
    parser.add_argument("--clips", type=int, default=40)
    parser.add_argument("--long-clients", type=int, default=2)
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument("--models-dir", type=Path, help="serve these models (default: the repo's)")
    parser.add_argument(
        "--loaded-first", action="store_true", help="the loaded phase first (the first clip cold)"
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    clip = folder / "clip.wav"
    speech = phrases(16000)[0][: 5 * 16000]
    sf.write(clip, np.concatenate([speech, np.zeros(5 * 16000 - len(speech), np.float32)]), 16000)
    flags = ["--models-dir", str(args.models_dir)] if args.models_dir else []
    server, url = start_server(args.port, *flags)
    try:
        alone = [] if args.loaded_first else [post(url, clip) for _ in range(args.clips)]
        loaded, long_done = _under_load(url, clip, args.long, args.long_clients, args.clips)
        if args.loaded_first:
            alone = [post(url, clip) for _ in range(args.clips)]
    finally:
        server.terminate()
        server.wait()
    print("| phase | clips | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|---|")
    print(f"| 5 s clips alone | {len(alone)} | {percentiles(alone)} |")
    phase = f"5 s clips, {args.long_clients} clients posting {args.long.name}"
    print(f"| {phase} | {len(loaded)} | {percentiles(loaded)} |")
    first = "the server's first" if args.loaded_first else "after the clips alone"
    print(f"| its first clip, {first} | 1 | {loaded[0] * 1000:.0f} | | |")
    print(f"\nlong recordings done meanwhile: {len(long_done)}, {np.mean(long_done):.1f} s each")


if __name__ == "__main__":
    main()

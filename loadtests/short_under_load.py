"""Latency of 5-second clips alone, and while long recordings are being processed.

    python -m loadtests.short_under_load loadtests/out/2h.wav --clips 40 --long-clients 2

Starts a real `arengine serve` on 127.0.0.1, posts `--clips` 5-second clips one after another
(alone), then again while `--long-clients` clients keep posting the long recording; prints
p50/p95/p99 for both phases. Bounded: a fixed number of clips, against loopback only.
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("long", type=Path)
    parser.add_argument("--clips", type=int, default=40)
    parser.add_argument("--long-clients", type=int, default=2)
    parser.add_argument("--port", type=int, default=8795)
    parser.add_argument("--models-dir", type=Path, help="serve these models (default: the repo's)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    clip = folder / "clip.wav"
    speech = phrases(16000)[0][: 5 * 16000]
    sf.write(clip, np.concatenate([speech, np.zeros(5 * 16000 - len(speech), np.float32)]), 16000)
    flags = ["--models-dir", str(args.models_dir)] if args.models_dir else []
    server, url = start_server(args.port, *flags)
    try:
        alone = [post(url, clip) for _ in range(args.clips)]
        stop = threading.Event()
        long_done: list[float] = []

        def long_client() -> None:
            while not stop.is_set():
                long_done.append(post(url, args.long))

        clients = [threading.Thread(target=long_client) for _ in range(args.long_clients)]
        for client in clients:
            client.start()
        time.sleep(1.0)
        loaded = []
        for _ in range(args.clips):
            loaded.append(post(url, clip))
            time.sleep(0.05)
        stop.set()
        for client in clients:
            client.join()
    finally:
        server.terminate()
        server.wait()
    print("| phase | clips | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|---|")
    print(f"| 5 s clips alone | {len(alone)} | {percentiles(alone)} |")
    phase = f"5 s clips, {args.long_clients} clients posting {args.long.name}"
    print(f"| {phase} | {len(loaded)} | {percentiles(loaded)} |")
    print(f"\nlong recordings done meanwhile: {len(long_done)}, {np.mean(long_done):.1f} s each")


if __name__ == "__main__":
    main()

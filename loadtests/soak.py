"""Soak: mixed good and bad traffic against one server for a while, RSS and latency recorded.

    python -m loadtests.soak --minutes 60 --clients 3 --out loadtests/out/soak-jemalloc.csv
    python -m loadtests.soak --minutes 60 --no-jemalloc --out loadtests/out/soak-glibc.csv

Every second the server's RSS is sampled into the CSV; at the end a summary is printed: requests by
status, latency percentiles of the good requests, and RSS start, peak, mean and growth (mean RSS of
the last fifth of the run against the second fifth: a leak shows as steady growth).
"""

from __future__ import annotations

import argparse
import collections
import csv
import random
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from loadtests.recordings import write_recording
from loadtests.server import sample_memory, start_server


def inputs(folder: Path) -> list[tuple[str, bytes]]:
    """Good files (a 5-minute recording, a 30 s stereo FLAC clip) and bad ones."""
    long, clip = folder / "5min.wav", folder / "clip.flac"
    write_recording(long, 5, 16000, 1, seed=1)
    write_recording(clip, 0.5, 44100, 2, seed=2)
    good = clip.read_bytes()
    return [
        ("good", long.read_bytes()),
        ("good", good),
        ("good", good),
        ("empty", b""),
        ("random", random.Random(0).randbytes(50_000)),
        ("truncated", good[:300]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--no-jemalloc", action="store_true")
    parser.add_argument("--port", type=int, default=8797)
    parser.add_argument("--out", type=Path, default=Path("loadtests/out/soak.csv"))
    args = parser.parse_args()
    corpus = inputs(Path(tempfile.mkdtemp()))
    flags = ["--no-jemalloc"] if args.no_jemalloc else []
    server, url = start_server(args.port, *flags)
    statuses: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    stop = threading.Event()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, timeout=600) as http:
            while not stop.is_set():
                kind, body = rng.choice(corpus)
                started = time.perf_counter()
                response = http.post("/v1/recognize", files={"file": ("x", body)})
                statuses[f"{kind} {response.status_code}"] += 1
                if kind == "good" and response.status_code == 200:
                    latencies.append(time.perf_counter() - started)

    try:
        workers = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for worker in workers:
            worker.start()
        samples, peak = sample_memory(server.pid, args.minutes)
        stop.set()
        for worker in workers:
            worker.join()
    finally:
        server.terminate()
        server.wait()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as out:
        csv.writer(out).writerows([("seconds", "rss_mib"), *samples])
    rss = np.array([value for _, value in samples])
    fifth = max(1, len(rss) // 5)
    p50, p95, p99 = np.percentile(np.array(latencies) * 1000, [50, 95, 99])
    print(
        f"allocator: {'glibc' if args.no_jemalloc else 'jemalloc'}, {args.minutes:g} min, "
        f"{args.clients} clients"
    )
    print(f"requests: {dict(sorted(statuses.items()))}")
    print(f"good latency ms: p50 {p50:.0f}, p95 {p95:.0f}, p99 {p99:.0f}")
    print(
        f"RSS MiB: start {rss[0]:.0f}, peak {peak:.0f}, mean {rss.mean():.0f}, "
        f"growth {rss[-fifth:].mean() - rss[fifth : 2 * fifth].mean():+.1f} (last fifth vs second)"
    )


if __name__ == "__main__":
    main()

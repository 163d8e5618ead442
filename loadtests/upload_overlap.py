"""Upload and recognition overlapped: a WAV read while it arrives, against one read once complete.

    python -m loadtests.upload_overlap loadtests/out/35min.wav [--rates 0 100 30] [--repeats 3]

Starts `arengine serve --models speech` twice, with `--read-while-uploading` and with
`--no-read-while-uploading`, and posts the file as a raw `audio/wav` body with its
Content-Length to each in turn (alternating, after one warm-up request each), from a client that
sends at most RATE MB/s (0: as fast as it can, on the same cores as the server). A client across
a network sends at its link's speed; pacing stands in for the link. Prints, per rate, each
server's median response time, the send time alone, and the server's CPU seconds per request.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from loadtests.roofline import this_cpu
from loadtests.server import start_server
from loadtests.thread_sweep import cpu_seconds

CHUNK = 256 * 1024


def paced(data: bytes, megabytes_per_s: float) -> Iterator[bytes]:
    """`data` in chunks, no faster than `megabytes_per_s` (0: unpaced)."""
    started = time.perf_counter()
    for offset in range(0, len(data), CHUNK):
        if megabytes_per_s > 0:
            due = started + offset / (megabytes_per_s * 1e6)
            time.sleep(max(due - time.perf_counter(), 0.0))
        yield data[offset : offset + CHUNK]


def post(url: str, data: bytes, rate: float, pid: int) -> tuple[float, float]:
    """(response seconds, server CPU seconds) of one request."""
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    response = httpx.post(
        url + "/v1/recognize",
        content=paced(data, rate),
        headers={"Content-Type": "audio/wav", "Content-Length": str(len(data))},
        timeout=3600,
    )
    seconds = time.perf_counter() - started
    response.raise_for_status()
    return seconds, cpu_seconds(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--rates", type=float, nargs="+", default=[0, 100, 30])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = args.path.read_bytes()
    flags = {"on": "--read-while-uploading", "off": "--no-read-while-uploading"}
    servers = {
        name: start_server(8795 + i, "--models", "speech", flag)
        for i, (name, flag) in enumerate(flags.items())
    }
    try:
        print(f"{args.path.name}: {len(data) / 1e6:.1f} MB; {this_cpu().line()}\n")
        print(
            "| client MB/s | send alone s | read while uploading s | read once complete s "
            "| saved | server CPU s (on / off) |"
        )
        print("|---|---|---|---|---|---|")
        for rate in args.rates:
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
            for process, url in servers.values():
                post(url, data, rate, process.pid)  # warm-up
            for _ in range(args.repeats):
                for name, (process, url) in servers.items():
                    times[name].append(post(url, data, rate, process.pid))
            on, off = (statistics.median(t for t, _ in times[n]) for n in ("on", "off"))
            cpu_on, cpu_off = (statistics.median(c for _, c in times[n]) for n in ("on", "off"))
            alone = len(data) / (rate * 1e6) if rate else float("nan")
            print(
                f"| {rate or 'unpaced'} | {alone:.2f} | {on:.2f} | {off:.2f} "
                f"| {1 - on / off:.0%} | {cpu_on:.2f} / {cpu_off:.2f} |"
            )
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()

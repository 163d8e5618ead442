"""Threads versus processes: one server with N engine threads against N single-thread servers.

    python -m loadtests.threads_vs_processes loadtests/out/35min.wav [--n 2] [--rounds 2]
    python -m loadtests.threads_vs_processes loadtests/out/35min-44k.mp3 \
        --server-flag=--parallel-decoding

Both set-ups get the same load (N clients, each posting the recording `--rounds` times; in the
process set-up each client has its own server) and intra-op 1. Reported: wall time, throughput
(audio seconds per second), the servers' CPU seconds (what a busy shared machine distorts less
than wall time) and the sum of their peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from pathlib import Path

import httpx

from arengine.audio.validation import AudioLimits, probe
from arengine.system.threads import available_cpus
from loadtests.server import memory_mib, running_server
from loadtests.thread_sweep import cpu_seconds


def load(ports: list[int], clients: int, data: bytes, rounds: int) -> float:
    def client(port: int) -> None:
        for _ in range(rounds):
            httpx.post(
                f"http://127.0.0.1:{port}/v1/recognize", files={"file": data}, timeout=3600
            ).raise_for_status()

    workers = [
        threading.Thread(target=client, args=(ports[i % len(ports)],)) for i in range(clients)
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


def measure(
    path: Path, n: int, rounds: int, processes: bool, flags: list[str]
) -> tuple[float, float, float]:
    ports = [8850 + i for i in range(n if processes else 1)]
    threads = "1" if processes else str(n)
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                running_server(port, "--models", "speech", "--engine-threads", threads, *flags)
            )[0]
            for port in ports
        ]
        cpu = sum(cpu_seconds(server.pid) for server in servers)
        wall = load(ports, n, path.read_bytes(), rounds)
        cpu = sum(cpu_seconds(server.pid) for server in servers) - cpu
        return wall, cpu, sum(memory_mib(server.pid, "VmHWM") for server in servers)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--n", type=int, default=available_cpus())
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--server-flag", action="append", default=[], help="passed to every `arengine serve`"
    )
    args = parser.parse_args()
    limits = AudioLimits(
        max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
    )
    audio = probe(args.path, limits).duration_s * args.n * args.rounds
    print(
        "| set-up | wall s | throughput (x real time) | server CPU s | audio s per CPU s "
        "| total peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|")
    results = {}
    for processes in (False, True):
        wall, cpu, rss = measure(args.path, args.n, args.rounds, processes, args.server_flag)
        name = (
            f"{args.n} processes x 1 engine thread"
            if processes
            else f"1 process x {args.n} engine threads"
        )
        results[processes] = rss
        print(
            f"| {name} | {wall:.1f} | {audio / wall:.0f}x | {cpu:.2f} | {audio / cpu:.0f} "
            f"| {rss:.0f} |",
            flush=True,
        )
    print(f"\nRSS ratio threads/processes: {results[False] / results[True]:.2f}")


if __name__ == "__main__":
    main()

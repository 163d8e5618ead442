"""Threads versus processes: one server with N engine threads against N single-thread servers.

    python -m loadtests.threads_vs_processes loadtests/out/35min.wav [--n 2] [--rounds 2] [--runs 3]
    python -m loadtests.threads_vs_processes loadtests/out/35min-44k.mp3 \
        --server-flag=--parallel-decoding

Both set-ups get the same load (N clients, each posting the recording `--rounds` times; in the
process set-up each client has its own server) and intra-op 1, `--runs` times, alternating
(threads first). Reported per run: wall time, throughput (audio seconds per second), the servers'
CPU seconds (what a busy shared machine distorts less than wall time; their children's too: the
`ffmpeg` parts, the decoders' fork server and the children it forked), the sum of their peak RSS,
and the peak RSS of their decoders' fork servers (`arengine/audio/child.py`, one per server,
started by the first compressed upload; the forked children come and go and are not counted);
then each run's ratios.
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


def helpers(pid: int) -> list[int]:
    """The server's child processes still running (its decoders' fork server)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():  # each thread's children: an engine
        with contextlib.suppress(FileNotFoundError):  # thread starts the fork server
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def helpers_mib(pid: int) -> float:
    """Peak RSS of the server's child processes still running, in MiB."""
    total = 0.0
    for child in helpers(pid):
        with contextlib.suppress(FileNotFoundError, RuntimeError):
            total += memory_mib(child, "VmHWM")
    return total


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of the server, of its children that ended, and of those still running with
    theirs that ended (the fork server waits for each decoding child)."""
    total = cpu_seconds(pid)
    for child in helpers(pid):
        with contextlib.suppress(FileNotFoundError):
            total += cpu_seconds(child)
    return total


def measure(
    path: Path, n: int, rounds: int, processes: bool, flags: list[str], port: int = 8850
) -> tuple[float, float, float, float]:
    ports = [port + i for i in range(n if processes else 1)]
    threads = "1" if processes else str(n)
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                running_server(port, "--models", "speech", "--engine-threads", threads, *flags)
            )[0]
            for port in ports
        ]
        cpu = sum(tree_cpu_seconds(server.pid) for server in servers)
        wall = load(ports, n, path.read_bytes(), rounds)
        cpu = sum(tree_cpu_seconds(server.pid) for server in servers) - cpu
        rss = sum(memory_mib(server.pid, "VmHWM") for server in servers)
        return wall, cpu, rss, sum(helpers_mib(server.pid) for server in servers)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--n", type=int, default=available_cpus())
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="alternating runs of both set-ups")
    parser.add_argument("--port", type=int, default=8850, help="the first server's port")
    parser.add_argument(
        "--server-flag", action="append", default=[], help="passed to every `arengine serve`"
    )
    args = parser.parse_args()
    limits = AudioLimits(
        max_duration_s=86400, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
    )
    audio = probe(args.path, limits).duration_s * args.n * args.rounds
    print(
        "| run | set-up | wall s | throughput (x real time) | server CPU s | audio s per CPU s "
        "| total peak RSS MiB | decoders' fork servers MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for run in range(1, args.runs + 1):
        results = {}
        for processes in (False, True):
            wall, cpu, rss, helpers = measure(
                args.path, args.n, args.rounds, processes, args.server_flag, args.port
            )
            name = (
                f"{args.n} processes x 1 engine thread"
                if processes
                else f"1 process x {args.n} engine threads"
            )
            results[processes] = (wall, rss)
            print(
                f"| {run} | {name} | {wall:.1f} | {audio / wall:.0f}x | {cpu:.2f} "
                f"| {audio / cpu:.0f} | {rss:.0f} | {helpers:.0f} |",
                flush=True,
            )
        (threads_wall, threads_rss), (processes_wall, processes_rss) = results[False], results[True]
        ratios.append((processes_wall / threads_wall, threads_rss / processes_rss))
    print()
    for run, (speed, memory) in enumerate(ratios, 1):
        print(f"run {run}: threads/processes throughput {speed:.2f}x, RSS ratio {memory:.2f}")


if __name__ == "__main__":
    main()

"""Memory over time (`bench-memory-over-time.png`): a long recording posted again and again.

    OUT=loadtests/out
    python -m loadtests.memory_over_time run $OUT/2h.wav --minutes 20 --out $OUT/mem-jemalloc.csv
    python -m loadtests.memory_over_time run $OUT/2h.wav --minutes 20 --no-jemalloc \
        --out $OUT/mem-glibc.csv
    python -m loadtests.memory_over_time plot $OUT/mem-glibc.csv $OUT/mem-jemalloc.csv

`run`: a fresh server, `--clients` clients each posting the file in a loop, the server's RSS
sampled every second into a CSV; prints peak, average and growth (mean RSS of the last 5 minutes
against minutes 5 to 10; for runs shorter than 15 minutes, the last third against the middle one).
`plot`: both curves in one PNG next to the first CSV.
"""

from __future__ import annotations

import argparse
import csv
import threading
from pathlib import Path

import httpx
import numpy as np

from loadtests.server import sample_memory, start_server


def growth(seconds: np.ndarray, rss: np.ndarray) -> tuple[float, str]:
    """Growth in percent, and the windows it compares."""
    end = seconds[-1]
    if end >= 15 * 60:
        late, early, label = (
            seconds >= end - 300,
            (seconds >= 300) & (seconds < 600),
            "last 5 min vs min 5-10",
        )
    else:
        late, early = seconds >= 2 * end / 3, (seconds >= end / 3) & (seconds < 2 * end / 3)
        label = "last third vs middle third"
    return 100 * (rss[late].mean() / rss[early].mean() - 1), label


def run(args: argparse.Namespace) -> None:
    flags = ["--no-jemalloc"] if args.no_jemalloc else []
    server, url = start_server(args.port, "--models", "speech", *flags)
    stop = threading.Event()
    done = [0]

    def client() -> None:
        data = args.path.read_bytes()
        with httpx.Client(timeout=3600) as http:
            while not stop.is_set():
                http.post(url + "/v1/recognize", files={"file": data}).raise_for_status()
                done[0] += 1

    try:
        workers = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
        for worker in workers:
            worker.start()
        samples, peak = sample_memory(server.pid, args.minutes)
        stop.set()
    finally:
        server.terminate()
        server.wait()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as out:
        csv.writer(out).writerows([("seconds", "rss_mib"), *samples])
    seconds, rss = np.array(samples).T
    percent, label = growth(seconds, rss)
    allocator = "glibc" if args.no_jemalloc else "jemalloc"
    print(
        f"{allocator}: {args.minutes:g} min, {args.clients} clients, "
        f"{done[0]} recordings done; RSS MiB peak {peak:.0f}, average {rss.mean():.0f}, "
        f"growth {percent:+.1f}% ({label})"
    )


def plot(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 4.2))
    for path in args.csvs:
        seconds, rss = np.loadtxt(path, delimiter=",", skiprows=1).T
        axis.plot(seconds / 60, rss, label=path.stem)
    axis.set(
        xlabel="minutes",
        ylabel="server RSS, MiB",
        title="RSS while 2-hour recordings are posted repeatedly",
    )
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    out = args.csvs[0].with_name("memory_over_time.png")
    figure.savefig(out, dpi=110)
    print(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("path", type=Path)
    runner.add_argument("--minutes", type=float, default=20)
    runner.add_argument("--clients", type=int, default=3)
    runner.add_argument("--no-jemalloc", action="store_true")
    runner.add_argument("--port", type=int, default=8798)
    runner.add_argument("--out", type=Path, required=True)
    plotter = commands.add_parser("plot")
    plotter.add_argument("csvs", type=Path, nargs="+")
    args = parser.parse_args()
    (run if args.command == "run" else plot)(args)


if __name__ == "__main__":
    main()

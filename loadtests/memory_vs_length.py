"""Peak resident memory of a fresh `arengine serve` processing one file, for several lengths.

    python -m loadtests.memory_vs_length loadtests/out/5min.wav loadtests/out/2h.wav [--no-jemalloc]
        [--model speech,notes,music]

For each file: start a server, wait until ready, read its peak RSS (VmHWM), post the file, read the
peak RSS again. Memory independent of length means the two peaks barely differ.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx
import soundfile as sf

from loadtests.server import memory_mib, running_server


def measure(path: Path, port: int, extra: list[str], model: str) -> tuple[float, float, float]:
    with running_server(port, *extra) as (server, url):
        before = memory_mib(server.pid, "VmHWM")
        started = time.perf_counter()
        with path.open("rb") as body:
            response = httpx.post(
                url + "/v1/recognize", params={"model": model}, files={"file": body}, timeout=7200
            )
        response.raise_for_status()
        return before, memory_mib(server.pid, "VmHWM"), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", type=Path, nargs="+")
    parser.add_argument("--no-jemalloc", action="store_true")
    parser.add_argument(
        "--model", default="speech", help="one model, or several: speech,notes,music"
    )
    args = parser.parse_args()
    extra = ["--no-jemalloc"] if args.no_jemalloc else []
    extra += ["--models", ",".join(sorted(set(args.model.split(","))))]
    print("| file | audio min | file MiB | peak RSS ready MiB | peak RSS after MiB | growth | s |")
    print("|---|---|---|---|---|---|---|")
    for i, path in enumerate(args.paths):
        minutes = sf.info(str(path)).duration / 60
        before, after, wall = measure(path, 8791 + i, extra, args.model)
        size = path.stat().st_size / 2**20
        cells = [
            path.name,
            f"{minutes:.0f}",
            f"{size:.0f}",
            f"{before:.0f}",
            f"{after:.0f}",
            f"{after - before:.0f}",
            f"{wall:.1f}",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

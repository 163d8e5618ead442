"""Peak resident memory of a fresh `arengine serve` processing one file, for several lengths.

    python -m loadtests.memory_vs_length loadtests/out/5min.wav loadtests/out/2h.wav [--no-jemalloc]

For each file: start a server, wait until ready, read its peak RSS (VmHWM), post the file, read the
peak RSS again. Memory independent of length means the two peaks barely differ.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx
import soundfile as sf


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def measure(path: Path, port: int, extra: list[str]) -> tuple[float, float, float]:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "arengine",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
            *extra,
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        before = peak_rss_mib(server.pid)
        started = time.perf_counter()
        with path.open("rb") as body:
            response = httpx.post(url + "/v1/recognize", files={"file": body}, timeout=7200)
        response.raise_for_status()
        return before, peak_rss_mib(server.pid), time.perf_counter() - started
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", type=Path, nargs="+")
    parser.add_argument("--no-jemalloc", action="store_true")
    args = parser.parse_args()
    extra = ["--no-jemalloc"] if args.no_jemalloc else []
    print("| file | audio min | file MiB | peak RSS ready MiB | peak RSS after MiB | growth | s |")
    print("|---|---|---|---|---|---|---|")
    for i, path in enumerate(args.paths):
        minutes = sf.info(str(path)).duration / 60
        before, after, wall = measure(path, 8791 + i, extra)
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

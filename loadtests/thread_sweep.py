"""Thread sweep (`bench-thread-sweep-*.png`): engine threads x intra-op threads.

    python -m loadtests.thread_sweep loadtests/out/35min.wav [--model speech] [--out loadtests/out]

For each cell a fresh `arengine serve` (engine threads E, intra-op threads I, inter-op I) gets the
recording once (after a warm-up clip); the cell's end-to-end time and the server's CPU utilisation
(process CPU seconds / wall seconds / CPUs) are recorded. Also one cell with torch's default thread
settings (intra-op = CPUs, OMP not pinned), what a torch program gets unless it pins them.
Writes `thread_sweep.csv` and `thread_sweep.png`.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

import httpx

from arengine.system.threads import available_cpus
from loadtests.server import running_server


def cpu_seconds(pid: int) -> float:
    """CPU seconds of process `pid` and of its children that have ended (the `ffmpeg` parts)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def run_cell(
    path: Path, model: str, engine: int, intra: int | None, port: int, extra: list[str]
) -> tuple[float, float]:
    flags = ["--engine-threads", str(engine), *extra]
    env = dict(os.environ)
    if intra is not None:
        flags += ["--intra-op-threads", str(intra), "--inter-op-threads", str(intra)]
        env["OMP_NUM_THREADS"] = str(intra)
    else:  # torch's defaults: intra-op = CPUs; arengine leaves them alone
        flags += [
            "--intra-op-threads",
            str(available_cpus()),
            "--inter-op-threads",
            str(available_cpus()),
        ]
        env.pop("OMP_NUM_THREADS", None)
    with running_server(port, "--models", model, *flags, env=env) as (server, url):
        data = path.read_bytes()
        cpu_before, started = cpu_seconds(server.pid), time.perf_counter()
        response = httpx.post(
            url + "/v1/recognize", params={"model": model}, files={"file": data}, timeout=3600
        )
        response.raise_for_status()
        wall = time.perf_counter() - started
        return wall, (cpu_seconds(server.pid) - cpu_before) / wall / available_cpus()


def plot(rows: list[dict[str, str]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for intra in sorted({r["intra_op"] for r in rows}, key=lambda v: (v == "default", v)):
        cells = [r for r in rows if r["intra_op"] == intra]
        engines = [int(r["engine_threads"]) for r in cells]
        label = "torch defaults" if intra == "default" else f"intra-op {intra}"
        style = "x" if intra == "default" else "o-"
        left.plot(engines, [float(r["seconds"]) for r in cells], style, label=label)
        right.plot(engines, [100 * float(r["cpu_utilisation"]) for r in cells], style, label=label)
    left.set(xlabel="engine threads", ylabel="end-to-end seconds (lower is better)", title=title)
    right.set(
        xlabel="engine threads", ylabel="CPU utilisation, % of all CPUs", title="CPU utilisation"
    )
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--model", default="speech")
    parser.add_argument("--intra", default="1,2,4", help="intra-op thread counts")
    parser.add_argument("--out", type=Path, default=Path("loadtests/out"))
    parser.add_argument("--segment-s", help="segment length for every model (more parallel work)")
    args = parser.parse_args()
    cpus = available_cpus()
    cells: list[tuple[int, int | None]] = [
        (e, int(i)) for i in args.intra.split(",") for e in range(1, 2 * cpus + 1)
    ]
    cells.append((cpus, None))
    rows = []
    print("| engine threads | intra-op | seconds | CPU utilisation |")
    print("|---|---|---|---|")
    for n, (engine, intra) in enumerate(cells):
        extra = ["--segment-s", args.segment_s] if args.segment_s else []
        wall, utilisation = run_cell(args.path, args.model, engine, intra, 8800 + n, extra)
        row = {
            "engine_threads": str(engine),
            "intra_op": "default" if intra is None else str(intra),
            "seconds": f"{wall:.3f}",
            "cpu_utilisation": f"{utilisation:.3f}",
        }
        rows.append(row)
        print(
            f"| {engine} | {row['intra_op']} | {wall:.2f} | {100 * utilisation:.0f}% |", flush=True
        )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"thread_sweep_{args.model}"
    with (args.out / f"{stem}.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.out / f"{stem}.png", f"{args.model}: {args.path.name}")


if __name__ == "__main__":
    main()

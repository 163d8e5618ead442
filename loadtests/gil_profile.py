"""What holds the GIL in a loaded server: py-spy samples of GIL-holding threads, per stage.

    python -m loadtests.gil_profile loadtests/out/35min.wav [--clients 2] [--rounds 2]

Starts `arengine serve` (intra-op 1, engine threads = CPUs), attaches `py-spy record --gil
--native --format raw` (py-spy must be on PATH or in the venv: `pip install py-spy`), posts the
recording from `--clients` clients, then sorts the samples: by stage (the engine's task
functions on the stack), and the innermost frames that held the GIL most. The raw stacks are kept
in `--out` for flame graphs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from arengine.system.threads import available_cpus
from loadtests.server import running_server
from loadtests.threads_vs_processes import load

STAGES = {
    "_validate": "validation",
    "_decode": "decoding (features)",
    "_infer": "inference (features + forward)",
    "_postprocess_in_order": "post-processing",
    "_complete": "post-processing",
}
"""Engine task functions (arengine/engine/job.py) and the stage each one is."""


def stage_of(frames: list[str]) -> str:
    """The stage of one sampled stack: the innermost engine task on it, else where it runs."""
    for frame in reversed(frames):
        name = frame.split(" ", 1)[0].rsplit(".", 1)[-1]
        if name in STAGES and "job.py" in frame:
            return STAGES[name]
    text = ";".join(frames)
    if "uvicorn" in text or "starlette" in text or "asyncio" in text or "h11" in text:
        return "HTTP and event loop"
    if "_work" in text and "pool.py" in text:
        return "engine pool (waiting, scheduling)"
    return "other"


def read_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) stacks: `frame;frame;... count` per line."""
    samples = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples.append((stack.split(";"), int(count)))
    return samples


def report(samples: list[tuple[list[str], int]], top: int) -> None:
    total = sum(count for _, count in samples) or 1
    stages: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    for frames, count in samples:
        stages[stage_of(frames)] += count
        inner[frames[-1]] += count
    print(f"{total} GIL-holding samples\n")
    print("| stage | share of GIL-holding samples |")
    print("|---|---|")
    for stage, count in stages.most_common():
        print(f"| {stage} | {count / total:.1%} |")
    print("\n| innermost frame holding the GIL | share |")
    print("|---|---|")
    for frame, count in inner.most_common(top):
        print(f"| `{frame[:110]}` | {count / total:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--clients", type=int, default=available_cpus())
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("loadtests/out/gil.txt"))
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    threads = str(available_cpus())
    with running_server(8870, "--models", "speech", "--engine-threads", threads) as (server, _):
        recorder = subprocess.Popen(
            [spy, "record", "--gil", "--native", "--threads", "--format", "raw", "--rate",
             str(args.rate), "-o", str(args.out), "-p", str(server.pid)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wall = load([8870], args.clients, args.path.read_bytes(), args.rounds)
        finally:
            recorder.send_signal(2)  # py-spy writes its output on SIGINT
            recorder.wait(60)
    print(f"{args.clients} clients x {args.rounds} x {args.path.name} in {wall:.1f} s\n")
    report(read_raw(args.out), args.top)


if __name__ == "__main__":
    main()

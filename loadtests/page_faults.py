"""Page faults and kernel time of one model's forward on one thread, under the server's allocator.

    python -m loadtests.page_faults pitch [--seconds 30] [--rounds 2] [--no-jemalloc]

Runs features and inference over `--seconds` of noise (the same work as `model_speed`'s one-thread
column) and prints, per round, x real time, user and kernel CPU seconds and minor page faults
(`getrusage`). Many faults and much kernel time mean buffers the allocator hands back to the
kernel on free and faults in again: jemalloc does that for allocations over its 8 MiB
`oversize_threshold` (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import resource
import sys

import torch

from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.system.allocator import active_allocator
from loadtests.model_speed import as_served, noise, x_real_time


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-jemalloc", action="store_true", help="run under glibc malloc")
    args = parser.parse_args()
    if not args.no_jemalloc:
        as_served("loadtests.page_faults", sys.argv[1:])
    torch.set_num_threads(1)
    loaded = load_models(DEFAULT_MODELS_DIR, [args.model])[0][args.model]
    audio = noise(args.seconds, loaded.recognizer.sample_rate)
    x_real_time(loaded, audio[: len(audio) // 3], 1)  # warm-up
    print(f"{args.model}, {args.seconds:g} s of noise, one thread, {active_allocator()}")
    for _ in range(args.rounds):
        before = resource.getrusage(resource.RUSAGE_SELF)
        speed = x_real_time(loaded, audio, 1)
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"{speed:.1f}x real time; user {after.ru_utime - before.ru_utime:.2f} s, "
            f"kernel {after.ru_stime - before.ru_stime:.2f} s, "
            f"{after.ru_minflt - before.ru_minflt} minor page faults"
        )


if __name__ == "__main__":
    main()

"""Memory after dropped requests: does the server's RSS come back once a heavy request whose
client went away is done?

    python -m loadtests.dropped_memory --seconds 180 --drops 3 --out /tmp/dropped

A fresh `arengine serve --models notes` (jemalloc, the default; `--no-jemalloc` for glibc). One
short request warms it up. Then, `--drops` times: a rendered piece of `--seconds` (FluidR3, chords
under a melody) is posted with the heaviest parameters in range (`pitch_bends=1`, both thresholds
at their floor, `melodia=1`, `min_note_ms=0`), and the client disconnects `--after` seconds in.
The server's RSS is sampled every 0.2 s until `/v1/info` shows no request and no job in the
engine, then for `--settle` seconds more (jemalloc returns freed pages after its decay time,
1 s by default). Prints the RSS before, the peak while each dropped request worked, and after.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from loadtests.server import memory_mib, start_server
from tests.music import polyphonic_piece, render
from tests.recordings import write

HEAVY = {
    "model": "notes",
    "pitch_bends": "1",
    "onset_threshold": "0.05",
    "frame_threshold": "0.05",
    "melodia": "1",
    "min_note_ms": "0",
}
"""Every value inside its documented range, each at the costly end (issue 23's request)."""
WAV = {"Content-Type": "audio/wav"}


@dataclass(frozen=True, slots=True)
class Drop:
    """One dropped request: RSS (MiB) before it, at its peak, and once the engine was idle and
    `settle` seconds had passed."""

    before: float
    peak: float
    after: float
    idle_after_s: float
    """From the hang-up until the engine had nothing left of the request."""

    def line(self, index: int) -> str:
        returned = self.peak - self.before
        kept = self.after - self.before
        share = 100 * kept / returned if returned > 0 else 0.0
        return (
            f"drop {index}: RSS before {self.before:.0f} MiB, peak {self.peak:.0f} "
            f"(+{returned:.0f}), after {self.after:.0f} ({kept:+.0f} MiB, "
            f"{share:.0f}% of the rise kept); engine idle {self.idle_after_s:.1f} s after the "
            "hang-up"
        )


def _idle(url: str) -> bool:
    info = httpx.get(url + "/v1/info", timeout=10).json()
    return bool(info["pending_requests"] == 0 and info["active_jobs"] == 0)


def drop_once(url: str, pid: int, body: bytes, after_s: float, settle_s: float) -> Drop:
    """Post `body` with the heavy parameters, hang up after `after_s`; RSS until settled."""
    before = memory_mib(pid)
    peak = before
    try:
        httpx.post(
            url + "/v1/recognize",
            params=HEAVY,
            content=body,
            headers=WAV,
            timeout=after_s,
        )
        print("  the request finished before the client hung up: raise --seconds")
    except httpx.TimeoutException:
        pass  # the client hangs up: its connection is closed
    hung_up = time.monotonic()
    idle_since: float | None = None
    while idle_since is None or time.monotonic() - idle_since < settle_s:
        peak = max(peak, memory_mib(pid))
        if idle_since is None and _idle(url):
            idle_since = time.monotonic()
        time.sleep(0.2)
    assert idle_since is not None
    return Drop(before, peak, memory_mib(pid), idle_since - hung_up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--drops", type=int, default=3)
    parser.add_argument("--after", type=float, default=5.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=8893)
    parser.add_argument("--no-jemalloc", action="store_true")
    parser.add_argument("--full", action="store_true", help="last, one request not dropped")
    parser.add_argument("--out", type=Path, default=Path("loadtests/out/dropped"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rate = 22050
    piece = write(
        render(polyphonic_piece(args.seconds, seed=3), args.out), rate, args.out / "piece.wav"
    )
    short = write(np.zeros(rate, np.float32), rate, args.out / "short.wav")
    flags = ["--models", "notes", "--engine-threads", "2"]
    server, url = start_server(args.port, *flags, *(["--no-jemalloc"] if args.no_jemalloc else []))
    try:
        warm = httpx.post(url + "/v1/recognize?model=notes", files={"file": short.read_bytes()})
        warm.raise_for_status()
        time.sleep(args.settle)
        allocator = httpx.get(url + "/v1/info").json()["allocator"]
        print(f"{args.seconds:g} s piece, {args.drops} drops after {args.after:g} s; {allocator}")
        body = piece.read_bytes()
        for index in range(1, args.drops + 1):
            print(drop_once(url, server.pid, body, args.after, args.settle).line(index))
        if args.full:
            started = time.monotonic()
            params = {**HEAVY, "format": "csv"}
            whole = httpx.post(
                url + "/v1/recognize", params=params, content=body, headers=WAV, timeout=3600
            )
            whole.raise_for_status()
            rows = len(whole.text.splitlines()) - 1
            took = time.monotonic() - started
            time.sleep(args.settle)
            rss = memory_mib(server.pid)
            print(f"not dropped: {rows} notes in {took:.1f} s, RSS {rss:.0f} MiB after")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()

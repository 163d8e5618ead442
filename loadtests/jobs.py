"""Jobs that outlive their server: a pitch job killed with `kill -9` every `--kill-every-s`
against the same job uninterrupted; new parameters on finished jobs; kept scores per audio hour.

    python -m loadtests.jobs --minutes 3 --kill-every-s 30 --segment-s 10 --store-minutes 2

1. A `pitch` job on a `--minutes` recording, uninterrupted, then again with the server killed
   (SIGKILL) every `--kill-every-s` and started again on the same data directory: the time to
   done without the restarts' own time (process start and model loading, until /readyz), against
   the uninterrupted time; and whether the tags are the same.
2. One job per model on a `--store-minutes` recording: its kept scores' bytes per audio hour,
   and `GET /v1/jobs/{id}/result` with a new parameter of its kind (median of 5, in ms).

Real servers on 127.0.0.1 only; bounded by the lengths given.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.recordings import write_recording
from loadtests.server import start_server

NEW_PARAMETERS: dict[str, dict[str, float]] = {
    "speech": {"threshold": 0.3},
    "pitch": {"threshold": 0.5},
    "notes": {"onset_threshold": 0.6},
    "events": {"threshold": 0.3},
    "music": {"threshold": 0.3},
}
"""A new parameter per model, for the re-derivation's time."""


def submit(url: str, path: Path, model: str) -> str:
    with path.open("rb") as body:
        response = httpx.post(
            f"{url}/v1/jobs", params={"model": model}, files={"file": body}, timeout=600
        )
    response.raise_for_status()
    return str(response.json()["id"])


def state(url: str, job_id: str) -> dict[str, Any] | None:
    """The job, or None while the server is away."""
    try:
        job: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json()
    except httpx.TransportError:
        return None
    return job


def wait_done(url: str, job_id: str, until: float = float("inf")) -> bool:
    """Whether the job is done before `until` (time.monotonic)."""
    while time.monotonic() < until:
        job = state(url, job_id)
        if job is not None and job["state"] == "done":
            return True
        if job is not None and job["state"] == "failed":
            raise RuntimeError(f"job failed: {job['error']}")
        time.sleep(0.2)
    return False


def tags(url: str, job_id: str, **params: float) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/v1/jobs/{job_id}/result", params=params, timeout=600)
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()["tags"]
    return found


def started(port: int, data: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str, float]:
    """A server on `data`; the seconds it took to be ready."""
    begin = time.monotonic()
    process, url = start_server(port, "--data-dir", str(data), *flags)
    return process, url, time.monotonic() - begin


def uninterrupted(audio: Path, port: int, flags: list[str]) -> tuple[float, list[Any]]:
    process, url, _ = started(port, Path(tempfile.mkdtemp()), *flags)
    try:
        begin = time.monotonic()
        job_id = submit(url, audio, "pitch")
        wait_done(url, job_id)
        return time.monotonic() - begin, tags(url, job_id)
    finally:
        process.terminate()
        process.wait()


def killed_often(
    audio: Path, port: int, flags: list[str], every_s: float
) -> tuple[float, float, int, list[Any]]:
    """(seconds to done, seconds of those spent restarting, kills, tags)."""
    data = Path(tempfile.mkdtemp())
    process, url, _ = started(port, data, *flags)
    restarting, kills = 0.0, 0
    begin = time.monotonic()
    job_id = submit(url, audio, "pitch")
    try:
        while not wait_done(url, job_id, time.monotonic() + every_s):
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            process, url, seconds = started(port, data, *flags)
            restarting += seconds
        total = time.monotonic() - begin
        return total, restarting, kills, tags(url, job_id)
    finally:
        process.terminate()
        process.wait()


def kept_scores(audio: Path, port: int, models: list[str]) -> list[tuple[str, float, float]]:
    """Per model: (model, kept bytes per audio hour, ms to derive the tags with a new
    parameter, median of 5)."""
    data = Path(tempfile.mkdtemp())
    process, url, _ = started(port, data, "--models", ",".join(models))
    rows = []
    try:
        for model in models:
            job_id = submit(url, audio, model)
            wait_done(url, job_id)
            duration = float(httpx.get(f"{url}/v1/jobs/{job_id}").json()["progress"]["duration_s"])
            size = (data / "results" / f"{job_id}.scores").stat().st_size
            times = []
            for _ in range(5):
                begin = time.perf_counter()
                tags(url, job_id, **NEW_PARAMETERS[model])
                times.append(time.perf_counter() - begin)
            rows.append((model, size / duration * 3600, statistics.median(times) * 1000))
    finally:
        process.terminate()
        process.wait()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="0: no pitch job")
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument(
        "--segment-s",
        type=float,
        default=30.0,
        help="the pitch job's segment length: a kill loses at most one per engine thread, so "
        "`--kill-every-s` must exceed one segment's inference",
    )
    parser.add_argument("--store-minutes", type=float, default=2.0)
    parser.add_argument("--models", default="speech,pitch,notes,events,music")
    parser.add_argument("--port", type=int, default=8796)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    if args.minutes > 0:
        pitch_job_killed_often(args, folder)
    store = folder / "store.wav"
    write_recording(store, args.store_minutes, 16000, 1)
    rows = kept_scores(store, args.port, args.models.split(","))
    print(f"\n{args.store_minutes:g} min of audio; load average at the end: {os.getloadavg()}")
    print("| model | kept scores, MB per audio hour | new parameter | ms (median of 5) |")
    print("|---|---|---|---|")
    for model, per_hour, ms in rows:
        parameter = ", ".join(f"{k}={v:g}" for k, v in NEW_PARAMETERS[model].items())
        print(f"| {model} | {per_hour / 1e6:.2f} | {parameter} | {ms:.0f} |")


def pitch_job_killed_often(args: argparse.Namespace, folder: Path) -> None:
    audio = folder / "pitch.wav"
    write_recording(audio, args.minutes, 16000, 1)
    flags = ["--models", "pitch", "--segment-s", str(args.segment_s)]
    alone_s, alone_tags = uninterrupted(audio, args.port, flags)
    total_s, restart_s, kills, killed_tags = killed_often(
        audio, args.port, flags, args.kill_every_s
    )
    working = total_s - restart_s
    print(f"load average at the end: {os.getloadavg()}")
    print("| pitch job | audio min | kills | s to done | s restarting | s working | ratio |")
    print("|---|---|---|---|---|---|---|")
    print(f"| uninterrupted | {args.minutes:g} | 0 | {alone_s:.1f} | 0 | {alone_s:.1f} | 1.00 |")
    print(
        f"| kill -9 every {args.kill_every_s:g} s | {args.minutes:g} | {kills} | {total_s:.1f} | "
        f"{restart_s:.1f} | {working:.1f} | {working / alone_s:.2f} |"
    )
    print(f"same tags: {alone_tags == killed_tags} ({len(alone_tags)} tags)")


if __name__ == "__main__":
    main()

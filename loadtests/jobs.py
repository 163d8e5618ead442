"""Jobs that outlive their server: a pitch job killed with `kill -9` every `--kill-every-s`
against the same job uninterrupted; new parameters on finished jobs; kept scores per audio hour.

    python -m loadtests.jobs --minutes 3 --kill-every-s 30 --segment-s 10 --store-minutes 2

1. A `pitch` job on a `--minutes` recording, uninterrupted, then again with the server killed
   (SIGKILL) every `--kill-every-s` and started again on the same data directory: the time to
   done without the restarts' own time (process start and model loading, until /readyz), against
   the uninterrupted time; and whether the tags are the same.
2. One job per model on a `--store-minutes` recording: its kept scores' bytes per audio hour,
   and `GET /v1/jobs/{id}/result` with a new parameter of its kind (median of 5, in ms), then
   the same in-process, split into reading the scores and deriving the tags. `--data-dir` keeps
   the jobs; `--reuse DIR` times the done jobs of such a folder again without running them
   (after a change to the taggers or to how scores are read):

    python -m loadtests.jobs --minutes 0 --store-minutes 120 --models speech,events,notes \
        --data-dir loadtests/out/jobs
    python -m loadtests.jobs --minutes 0 --reuse loadtests/out/jobs

Real servers on 127.0.0.1 only; bounded by the lengths given.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from arengine.jobs.scores import ScoreLog
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.postprocess import WholeTagger
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


Row = tuple[str, float, float, float, float, float]
"""(model, kept MB per audio hour, ms over HTTP, ms in-process: reading, tags, in all)."""


def kept_scores(audio: Path | None, port: int, models: list[str], data: Path) -> list[Row]:
    """Per model: its job (run on `audio`, or the done one in `data` when `audio` is None), its
    kept bytes per audio hour, and the ms to derive its tags with a new parameter (medians of
    5): over HTTP, then in-process."""
    process, url, _ = started(port, data, "--models", ",".join(models))
    jobs: list[tuple[str, str]] = []
    try:
        if audio is None:
            listed = httpx.get(f"{url}/v1/jobs").json()["jobs"]
            done = [job for job in listed if job["state"] == "done" and job["model"] in models]
            jobs = [(job["model"], job["id"]) for job in done]
        else:
            for model in models:
                job_id = submit(url, audio, model)
                wait_done(url, job_id)
                jobs.append((model, job_id))
        over_http = {job_id: _median_ms(url, job_id, model) for model, job_id in jobs}
    finally:
        process.terminate()
        process.wait()
    rows = []
    for model, job_id in jobs:
        path = data / "results" / f"{job_id}.scores"
        duration = json.loads((data / "results" / f"{job_id}.json").read_text())["audio"]
        per_hour = path.stat().st_size / duration["duration_s"] * 3600 / 1e6
        reading, tagging = in_process(path, model)
        rows.append((model, per_hour, over_http[job_id], reading, tagging, reading + tagging))
    return rows


def in_process(path: Path, model: str) -> tuple[float, float]:
    """Medians of 5: ms to read the kept scores (as one array, or palette codes), and to derive
    the tags from them; the model is loaded, not run."""
    recognizer = load_models(DEFAULT_MODELS_DIR, [model])[0][model].recognizer
    reading, tagging = [], []
    for _ in range(5):
        begin = time.perf_counter()
        with ScoreLog.reading(path) as (_, kept):
            assert kept is not None
            joined = kept[0].joined() if model != "notes" else None
            read = time.perf_counter()
            tagger = recognizer.tagger(NEW_PARAMETERS[model])
            if isinstance(tagger, WholeTagger) and joined is not None:
                tagger.whole(joined, kept[0].total_samples)
            else:  # notes: segment by segment, read while tagged
                for scores in kept[0].scores:
                    tagger.push(scores)
                tagger.finish(kept[0].total_samples)
        reading.append(read - begin)
        tagging.append(time.perf_counter() - read)
    return statistics.median(reading) * 1000, statistics.median(tagging) * 1000


def _median_ms(url: str, job_id: str, model: str) -> float:
    """One client for the five requests, as a caller trying thresholds would keep: a new
    `httpx.get` client loads its CA certificates each time (40-100 ms on these busy cores)."""
    times = []
    with httpx.Client(timeout=600) as client:
        for _ in range(5):
            begin = time.perf_counter()
            response = client.get(f"{url}/v1/jobs/{job_id}/result", params=NEW_PARAMETERS[model])
            response.raise_for_status()
            response.json()
            times.append(time.perf_counter() - begin)
    return statistics.median(times) * 1000


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
    parser.add_argument("--data-dir", type=Path, help="keep the kept-scores jobs here")
    parser.add_argument(
        "--reuse", type=Path, help="time the done jobs of this data directory; run none"
    )
    parser.add_argument("--models", default="speech,pitch,notes,events,music")
    parser.add_argument("--port", type=int, default=8796)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    if args.minutes > 0:
        pitch_job_killed_often(args, folder)
    models = args.models.split(",")
    if args.reuse is not None:
        rows = kept_scores(None, args.port, models, args.reuse)
    else:
        store = folder / "store.wav"
        write_recording(store, args.store_minutes, 16000, 1)
        data = args.data_dir or Path(tempfile.mkdtemp())
        data.mkdir(parents=True, exist_ok=True)
        rows = kept_scores(store, args.port, models, data)
    print(f"\nload average at the end: {os.getloadavg()}")
    print(
        "| model | kept scores, MB per audio hour | new parameter | ms over HTTP | "
        "ms in-process: reading | tags | in all |"
    )
    print("|---|---|---|---|---|---|---|")
    for model, per_hour, http_ms, reading, tagging, total in rows:
        parameter = ", ".join(f"{k}={v:g}" for k, v in NEW_PARAMETERS[model].items())
        print(
            f"| {model} | {per_hour:.2f} | {parameter} | {http_ms:.0f} | {reading:.0f} | "
            f"{tagging:.0f} | {total:.0f} |"
        )


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

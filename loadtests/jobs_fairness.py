"""Latency of 5-second clips alone, and while a long job runs (`POST /v1/jobs`).

    python -m loadtests.jobs_fairness --minutes 120 --model speech --clips 40
    python -m loadtests.jobs_fairness --minutes 20 --model pitch --clips 40 -- --job-threads 2

Starts a real `arengine serve --data-dir` on 127.0.0.1 with `speech` and `--model`, posts
`--clips` 5-second speech clips to `POST /v1/recognize` one after another (alone), then again
while a `--minutes` recording runs as a `--model` job (queued again as soon as it is done, so a
job runs through the whole phase); prints p50/p95/p99 of both phases and their ratio. Flags after
`--` go to the server. Bounded: a fixed number of clips, against loopback only.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from loadtests.recordings import phrases, write_recording
from loadtests.server import start_server


def post(url: str, path: Path) -> float:
    with path.open("rb") as body:
        started = time.perf_counter()
        response = httpx.post(
            url + "/v1/recognize", params={"model": "speech"}, files={"file": body}, timeout=600
        )
    response.raise_for_status()
    return time.perf_counter() - started


def run_job(url: str, audio: Path, model: str) -> str:
    """Submit a job; return its id once it runs (its engine work under way)."""
    with audio.open("rb") as body:
        response = httpx.post(
            url + "/v1/jobs", params={"model": model}, files={"file": body}, timeout=600
        )
    response.raise_for_status()
    job_id = str(response.json()["id"])
    while job_state(url, job_id)["state"] == "queued":
        time.sleep(0.05)
    return job_id


def job_state(url: str, job_id: str) -> dict[str, object]:
    state: dict[str, object] = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json()
    return state


def quantiles(values: list[float]) -> tuple[float, float, float]:
    p50, p95, p99 = np.percentile(np.array(values) * 1000, [50, 95, 99])
    return float(p50), float(p95), float(p99)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=120.0, help="the job's recording")
    parser.add_argument("--model", default="speech", help="the job's model")
    parser.add_argument("--clips", type=int, default=40)
    parser.add_argument("--port", type=int, default=8797)
    parser.add_argument("server_flags", nargs="*", help="after `--`: more server flags")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    clip = folder / "clip.wav"
    speech = phrases(16000)[0][: 5 * 16000]
    sf.write(clip, np.concatenate([speech, np.zeros(5 * 16000 - len(speech), np.float32)]), 16000)
    recording = folder / "long.wav"
    write_recording(recording, args.minutes, 16000, 1)
    models = ",".join(dict.fromkeys(["speech", args.model]))
    flags = ["--data-dir", str(folder / "data"), "--models", models, *args.server_flags]
    server, url = start_server(args.port, *flags)
    try:
        for _ in range(3):  # warm
            post(url, clip)
        alone = [post(url, clip) for _ in range(args.clips)]
        stop, running = threading.Event(), threading.Event()
        jobs: list[tuple[str, float]] = []

        def jobs_back_to_back() -> None:
            while not stop.is_set():
                begin = time.monotonic()
                job_id = run_job(url, recording, args.model)
                running.set()
                while not stop.is_set() and job_state(url, job_id)["state"] == "running":
                    time.sleep(0.2)
                if job_state(url, job_id)["state"] == "done":
                    jobs.append((job_id, time.monotonic() - begin))

        submitter = threading.Thread(target=jobs_back_to_back)
        submitter.start()
        running.wait()
        time.sleep(1.0)
        loaded = []
        for _ in range(args.clips):
            loaded.append(post(url, clip))
            time.sleep(0.05)
        stop.set()
        submitter.join()
    finally:
        server.terminate()
        server.wait()
    a, b = quantiles(alone), quantiles(loaded)
    print(f"server flags: {' '.join(flags[3:])}; load average at the end: {os.getloadavg()}")
    print("| phase | clips | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|---|")
    print(f"| 5 s clips alone | {len(alone)} | {a[0]:.0f} | {a[1]:.0f} | {a[2]:.0f} |")
    phase = f"5 s clips, a {args.minutes:g}-min {args.model} job running"
    print(f"| {phase} | {len(loaded)} | {b[0]:.0f} | {b[1]:.0f} | {b[2]:.0f} |")
    print(f"| ratio | | {b[0] / a[0]:.2f} | {b[1] / a[1]:.2f} | {b[2] / a[2]:.2f} |")
    done = ", ".join(f"{seconds:.1f} s" for _, seconds in jobs) or "none"
    print(f"\njobs done meanwhile (from upload): {done}")


if __name__ == "__main__":
    main()

"""Jobs through a real server: one killed with SIGKILL (or stopped with SIGTERM) while its job
runs, then a new server on the same data directory finishes the job from its checkpoint (the
segments kept are not inferred again) with the tags a direct recognition gives."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from arengine.jobs.store import DATABASE
from tests.conftest import Phrases, Server, start_server, stop_server, wait_until
from tests.gate import RATE, Gate, gated_models, marked, noise
from tests.recordings import compose, write

# Small segments and one engine thread; `speech` with the `gate` test model (`tests/gate.py`),
# which holds the job (at its loudest phrase, or at the latest at the marker in the middle of the
# recording) until the test opens it: the job is stopped mid-way on any machine, never after it
# ended, and its progress (written to its row once a second) is seen before.
SLOW = ("--segment-s", "2", "--engine-threads", "1")
MODEL = "speech,gate"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Gate]:
    return gated_models(tmp_path_factory.mktemp("gated"))


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory, phrases: Phrases) -> Path:
    """Written once for every test: `write_long_file`."""
    return write_long_file(tmp_path_factory.mktemp("long"), phrases)


def write_long_file(folder: Path, phrases: Phrases) -> Path:
    """About four minutes at 16 kHz: a phrase every 10 s, and a second behind the gate in the
    middle."""
    pieces = [p for _ in range(12) for p in [("silence", 8.0), ("speech", 0)]]
    audio, _ = compose(pieces, RATE, folder, *phrases)
    half = len(audio) // 2
    audio = np.concatenate([audio[:half], noise("mark", 1.0), audio[half:]])
    assert len(audio) / RATE > 120
    return write(audio, RATE, folder / "long.flac")


def _start(folder: Path, models: tuple[Path, Gate], *args: str, port: int | None = None) -> Server:
    return start_server(folder, *SLOW, "--models-dir", str(models[0]), *args, port=port)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_job_survives_its_server_stopping_and_ends_with_the_tags_of_a_direct_recognition(
    stop: signal.Signals, long_file: Path, tmp_path: Path, models: tuple[Path, Gate]
) -> None:
    data = tmp_path / "data"
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    gate = models[1]
    first = _start(tmp_path / "first", models, "--data-dir", str(data))
    try:
        with gate.held(), first.client() as client:
            posted = client.post(
                "/v1/jobs",
                params={"model": MODEL},
                files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
            )
            assert posted.status_code == 202, posted.text
            job_id = posted.json()["id"]
            seen: dict[str, Any] = {}

            def under_way() -> bool:
                seen.update(client.get(f"/v1/jobs/{job_id}").json())
                return bool(seen["state"] == "running" and seen["progress"]["audio_s"] > 0)

            assert wait_until(under_way, 120), seen
            first.process.send_signal(stop)
            if stop == signal.SIGKILL:
                assert first.process.wait(timeout=120) == -stop
        # Let go (a drain waits for the engine's threads): the job may end during it.
        assert first.process.wait(timeout=120) == (0 if stop == signal.SIGTERM else -stop)
    finally:
        if first.process.poll() is None:
            stop_server(first)
    assert seen["progress"]["audio_s"] < seen["progress"]["duration_s"], "killed mid-job"

    # Started again where it was: the same replica, which takes its jobs up again at once.
    port = int(first.url.rsplit(":", 1)[1])
    second = _start(tmp_path / "second", models, "--data-dir", str(data), port=port)
    try:
        with second.client() as client:
            # Its events, followed while the job goes on: every tag from the first.
            events = f"/v1/jobs/{job_id}/events"
            with client.stream("GET", events, timeout=httpx.Timeout(300)) as response:
                lines = [json.loads(line) for line in response.iter_lines()]
            job: dict[str, Any] = {}

            def ended() -> bool:
                job.update(client.get(f"/v1/jobs/{job_id}").json())
                return job["state"] in ("done", "failed")

            assert wait_until(ended, 300), job
            assert job["state"] == "done", job
            result = client.get(f"/v1/jobs/{job_id}/result").json()
            resumed = _inferred(client)
            direct = client.post(
                "/v1/recognize",
                params={"model": MODEL},
                files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
                timeout=httpx.Timeout(600),
            ).json()
            segments = _inferred(client) - resumed
        assert len([tag for tag in result["tags"] if tag["model"] == "speech"]) >= 12
        assert result["tags"] == direct["tags"]
        assert [line for line in lines if "label" in line] == result["tags"]
        assert lines[-1]["summary"]["tag_count"] == len(result["tags"])
        if stop == signal.SIGKILL:
            log = second.log.read_text()
            assert "queued again" in log
            found = re.search(rf"job {job_id}: resumed from its checkpoint: (\d+) segments", log)
            assert found, log
            kept = int(found[1])
            # Every segment post-processed before the kill was kept, and only the others were
            # inferred again.
            assert kept >= seen["progress"]["audio_s"] // 2 > 0
            assert resumed == segments - kept
        # After SIGTERM the job may have ended during the drain, or been cut off and queued
        # again: either way it is done once, with the same tags.
    finally:
        stop_server(second)


def _inferred(client: httpx.Client) -> int:
    """Segments the server has inferred: each waited once for an engine thread."""
    metrics = client.get("/metrics").text
    found = re.search(r'^arengine_queue_wait_seconds_count\{model="speech"\} (\S+)$', metrics, re.M)
    return 0 if found is None else int(float(found[1]))


@pytest.mark.slow
def test_the_cli_sends_a_long_recording_as_a_job_and_outlasts_a_server_restart(
    long_file: Path, tmp_path: Path, models: tuple[Path, Gate]
) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    gate = models[1]
    first = _start(tmp_path / "first", models, "--data-dir", str(data))
    port = int(first.url.rsplit(":", 1)[1])
    command = [sys.executable, "-m", "arengine", "recognize", str(long_file), "--server"]
    command += [first.url, "--job-over-s", "60", "--model", MODEL, "--out", str(out)]
    cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    second = None
    try:
        with gate.held(), first.client() as client:

            def under_way() -> bool:
                jobs = client.get("/v1/jobs").json()["jobs"]
                return bool(jobs and jobs[0]["progress"]["audio_s"] > 0)

            assert wait_until(under_way, 120)
            first.process.kill()
            first.process.wait(timeout=60)
        second = _start(tmp_path / "second", models, "--data-dir", str(data), port=port)
        output, _ = cli.communicate(timeout=600)
        assert cli.returncode == 0, output
        with second.client() as client:
            direct = client.post(
                "/v1/recognize",
                params={"model": MODEL},
                files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
                timeout=httpx.Timeout(600),
            ).json()
        written = json.loads((out / "long.json").read_text())
        assert written["tags"] == direct["tags"] and len(direct["tags"]) >= 12
        assert "queued again" in second.log.read_text()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        for server in (first, second):
            if server is not None and server.process.poll() is None:
                stop_server(server)


@pytest.mark.slow
def test_replicas_sharing_a_data_dir_answer_for_each_other_and_take_over_a_dead_one_s_job(
    long_file: Path, tmp_path: Path, models: tuple[Path, Gate]
) -> None:
    """Both replicas are up before the job is posted (a replica starting while the job runs
    could find it already done on a quiet machine); whichever claims it is killed once it has
    made progress (held at the gate), and the other finishes it from its checkpoint."""
    data = tmp_path / "data"
    shared = ("--data-dir", str(data), "--job-lease-s", "3")
    gate = models[1]
    servers = {}
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers[name] = _start(tmp_path / name, models, *shared, "--replica-name", name)
        runner = ""
        with gate.held():
            with servers["a"].client() as client:
                posted = client.post(
                    "/v1/jobs",
                    params={"model": MODEL},
                    files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
                )
                job_id = posted.json()["id"]

            def claimed_and_progressing() -> bool:
                nonlocal runner
                runner = _runner(data, job_id)
                with servers["b" if runner == "a" else "a"].client() as other:
                    job = other.get(f"/v1/jobs/{job_id}").json()
                return bool(runner and job["state"] == "running" and job["progress"]["audio_s"] > 0)

            assert wait_until(claimed_and_progressing, 120), "a replica's job, seen from the other"
            servers[runner].process.kill()
            servers[runner].process.wait(timeout=60)
        survivor = servers["b" if runner == "a" else "a"]
        with survivor.client() as client:
            job: dict[str, Any] = {}

            def ended() -> bool:
                job.update(client.get(f"/v1/jobs/{job_id}").json())
                return job["state"] in ("done", "failed")

            assert wait_until(ended, 300), job
            assert job["state"] == "done", job
            result = client.get(f"/v1/jobs/{job_id}/result").json()
            direct = client.post(
                "/v1/recognize",
                params={"model": MODEL},
                files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
                timeout=httpx.Timeout(600),
            ).json()
        assert result["tags"] == direct["tags"] and len(direct["tags"]) >= 12
        log = survivor.log.read_text()
        assert f"job {job_id}: its server stopped reporting; queued again" in log
        assert f"job {job_id}: resumed from its checkpoint" in log
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                stop_server(server)


def _runner(data: Path, job_id: str) -> str:
    """The replica running `job_id`, read from the shared jobs database ("" before a claim)."""
    with contextlib.closing(sqlite3.connect(f"file:{data / DATABASE}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT runner FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return str(row[0] or "") if row else ""


@pytest.mark.slow
def test_a_job_s_events_give_its_progress_while_it_runs_then_its_tags_and_summary(
    tmp_path: Path, models: tuple[Path, Gate]
) -> None:
    """Held at the gate, the job is running when its events are asked for, on any machine: they
    give progress lines (a job already done gives only its tags and summary)."""
    gate = models[1]
    pieces = [("quiet", 1.0), ("loud", 1.0), ("quiet", 2.0), ("mark", 1.0), ("quiet", 1.0)]
    clip = marked(tmp_path / "held.wav", pieces)
    server = _start(tmp_path, models, "--data-dir", str(tmp_path / "data"))
    try:
        with server.client() as client:
            lines: list[dict[str, Any]] = []
            with gate.held():
                posted = client.post(
                    "/v1/jobs", params={"model": "gate"}, files={"file": clip.read_bytes()}
                )
                job_id = posted.json()["id"]
                with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
                    for line in response.iter_lines():
                        lines.append(json.loads(line))
                        if "progress" in lines[-1]:
                            gate.open()  # a progress line came while the job was held
            result = client.get(f"/v1/jobs/{job_id}/result").json()
    finally:
        stop_server(server)
    progress = [line for line in lines if "progress" in line]
    assert progress and {line["state"] for line in progress} <= {"queued", "running"}, lines
    assert [line for line in lines if "label" in line] == result["tags"]
    assert [(tag["start"], tag["end"]) for tag in result["tags"]] == [(1.0, 2.0), (4.0, 5.0)]
    assert lines[-1]["summary"]["tag_count"] == 2

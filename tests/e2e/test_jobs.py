"""Jobs through a real server: one killed with SIGKILL (or stopped with SIGTERM) while its job
runs, then a new server on the same data directory finishes the job with the tags a direct
recognition gives."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Phrases, start_server, stop_server, wait_until
from tests.recordings import compose, write

# Small segments and one engine thread: the job takes many seconds, long enough to be killed.
SLOW = ("--segment-s", "2", "--engine-threads", "1", "--models", "speech")


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory, phrases: Phrases) -> Path:
    """About 40 minutes at 8 kHz: a phrase every 25 s; written once for both stops."""
    pieces = [p for _ in range(90) for p in [("silence", 24.0), ("speech", 0)]]
    folder = tmp_path_factory.mktemp("long")
    audio, _ = compose(pieces, 8000, folder, *phrases)
    assert len(audio) / 8000 > 2300
    return write(audio, 8000, folder / "long.flac")


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_job_survives_its_server_stopping_and_ends_with_the_tags_of_a_direct_recognition(
    stop: signal.Signals, long_file: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    first = start_server(tmp_path / "first", *SLOW, "--data-dir", str(data))
    try:
        with first.client() as client:
            posted = client.post(
                "/v1/jobs", files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")}
            )
            assert posted.status_code == 202, posted.text
            job_id = posted.json()["id"]
            seen: dict[str, Any] = {}

            def under_way() -> bool:
                seen.update(client.get(f"/v1/jobs/{job_id}").json())
                return bool(seen["state"] == "running" and seen["progress"]["audio_s"] > 0)

            assert wait_until(under_way, 120), seen
        first.process.send_signal(stop)
        assert first.process.wait(timeout=120) == (0 if stop == signal.SIGTERM else -stop)
    finally:
        if first.process.poll() is None:
            stop_server(first)
    assert seen["progress"]["audio_s"] < seen["progress"]["duration_s"], "killed mid-job"

    second = start_server(tmp_path / "second", *SLOW, "--data-dir", str(data))
    try:
        with second.client() as client:
            job: dict[str, Any] = {}

            def ended() -> bool:
                job.update(client.get(f"/v1/jobs/{job_id}").json())
                return job["state"] in ("done", "failed")

            assert wait_until(ended, 300), job
            assert job["state"] == "done", job
            result = client.get(f"/v1/jobs/{job_id}/result").json()
            direct = client.post(
                "/v1/recognize",
                files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
                timeout=httpx.Timeout(600),
            ).json()
        assert len(result["tags"]) >= 80
        assert result["tags"] == direct["tags"]
        if stop == signal.SIGKILL:
            assert "queued again" in second.log.read_text()
        # After SIGTERM the job may have ended during the drain, or been cut off and queued
        # again: either way it is done once, with the same tags.
    finally:
        stop_server(second)

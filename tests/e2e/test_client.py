"""`arengine.client` and `arengine recognize --server`, against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from arengine.cli.runner import plan
from arengine.client import (
    AsyncClient,
    BadRequest,
    Client,
    InvalidInput,
    NotFound,
    RetryPolicy,
    Unauthorized,
    Unavailable,
)
from arengine.outputs.formats import FORMATS
from arengine.types import Tag, result_dict
from arengine_client.remote import Remote, recognize_remote
from tests.conftest import RecordingFactory, Server, free_port, start_server, stop_server
from tests.music import PIANO, Note, render
from tests.recordings import ffmpeg

FAST = RetryPolicy(retries=2, backoff_s=0.01, max_wait_s=0.05)
TUNE = [
    Note(0.5 + 0.5 * i, 0.95 + 0.5 * i, pitch, PIANO, 100)
    for i, pitch in enumerate([72, 76, 79, 84])
]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with an API key and room for one upload and one engine request at a time."""
    tmp = tmp_path_factory.mktemp("keyed")
    running = start_server(
        tmp,
        "--models", "speech",
        "--max-pending-requests", "1", "--max-uploading-requests", "1", "--segment-s", "2",
        "--body-timeout-s", "30",
        env={"ARENGINE_API_KEYS": "client-test-key"},
    )  # fmt: skip
    yield running
    stop_server(running)


def test_recognize_is_the_servers_answer_typed(server: Server, recording: RecordingFactory) -> None:
    clip = recording("talk.flac")
    with Client(server.url) as client:
        result = client.recognize(clip.path, model="speech", threshold=0.5)
        with clip.path.open("rb") as handle:
            again = client.recognize(handle)
        info, models = client.info(), client.models()
    with server.client() as raw, clip.path.open("rb") as handle:
        plain = raw.post("/v1/recognize", files={"file": ("talk.flac", handle)}).json()
    assert result.model == "speech"
    assert result.audio.duration_s == pytest.approx(clip.duration_s, abs=0.01)
    assert result.audio.format == "FLAC" and result.audio.sample_rate == 16000
    assert [(t.start, t.end, t.label) for t in result.tags] == [
        (t["start"], t["end"], t["label"]) for t in plain["tags"]
    ]
    assert len(result.tags) == len(clip.speech) == 2
    assert again.tags == result.tags
    assert result.timings.total_s > 0
    assert result_dict(result) == {**plain, "timings": result_dict(result)["timings"]}
    assert info["ready"] is True and info["engine_threads"] >= 1
    assert "speech" in [model["name"] for model in models]


def test_download_and_stream(server: Server, recording: RecordingFactory) -> None:
    clip = recording("talk.wav")
    with Client(server.url) as client:
        result = client.recognize(clip.path)
        csv = client.download(clip.path, "csv").decode()
        streamed = list(client.stream(clip.path))
    parsed = FORMATS["csv"].parse(csv)
    assert len(parsed) == len(result.tags) == 2
    for got, want in zip(parsed, result.tags, strict=True):
        assert got.start == pytest.approx(want.start, abs=1e-3)
        assert got.end == pytest.approx(want.end, abs=1e-3)
    assert streamed == list(result.tags)
    assert all(isinstance(tag, Tag) for tag in streamed)


def test_download_gives_a_binary_format_byte_for_byte(server: Server, tmp_path: Path) -> None:
    """It returned `response.text`: a MIDI file came back decoded as text, corrupted."""
    path = tmp_path / "tune.flac"
    sf.write(path, render(TUNE, tmp_path, 44100), 44100)
    with Client(server.url) as client:
        midi = client.download(path, "midi", model="notes")
        result = client.recognize(path, model="notes")
    with server.client() as raw, path.open("rb") as handle:
        sent = raw.post(
            "/v1/recognize", params={"model": "notes", "format": "midi"}, files={"file": handle}
        )
    assert sent.status_code == 200 and midi == sent.content
    assert len(FORMATS["midi"].parse(midi)) == len(result.tags) > 0


@pytest.mark.parametrize("client", [Client, AsyncClient])
def test_download_names_every_format(client: type[Client] | type[AsyncClient]) -> None:
    doc = client.download.__doc__ or ""
    assert [name for name in FORMATS if not re.search(rf"\b{name}\b", doc)] == []


def test_cli_server_mode_keeps_every_audio_field(
    server: Server, recording: RecordingFactory, tmp_path: Path
) -> None:
    """`remote.result_of` dropped `decoder`, `stream`, `truncated` and `warnings`."""
    m4a = tmp_path / "talk.m4a"
    ffmpeg("-i", str(recording("talk.wav").path), "-c:a", "aac", str(m4a))
    work = plan([m4a], FORMATS["json"], tmp_path / "out")
    failures = recognize_remote(Remote(server.url, None), work, "speech", FORMATS["json"])
    with server.client() as raw, m4a.open("rb") as handle:
        plain = raw.post("/v1/recognize", files={"file": ("talk.m4a", handle)}).json()
    written = json.loads((tmp_path / "out" / "talk.json").read_text())
    assert failures == [] and plain["audio"]["decoder"] == "ffmpeg"
    assert written["audio"] == plain["audio"]


def test_error_codes_become_exceptions(server: Server, tmp_path: Path) -> None:
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....WAVEfmt " + b"\x00" * 64)
    with Client(server.url, retry=FAST) as client:
        with pytest.raises(NotFound) as unknown:
            client.recognize(broken, model="no-such-model")
        with pytest.raises(BadRequest) as corrupt:
            client.recognize(broken)
        with pytest.raises(InvalidInput) as invalid:
            client.recognize(broken, threshold=2.0)
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_model")
    assert "speech" in unknown.value.message  # names the loaded models
    assert corrupt.value.status == 400 and corrupt.value.code == "corrupt_audio"
    assert invalid.value.status == 422 and "threshold" in invalid.value.message


def test_api_key(keyed: Server, recording: RecordingFactory) -> None:
    clip = recording("talk.flac")
    with Client(keyed.url) as anonymous, pytest.raises(Unauthorized) as refused:
        anonymous.recognize(clip.path)
    assert refused.value.code == "unauthorized"
    with Client(keyed.url, api_key="client-test-key") as client:
        assert len(client.recognize(clip.path).tags) == 2


def _hold_the_only_slot(url: str) -> socket.socket:
    """An upload that has started and stalls: it holds the server's one admission slot."""
    host, port = url.removeprefix("http://").split(":")
    held = socket.create_connection((host, int(port)))
    held.sendall(
        b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\n"
        b"Authorization: Bearer client-test-key\r\n"
        b"Content-Type: audio/wav\r\nContent-Length: 100000\r\n\r\nRIFF"
    )
    return held


def _rejected(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("arengine_rejected_requests_total") and "overloaded" in line
    )


def test_retries_honour_503_then_succeed(keyed: Server, recording: RecordingFactory) -> None:
    clip = recording("talk.flac")
    before = _rejected(keyed.url)
    held = _hold_the_only_slot(keyed.url)
    try:
        with Client(keyed.url, "client-test-key", retry=RetryPolicy(retries=0)) as impatient:
            deadline = time.monotonic() + 10
            while True:  # the stalled upload is admitted once its headers are read
                try:
                    impatient.recognize(clip.path)
                except Unavailable as error:
                    assert (error.status, error.code) == (503, "overloaded")
                    break
                assert time.monotonic() < deadline, "the held upload was never admitted"
        outcome: list[object] = []
        policy = RetryPolicy(retries=50, max_wait_s=0.2)
        client = Client(keyed.url, "client-test-key", retry=policy)
        worker = threading.Thread(target=lambda: outcome.append(client.recognize(clip.path)))
        worker.start()
        while _rejected(keyed.url) < before + 3:  # the patient client was refused and retried
            time.sleep(0.05)
    finally:
        held.close()  # frees the slot: the next retry is admitted
    worker.join(60)
    client.close()
    assert len(outcome) == 1 and len(getattr(outcome[0], "tags", ())) == 2


class _BadGateway(http.server.BaseHTTPRequestHandler):
    """A balancer whose replicas are gone: 502 with an HTML page, counting the attempts."""

    attempts = 0

    def do_POST(self) -> None:
        type(self).attempts += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"<html><body>502 Bad Gateway</body></html>"
        self.send_response(502)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_bounded_retries_on_502_and_refused_connections(recording: RecordingFactory) -> None:
    clip = recording("talk.wav")
    gateway = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway)
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{gateway.server_address[1]}"
        with Client(url, retry=FAST) as client, pytest.raises(Unavailable) as gone:
            client.recognize(clip.path)
    finally:
        gateway.shutdown()
        gateway.server_close()
    assert _BadGateway.attempts == FAST.retries + 1
    assert (gone.value.status, gone.value.code) == (502, "http_error")
    assert "Bad Gateway" in gone.value.message
    with (
        Client(f"http://127.0.0.1:{free_port()}", retry=FAST) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.recognize(clip.path)


def test_retry_after_is_capped() -> None:
    policy = RetryPolicy(retries=3, max_wait_s=2.0, backoff_s=0.5)
    answer = httpx.Response(503, headers={"Retry-After": "120"})
    assert policy.wait_s(0, answer) == 2.0
    assert policy.wait_s(0, httpx.Response(503, headers={"Retry-After": "1"})) == 1.0
    assert [policy.wait_s(n, None) for n in range(3)] == [0.5, 1.0, 2.0]


def test_async_client_runs_requests_concurrently(
    server: Server, recording: RecordingFactory
) -> None:
    clips = [recording(f"talk{i}.flac") for i in range(3)]

    async def run() -> tuple[list[int], list[Tag], dict[str, object]]:
        async with AsyncClient(server.url) as client:
            results = await asyncio.gather(*(client.recognize(c.path) for c in clips))
            streamed = [tag async for tag in client.stream(clips[0].path)]
            return [len(r.tags) for r in results], streamed, await client.info()

    counts, streamed, info = asyncio.run(run())
    assert counts == [2, 2, 2]
    assert len(streamed) == 2 and info["ready"] is True


def _arengine(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arengine", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


@pytest.mark.slow
def test_cli_server_mode_matches_in_process_and_resumes(
    keyed: Server, tmp_path: Path, recording: RecordingFactory
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i, ext in enumerate(["flac", "wav", "mp3"]):
        recording(f"talk{i}.{ext}").path.rename(inputs / f"talk{i}.{ext}")
    (inputs / "broken.wav").write_bytes(b"RIFF....WAVEfmt " + b"\x00" * 64)
    missing = str(tmp_path / "missing.flac")
    common = ["--format", "csv", "--concurrency", "3"]
    key = {"ARENGINE_API_KEY": "client-test-key"}
    local = _arengine(
        "recognize", str(inputs), missing, *common, "--out", "local", "--segment-s", "2",
        cwd=tmp_path,
    )  # fmt: skip
    remote = _arengine(
        "recognize", str(inputs), missing, *common, "--out", "remote", "--server", keyed.url,
        cwd=tmp_path, env=key,
    )  # fmt: skip
    assert local.returncode == remote.returncode == 1, remote.stderr
    names = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert names == ["talk0.csv", "talk1.csv", "talk2.csv"]
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == names
    for name in names:
        assert (tmp_path / "remote" / name).read_text() == (tmp_path / "local" / name).read_text()

    def report(stderr: str) -> list[str]:
        return sorted(line for line in stderr.splitlines() if line.startswith(("arengine:", "  ")))

    assert report(remote.stderr) == report(local.stderr)
    assert "2 of 5 files failed" in remote.stderr and "overall: 5/5 files" in remote.stderr

    (tmp_path / "remote" / "talk1.csv").unlink()
    again = _arengine(
        "recognize", str(inputs), *common, "--out", "remote", "--server", keyed.url, "--resume",
        cwd=tmp_path, env=key,
    )  # fmt: skip
    assert "resume: 2 outputs already there, skipped" in again.stderr
    assert "overall: 2/2 files" in again.stderr  # talk1 and broken.wav, which has no output
    expected = (tmp_path / "local" / "talk1.csv").read_text()
    assert (tmp_path / "remote" / "talk1.csv").read_text() == expected
    assert again.returncode == 1
    no_key = _arengine(
        "recognize", str(inputs / "talk0.flac"), "--out", "x", "--server", keyed.url, cwd=tmp_path
    )
    assert no_key.returncode == 1
    assert "1 of 1 files failed" in no_key.stderr and "API key" in no_key.stderr


def test_cli_resume_in_process_skips_what_is_done(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    first, second = recording("one.flac").path, recording("two.wav").path
    out = tmp_path / "out"
    out.mkdir()
    (out / "one.json").write_text("kept")
    done = _arengine(
        "recognize", str(first), str(second), "--out", str(out), "--resume", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (out / "one.json").read_text() == "kept"
    assert "two.wav" in done.stderr and "one.flac" not in done.stderr
    assert len(FORMATS["json"].parse((out / "two.json").read_text())) == 2
    again = _arengine(
        "recognize", str(first), str(second), "--out", str(out), "--resume", cwd=tmp_path
    )
    assert again.returncode == 0 and again.stderr == ""  # nothing left: no engine started


def test_jobs_through_both_clients_answer_as_a_recognition_and_take_new_parameters(
    tmp_path: Path, recording: RecordingFactory
) -> None:
    running = start_server(tmp_path, "--data-dir", str(tmp_path / "data"), "--segment-s", "2")
    talk = recording("talk.wav").path
    try:
        with Client(running.url, retry=FAST) as client:
            direct = client.recognize(talk)
            strict = client.recognize(talk, threshold=0.9)
            assert strict.tags != direct.tags, "the new threshold must show"
            job_id = client.submit(talk)
            assert client.wait(job_id, poll_s=0.1).tags == direct.tags
            assert client.job_result(job_id, threshold=0.9).tags == strict.tags
            assert client.recognize_job(talk, poll_s=0.1, threshold=0.9).tags == strict.tags
            assert client.job(job_id)["state"] == "done"
            with pytest.raises(NotFound) as missing:
                client.wait("x" * 22, poll_s=0.1)
            assert missing.value.code == "job_not_found"

        async def through_async() -> None:
            async with AsyncClient(running.url, retry=FAST) as client:
                job_id = await client.submit(talk, threshold=0.9)
                assert (await client.wait(job_id, poll_s=0.1)).tags == strict.tags
                assert (await client.job_result(job_id, threshold=0.5)).tags == direct.tags
                assert (await client.recognize_job(talk, poll_s=0.1)).tags == direct.tags

        asyncio.run(through_async())
    finally:
        stop_server(running)

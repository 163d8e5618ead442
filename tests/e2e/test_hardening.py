"""Limits, admission, deadlines, disconnects, API keys and shutdown, against real servers."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server, ServerFactory, start_server, stop_server, wait_until
from tests.gate import Gate, gated_models, marked


def _info(server: Server) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(server.url + "/v1/info").json()
    return info


def _slow_upload(server: Server, declared: int = 10_000_000) -> socket.socket:
    """A raw connection that sends headers and the start of a body, then nothing."""
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\nContent-Type: audio/wav\r\n"
        b"Content-Length: %d\r\n\r\n" % declared + b"RIFF" + bytes(1000)
    )
    return sock


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Gate]:
    """`speech` and the `gate` test model, which holds a request in the engine on demand."""
    return gated_models(tmp_path_factory.mktemp("gated"))


@pytest.fixture(scope="module")
def held_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second behind the gate, then two quiet minutes (60 segments of 2 s) as FLAC: a few kB
    to upload, and held in the engine at its first segment while the gate is."""
    return marked(tmp_path_factory.mktemp("held") / "held.flac", [("mark", 1.0), ("quiet", 120.0)])


@pytest.fixture(scope="module")
def gated(serve: ServerFactory, models: tuple[Path, Gate]) -> tuple[Server, Gate]:
    """One engine thread and 2-s segments, serving the `gate` model; and its gate."""
    folder, gate = models
    return serve("--models-dir", str(folder), "--engine-threads", "1", "--segment-s", "2"), gate


def _inferred(server: Server, model: str = "gate") -> int:
    """Segments of `model` the server has started inferring: each waited once for a thread."""
    metrics = httpx.get(server.url + "/metrics").text
    pattern = rf'^arengine_queue_wait_seconds_count\{{model="{model}"\}} (\S+)$'
    found = re.search(pattern, metrics, re.M)
    return 0 if found is None else int(float(found[1]))


def _signalled(server: Server) -> bool:
    """The server has handled its first SIGTERM (it says so before it drains)."""
    return "signal 15: not ready" in server.log.read_text()


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve(
        "--models",
        "speech",
        "--max-pending-requests",
        "2",
        "--max-uploading-requests",
        "2",
        "--body-timeout-s",
        "1",
        "--engine-threads",
        "1",
    )


@pytest.fixture(scope="module")
def patient(serve: ServerFactory) -> Server:
    """Two upload slots, and stalled uploads kept for a minute (the common server here cuts
    them after 1 s, which a slow machine can spend between filling the slots and asking)."""
    return serve(
        "--models",
        "speech",
        "--max-uploading-requests",
        "2",
        "--body-timeout-s",
        "60",
        "--min-upload-bytes-per-s",
        "0",
    )


@pytest.mark.slow  # a server of its own
def test_beyond_the_upload_bound_requests_get_503_with_retry_after_at_once(
    patient: Server,
) -> None:
    server = patient
    slow = [_slow_upload(server), _slow_upload(server)]
    try:
        assert wait_until(lambda: _info(server)["uploading_requests"] == 2)
        response = httpx.post(
            server.url + "/v1/recognize", content=b"RIFF", headers={"Content-Type": "audio/wav"}
        )
        # Refused while both slots are still held: not queued behind them.
        assert _info(server)["uploading_requests"] == 2
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "overloaded"
    finally:
        for sock in slow:
            sock.close()
    assert wait_until(lambda: _info(server)["uploading_requests"] == 0)


def test_a_body_that_stops_arriving_gets_408(server: Server) -> None:
    sock = _slow_upload(server)
    try:
        sock.settimeout(10)
        reply = ""
        while "}}" not in reply and (chunk := sock.recv(65536)):
            reply += chunk.decode("latin-1")
    finally:
        sock.close()
    assert reply.startswith("HTTP/1.1 408")
    assert "body_timeout" in reply
    assert wait_until(lambda: _info(server)["uploading_requests"] == 0)


@pytest.mark.slow  # a server of its own
def test_deadline_gives_504_and_drops_the_work(gated: tuple[Server, Gate], held_file: Path) -> None:
    server, gate = gated
    before = _inferred(server)
    with gate.held(), held_file.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"timeout_s": 0.5, "model": "gate"},
            files={"file": body},
            timeout=60,
        )
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "deadline_exceeded"
    # Let go once the deadline had passed, the job ends with the tasks already started (at most
    # the segments decoded ahead), not with the 60 segments of the file.
    assert wait_until(lambda: _info(server)["active_jobs"] == 0)
    assert _inferred(server) - before <= 5


@pytest.mark.slow  # a server of its own
def test_client_disconnect_cancels_the_remaining_work(
    gated: tuple[Server, Gate], held_file: Path
) -> None:
    server, gate = gated
    port = int(server.url.rsplit(":", 1)[1])
    data = held_file.read_bytes()
    before = _inferred(server)
    disconnects = server.log.read_text().count("client disconnected")
    with gate.held():
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"POST /v1/recognize?model=gate HTTP/1.1\r\nHost: localhost\r\n"
                b"Content-Type: audio/flac\r\nContent-Length: %d\r\n\r\n" % len(data) + data
            )
            # Uploaded, and held in the engine until the gate opens.
            assert wait_until(lambda: _info(server)["active_jobs"] == 1)
            assert _info(server)["pending_requests"] == 1
        logged = server.log.read_text
        assert wait_until(lambda: logged().count("client disconnected") > disconnects)
    assert wait_until(lambda: _info(server)["active_jobs"] == 0)
    assert wait_until(lambda: _info(server)["pending_requests"] == 0)
    assert _inferred(server) - before <= 5


def test_after_a_4xx_the_keep_alive_connection_still_works(server: Server, tmp_path: Path) -> None:
    sf.write(tmp_path / "ok.wav", np.zeros(16000, np.float32), 16000)
    with httpx.Client(base_url=server.url) as client:
        bad = client.post("/v1/recognize", files={"file": b""})
        good = client.post("/v1/recognize", files={"file": (tmp_path / "ok.wav").read_bytes()})
    assert bad.status_code == 422
    assert good.status_code == 200


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", "empty_file"),
        (b"\x00" * 100, "unsupported_format"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt " + bytes(8), "corrupt_audio"),
    ],
)
def test_error_bodies_do_not_leak_server_paths(server: Server, content: bytes, code: str) -> None:
    response = httpx.post(
        server.url + "/v1/recognize", files={"file": ("../../etc/x.wav", content)}
    )
    assert response.json()["error"]["code"] == code, response.text
    assert "/tmp" not in response.text and "arengine-" not in response.text
    assert "Traceback" not in response.text


@pytest.mark.slow
def test_api_keys(tmp_path: Path) -> None:
    # Written as people write lists: a space after the comma.
    running = start_server(
        tmp_path,
        "--no-metrics-public",
        "--models",
        "speech",
        env={"ARENGINE_API_KEYS": "key-one, key-two "},
    )
    try:
        with httpx.Client(base_url=running.url) as client:
            missing = client.get("/v1/models")
            wrong = client.get("/v1/models", headers={"Authorization": "Bearer key-three"})
            first, second = (
                client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
                for key in ("key-one", "key-two")
            )
            open_paths = [client.get(path).status_code for path in ("/healthz", "/readyz")]
    finally:
        stop_server(running)
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["error"]["code"] == "unauthorized"
    assert first.status_code == second.status_code == 200
    assert open_paths == [200, 200]
    assert "key-one" not in " ".join(running.process.args)  # type: ignore[arg-type]
    log = running.log.read_text()
    assert '"api_keys": 2' in log  # how many keys are active, never which
    assert "key-one" not in log and "key-two" not in log


@pytest.mark.slow
def test_sigterm_drains_in_flight_work_then_exits_0(
    tmp_path: Path, models: tuple[Path, Gate], held_file: Path
) -> None:
    folder, gate = models
    running = start_server(
        tmp_path, "--shutdown-delay-s", "3", "--engine-threads", "1", "--models-dir", str(folder)
    )
    outcome: dict[str, httpx.Response] = {}

    def post() -> None:
        with held_file.open("rb") as body:
            outcome["in_flight"] = httpx.post(
                running.url + "/v1/recognize?model=gate", files={"file": body}, timeout=60
            )

    poster = threading.Thread(target=post)
    with gate.held():
        poster.start()
        assert wait_until(lambda: _info(running)["active_jobs"] == 1)  # held in the engine
        running.process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _signalled(running))
        ready = httpx.get(running.url + "/readyz")
        alive = httpx.get(running.url + "/healthz")
        refused = httpx.post(
            running.url + "/v1/recognize", content=b"x", headers={"Content-Type": "audio/wav"}
        )
    poster.join(60)
    assert running.process.wait(30) == 0
    assert ready.status_code == 503 and alive.status_code == 200
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "shutting_down"
    assert outcome["in_flight"].status_code == 200
    assert outcome["in_flight"].json()["audio"]["duration_s"] == pytest.approx(121.0)


@pytest.mark.slow
def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    running = start_server(tmp_path, "--shutdown-delay-s", "30", "--models", "speech")
    running.process.send_signal(signal.SIGTERM)
    assert wait_until(lambda: _signalled(running))
    running.process.send_signal(signal.SIGTERM)
    # Exits with its 30-s drain delay still running: the second signal cut it short.
    assert running.process.wait(10) == 0


@pytest.mark.slow
def test_sigterm_lets_an_upload_in_progress_finish(tmp_path: Path) -> None:
    path = tmp_path / "clip.wav"
    sf.write(path, np.zeros(16000 * 3, np.float32), 16000)
    data = path.read_bytes()
    running = start_server(tmp_path, "--shutdown-delay-s", "1.0", "--models", "speech")
    port = int(running.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data) + data[:1000]
        )
        assert wait_until(lambda: _info(running)["uploading_requests"] == 1)
        running.process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _signalled(running))
        sock.sendall(data[1000:])
        sock.settimeout(20)
        reply = b""
        while b"}}" not in reply and (chunk := sock.recv(65536)):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    assert running.process.wait(30) == 0


def _start_upload(server: Server) -> socket.socket:
    """An upload that has begun and waits for more: the server holds it as uploading."""
    sock = _slow_upload(server)
    assert wait_until(lambda: _info(server)["uploading_requests"] == 1)
    return sock


def _reply(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    reply = b""
    while b"}}" not in reply and (chunk := sock.recv(65536)):
        reply += chunk
    return reply


def _assert_shutting_down(reply: bytes) -> None:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), reply[:300]
    assert b"application/json" in head and b"retry-after: 1" in head.lower()
    assert json.loads(body)["error"]["code"] == "shutting_down"


@pytest.mark.slow
def test_a_second_signal_answers_an_upload_in_progress_with_503_shutting_down(
    tmp_path: Path,
) -> None:
    running = start_server(tmp_path, "--shutdown-delay-s", "30", "--models", "speech")
    with _start_upload(running) as sock:
        running.process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _signalled(running))
        running.process.send_signal(signal.SIGTERM)
        reply = _reply(sock)
    assert running.process.wait(10) == 0
    _assert_shutting_down(reply)
    log = running.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log


@pytest.mark.slow
def test_an_upload_cut_off_by_the_shutdown_timeout_gets_503_shutting_down(tmp_path: Path) -> None:
    running = start_server(
        tmp_path,
        "--shutdown-delay-s",
        "0",
        "--shutdown-timeout-s",
        "1",
        "--upload-dir",
        str(tmp_path),
        "--models",
        "speech",
    )
    with _start_upload(running) as sock:
        running.process.send_signal(signal.SIGTERM)
        reply = _reply(sock)
    assert running.process.wait(10) == 0
    _assert_shutting_down(reply)
    log = running.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log
    assert not list(tmp_path.glob("arengine-*.upload"))


@pytest.mark.slow
def test_uploads_left_by_a_crash_are_swept_when_the_server_starts_again(tmp_path: Path) -> None:
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    others = [uploads / "arengine-notes.txt", uploads / "recording.upload", uploads / "x.wav"]
    for other in others:
        other.write_bytes(b"not ours")
    (uploads / "arengine-linked00.upload").symlink_to(others[0])

    def spooled() -> list[str]:
        return sorted(path.name for path in uploads.glob("arengine-*.upload"))

    args = ("--upload-dir", str(uploads), "--models", "speech", "--min-upload-bytes-per-s", "0")
    first = start_server(tmp_path, *args)
    with _start_upload(first):
        assert wait_until(lambda: len(spooled()) == 2)
        # A second server on the directory while the first is alive must not touch its upload.
        beside = start_server(tmp_path, *args, wait_ready=False)
        stop_server(beside)
        assert len(spooled()) == 2 and _info(first)["uploading_requests"] == 1
        first.process.kill()
        first.process.wait(10)
    assert len(spooled()) == 2  # the crash left the partial upload behind
    again = start_server(tmp_path, *args, wait_ready=False)
    stop_server(again)
    assert spooled() == ["arengine-linked00.upload"]  # a symlink is never ours
    assert all(other.read_bytes() == b"not ours" for other in others)
    assert "in use by another server: not swept" in beside.log.read_text()
    assert "removed 1 upload(s) left in" in again.log.read_text()


@pytest.mark.slow
def test_a_stream_cut_off_by_a_second_signal_ends_with_a_shutting_down_line(
    tmp_path: Path, models: tuple[Path, Gate], held_file: Path
) -> None:
    folder, gate = models
    running = start_server(
        tmp_path, "--shutdown-delay-s", "30", "--engine-threads", "1", "--models-dir", str(folder)
    )
    lines: list[dict[str, Any]] = []

    def stream() -> None:
        with (
            held_file.open("rb") as body,
            httpx.stream(
                "POST",
                running.url + "/v1/recognize",
                params={"format": "ndjson", "progress": "true", "model": "gate"},
                files={"file": body},
                timeout=60,
            ) as response,
        ):
            lines.extend(json.loads(line) for line in response.iter_lines() if line)

    reader = threading.Thread(target=stream)
    with gate.held():  # the job cannot end before the signals
        reader.start()
        assert wait_until(lambda: bool(lines)), "the stream starts once the upload is validated"
        running.process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _signalled(running))
        running.process.send_signal(signal.SIGTERM)
        reader.join(30)
    assert running.process.wait(10) == 0
    assert "progress" in lines[0]
    assert lines[-1]["error"]["code"] == "shutting_down", lines[-1]
    assert "cut off" in lines[-1]["error"]["message"]
    log = running.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log


@pytest.mark.slow
def test_a_second_signal_answers_a_request_in_the_engine_with_503_shutting_down(
    tmp_path: Path, models: tuple[Path, Gate], held_file: Path
) -> None:
    folder, gate = models
    running = start_server(
        tmp_path, "--shutdown-delay-s", "30", "--engine-threads", "1", "--models-dir", str(folder)
    )
    outcome: dict[str, httpx.Response] = {}

    def post() -> None:
        with held_file.open("rb") as body:
            outcome["in_flight"] = httpx.post(
                running.url + "/v1/recognize?model=gate", files={"file": body}, timeout=60
            )

    poster = threading.Thread(target=post)
    with gate.held():  # in the engine until both signals are in
        poster.start()
        assert wait_until(lambda: _info(running)["active_jobs"] == 1)
        running.process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _signalled(running))
        running.process.send_signal(signal.SIGTERM)
        poster.join(30)
    assert running.process.wait(10) == 0
    answer = outcome["in_flight"]
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"]["code"] == "shutting_down"
    log = running.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log

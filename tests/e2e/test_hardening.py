"""Limits, admission, deadlines, disconnects, API keys and shutdown, against real servers."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server, ServerFactory, start_server, stop_server, wait_until


def _info(server: Server) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(server.url + "/v1/info").json()
    return info


def _slow_upload(server: Server, declared: int = 10_000_000) -> socket.socket:
    """A raw connection that sends headers and the start of a body, then nothing."""
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/recognize HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n"
        b"Content-Length: %d\r\n\r\n" % declared + b"RIFF" + bytes(1000)
    )
    return sock


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 minutes of quiet noise: about a second of engine work on one thread."""
    path = tmp_path_factory.mktemp("long") / "30min.wav"
    rng = np.random.default_rng(0)
    with sf.SoundFile(path, "w", 16000, 1, "PCM_16") as out:
        for _ in range(30):
            out.write((0.01 * rng.standard_normal(16000 * 60)).astype(np.float32))
    return path


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--max-pending-requests", "2", "--body-timeout-s", "1", "--engine-threads", "1")


def test_beyond_the_pending_bound_requests_get_503_with_retry_after_at_once(server: Server) -> None:
    slow = [_slow_upload(server), _slow_upload(server)]
    try:
        assert wait_until(lambda: _info(server)["pending_requests"] == 2)
        response = httpx.post(
            server.url + "/v1/recognize", content=b"RIFF", headers={"Content-Type": "audio/wav"}
        )
        # Refused while both slots are still held: not queued behind them.
        assert _info(server)["pending_requests"] == 2
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "overloaded"
    finally:
        for sock in slow:
            sock.close()
    assert wait_until(lambda: _info(server)["pending_requests"] == 0)


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
    assert wait_until(lambda: _info(server)["pending_requests"] == 0)


def test_deadline_gives_504_and_drops_the_work(server: Server, long_file: Path) -> None:
    with long_file.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"timeout_s": 0.5},
            files={"file": body},
            timeout=60,
        )
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "deadline_exceeded"
    assert wait_until(lambda: _info(server)["active_jobs"] == 0, 3)


def test_client_disconnect_cancels_the_remaining_work(server: Server, long_file: Path) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    data = long_file.read_bytes()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/recognize HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)
        )
        sock.sendall(data)
        assert wait_until(lambda: _info(server)["active_jobs"] == 1, 5)
    # The engine needs about a second for this file; cancelled, it is idle well before.
    assert wait_until(lambda: _info(server)["active_jobs"] == 0, 0.8)
    assert wait_until(lambda: _info(server)["pending_requests"] == 0, 2)
    assert wait_until(lambda: "client disconnected" in server.log.read_text(), 2)


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


def test_api_keys(tmp_path: Path) -> None:
    running = start_server(
        tmp_path, "--no-metrics-public", env={"ARENGINE_API_KEYS": "key-one,key-two"}
    )
    try:
        with httpx.Client(base_url=running.url) as client:
            missing = client.get("/v1/models")
            wrong = client.get("/v1/models", headers={"Authorization": "Bearer key-three"})
            right = client.get("/v1/models", headers={"Authorization": "Bearer key-two"})
            open_paths = [client.get(path).status_code for path in ("/healthz", "/readyz")]
    finally:
        stop_server(running)
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["error"]["code"] == "unauthorized"
    assert right.status_code == 200
    assert open_paths == [200, 200]
    assert "key-one" not in " ".join(running.process.args)  # type: ignore[arg-type]


def test_sigterm_drains_in_flight_work_then_exits_0(tmp_path: Path, long_file: Path) -> None:
    running = start_server(tmp_path, "--shutdown-delay-s", "1.5", "--engine-threads", "1")
    outcome: dict[str, httpx.Response] = {}

    def post() -> None:
        with long_file.open("rb") as body:
            outcome["in_flight"] = httpx.post(
                running.url + "/v1/recognize", files={"file": body}, timeout=60
            )

    poster = threading.Thread(target=post)
    poster.start()
    assert wait_until(lambda: _info(running)["active_jobs"] == 1, 5)
    running.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    ready = httpx.get(running.url + "/readyz")
    alive = httpx.get(running.url + "/healthz")
    refused = httpx.post(
        running.url + "/v1/recognize", content=b"x", headers={"Content-Type": "audio/wav"}
    )
    poster.join(60)
    assert running.process.wait(30) == 0
    assert ready.status_code == 503 and alive.status_code == 200
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert outcome["in_flight"].status_code == 200
    assert outcome["in_flight"].json()["audio"]["duration_s"] == pytest.approx(1800.0)


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    running = start_server(tmp_path, "--shutdown-delay-s", "30")
    running.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    running.process.send_signal(signal.SIGTERM)
    # Exits with its 30-s drain delay still running: the second signal cut it short.
    assert running.process.wait(10) == 0


def test_sigterm_lets_an_upload_in_progress_finish(tmp_path: Path) -> None:
    path = tmp_path / "clip.wav"
    sf.write(path, np.zeros(16000 * 3, np.float32), 16000)
    data = path.read_bytes()
    running = start_server(tmp_path, "--shutdown-delay-s", "1.0")
    port = int(running.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/recognize HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data) + data[:1000]
        )
        assert wait_until(lambda: _info(running)["pending_requests"] == 1, 5)
        running.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        sock.sendall(data[1000:])
        sock.settimeout(20)
        reply = b""
        while b"}}" not in reply and (chunk := sock.recv(65536)):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    assert running.process.wait(30) == 0

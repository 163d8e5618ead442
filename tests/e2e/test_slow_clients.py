"""Slow and idle clients against a real server: drippers, slowloris, idle connections, the
connection cap, descriptor exhaustion, and what the protocol refuses before the application.

Settings are small (a 3 s grace period, 1 s header timeout) so each case takes seconds. Each
case runs under each HTTP parser (`--http-parser`).
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from arengine.settings import HTTP_PARSERS
from tests.conftest import Server, ServerFactory, start_server, stop_server, wait_until

MIN_RATE = 2000
GRACE_S = 3.0


@pytest.fixture(scope="module", params=HTTP_PARSERS)
def server(serve: ServerFactory, request: pytest.FixtureRequest) -> Server:
    return serve(
        "--http-parser",
        request.param,
        "--models",
        "speech",
        "--engine-threads",
        "1",
        "--max-pending-requests",
        "2",
        "--max-uploading-requests",
        "4",
        "--upload-grace-s",
        str(GRACE_S),
        "--min-upload-bytes-per-s",
        str(MIN_RATE),
        "--body-timeout-s",
        "30",
        "--header-timeout-s",
        "1",
        "--max-header-bytes",
        "8192",
        "--max-connections",
        "12",
    )


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("clip") / "clip.wav"
    sf.write(path, np.zeros(16000, np.float32), 16000)
    return path.read_bytes()


def _port(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _info(server: Server) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(server.url + "/v1/info").json()
    return info


def _metric(server: Server, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, flags=re.MULTILINE)
    assert found, name
    return float(found.group(1))


def _read_reply(sock: socket.socket, seconds: float = 10.0) -> bytes:
    """Everything the server sends until it closes, or until `seconds` pass."""
    sock.settimeout(seconds)
    reply = b""
    try:
        while chunk := sock.recv(65536):
            reply += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return reply


def _closed_by_server(sock: socket.socket, seconds: float = 10.0) -> bool:
    """Whether the server closes `sock` (without a word) within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _error_of(reply: bytes) -> tuple[int, str]:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), reply[:300]
    return int(head.split()[1]), json.loads(body)["error"]["code"]


def _post(server: Server, clip: bytes) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/recognize", content=clip, headers={"Content-Type": "audio/wav"}
    )


class Dripper(threading.Thread):
    """A client that sends its headers, then a byte of body every `gap_s`, until answered."""

    def __init__(self, server: Server, gap_s: float) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", _port(server)))
        self.gap_s = gap_s
        self.reply = b""
        self.sent = 0

    def run(self) -> None:
        self.sock.sendall(
            b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: 1000000\r\n\r\n"
        )
        try:
            while not select.select([self.sock], [], [], self.gap_s)[0]:
                self.sock.sendall(b"\0")
                self.sent += 1
        except OSError:
            pass
        self.reply = _read_reply(self.sock)
        self.sock.close()


def _drip(server: Server, count: int, gap_s: float = 0.2) -> list[Dripper]:
    drippers = [Dripper(server, gap_s) for _ in range(count)]
    for dripper in drippers:
        dripper.start()
    return drippers


def test_drippers_do_not_starve_the_engine_and_are_cut_off_after_the_grace_period(
    server: Server, clip: bytes
) -> None:
    # Two drippers as many as the engine's slots: they hold upload slots only.
    drippers = _drip(server, 2)
    assert wait_until(lambda: _info(server)["uploading_requests"] == 2)
    assert _metric(server, "arengine_uploading_requests") == 2
    # Their first bytes follow their headers by a drip gap: wait for them rather than race them.
    assert wait_until(lambda: _metric(server, "arengine_uploading_bytes") > 0)
    answer = _post(server, clip)
    still_dripping = all(dripper.is_alive() for dripper in drippers)
    assert answer.status_code == 200, answer.text
    assert still_dripping
    for dripper in drippers:
        dripper.join(15)
        assert _error_of(dripper.reply) == (408, "upload_too_slow"), dripper.reply[:300]
        assert b"bytes/s" in dripper.reply
    assert wait_until(lambda: _info(server)["uploading_requests"] == 0)
    assert _metric(server, "arengine_uploading_bytes") == 0
    assert _metric(server, "arengine_upload_bytes_total") >= len(clip)


def test_when_drippers_fill_the_upload_slots_a_request_is_refused_until_they_are_cut_off(
    server: Server, clip: bytes
) -> None:
    drippers = _drip(server, 4)
    assert wait_until(lambda: _info(server)["uploading_requests"] == 4)
    refused = _post(server, clip)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "overloaded"
    assert "uploads are in progress" in refused.json()["error"]["message"]
    for dripper in drippers:
        dripper.join(15)
        assert _error_of(dripper.reply) == (408, "upload_too_slow")
    assert _post(server, clip).status_code == 200


def test_the_deadline_covers_the_upload(server: Server) -> None:
    # Fast enough for the minimum rate, too slow for a 1 s deadline: cut off at the deadline.
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(
            b"POST /v1/recognize?timeout_s=1 HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: audio/wav\r\n"
            b"Content-Length: 1000000\r\n\r\n"
        )
        try:
            while not select.select([sock], [], [], 0.05)[0]:
                sock.sendall(bytes(MIN_RATE // 10))
        except OSError:
            pass
        reply = _read_reply(sock)
    assert _error_of(reply) == (408, "upload_too_slow")
    assert b"deadline" in reply
    assert wait_until(lambda: _info(server)["uploading_requests"] == 0)


def test_an_idle_connection_is_closed_after_the_header_timeout(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        assert _closed_by_server(sock)


def test_slowloris_gets_408_after_the_header_timeout(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + b"X-Slow: 1\r\n" * 100
        sent = 0
        try:
            while sent < len(request) and not select.select([sock], [], [], 0.1)[0]:
                sock.sendall(request[sent : sent + 1])
                sent += 1
        except OSError:
            pass
        reply = _read_reply(sock)
    assert sent < len(request)
    assert _error_of(reply) == (408, "header_timeout")


@pytest.mark.parametrize("size", [7000, 20_000, 100_000])
def test_the_header_limit_holds_for_headers_sent_in_one_write(server: Server, size: int) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Big: "
            + b"a" * size
            + b"\r\n\r\n"
        )
        reply = _read_reply(sock, 5)
    if size < 8192:
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    else:
        assert _error_of(reply) == (431, "headers_too_large")


def test_headers_arriving_in_pieces_past_the_limit_get_the_json_431(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        try:
            for _ in range(20):  # 20 KB of headers, never finished, in 1 KB writes
                sock.sendall(b"X-Piece: " + b"a" * 1000 + b"\r\n")
                time.sleep(0.01)
        except OSError:
            pass
        reply = _read_reply(sock, 5)
    assert _error_of(reply) == (431, "headers_too_large")


def test_a_garbage_request_line_gets_the_json_400(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(b"HELLO THERE\r\n\r\n")
        reply = _read_reply(sock, 5)
    assert _error_of(reply) == (400, "bad_request")


def test_content_length_with_transfer_encoding_is_refused(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(
            b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nRIFF\r\n0\r\n\r\n"
        )
        reply = _read_reply(sock, 5)
    assert _error_of(reply) == (400, "ambiguous_length")
    assert reply.count(b"HTTP/1.1") == 1  # closed after the refusal: nothing else is read


@pytest.mark.parametrize(
    "value", [b"-1", b"abc", b"1e3", b"0x10", b"12, 13", b"99999999999999999999x"]
)
def test_a_malformed_content_length_gets_the_json_error_body(server: Server, value: bytes) -> None:
    with socket.create_connection(("127.0.0.1", _port(server))) as sock:
        sock.sendall(
            b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\nContent-Type: audio/wav\r\n"
            b"Content-Length: " + value + b"\r\n\r\nRIFF"
        )
        reply = _read_reply(sock, 5)
    assert _error_of(reply) == (400, "bad_content_length")


def test_connections_beyond_the_cap_get_503_and_are_closed(server: Server) -> None:
    idle = [socket.create_connection(("127.0.0.1", _port(server))) for _ in range(12)]
    try:
        with socket.create_connection(("127.0.0.1", _port(server))) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            reply = _read_reply(extra, 5)
        assert _error_of(reply) == (503, "too_many_connections")
        assert b"retry-after: 1" in reply.lower()
        # The idle ones are closed by the header timeout, and the server answers again.
        assert all(_closed_by_server(sock) for sock in idle)
    finally:
        for sock in idle:
            sock.close()
    assert httpx.get(server.url + "/healthz").status_code == 200


@pytest.mark.slow
def test_descriptor_exhaustion_neither_stops_the_server_nor_floods_the_log(
    tmp_path: Path,
) -> None:
    running = start_server(
        tmp_path, "--models", "speech", "--header-timeout-s", "1", open_files=256, wait_ready=False
    )

    def healthy(timeout_s: float) -> bool:
        try:
            return httpx.get(running.url + "/healthz", timeout=timeout_s).status_code == 200
        except httpx.TransportError:  # queued behind the idle connections: try again
            return False

    idle: list[socket.socket] = []
    try:
        try:
            for _ in range(300):
                idle.append(socket.create_connection(("127.0.0.1", _port(running))))
            answered = wait_until(lambda: healthy(2), 15)
        finally:
            for sock in idle:
                sock.close()
        alive = wait_until(lambda: healthy(5), 15)
    finally:
        stop_server(running)
    log = running.log.read_text()
    assert answered and alive
    assert "Traceback" not in log
    assert log.count("max_connections (") == 1  # the cap warning, once
    assert "max_connections lowered from 1000 to 64" in log
    assert len(log) < 50_000

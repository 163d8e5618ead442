"""A real server recognises a WAV while it is uploaded: the job starts on the header, a refusal
comes before the body ends, and a client that leaves mid-upload leaves nothing behind."""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import RecordingFactory, Server, ServerFactory, wait_until
from tests.recordings import Recording

BOUNDARY = b"arengine-test-boundary"


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", "speech", "--max-duration-s", "120", "--segment-s", "4")


@pytest.fixture
def talk(recording: RecordingFactory) -> Recording:
    pieces = [p for i in range(6) for p in [("silence", 1.0 + i % 3), ("speech", 0), ("noise", 1)]]
    return recording("talk.wav", rate=16000, pieces=pieces)


def _info(server: Server) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(server.url + "/v1/info").json()
    return info


def _request(server: Server, body: bytes, multipart: bool) -> tuple[socket.socket, bytes]:
    """A connection with the request's head sent, and the body it declares (still to send)."""
    if multipart:
        body = (
            b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; '
            b'filename="talk.wav"\r\nContent-Type: audio/wav\r\n\r\n'
            + body
            + b"\r\n--"
            + BOUNDARY
            + b"--\r\n"
        )
        kind = b"multipart/form-data; boundary=" + BOUNDARY
    else:
        kind = b"audio/wav"
    sock = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
    sock.sendall(
        b"POST /v1/recognize HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: "
        + kind
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    return sock, body


def _reply(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    sock.settimeout(60)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize("multipart", [False, True], ids=["raw", "multipart"])
def test_the_job_starts_on_the_header_and_gives_the_tags_of_the_whole_file(
    server: Server, talk: Recording, multipart: bool
) -> None:
    expected = httpx.post(
        server.url + "/v1/recognize", files={"file": talk.path.read_bytes()}, timeout=60
    ).json()
    sock, body = _request(server, talk.path.read_bytes(), multipart)
    with sock:
        half = len(body) // 2
        sock.sendall(body[:half])
        # In the engine while still uploading, holding an upload slot and no engine slot.
        assert wait_until(lambda: _info(server)["active_jobs"] == 1)
        info = _info(server)
        assert (info["uploading_requests"], info["pending_requests"]) == (1, 0)
        sock.sendall(body[half:])
        status, answer = _reply(sock)
    assert status == 200, answer
    assert answer["tags"] == expected["tags"]
    assert answer["audio"] == expected["audio"]


def test_a_refusal_found_in_the_header_comes_before_the_body_ends(
    server: Server, tmp_path: Path
) -> None:
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(16000 * 180, np.int16), 16000)  # 180 s: over the 120 s cap
    sock, body = _request(server, long.read_bytes(), multipart=False)
    with sock:
        sock.sendall(body[: 256 * 1024])  # the header and the first seconds only
        select.select([sock], [], [], 60)  # the refusal has arrived...
        sock.sendall(body[256 * 1024 : 1024 * 1024])  # ...while the client still sends
        status, answer = _reply(sock)  # it was lost to a reset, under load: now it is read
    assert (status, answer["error"]["code"]) == (413, "audio_too_long")
    assert wait_until(lambda: _info(server)["uploading_requests"] == 0)
    assert wait_until(lambda: list(server.upload_dir.iterdir()) == [])


def test_a_client_that_leaves_mid_upload_leaves_no_job_and_no_file(
    server: Server, talk: Recording
) -> None:
    sock, body = _request(server, talk.path.read_bytes(), multipart=False)
    with sock:
        sock.sendall(body[: len(body) // 2])
        assert wait_until(lambda: _info(server)["active_jobs"] == 1)
    assert wait_until(
        lambda: (_info(server)["active_jobs"], _info(server)["uploading_requests"]) == (0, 0)
    )
    assert wait_until(lambda: list(server.upload_dir.iterdir()) == [])
    again = httpx.post(server.url + "/v1/recognize", files={"file": talk.path.read_bytes()})
    assert again.status_code == 200


@pytest.mark.slow
def test_with_the_setting_off_the_job_waits_for_the_whole_body(
    serve: ServerFactory, talk: Recording
) -> None:
    server = serve("--models", "speech", "--no-read-while-uploading")
    sock, body = _request(server, talk.path.read_bytes(), multipart=False)
    with sock:
        sock.sendall(body[: len(body) // 2])
        assert wait_until(lambda: _info(server)["uploading_requests"] == 1)
        time.sleep(1.0)  # room for a job to start, if one were going to
        during = _info(server)["active_jobs"]
        sock.sendall(body[len(body) // 2 :])
        status, answer = _reply(sock)
    assert during == 0
    assert status == 200, answer
    assert answer["tags"]

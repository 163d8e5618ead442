"""The HTTP layer's own limits in-process (httpx's ASGI transport against `create_app`): API keys,
truncated multipart bodies, admission, shutdown answers, and the log guard for descriptor
exhaustion. (Parameters refused before any upload are in `test_app.py`.)"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from pydantic import ValidationError

from arengine.cli.commands import main
from arengine.engine.admission import Admission
from arengine.errors import ErrorCode, Overloaded
from arengine.http.app import create_app
from arengine.http.server import ACCEPT_ERROR, QuietAcceptErrors, connection_cap
from arengine.http.upload_dir import UploadDir
from arengine.settings import Settings, parse_api_keys

Scenario = Callable[[httpx.AsyncClient, Any], Awaitable[None]]


def _run(scenario: Scenario, **settings: Any) -> None:
    """Run `scenario(client, app)` against an app whose models are loaded."""
    app = create_app(Settings(models="speech", engine_threads=1, **settings))

    async def run() -> None:
        async with app.router.lifespan_context(app):
            while not app.state.engine.ready:
                await asyncio.sleep(0.02)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                await scenario(client, app)

    asyncio.run(run())


def _wav(tmp_path: Any) -> bytes:
    sf.write(tmp_path / "clip.wav", np.zeros(16000, np.float32), 16000)
    return bytes((tmp_path / "clip.wav").read_bytes())


def test_every_configured_key_opens_the_api_however_the_list_is_spaced() -> None:
    statuses: dict[str, int] = {}

    async def scenario(client: httpx.AsyncClient, app: Any) -> None:
        for key in ("alpha-key-123", "beta-key-456", "gamma", ""):
            headers = {"Authorization": f"Bearer {key}"}
            statuses[key] = (await client.get("/v1/models", headers=headers)).status_code

    _run(scenario, api_keys=" alpha-key-123, beta-key-456 ")
    assert statuses == {"alpha-key-123": 200, "beta-key-456": 200, "gamma": 401, "": 401}


@pytest.mark.parametrize("raw", ["", ",", " ", " , ", "a,,b", "a,", "key one", "k\x00ey", "ké"])
def test_an_api_key_list_meant_to_be_set_but_empty_or_malformed_is_refused(raw: str) -> None:
    with pytest.raises(ValidationError, match="API key"):
        Settings(api_keys=raw)


def test_api_keys_are_stripped_and_deduplicated() -> None:
    assert parse_api_keys(" a-1 ,b-2,a-1") == ("a-1", "b-2")
    assert Settings(api_keys="a-1, b-2").security.api_key_list() == ("a-1", "b-2")
    assert Settings().security.api_key_list() == ()


@pytest.mark.parametrize("raw", ["", "a,,b", "key one"])
def test_an_administrator_key_list_is_checked_as_users_keys_are(raw: str) -> None:
    with pytest.raises(ValidationError, match="ARENGINE_ADMIN_KEYS"):
        Settings(admin_keys=raw)


def test_a_key_cannot_be_both_a_users_and_an_administrators() -> None:
    assert Settings(api_keys="u-1", admin_keys=" a-1,a-2").security.admin_key_list() == (
        "a-1",
        "a-2",
    )
    with pytest.raises(ValidationError, match="kept apart"):
        Settings(api_keys="u-1,shared-9", admin_keys="shared-9")


def test_the_server_refuses_to_start_on_an_empty_key_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARENGINE_API_KEYS", ",")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--no-jemalloc"])
    assert "API key 1 of 2 is empty" in str(exited.value.code)


def test_a_multipart_body_without_its_closing_boundary_is_400_not_a_result(tmp_path: Any) -> None:
    wav = _wav(tmp_path)
    head = b'--xx\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    answers: list[httpx.Response] = []

    async def scenario(client: httpx.AsyncClient, app: Any) -> None:
        headers = {"Content-Type": "multipart/form-data; boundary=xx"}
        for body in (head + wav + b"\r\n--xx--\r\n", head + wav + b"\r\n", head + wav):
            answers.append(await client.post("/v1/recognize", content=body, headers=headers))

    _run(scenario)
    assert answers[0].status_code == 200, answers[0].text
    for truncated in answers[1:]:
        assert truncated.status_code == 400
        assert truncated.json()["error"]["code"] == "bad_multipart"
        assert "closing boundary" in truncated.json()["error"]["message"]


def test_uploads_and_engine_requests_have_separate_bounds() -> None:
    admission = Admission(max_uploading=2, max_pending=1)
    with admission.uploading_slot(), admission.uploading_slot():
        with pytest.raises(Overloaded, match="2 uploads are in progress"):
            admission.uploading_slot().__enter__()
        # The engine's slot is not taken by uploads; once it is, the engine is full.
        with admission.pending_slot(), pytest.raises(Overloaded, match="in the engine"):
            admission.check_room()
    admission.check_room()
    assert (admission.uploading, admission.pending) == (0, 0)


def test_a_request_the_engine_has_no_room_for_is_refused_before_its_body_is_read(
    tmp_path: Any,
) -> None:
    answers: list[httpx.Response] = []
    read: list[int] = []

    async def body() -> Any:
        read.append(1)
        yield b"RIFF"

    async def scenario(client: httpx.AsyncClient, app: Any) -> None:
        with app.state.engine.admission.pending_slot():
            headers = {"Content-Type": "audio/wav"}
            answers.append(await client.post("/v1/recognize", content=body(), headers=headers))

    _run(scenario, max_pending_requests=1)
    assert answers[0].status_code == 503
    assert answers[0].json()["error"]["code"] == "overloaded"
    assert answers[0].headers["retry-after"] == "1"
    assert read == []


def test_during_a_shutdown_readiness_and_new_requests_say_shutting_down() -> None:
    answers: list[httpx.Response] = []

    async def scenario(client: httpx.AsyncClient, app: Any) -> None:
        app.state.engine.stop_accepting()
        answers.append(await client.get("/readyz"))
        headers = {"Content-Type": "audio/wav"}
        answers.append(await client.post("/v1/recognize", content=b"RIFF", headers=headers))

    _run(scenario)
    for answer in answers:
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == ErrorCode.SHUTTING_DOWN


def test_accept_errors_from_descriptor_exhaustion_are_logged_once_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def exhaust() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(QuietAcceptErrors())
        error = OSError(errno.EMFILE, "Too many open files")
        for _ in range(2048):  # what asyncio's accept loop reports in one second
            loop.call_exception_handler({"message": ACCEPT_ERROR, "exception": error})
        loop.call_exception_handler({"message": "something else"})

    with caplog.at_level(logging.ERROR):
        asyncio.run(exhaust())
    accept = [record for record in caplog.records if "cannot accept" in record.getMessage()]
    assert len(accept) == 1 and accept[0].exc_info is None
    assert "Too many open files" in accept[0].getMessage()
    assert any(record.getMessage() == "something else" for record in caplog.records)


def test_a_listener_closed_while_asyncio_waits_to_retry_accept_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Descriptors run out while a client connects, so asyncio's accept fails and is retried from
    # a timer a second later; the server shuts down within that second. Before, the retry's
    # "Invalid file descriptor: -1" reached the log as an ERROR with a traceback.
    async def exhaust_then_close() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(QuietAcceptErrors())
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()
        client.setblocking(False)
        filler = [os.open(os.devnull, os.O_RDONLY)]
        try:
            with contextlib.suppress(OSError):  # take every descriptor left
                while True:
                    filler.append(os.dup(filler[0]))
            os.close(filler.pop())  # one for the client; none for the server's accept
            with contextlib.suppress(BlockingIOError):
                client.connect(("127.0.0.1", port))
            await asyncio.sleep(0.2)  # the accept fails; asyncio schedules its retry
        finally:
            for fd in filler:
                os.close(fd)
        server.close()
        await server.wait_closed()
        await asyncio.sleep(1.3)  # the retry's second passes
        client.close()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    try:
        with caplog.at_level(logging.DEBUG):
            asyncio.run(exhaust_then_close())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert any("cannot accept" in record.getMessage() for record in caplog.records)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors if "cannot accept" not in r.getMessage()] == []
    assert any("listener closed" in record.getMessage() for record in caplog.records)


def test_the_connection_cap_fits_the_open_file_limit() -> None:
    settings = Settings(max_uploading_requests=64, max_pending_requests=64, max_connections=1000)
    assert connection_cap(settings, 256) == 256 - 64 - 64 - 64
    assert connection_cap(settings, 1_048_576) == 1000
    assert connection_cap(settings, 100) == 1


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))

    script = "from arengine.http.server import open_file_limit; print(open_file_limit())"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=low_soft_limit,
    )
    assert done.stdout.strip() == "4096"


def test_an_upload_directory_that_cannot_be_locked_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        claim = UploadDir.claim(tmp_path / "missing")
    claim.close()
    assert claim.swept == 0
    assert "not swept" in caplog.text

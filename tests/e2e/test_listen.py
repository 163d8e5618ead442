"""`WS /v1/listen` on a real server: a live stream's tags are the tags of the same audio posted
as a file, they come while the stream is open, and every limit and error ends the stream with
its line and its close code."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from arengine.client import AsyncClient, InvalidInput, NotFound
from tests.conftest import ROOT, RecordingFactory, Server, ServerFactory, wait_until
from tests.gate import LEVELS, Gate, gated_models
from tests.recordings import Recording

OPENING = {"format": "s16le", "sample_rate": 16000, "channels": 1}
TIGHT = (
    "--models", "speech", "--segment-s", "1.024", "--listen-segment-s", "1.024",
    "--max-listen-streams", "2", "--listen-idle-timeout-s", "3", "--listen-max-duration-s",
    "20", "--listen-max-message-bytes", "16384",
)  # fmt: skip
"""Segments of 32 windows for files and streams alike (so their tags must be equal), and
limits small enough to reach."""


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    """The default plans (30-s segments for files, 0.5-s for streams); 2 s of buffer."""
    return serve("--models", "speech", "--listen-buffer-s", "2")


@pytest.fixture(scope="module")
def tight(serve: ServerFactory) -> Server:
    return serve(*TIGHT)


@pytest.fixture
def talk(recording: RecordingFactory) -> Recording:
    return recording("talk.wav")


@contextmanager
def _ws(server: Server, query: str = "model=speech", **options: Any) -> Iterator[ClientConnection]:
    """A connection to the server's `WS /v1/listen?query`, closed after (the server may have
    closed it with an error's code already)."""
    url = server.url.replace("http://", "ws://") + "/v1/listen?" + query
    with suppress(ConnectionClosed), connect(url, open_timeout=30, **options) as connection:
        yield connection


def _pcm(path: Path) -> bytes:
    audio, _ = sf.read(str(path), dtype="int16")
    data: bytes = audio.tobytes()
    return data


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def _lines(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every message until the server closes."""
    lines = []
    try:
        for message in ws:
            lines.append(json.loads(message))
    except ConnectionClosed:
        pass
    return lines


def _lines_within(ws: ClientConnection, seconds: float) -> list[dict[str, Any]]:
    """Every message until the server closes, which must be within `seconds` (a stream that
    never ends fails the test rather than hanging it)."""
    lines = []
    deadline = time.monotonic() + seconds
    with suppress(ConnectionClosed):
        while True:
            lines.append(json.loads(ws.recv(timeout=max(0.0, deadline - time.monotonic()))))
    return lines


def _stream(
    server: Server, data: bytes, opening: dict[str, Any] = OPENING, query: str = "model=speech"
) -> tuple[list[dict[str, Any]], int | None, str | None]:
    """Send `data` in 20-ms messages and the end; every line back and the close code/reason."""
    chunk = (
        opening["sample_rate"] * opening["channels"] * (4 if opening["format"] == "f32le" else 2)
    )
    with _ws(server, query) as ws:
        ws.send(json.dumps(opening))
        for piece in _chunks(data, chunk // 50):
            ws.send(piece)
        ws.send(json.dumps({"end": True}))
        lines = _lines(ws)
    return lines, ws.close_code, ws.close_reason


def _tags(lines: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    return [(line["start"], line["end"], line["label"]) for line in lines if "label" in line]


def _posted(server: Server, path: Path) -> dict[str, Any]:
    reply = httpx.post(server.url + "/v1/recognize", files={"file": path.read_bytes()}, timeout=60)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _error(lines: list[dict[str, Any]]) -> str:
    assert "error" in lines[-1], lines
    code: str = lines[-1]["error"]["code"]
    return code


def test_a_stream_gives_the_tags_of_the_same_audio_posted_as_a_file(
    tight: Server, talk: Recording
) -> None:
    lines, code, _ = _stream(tight, _pcm(talk.path))
    posted = _posted(tight, talk.path)
    assert code == 1000
    assert _tags(lines) == [(t["start"], t["end"], t["label"]) for t in posted["tags"]]
    assert [line["score"] for line in lines if "label" in line] == [
        t["score"] for t in posted["tags"]
    ]
    assert len(_tags(lines)) == len(talk.speech) == 2
    summary = lines[-1]["summary"]
    assert summary["tag_count"] == 2
    assert summary["audio"]["duration_s"] == pytest.approx(talk.duration_s, abs=1e-4)
    assert summary["audio"]["truncated"] is False and summary["audio"]["warnings"] == []
    assert lines[0] == {"progress": {"audio_s": 0.0, "duration_s": None, "received_s": 0.0}}


def test_a_stereo_float_stream_at_44100_is_resampled_as_a_file_is(
    tight: Server, recording: RecordingFactory
) -> None:
    clip = recording("stereo.wav", rate=44100, channels=2)
    audio, rate = sf.read(str(clip.path), dtype="float32")
    float_file = clip.path.with_name("float.wav")
    sf.write(str(float_file), audio, rate, subtype="FLOAT")
    opening = {"format": "f32le", "sample_rate": 44100, "channels": 2}
    lines, code, _ = _stream(tight, audio.astype("<f4").tobytes(), opening)
    posted = _posted(tight, float_file)
    assert code == 1000
    assert _tags(lines) == [(t["start"], t["end"], t["label"]) for t in posted["tags"]]
    assert len(_tags(lines)) == 2
    audio_info = lines[-1]["summary"]["audio"]
    assert (audio_info["sample_rate"], audio_info["channels"]) == (44100, 2)


def test_the_default_live_plan_finds_the_tags_of_the_file(server: Server, talk: Recording) -> None:
    """0.5-s segments restart the speech model's recurrent state more often than 30-s ones (with
    the same 2-s pre-roll): the same tags, their bounds within a few windows."""
    lines, code, _ = _stream(server, _pcm(talk.path))
    posted = _posted(server, talk.path)
    assert code == 1000
    streamed = _tags(lines)
    assert len(streamed) == len(posted["tags"]) == 2
    for (start, end, _), tag in zip(streamed, posted["tags"], strict=True):
        assert start == pytest.approx(tag["start"], abs=0.1)
        assert end == pytest.approx(tag["end"], abs=0.1)


def test_a_tag_comes_while_the_stream_is_still_open(server: Server, talk: Recording) -> None:
    data = _pcm(talk.path)
    first_speech_end = talk.speech[0][1]
    cut = int((first_speech_end + 2.5) * 16000) * 2  # the first phrase and 2.5 s of what follows
    with _ws(server) as ws:
        ws.send(json.dumps(OPENING))
        for piece in _chunks(data[:cut], 3200):
            ws.send(piece)
        early: list[dict[str, Any]] = []
        while not any("label" in line for line in early):
            early.append(json.loads(ws.recv(timeout=60)))  # no end sent: the stream is open
        for piece in _chunks(data[cut:], 3200):
            ws.send(piece)
        ws.send(json.dumps({"end": True}))
        lines = early + _lines(ws)
    assert _tags(early) == _tags(lines)[:1]
    assert len(_tags(lines)) == 2 and "summary" in lines[-1]


@pytest.fixture(scope="module")
def gated(serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> tuple[Server, Gate]:
    """The default plans and 2 s of buffer, serving `speech` and the `gate` test model."""
    models, gate = gated_models(tmp_path_factory.mktemp("gated"))
    return serve("--models-dir", str(models), "--listen-buffer-s", "2"), gate


@pytest.mark.slow
def test_a_fast_client_is_read_at_the_engines_pace(gated: tuple[Server, Gate]) -> None:
    """Ten minutes sent as fast as the socket takes them, while the model is held at its first
    window: the server reads no more than `listen_buffer_s` (2 s) of audio beyond what the model
    has post-processed, plus one message and one segment; let go, it reads the rest at the
    engine's pace, never further ahead."""
    server, gate = gated
    rng = np.random.default_rng(7)
    noise = np.clip(LEVELS["mark"] * rng.standard_normal(16000 * 600), -1, 1)
    data = (noise * 32767).astype(np.int16).tobytes()
    bound = 2 + 0.1 + 0.512 + 0.1
    held, lines, code = asyncio.run(_held_stream(server, gate, data))
    assert code == 1000, lines[-1]
    # Held: 600 s offered, the engine at 0 s, and the server read no further than the bound.
    waiting = [line["progress"] for line in held if "progress" in line]
    assert all(p["audio_s"] == 0 for p in waiting), waiting
    assert 0 < waiting[-1]["received_s"] <= bound, waiting
    progress = [line["progress"] for line in held + lines if "progress" in line]
    assert len(progress) > len(waiting)
    assert max(p["received_s"] - p["audio_s"] for p in progress) <= bound
    assert lines[-1]["summary"]["audio"]["duration_s"] == pytest.approx(600.0)


async def _held_stream(
    server: Server, gate: Gate, data: bytes
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int | None]:
    """Stream `data` (20-ms messages, then the end) to the `gate` model, sending and reading at
    once: the lines read while the gate is held (until its fourth progress line, about once a
    second), the lines after it opened, and the close code."""
    url = server.url.replace("http://", "ws://") + "/v1/listen?model=gate"
    async with connect_async(url, open_timeout=30) as ws:

        async def send_all() -> None:
            await ws.send(json.dumps(OPENING))
            for piece in _chunks(data, 640):
                await ws.send(piece)
            await ws.send(json.dumps({"end": True}))

        sender = asyncio.ensure_future(send_all())
        held: list[dict[str, Any]] = []
        with gate.held():
            while sum("progress" in line for line in held) < 4:
                held.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        lines = [json.loads(message) async for message in ws]
        await asyncio.wait_for(sender, 60)
    return held, lines, ws.close_code


def test_too_many_streams_are_refused_and_a_closed_one_frees_its_slot(tight: Server) -> None:
    with _ws(tight) as first, _ws(tight) as second:
        first.send(json.dumps(OPENING))
        second.send(json.dumps(OPENING))
        assert wait_until(lambda: _gauge(tight, "arengine_live_streams") == 2)
        with _ws(tight) as third:
            lines = _lines(third)  # refused before its opening message is read
        assert _error(lines) == "too_many_listeners"
        assert (third.close_code, third.close_reason) == (4503, "too_many_listeners")
    assert wait_until(lambda: _gauge(tight, "arengine_live_streams") == 0)
    lines, code, _ = _stream(tight, b"\0" * 32000)
    assert code == 1000 and "summary" in lines[-1]


def test_an_idle_stream_is_closed(tight: Server, talk: Recording) -> None:
    with _ws(tight) as silent:
        lines = _lines(silent)  # no opening message
    assert _error(lines) == "listen_idle"
    assert (silent.close_code, silent.close_reason) == (4408, "listen_idle")
    with _ws(tight) as stalled:
        stalled.send(json.dumps(OPENING))
        for piece in _chunks(_pcm(talk.path)[: 16000 * 2 * 5], 3200):
            stalled.send(piece)  # the first phrase, then nothing
        lines = _lines(stalled)
    assert _error(lines) == "listen_idle" and stalled.close_code == 4408
    assert len(_tags(lines)) == 1  # what was final before the stream stalled was sent


def test_a_stream_ends_at_its_longest_duration_with_every_tag(
    tight: Server, recording: RecordingFactory
) -> None:
    clip = recording("long.wav", pieces=[("silence", 1.0), ("speech", 0), ("silence", 25.0)])
    lines, code, reason = _stream(tight, _pcm(clip.path))
    assert (code, reason) == (4413, "listen_too_long")
    assert lines[-1]["summary"]["audio"]["duration_s"] == 20.0
    assert len(_tags(lines)) == 1


def test_a_message_over_the_size_limit_closes_the_connection(tight: Server) -> None:
    with _ws(tight) as ws:
        ws.send(json.dumps(OPENING))
        ws.send(b"\0" * 16385)
        _lines(ws)
    assert ws.close_code == 1009


@pytest.mark.parametrize("opened", [False, True])
@pytest.mark.parametrize("message", [b"\0" * (2 << 20), "x" * (2 << 20)])
def test_a_huge_message_closes_the_connection_without_a_fatal_error(
    tight: Server, opened: bool, message: str | bytes
) -> None:
    """A 2 MiB message (128 times the limit), before or after the opening: 1009, and the server
    logs no asyncio "Fatal error" (before: one per such message, from the protocol's
    data_received) and keeps serving."""
    with _ws(tight, max_size=None) as ws:
        if opened:
            ws.send(json.dumps(OPENING))
        with suppress(ConnectionClosed):
            ws.send(message)
        _lines_within(ws, 60)
    assert ws.close_code == 1009
    assert wait_until(lambda: _gauge(tight, "arengine_live_streams") == 0)
    lines, code, _ = _stream(tight, b"\0" * 3200)
    assert code == 1000 and "summary" in lines[-1]
    log = tight.log.read_text()
    assert "Fatal error" not in log and "Traceback" not in log


@pytest.mark.parametrize(
    ("first", "code"),
    [
        (b"\0\0", "invalid_stream_message"),
        ("not json", "invalid_stream_message"),
        ('{"format": "mp3", "sample_rate": 16000}', "invalid_stream_message"),
        ('{"format": "s16le", "sample_rate": 16000, "bits": 16}', "invalid_stream_message"),
        ('{"format": "s16le", "sample_rate": 5}', "unsupported_sample_rate"),
        ('{"format": "s16le", "sample_rate": "16000"}', "unsupported_sample_rate"),
        ('{"format": "s16le", "sample_rate": 16000, "channels": 99}', "unsupported_channels"),
        # Before: a TypeError (an unhashable format) or a RecursionError, closed with 1006.
        ('{"format": ["s16le"]}', "invalid_stream_message"),
        ('{"format": {"s16le": 1}, "sample_rate": 16000}', "invalid_stream_message"),
        ("[" * 10_000, "invalid_stream_message"),
        (
            '{"format": "s16le", "sample_rate": ' + "[" * 5000 + "]" * 5000 + "}",
            "invalid_stream_message",
        ),
        (
            json.dumps({"format": "s16le", "sample_rate": 16000, "pad": "x" * 8000}),
            "invalid_stream_message",
        ),
    ],
)
def test_a_bad_opening_message_is_refused(tight: Server, first: str | bytes, code: str) -> None:
    with _ws(tight) as ws:
        ws.send(first)
        lines = _lines(ws)
    assert _error(lines) == code
    assert (ws.close_code, ws.close_reason) == (4422, code)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"end": ' + "[" * 50_000 + "]" * 50_000 + "}",
        '{"end": true, "pad": "' + "x" * 100_000 + '"}',
    ],
)
def test_a_deeply_nested_or_long_text_message_ends_the_stream(server: Server, text: str) -> None:
    """Before: the reading task died of a RecursionError nobody awaited, and the stream sent
    progress lines for as long as the client stayed, holding its slot and its spool file."""
    with _ws(server) as ws:
        ws.send(json.dumps(OPENING))
        ws.send(b"\0" * 3200)
        ws.send(text)
        lines = _lines_within(ws, 60)
    assert _error(lines) == "invalid_stream_message"
    assert (ws.close_code, ws.close_reason) == (4422, "invalid_stream_message")
    assert wait_until(lambda: _gauge(server, "arengine_live_streams") == 0)
    assert wait_until(lambda: not list(server.upload_dir.iterdir()))
    assert "Traceback" not in server.log.read_text()


def test_a_text_message_other_than_the_end_ends_the_stream(tight: Server) -> None:
    with _ws(tight) as ws:
        ws.send(json.dumps(OPENING))
        ws.send(b"\0" * 3200)
        ws.send('{"end": false}')
        lines = _lines(ws)
    assert _error(lines) == "invalid_stream_message" and ws.close_code == 4422


@pytest.mark.parametrize(
    ("query", "code", "close"),
    [
        ("model=nope", "unknown_model", 4404),
        ("model=speech&threshold=7", "invalid_parameter", 4422),
        ("model=speech&format=json", "invalid_parameter", 4422),
        ("model=speech&model=speech", "invalid_parameter", 4422),
    ],
)
def test_a_bad_query_is_refused(tight: Server, query: str, code: str, close: int) -> None:
    with _ws(tight, query) as ws:
        lines = _lines(ws)
    assert _error(lines) == code
    assert (ws.close_code, ws.close_reason) == (close, code)


def test_a_client_that_leaves_mid_stream_leaves_nothing_behind(
    tight: Server, talk: Recording
) -> None:
    with _ws(tight) as ws:
        ws.send(json.dumps(OPENING))
        ws.send(_pcm(talk.path)[:16000])
        assert wait_until(lambda: _gauge(tight, "arengine_live_streams") == 1)
    assert wait_until(lambda: _gauge(tight, "arengine_live_streams") == 0)
    assert wait_until(lambda: _gauge(tight, "arengine_inflight_requests") == 0)
    assert wait_until(lambda: not list(tight.upload_dir.iterdir()))


def test_a_page_of_another_origin_cannot_open_a_stream(server: Server, talk: Recording) -> None:
    with pytest.raises(InvalidStatus) as refused, _ws(server, origin="http://evil.example"):
        pass
    assert refused.value.response.status_code == 403
    assert b"forbidden_origin" in (refused.value.response.body or b"")
    with _ws(server, origin=server.url) as ws:
        ws.send(json.dumps(OPENING))
        ws.send(json.dumps({"end": True}))
        assert "summary" in _lines(ws)[-1] or ws.close_code is not None


def test_live_tags_are_counted_per_model_and_label(server: Server, talk: Recording) -> None:
    before = _series(server, 'arengine_live_tags_total{label="speech",model="speech"}')
    lags = _series(server, 'arengine_live_lag_seconds_count{model="speech"}')
    lines, _, _ = _stream(server, _pcm(talk.path))
    assert len(_tags(lines)) == 2
    assert _series(server, 'arengine_live_tags_total{label="speech",model="speech"}') == before + 2
    assert _series(server, 'arengine_live_lag_seconds_count{model="speech"}') == lags + 2


def test_the_async_client_yields_the_tags_and_raises_the_servers_error(
    server: Server, talk: Recording
) -> None:
    data = _pcm(talk.path)

    async def listen(model: str, threshold: float = 0.5) -> list[tuple[float, float, str]]:
        async with AsyncClient(server.url) as client:
            chunks = list(_chunks(data, 3200))
            return [
                (tag.start, tag.end, tag.label)
                async for tag in client.listen(chunks, model=model, threshold=threshold)
            ]

    lines, _, _ = _stream(server, data)
    assert asyncio.run(listen("speech")) == _tags(lines)
    with pytest.raises(NotFound) as unknown:
        asyncio.run(listen("nope"))
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_model")
    with pytest.raises(InvalidInput) as invalid:
        asyncio.run(listen("speech", threshold=7))
    assert invalid.value.code == "invalid_parameter"


@pytest.mark.slow
def test_the_command_reads_standard_input_and_prints_the_tags(
    server: Server, talk: Recording, tmp_path: Path
) -> None:
    data = _pcm(talk.path)
    command = [sys.executable, "-m", "arengine", "listen", "--server", server.url]
    done = subprocess.run(
        [*command, "-"], input=data, capture_output=True, cwd=ROOT, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.decode().splitlines()]
    lines, _, _ = _stream(server, data)
    assert _tags(printed) == _tags(lines) and "summary" in printed[-1]
    from_file = subprocess.run(
        [*command, "--realtime", "--progress", str(talk.path)],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert from_file.returncode == 0, from_file.stderr
    assert _tags([json.loads(line) for line in from_file.stdout.decode().splitlines()]) == _tags(
        lines
    )
    assert b'"progress"' in from_file.stderr
    refused = subprocess.run(
        [*command, "--model", "nope", "-"], input=data, capture_output=True, cwd=ROOT, timeout=60
    )
    assert refused.returncode == 1
    assert b"unknown_model" in refused.stderr and refused.stdout == b""


def _gauge(server: Server, name: str) -> float:
    return _series(server, name)


def _series(server: Server, series: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, flags=re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _handshake(server: Server, host: str, headers: str = "") -> bytes:
    """A WebSocket handshake for `WS /v1/listen` with `Host: host` (and `headers`), raw; the
    server's answer until it closes."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            (
                f"GET /v1/listen?model=speech HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\n{headers}\r\n"
            ).encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_handshake_naming_another_host_is_refused(server: Server) -> None:
    answer = _handshake(server, "rebound.example")
    assert answer.startswith(b"HTTP/1.1 400") and b"forbidden_host" in answer


def test_a_handshake_needs_an_api_key_when_the_server_has_keys(serve: ServerFactory) -> None:
    keyed = serve("--models", "speech", env={"ARENGINE_API_KEYS": "listen-key"})
    refused = _handshake(keyed, "127.0.0.1")
    assert refused.startswith(b"HTTP/1.1 401") and b"unauthorized" in refused
    with _ws(keyed, additional_headers={"Authorization": "Bearer listen-key"}) as ws:
        ws.send(json.dumps(OPENING))
        ws.send(b"\0" * 3200)
        ws.send(json.dumps({"end": True}))
        lines = _lines(ws)
    assert "summary" in lines[-1] and ws.close_code == 1000


def test_a_stream_that_cannot_be_spooled_is_a_4507(
    serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    gone = tmp_path_factory.mktemp("spool") / "removed"
    gone.mkdir()
    unwritable = serve("--models", "speech", "--upload-dir", str(gone))
    gone.rmdir()
    with _ws(unwritable) as ws:
        ws.send(json.dumps(OPENING))
        lines = _lines(ws)
    assert _error(lines) == "insufficient_storage"
    assert (ws.close_code, ws.close_reason) == (4507, "insufficient_storage")

"""The loudness kind as a noise trigger on a live stream (`WS /v1/listen`, a real server): the
door slam's tag comes while the stream is still open, and the stream's tags are the file's; and
as a gate (`?gate=loudness`), which spares speech the stream's silence."""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import Phrases, Server, ServerFactory
from tests.kinds.loudness.room import ALARM, RATE, SLAM, quiet_room
from tests.recordings import compose

pytestmark = pytest.mark.slow  # a server started for the module

OPENING = {"format": "s16le", "sample_rate": RATE, "channels": 1}


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", "loudness")


def _pcm() -> bytes:
    data: bytes = (np.clip(quiet_room(), -1, 1) * 32767).astype("<i2").tobytes()
    return data


def _url(server: Server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/listen?model=loudness"


def test_the_slam_is_tagged_while_the_stream_is_open(server: Server, tmp_path: Path) -> None:
    data = _pcm()
    with suppress(ConnectionClosed), connect(_url(server), open_timeout=30) as ws:
        ws.send(json.dumps(OPENING))
        sent = 0
        early: list[dict[str, Any]] = []
        # Up to 7 s: the slam (5.0 to 5.2 s), then its hold; no end sent, the stream stays open.
        while sent < 7 * RATE * 2:
            ws.send(data[sent : sent + 3200])
            sent += 3200
        while not any("label" in line for line in early):
            early.append(json.loads(ws.recv(timeout=60)))
        tag = next(line for line in early if "label" in line)
        assert (tag["start"], tag["end"], tag["label"]) == (*SLAM, "loud")
        ws.send(data[sent:])
        ws.send(json.dumps({"end": True}))
        rest = [json.loads(message) for message in ws]
    streamed = [(x["start"], x["end"]) for x in early + rest if "label" in x]
    assert streamed == [SLAM, ALARM]
    # The same samples posted as a file give the same tags.
    path = tmp_path / "room.wav"
    sf.write(str(path), np.frombuffer(data, "<i2"), RATE, subtype="PCM_16")
    posted = httpx.post(
        server.url + "/v1/recognize?model=loudness", files={"file": path.read_bytes()}, timeout=60
    )
    assert posted.status_code == 200, posted.text
    assert [(t["start"], t["end"]) for t in posted.json()["tags"]] == streamed


@pytest.fixture(scope="module")
def gated(serve: ServerFactory) -> Server:
    return serve("--models", "loudness,speech")


def _stream(server: Server, query: str, data: bytes) -> list[dict[str, Any]]:
    url = server.url.replace("http://", "ws://") + "/v1/listen?" + query
    lines: list[dict[str, Any]] = []
    with suppress(ConnectionClosed), connect(url, open_timeout=30) as ws:
        ws.send(json.dumps(OPENING))
        for at in range(0, len(data), 32000):
            ws.send(data[at : at + 32000])
        ws.send(json.dumps({"end": True}))
        lines.extend(json.loads(message) for message in ws)
    return lines


def test_a_gated_stream_skips_the_silence_and_tags_the_speech_as_ungated(
    gated: Server, phrases: Phrases, tmp_path: Path
) -> None:
    pieces = [("silence", 6.0), ("speech", 0.0), ("silence", 6.0)]
    audio, _ = compose(pieces, RATE, tmp_path, *phrases)
    data = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    plain = _stream(gated, "model=speech", data)
    lines = _stream(gated, "model=speech&gate=loudness", data)
    tags = [line for line in lines if "label" in line]
    assert tags and tags == [line for line in plain if "label" in line]
    summary = lines[-1]["summary"]
    assert 6.0 <= summary["skipped_s"]["speech"] <= 12.0, summary
    assert "skipped_s" not in plain[-1]["summary"]
    metrics = httpx.get(gated.url + "/metrics", timeout=30).text
    assert 'arengine_gate_skipped_seconds_total{model="speech"}' in metrics


@pytest.mark.parametrize(
    ("query", "close", "code"),
    [
        ("model=speech&gate=nope", 4404, "unknown_model"),
        ("model=loudness&gate=speech", 4422, "invalid_gate"),
        ("model=speech,loudness&gate=loudness", 4422, "invalid_gate"),
    ],
)
def test_a_stream_with_a_gate_it_cannot_have_is_refused(
    gated: Server, query: str, close: int, code: str
) -> None:
    url = gated.url.replace("http://", "ws://") + "/v1/listen?" + query
    lines: list[dict[str, Any]] = []
    with connect(url, open_timeout=30) as ws, suppress(ConnectionClosed):
        for message in ws:  # until the server closes, with the error's code
            lines.append(json.loads(message))
    assert lines[-1]["error"]["code"] == code
    assert (ws.close_code, ws.close_reason) == (close, code)

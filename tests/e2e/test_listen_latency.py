"""A live stream's tags are not held back for order's sake: with several models, a model's tag
goes out once final, whatever the others have found (a file's NDJSON stream merges them into one
start order, which on a stream would hold speech back until the events model tags something)."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import RecordingFactory, ServerFactory

pytestmark = pytest.mark.slow  # the events model


def test_a_speech_tag_comes_while_another_model_has_found_nothing(
    serve: ServerFactory, recording: RecordingFactory
) -> None:
    """`min_duration_ms` (events only) keeps every events tag out, so the events model gives
    none until the stream ends: the first phrase's speech tag still comes while the stream is
    open, and the stream ends with both phrases."""
    server = serve("--models", "speech,events")
    talk = recording("talk.wav")
    audio, rate = sf.read(str(talk.path), dtype="int16")
    data = audio.tobytes()
    cut = int((talk.speech[0][1] + 2.5) * rate) * 2
    url = server.url.replace("http://", "ws://")
    query = "/v1/listen?model=speech,events&min_duration_ms=3600000"
    lines: list[dict[str, Any]] = []
    with suppress(ConnectionClosed), connect(url + query, open_timeout=30) as ws:
        ws.send(json.dumps({"format": "s16le", "sample_rate": rate, "channels": 1}))
        for start in range(0, cut, 3200):
            ws.send(data[start : min(start + 3200, cut)])
        while not any("label" in line for line in lines):
            lines.append(json.loads(ws.recv(timeout=60)))  # no end sent: the stream is open
        early = [line for line in lines if "label" in line]
        for start in range(cut, len(data), 3200):
            ws.send(data[start : start + 3200])
        ws.send(json.dumps({"end": True}))
        for message in ws:
            lines.append(json.loads(message))
    assert [(line["model"], line["label"]) for line in early] == [("speech", "speech")]
    tags = [line for line in lines if "label" in line]
    assert [(tag["model"], tag["label"]) for tag in tags] == [("speech", "speech")] * 2
    assert "summary" in lines[-1]

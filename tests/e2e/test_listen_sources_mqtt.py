"""The whole path a Home Assistant user wires: an alarm clock on a network stream (FFmpeg serving
Ogg/Opus over HTTP), read by `arengine listen --sources`, recognised by a real server, and
published to a real broker (Debian's mosquitto): its watched label turns ON, then OFF after it
ends, on the source's own topics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server, ServerFactory, wait_until
from tests.mosquitto import Mosquitto, Subscriber, needs_mosquitto, running_broker
from tests.recordings import DEBIAN_SOUNDS, mono_16k
from tests.stream_server import Listener, StreamServer, needs_ffmpeg

pytestmark = [pytest.mark.slow, needs_mosquitto(), needs_ffmpeg()]  # the events model

RATE = 16000
LEAD_S = 1.0
"""Silence before the alarm clock."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    with running_broker(tmp_path_factory.mktemp("mosquitto")) as running:
        yield running


@pytest.fixture(scope="module")
def server(serve: ServerFactory, broker: Mosquitto) -> Server:
    return serve(
        "--models", "events", "--mqtt-url", broker.url, "--mqtt-hold-s", "0.5",
        "--mqtt-labels", "Beep, bleep;Glass",
    )  # fmt: skip


def alarm_clock(folder: Path) -> Path:
    """freedesktop's alarm clock (6.1 s) after `LEAD_S` of silence, 4 s of silence after it."""
    chime = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/alarm-clock-elapsed.oga")
    silence = np.zeros(int(LEAD_S * RATE), np.float32)
    path = folder / "alarm.wav"
    sf.write(path, np.concatenate([silence, chime, np.zeros(4 * RATE, np.float32)]), RATE)
    return path


def first_on(heard: Subscriber, source: str) -> str | None:
    """The state topic of the first watched label heard ON on `source`."""
    pattern = re.compile(rf"arengine/{source}/events/[^/]+/state")
    states = [m for m in heard.messages if pattern.fullmatch(m.topic) and m.payload == "ON"]
    return states[0].topic if states else None


def test_an_alarm_clock_streamed_through_listen_sources_turns_on_then_off(
    server: Server, broker: Mosquitto, tmp_path: Path
) -> None:
    stream = StreamServer(alarm_clock(tmp_path))
    sources = tmp_path / "sources.toml"
    sources.write_text(f'[sources.nursery]\nurl = "{stream.url}"\nmodels = "events"\n')
    heard = Subscriber(broker)
    stream.start()
    listener = Listener(server.url, sources, tmp_path)
    try:
        assert heard.wait(lambda s: first_on(s, "nursery") is not None, 60), listener.status()
        state = first_on(heard, "nursery")
        assert state is not None
        assert heard.wait(lambda s: s.payloads(state) == ["ON", "OFF"], 60), heard.messages
        events = [json.loads(p) for p in heard.payloads(state.removesuffix("/state"))]
        assert events[0]["source"] == "nursery"
        # The stream's time: the alarm starts after LEAD_S of silence.
        assert LEAD_S - 0.5 <= events[0]["start"] <= LEAD_S + 1.0
        assert heard.payloads("arengine/nursery/availability")[:1] == ["online"]
        label = state.split("/")[-2]  # the tag the command prints too
        assert wait_until(lambda: label in {t["label"] for t in listener.tags("nursery")})
    finally:
        heard.close()
        stream.stop()
        assert listener.stop() == 0

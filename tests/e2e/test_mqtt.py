"""Detections over MQTT on a real server and a real broker (Debian's mosquitto on loopback):
a chime streamed at real-time pace turns its label's state ON within 2 s of audio after its
start and OFF after it ends; a broker stopped and started mid-stream; named sources; the
password kept out of the log."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import Server, ServerFactory, wait_until
from tests.mosquitto import Mosquitto, Subscriber, needs_mosquitto
from tests.recordings import DEBIAN_SOUNDS, mono_16k

pytestmark = [pytest.mark.slow, needs_mosquitto()]  # the events model

PASSWORD = "pa55-w0rd-in-env"
RATE = 16000
CHUNK = RATE // 10  # 0.1 s
OPENING = {"format": "f32le", "sample_rate": RATE, "channels": 1}
LEAD_S = 1.0
"""Silence before the chime."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    folder = tmp_path_factory.mktemp("mosquitto")
    running = Mosquitto(folder, users={"arengine": PASSWORD, "watcher": "watcher-pass"})
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server(serve: ServerFactory, broker: Mosquitto) -> Server:
    return serve(
        "--models", "events", "--mqtt-url", broker.url, "--mqtt-username", "arengine",
        "--mqtt-hold-s", "0.5", "--mqtt-reconnect-max-s", "1", "--mqtt-max-queued", "2",
        "--max-sources", "2", "--mqtt-labels", "Beep, bleep;Glass",
        env={"ARENGINE_MQTT_PASSWORD": PASSWORD},
    )  # fmt: skip


@pytest.fixture
def heard(broker: Mosquitto, server: Server) -> Iterator[Subscriber]:
    subscriber = Subscriber(broker, user=("watcher", "watcher-pass"))
    yield subscriber
    subscriber.close()


@pytest.fixture(scope="module")
def chime() -> np.ndarray:
    """freedesktop's alarm clock (6.1 s), a glassy chime: the events model hears Glass."""
    return mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/alarm-clock-elapsed.oga")


@contextmanager
def _ws(server: Server, source: str | None) -> Iterator[ClientConnection]:
    query = "model=events" + ("" if source is None else f"&source={source}")
    url = server.url.replace("http://", "ws://") + "/v1/listen?" + query
    # Lines are read at the end: the client keeps them all meanwhile, and pings nobody.
    with connect(url, open_timeout=30, max_queue=None, ping_interval=None) as ws:
        ws.send(json.dumps(OPENING))
        yield ws


def _send(ws: ClientConnection, audio: np.ndarray, paced: bool) -> None:
    """`audio` in 0.1-s messages, at real-time pace when `paced`."""
    begun = time.monotonic()
    for k, at in enumerate(range(0, len(audio), CHUNK)):
        ws.send(audio[at : at + CHUNK].astype("<f4").tobytes())
        if paced:
            time.sleep(max(0.0, begun + (k + 1) * CHUNK / RATE - time.monotonic()))


def _finish(ws: ClientConnection) -> list[dict[str, Any]]:
    lines = []
    with suppress(ConnectionClosed):
        ws.send(json.dumps({"end": True}))
        for message in ws:
            lines.append(json.loads(message))
    return lines


def _metric(server: Server, name: str, **labels: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and all(part in (match.group(1) or "") for part in wanted.split(",") if part):
            total += float(match.group(2))
    return total


def _first_on(heard: Subscriber, source: str) -> str | None:
    """The state topic of the first watched label heard ON on `source` (the chime's first
    sound is a beep: `Beep, bleep` 0.45 s after its start, then `Glass`)."""
    pattern = re.compile(rf"arengine/{source}/events/[^/]+/state")
    states = [m for m in heard.messages if pattern.fullmatch(m.topic) and m.payload == "ON"]
    return states[0].topic if states else None


def test_a_chime_turns_its_state_on_within_2_s_of_its_start_and_off_after_it_ends(
    server: Server, heard: Subscriber, chime: np.ndarray
) -> None:
    silence = np.zeros(int(LEAD_S * RATE), np.float32)
    audio = np.concatenate([silence, chime, np.zeros(4 * RATE, np.float32)])
    until = int((LEAD_S + 2.0) * RATE)
    with _ws(server, "hall") as ws:
        assert heard.wait(lambda s: s.payloads("arengine/hall/availability")[-1:] == ["online"])
        _send(ws, audio[:until], paced=True)
        sound_sent = time.monotonic() - 2.0  # about when the chime's first sample went
        # Only 2 s of the chime are sent: a state must be ON before any more is.
        assert heard.wait(lambda s: _first_on(s, "hall") is not None, 60), heard.messages
        state = _first_on(heard, "hall")
        assert state is not None
        on = heard.on(state)[0]
        print(f"{state} ON {on.at - sound_sent:.2f} s after the chime's start (real-time pace)")
        _send(ws, audio[until:], paced=False)
        # The stream is still open: the OFF comes from the hold time after the tag, not the end.
        assert heard.wait(lambda s: s.payloads(state) == ["ON", "OFF"], 60), heard.messages
        lines = _finish(ws)
    label = state.split("/")[-2]
    event = state.removesuffix("/state")
    events = [json.loads(p) for p in heard.payloads(event)]
    assert events[0]["source"] == "hall" and events[0]["model"] == "events"
    assert events[0]["label"] == label
    assert LEAD_S - 0.5 <= events[0]["start"] <= LEAD_S + 1.0
    tags = [line for line in lines if "label" in line]
    assert {label, "Glass"} <= {tag["label"] for tag in tags}
    assert not heard.on("arengine/hall/events/Silence/state")  # not watched: events only
    assert heard.on("arengine/hall/events/Silence")
    assert all(tag["source"] == "hall" for tag in tags)
    topics = [m.topic for m in heard.messages]
    off = len(topics) - 1 - topics[::-1].index(state)
    assert topics.index(event) < off  # OFF after the tag
    sensor = "homeassistant/binary_sensor/arengine_hall/events_glass/config"
    assert json.loads(heard.payloads(sensor)[0])["state_topic"] == (
        "arengine/hall/events/Glass/state"
    )
    assert heard.wait(lambda s: s.payloads("arengine/hall/availability")[-1:] == ["offline"])
    assert PASSWORD not in Path(server.log).read_text()


def test_a_broker_stopped_mid_stream_neither_stops_recognition_nor_grows_a_queue(
    server: Server, broker: Mosquitto, chime: np.ndarray
) -> None:
    dropped = _metric(server, "arengine_mqtt_dropped_messages_total")
    with _ws(server, "yard") as ws:
        _send(ws, chime[: 2 * RATE], paced=False)
        broker.stop()
        assert wait_until(lambda: _metric(server, "arengine_mqtt_connected") == 0)
        # Three chimes while the broker is away: their tags still come on the stream.
        gap = np.zeros(2 * RATE, np.float32)
        _send(ws, np.concatenate([chime[2 * RATE :], gap, chime, gap, chime, gap]), paced=False)
        got: list[dict[str, Any]] = []
        while sum(line.get("label") == "Glass" for line in got) < 3:
            got.append(json.loads(ws.recv(timeout=60)))
        assert all(line["source"] == "yard" for line in got if "label" in line)
        assert wait_until(lambda: _metric(server, "arengine_mqtt_queued_messages") > 0)
        # At most mqtt_max_queued (2) events wait, besides the retained values of the topics.
        assert _metric(server, "arengine_mqtt_dropped_messages_total") > dropped
        broker.start()  # without persistence: it forgot every retained message
        assert wait_until(lambda: _metric(server, "arengine_mqtt_connected") == 1, 60)
        heard = Subscriber(broker, user=("watcher", "watcher-pass"))
        try:
            # Said again after the reconnection: what a subscriber needs to know now.
            # (Retained messages come in no set order: each is waited for.)
            assert heard.wait(lambda s: s.payloads("arengine/yard/availability") == ["online"])
            assert heard.wait(lambda s: s.payloads("arengine/status") == ["online"])
            config = "homeassistant/binary_sensor/arengine_yard/events_glass/config"
            assert heard.wait(lambda s: len(s.on(config)) == 1)
            _send(ws, chime, paced=False)
            assert heard.wait(lambda s: _first_on(s, "yard") is not None)
        finally:
            heard.close()
        lines = _finish(ws)
    assert "summary" in lines[-1]
    assert _metric(server, "arengine_mqtt_queued_messages") == 0


def test_a_source_is_a_slug_and_the_metrics_name_only_max_sources(
    server: Server, chime: np.ndarray
) -> None:
    for bad in ("Hall", "a/b", "x" * 65, "", "-x", "%2B"):
        with connect(
            server.url.replace("http://", "ws://") + f"/v1/listen?model=events&source={bad}",
            open_timeout=30,
        ) as ws:
            lines: list[dict[str, Any]] = []
            with suppress(ConnectionClosed):
                for message in ws:  # a close with an error's code raises after its line
                    lines.append(json.loads(message))
        assert (ws.close_code, ws.close_reason) == (4422, "invalid_source"), bad
        assert lines[-1]["error"]["code"] == "invalid_source"
    for source in ("cam-1", "cam-2", "cam-3"):
        with _ws(server, source) as ws:
            _send(ws, chime, paced=False)
            assert any(line.get("label") == "Glass" for line in _finish(ws))
    # Two names at most (--max-sources 2): hall and yard came first, the rest is `other`.
    text = httpx.get(server.url + "/metrics").text
    sources = set(re.findall(r'arengine_live_tags_total\{[^}]*source="([^"]*)"', text))
    assert len(sources) <= 3 and "other" in sources
    assert not {"cam-3"} & sources

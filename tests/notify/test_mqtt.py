"""The MQTT notifier against a real broker (Debian's mosquitto on loopback): states, events,
availability and discovery; a broker that goes away and comes back; bounded messages; the
credentials kept out of the log."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from arengine.notify.mqtt import MqttNotifier
from arengine.settings import Broker, Settings
from arengine.system.metrics import Metrics
from tests.conftest import wait_until
from tests.mosquitto import Mosquitto, Subscriber, needs_mosquitto, running_broker

pytestmark = needs_mosquitto()

GLASS = {"start": 1.0, "end": 2.5, "label": "Glass", "score": 0.81, "label_id": "/m/039jq"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with running_broker(tmp_path) as running:
        yield running


@pytest.fixture
def heard(broker: Mosquitto) -> Iterator[Subscriber]:
    subscriber = Subscriber(broker)
    yield subscriber
    subscriber.close()


def _notifier(broker: Mosquitto, **settings: Any) -> tuple[MqttNotifier, Metrics]:
    chosen = Settings(mqtt_url=broker.url, mqtt_reconnect_max_s=1, **settings)
    metrics = Metrics(CollectorRegistry())
    broker_of = Broker.of(chosen.mqtt)
    assert broker_of is not None
    notifier = MqttNotifier(chosen, metrics, broker_of)
    notifier.start()
    assert wait_until(lambda: _value(metrics, "arengine_mqtt_connected") == 1)
    return notifier, metrics


def _value(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name) or 0.0


def test_a_run_turns_its_state_on_and_its_tag_publishes_an_event_then_off(
    broker: Mosquitto, heard: Subscriber
) -> None:
    notifier, metrics = _notifier(broker, mqtt_hold_s=0.2)
    notice = notifier.stream("hall", ["events"])
    state = "arengine/hall/events/Glass/state"
    assert heard.wait(lambda s: s.payloads("arengine/hall/availability") == ["online"])
    notice.opened("events", "Glass", 1.0)
    assert heard.wait(lambda s: s.payloads(state) == ["ON"])
    notice.tagged("events", GLASS)
    assert heard.wait(lambda s: s.payloads(state) == ["ON", "OFF"])
    (event,) = heard.payloads("arengine/hall/events/Glass")
    assert json.loads(event) == {**GLASS, "source": "hall", "model": "events"}
    # The OFF came after the event: after the tag, once the hold time passed.
    topics = [m.topic for m in heard.messages]
    assert topics.index("arengine/hall/events/Glass") < len(topics) - topics[::-1].index(state) - 1
    notice.close()
    assert heard.wait(lambda s: s.payloads("arengine/hall/availability") == ["online", "offline"])
    notifier.close()
    assert heard.wait(lambda s: s.payloads("arengine/status")[-1:] == ["offline"])
    assert _value(metrics, "arengine_mqtt_published_messages_total") >= 6


def test_a_second_run_within_the_hold_keeps_the_state_on(
    broker: Mosquitto, heard: Subscriber
) -> None:
    notifier, _ = _notifier(broker, mqtt_hold_s=3600)
    notice = notifier.stream("hall", ["events"])
    state = "arengine/hall/events/Glass/state"
    notice.opened("events", "Glass", 1.0)
    notice.tagged("events", GLASS)
    notice.opened("events", "Glass", 4.0)
    notice.tagged("events", {**GLASS, "start": 4.0, "end": 5.0})
    assert heard.wait(lambda s: len(s.payloads("arengine/hall/events/Glass")) == 2)
    assert heard.payloads(state) == ["ON"]
    notice.close()  # the stream's end turns what is on off, hold or not
    assert heard.wait(lambda s: s.payloads(state) == ["ON", "OFF"])
    notifier.close()


def test_home_assistant_discovery_announces_a_binary_sensor_per_source_and_label(
    broker: Mosquitto, heard: Subscriber
) -> None:
    notifier, _ = _notifier(broker, mqtt_labels="Glass; Smoke detector, smoke alarm")
    notice = notifier.stream("front-door", ["events"])
    node = "homeassistant/binary_sensor/arengine_front-door"
    config = f"{node}/events_glass/config"
    smoke = f"{node}/events_smoke_detector_smoke_alarm/config"
    assert heard.wait(lambda s: bool(s.on(config)) and bool(s.on(smoke)))
    sensor = json.loads(heard.payloads(config)[0])
    assert sensor["state_topic"] == "arengine/front-door/events/Glass/state"
    assert sensor["device_class"] == "sound"
    assert sensor["unique_id"] == "arengine_front-door_events_glass"
    assert [a["topic"] for a in sensor["availability"]] == [
        "arengine/status",
        "arengine/front-door/availability",
    ]
    assert sensor["device"]["identifiers"] == ["arengine_front-door"]
    later = Subscriber(broker)  # retained: a subscriber that comes later gets it too
    assert later.wait(lambda s: [m.retain for m in s.on(config)] == [True])
    later.close()
    # A label not watched gets its events, and no state.
    notice.tagged("events", {**GLASS, "label": "Speech"})
    assert heard.wait(lambda s: bool(s.on("arengine/front-door/events/Speech")))
    assert not heard.on("arengine/front-door/events/Speech/state")
    notice.close()
    notifier.close()


def test_discovery_can_be_turned_off_and_prefixes_chosen(
    broker: Mosquitto, heard: Subscriber
) -> None:
    notifier, _ = _notifier(
        broker, mqtt_discovery=False, mqtt_topic_prefix="ar", mqtt_labels="Glass"
    )
    notice = notifier.stream("hall", ["events"])
    notice.opened("events", "Glass", 0.0)
    assert heard.wait(lambda s: s.payloads("ar/hall/events/Glass/state") == ["ON"])
    notice.close()
    notifier.close()
    assert not [m for m in heard.messages if m.topic.startswith("homeassistant/")]


def test_labels_become_safe_topic_levels(broker: Mosquitto, heard: Subscriber) -> None:
    notifier, _ = _notifier(broker)
    notice = notifier.stream("hall", ["events"])
    notice.tagged("events", {**GLASS, "label": "a/b+c#d"})
    assert heard.wait(lambda s: bool(s.on("arengine/hall/events/a_b_c_d")))
    notice.close()
    notifier.close()


def test_a_broker_gone_and_back_gets_everything_again_and_events_stay_bounded(
    broker: Mosquitto, tmp_path: Path
) -> None:
    notifier, metrics = _notifier(broker, mqtt_max_queued=2, mqtt_hold_s=3600)
    notice = notifier.stream("yard", ["events"])
    notice.opened("events", "Glass", 0.0)
    assert wait_until(lambda: _value(metrics, "arengine_mqtt_queued_messages") == 0)
    broker.stop()
    assert wait_until(lambda: _value(metrics, "arengine_mqtt_connected") == 0)
    for k in range(5):  # never waits for the broker: the oldest events go
        notice.tagged("events", {**GLASS, "start": float(k), "end": k + 0.5})
    assert _value(metrics, "arengine_mqtt_dropped_messages_total") == 3
    broker.start()  # without persistence: it lost every retained message
    heard = Subscriber(broker)
    try:
        assert wait_until(lambda: _value(metrics, "arengine_mqtt_connected") == 1)
        assert heard.wait(lambda s: len(s.on("arengine/yard/events/Glass")) == 2)
        starts = [json.loads(p)["start"] for p in heard.payloads("arengine/yard/events/Glass")]
        assert starts == [3.0, 4.0]  # the newest two, in order
        # (Retained messages come in no set order: each is waited for. A value may come twice:
        # one published just before the broker went, not yet acknowledged, is sent again by paho
        # beside the notifier's own repeat of every retained value; the latest is what counts.)
        assert heard.wait(lambda s: s.payloads("arengine/yard/availability")[-1:] == ["online"])
        assert heard.wait(lambda s: s.payloads("arengine/yard/events/Glass/state")[-1:] == ["ON"])
        assert heard.wait(lambda s: s.payloads("arengine/status")[-1:] == ["online"])
    finally:
        heard.close()
    notice.close()
    notifier.close()


def test_values_in_flight_when_the_broker_dies_hold_once_it_is_back(broker: Mosquitto) -> None:
    """A broker that dies with values it took but never acknowledged (frozen, then killed): once
    it is back, every retained value is there again, the latest as sent. paho sends those values
    again beside the notifier's own repeat, so one may come twice (a test that expected each
    exactly once failed on a slow machine); the latest is what a subscriber keeps."""
    notifier, metrics = _notifier(broker)
    assert broker.process is not None
    broker.process.send_signal(signal.SIGSTOP)  # takes nothing in, acknowledges nothing
    notice = notifier.stream("yard", ["events"])
    notice.opened("events", "Glass", 0.0)
    assert wait_until(lambda: _value(metrics, "arengine_mqtt_queued_messages") == 0)  # to paho
    broker.process.kill()
    broker.stop()
    broker.start()  # without persistence: nothing retained
    heard = Subscriber(broker)
    try:
        availability, state = "arengine/yard/availability", "arengine/yard/events/Glass/state"
        assert heard.wait(lambda s: s.payloads(availability)[-1:] == ["online"])
        assert heard.wait(lambda s: s.payloads(state)[-1:] == ["ON"])
        assert heard.wait(lambda s: s.payloads("arengine/status")[-1:] == ["online"])
        assert set(heard.payloads(availability)) == {"online"}
    finally:
        heard.close()
    notice.close()
    notifier.close()


def test_a_broker_not_there_at_start_is_connected_once_it_comes(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    chosen = Settings(mqtt_url=broker.url, mqtt_reconnect_max_s=1)
    metrics = Metrics(CollectorRegistry())
    broker_of = Broker.of(chosen.mqtt)
    assert broker_of is not None
    notifier = MqttNotifier(chosen, metrics, broker_of)
    notifier.start()
    notice = notifier.stream("hall", ["events"])
    notice.tagged("events", GLASS)
    broker.start()
    try:
        heard = Subscriber(broker)
        assert heard.wait(lambda s: s.payloads("arengine/hall/availability") == ["online"])
        assert heard.wait(lambda s: len(s.on("arengine/hall/events/Glass/state")) == 1)
        heard.close()
        notice.close()
        notifier.close()
    finally:
        broker.stop()


def test_credentials_work_and_never_reach_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = "s3cret-Pa55"
    with running_broker(tmp_path, users={"arengine": password, "ha": "ha-pass"}) as broker:
        monkeypatch.setenv("ARENGINE_MQTT_PASSWORD", password)
        caplog.set_level(logging.DEBUG)
        heard = Subscriber(broker, user=("ha", "ha-pass"))
        notifier, _ = _notifier(broker, mqtt_username="arengine")
        notice = notifier.stream("hall", ["events"])
        assert heard.wait(lambda s: s.payloads("arengine/hall/availability") == ["online"])
        notice.close()
        notifier.close()
        heard.close()
        assert "mqtt: connected to mqtt://127.0.0.1" in caplog.text
        assert password not in caplog.text
        assert password not in repr(
            Broker.of(Settings(mqtt_url=broker.url, mqtt_username="a").mqtt)
        )


def test_a_wrong_password_is_refused_and_logged_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_broker(tmp_path, users={"arengine": "right"}) as broker:
        url = broker.url.replace("mqtt://", "mqtt://arengine:wrong-guess@")
        chosen = Settings(mqtt_url=url, mqtt_reconnect_max_s=1)
        metrics = Metrics(CollectorRegistry())
        broker_of = Broker.of(chosen.mqtt)
        assert broker_of is not None
        notifier = MqttNotifier(chosen, metrics, broker_of)
        notifier.start()
        assert wait_until(lambda: "cannot connect" in caplog.text)
        notifier.close()
    assert "wrong-guess" not in caplog.text
    assert _value(metrics, "arengine_mqtt_connected") == 0

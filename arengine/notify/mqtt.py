"""Live streams' detections published to an MQTT broker (`mqtt_url`), as Frigate and BirdNET-Go do.

Topics and payloads: `arengine/notify/topics.py`. paho-mqtt's network thread connects, and
reconnects with a doubling wait up to `mqtt_reconnect_max_s`; one more thread (`_send`) hands it
the messages, so that nothing on the engine's threads or the event loop ever waits for a broker.

Two kinds of message wait for the broker, each bounded:
- events (a tag's JSON): a queue of `mqtt_max_queued`, the oldest dropped and counted past it;
- retained values (states, availability, discovery): only the latest value of each topic, so
  they are bounded by the topics of the streams open. After each (re)connection every retained
  value of the sources online is published again: a broker restarted without persistence has
  lost them.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from arengine.kinds.base import Recognizer
from arengine.notify.topics import OFF, OFFLINE, ON, ONLINE, Topics
from arengine.postprocess.vocabulary import split_list
from arengine.settings import Broker, Settings
from arengine.system.metrics import Metrics

log = logging.getLogger(__name__)

QOS = 1
"""At least once: a state change lost on a reconnection would leave a sensor ON for ever."""

CLOSE_FLUSH_S = 2.0
"""How long a closing notifier waits for its last messages (the sources going offline)."""

UNACKNOWLEDGED_MAX = 1000
"""Messages handed to paho and not yet acknowledged by the broker; past it they are dropped."""

KEEPALIVE_S = 30
"""Seconds between the client's pings: a broker gone without a word is noticed within 1.5 of it."""


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    payload: str
    retain: bool = False


@dataclass(slots=True)
class _State:
    """One watched label of one stream: ON while a run is open or within the hold time."""

    on: bool = False
    open_runs: int = 0
    off_at: float | None = None


class MqttNotifier:
    """The connection to the broker and what waits for it; `stream` for each live stream.

    Example::

        notifier = MqttNotifier(settings, metrics, Broker.parse("mqtt://127.0.0.1"))
        notifier.start()
        notice = notifier.stream("kitchen", ("events",))
        notice.tagged("events", {"start": 1.0, "end": 2.5, "label": "Glass", "score": 0.8})
        notice.close()
        notifier.close()
    """

    def __init__(self, settings: Settings, metrics: Metrics, broker: Broker) -> None:
        self.broker = broker
        self.topics = Topics(settings.mqtt.mqtt_topic_prefix, settings.mqtt.mqtt_discovery_prefix)
        self.hold_s = settings.mqtt.mqtt_hold_s
        self.discovery = settings.mqtt.mqtt_discovery
        self.watched = frozenset(split_list(settings.mqtt.mqtt_labels or ""))
        """The labels with a state topic; empty: every label."""
        self._metrics = metrics
        self._max_queued = settings.mqtt.mqtt_max_queued
        self._reconnect_max_s = settings.mqtt.mqtt_reconnect_max_s
        self._cond = threading.Condition()
        self._events: deque[Message] = deque()
        self._retained: dict[str, str] = {self.topics.status: ONLINE}
        """The latest retained value of each topic of the sources online, for a reconnection."""
        self._dirty: dict[str, str] = {}
        """Retained values not yet handed to the broker."""
        self._notices: list[StreamNotice] = []
        self._sources: dict[str, int] = {}
        self._connected = False
        self._closing = False
        self._failing = False
        self._client = self._new_client(settings)
        self._sender = threading.Thread(target=self._send, name="arengine-mqtt", daemon=True)

    def _new_client(self, settings: Settings) -> paho.Client:
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"arengine-{uuid.uuid4().hex}")
        if self.broker.username is not None:
            client.username_pw_set(self.broker.username, self.broker.password)
        if self.broker.tls:
            ca = str(self.broker.ca_file) if self.broker.ca_file else None
            client.tls_set(ca_certs=ca, cert_reqs=ssl.CERT_REQUIRED)
        client.will_set(self.topics.status, OFFLINE, qos=QOS, retain=True)
        client.reconnect_delay_set(1, round(settings.mqtt.mqtt_reconnect_max_s))
        # paho's own queue (messages not yet acknowledged, which a reconnection sends again) is
        # bounded too: a broker that takes messages but never acknowledges them.
        client.max_queued_messages_set(UNACKNOWLEDGED_MAX)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_disconnect = self._on_disconnect
        return client

    def start(self) -> None:
        """Connect in the background: a broker that is not there yet is tried again and again."""
        log.info(
            "mqtt: publishing to %s", self.broker, extra={"fields": {"broker": str(self.broker)}}
        )
        self._client.connect_async(self.broker.host, self.broker.port, KEEPALIVE_S)
        self._client.loop_start()
        self._sender.start()

    def close(self) -> None:
        """Say the sources and the server go offline, wait a little for it, and disconnect."""
        for notice in list(self._notices):
            notice.close()
        with self._cond:
            self._set(self.topics.status, OFFLINE)
            self._closing = True
            self._cond.notify_all()
        self._sender.join(CLOSE_FLUSH_S)
        self._client.disconnect()  # a clean one: the broker drops the last will
        self._client.loop_stop()

    def stream(self, source: str, models: Iterable[str]) -> StreamNotice:
        """The notice of a live stream from `source`, run by `models`; its source goes online."""
        notice = StreamNotice(self, source, tuple(models))
        with self._cond:
            self._notices.append(notice)
            self._sources[source] = self._sources.get(source, 0) + 1
            self._set(self.topics.availability(source), ONLINE)
            if self.watched:
                for model in notice.models:
                    for label in sorted(self.watched):
                        self._announce(source, model, label)
            self._cond.notify_all()
        return notice

    def watches(self, label: str) -> bool:
        return not self.watched or label in self.watched

    # What the notices call, under the lock.

    def _set(self, topic: str, value: str) -> None:
        if self._retained.get(topic) != value:
            self._retained[topic] = value
            self._dirty[topic] = value
            self._gauge()

    def _announce(self, source: str, model: str, label: str) -> None:
        if self.discovery:
            self._set(
                self.topics.config(source, model, label),
                self.topics.sensor(source, model, label),
            )

    def _event(self, message: Message) -> None:
        if len(self._events) >= self._max_queued:
            self._events.popleft()
            self._metrics.observe_mqtt(dropped=1)
        self._events.append(message)
        self._gauge()

    def _ended(self, notice: StreamNotice) -> None:
        source = notice.source
        self._notices.remove(notice)
        self._sources[source] -= 1
        if self._sources[source] > 0:
            return
        del self._sources[source]
        self._set(self.topics.availability(source), OFFLINE)
        # A source gone is no longer repeated after a reconnection (its last values still go
        # out, from `_dirty`): what is kept stays bounded by the streams open.
        for topic in [t for t in self._retained if self.topics.of_source(t, source)]:
            del self._retained[topic]

    def _gauge(self) -> None:
        self._metrics.mqtt_queued.set(len(self._events) + len(self._dirty))

    # The sender thread.

    def _send(self) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
            if batch is None:
                return
            self._publish(batch)

    def _next_batch(self) -> list[Message] | None:
        """Under the lock: the messages to hand to the broker now, once it is connected; `None`
        when closed and flushed."""
        while True:
            now = time.monotonic()
            for notice in self._notices:
                notice.expire(now)
            pending = self._dirty or self._events
            if self._connected and pending:
                batch = [Message(t, v, retain=True) for t, v in self._dirty.items()]
                batch += list(self._events)
                self._dirty.clear()
                self._events.clear()
                self._gauge()
                return batch
            if self._closing and (not pending or not self._connected):
                return None
            deadlines = [n.next_off() for n in self._notices]
            due = min((d for d in deadlines if d is not None), default=None)
            self._cond.wait(None if due is None else max(due - now, 0.0))

    def _publish(self, batch: list[Message]) -> None:
        published = dropped = 0
        for k, message in enumerate(batch):
            info = self._client.publish(message.topic, message.payload, QOS, message.retain)
            if info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS:
                published += 1
            elif info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN:
                self._put_back(batch[k:])
                break
            else:  # paho's own queue is full: the broker is too slow
                dropped += 1
        self._metrics.observe_mqtt(published, dropped)

    def _put_back(self, rest: list[Message]) -> None:
        """Messages the connection went away under: they wait for the next one."""
        with self._cond:
            self._connected = False
            for message in reversed(rest):
                if not message.retain:
                    if len(self._events) < self._max_queued:
                        self._events.appendleft(message)
                    else:
                        self._metrics.observe_mqtt(dropped=1)
                elif message.topic not in self._dirty:  # a newer value supersedes it
                    self._dirty[message.topic] = message.payload
            self._gauge()

    # paho's callbacks, on its network thread.

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        if reason.is_failure:
            self._on_connect_fail(client, userdata, reason)
            return
        log.info(
            "mqtt: connected to %s", self.broker, extra={"fields": {"broker": str(self.broker)}}
        )
        with self._cond:
            self._connected = True
            self._failing = False
            self._retained[self.topics.status] = ONLINE
            # The broker may have restarted without what it kept: say it all again, status first.
            self._dirty = {self.topics.status: ONLINE, **self._retained, **self._dirty}
            self._gauge()
            self._cond.notify_all()
        self._metrics.mqtt_connected.set(1)

    def _on_connect_fail(self, client: paho.Client, userdata: Any, reason: Any = None) -> None:
        with self._cond:
            first, self._failing = not self._failing, True
        if first:  # once an outage, not at every attempt
            log.warning(
                "mqtt: cannot connect to %s (%s); trying again, up to every %s s",
                self.broker,
                reason or "no answer",
                self._reconnect_max_s,
                extra={"fields": {"broker": str(self.broker)}},
            )

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        with self._cond:
            was, self._connected = self._connected, False
            closing = self._closing
        self._metrics.mqtt_connected.set(0)
        if was and not closing:
            log.warning(
                "mqtt: lost %s (%s); reconnecting",
                self.broker,
                reason,
                extra={"fields": {"broker": str(self.broker)}},
            )


class StreamNotice:
    """What one live stream tells the broker: its tags (`tagged`), its labels' runs as they
    start (`opened`, from an engine thread) and its end (`close`). Never blocks."""

    def __init__(self, notifier: MqttNotifier, source: str, models: tuple[str, ...]) -> None:
        self.notifier = notifier
        self.source = source
        self.models = models
        self._states: dict[tuple[str, str], _State] = {}
        self._closed = False

    def opened(self, model: str, label: str, start_s: float) -> None:
        """A run of `label` started at `start_s` and will be a tag: its state goes ON."""
        if not self.notifier.watches(label):
            return
        with self.notifier._cond:
            if self._closed:
                return
            state = self._state(model, label)
            state.open_runs += 1
            state.off_at = None
            self._turn(model, label, state, on=True)

    def tagged(self, model: str, tag: dict[str, Any]) -> None:
        """A final tag (a line of the stream): its event, and its label's state ON until the
        hold time has passed with no other run of the label."""
        label = str(tag["label"])
        notifier = self.notifier
        event = {**tag, "source": self.source, "model": model}
        with notifier._cond:
            if self._closed:
                return
            notifier._event(
                Message(notifier.topics.event(self.source, model, label), json.dumps(event))
            )
            if notifier.watches(label):
                state = self._state(model, label)
                state.open_runs = max(state.open_runs - 1, 0)
                self._turn(model, label, state, on=True)
                if state.open_runs == 0:
                    state.off_at = time.monotonic() + notifier.hold_s
            notifier._cond.notify_all()

    def close(self) -> None:
        """The stream ended: its states go OFF, and its source offline unless another stream
        of it is open."""
        with self.notifier._cond:
            if self._closed:
                return
            self._closed = True
            for (model, label), state in self._states.items():
                self._turn(model, label, state, on=False)
            self.notifier._ended(self)
            self.notifier._cond.notify_all()

    def expire(self, now: float) -> None:
        """Under the lock: the states whose hold time has passed go OFF."""
        for (model, label), state in self._states.items():
            if state.off_at is not None and state.off_at <= now:
                self._turn(model, label, state, on=False)

    def next_off(self) -> float | None:
        return min((s.off_at for s in self._states.values() if s.off_at is not None), default=None)

    def _state(self, model: str, label: str) -> _State:
        state = self._states.get((model, label))
        if state is None:
            state = self._states[(model, label)] = _State()
            if not self.notifier.watched:  # a label first heard: its sensor now
                self.notifier._announce(self.source, model, label)
        return state

    def _turn(self, model: str, label: str, state: _State, on: bool) -> None:
        if not on:
            state.off_at = None
            state.open_runs = 0
        if state.on != on:
            state.on = on
            self.notifier._set(
                self.notifier.topics.state(self.source, model, label), ON if on else OFF
            )
            self.notifier._cond.notify_all()


def start_mqtt(settings: Settings, metrics: Metrics) -> MqttNotifier | None:
    """The notifier of `settings.mqtt.mqtt_url`, connecting; `None` when MQTT is off."""
    broker = Broker.of(settings.mqtt)
    if broker is None:
        return None
    notifier = MqttNotifier(settings, metrics, broker)
    notifier.start()
    return notifier


def notify(
    notifier: MqttNotifier | None, source: str, recognizers: Iterable[Recognizer]
) -> StreamNotice | None:
    """A live stream's notice, when the server publishes to a broker."""
    if notifier is None:
        return None
    return notifier.stream(source, (recognizer.name for recognizer in recognizers))

"""A real MQTT broker for the tests (Debian's `mosquitto`, `deploy/setup.sh --test`) and a
subscriber that keeps what it hears.

`Mosquitto(tmp_path)` listens on a free loopback port with a configuration in `tmp_path`, no
persistence (a restart forgets retained messages, as a broker without a volume does); `stop`
and `start` again keep the port, so a client sees the same broker go away and come back.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.conftest import free_port, wait_until

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def needs_mosquitto() -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not Path(MOSQUITTO).exists(), reason="needs Debian's mosquitto (deploy/setup.sh --test)"
    )


class Mosquitto:
    """A broker on 127.0.0.1; with `users`, only they may connect (user name to password)."""

    def __init__(self, folder: Path, users: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        # `user`: started as root, mosquitto would switch to its own user, who cannot read the
        # test's folder (started as another user, the setting has no effect).
        lines = [f"listener {self.port} 127.0.0.1", "persistence false", "user root"]
        if users:
            passwords = folder / "passwords"
            passwords.touch(mode=0o600)
            for user, password in users.items():
                subprocess.run(
                    ["mosquitto_passwd", "-b", str(passwords), user, password],
                    check=True,
                    capture_output=True,
                )
            lines += ["allow_anonymous false", f"password_file {passwords}"]
        else:
            lines.append("allow_anonymous true")
        self.config = folder / "mosquitto.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.log = folder / "mosquitto.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [MOSQUITTO, "-c", str(self.config)], stdout=out, stderr=subprocess.STDOUT
            )
        if not wait_until(self._listening, 30):
            self.stop()
            raise AssertionError(f"mosquitto did not start: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True


@contextmanager
def running_broker(folder: Path, users: dict[str, str] | None = None) -> Iterator[Mosquitto]:
    broker = Mosquitto(folder, users)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@dataclass(frozen=True, slots=True)
class Heard:
    topic: str
    payload: str
    retain: bool
    at: float
    """`time.monotonic()` when it came."""


class Subscriber:
    """A paho client subscribed to `#`, keeping every message it hears, in order."""

    def __init__(
        self, broker: Mosquitto, topics: str = "#", user: tuple[str, str] | None = None
    ) -> None:
        self._clock = time.monotonic
        self.messages: list[Heard] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = paho.Client(CallbackAPIVersion.VERSION2)
        if user is not None:
            self.client.username_pw_set(*user)
        self.client.on_message = self._heard
        self.client.on_connect = lambda c, *_: c.subscribe(topics, qos=1)
        self.client.on_subscribe = lambda *_: self._subscribed.set()
        self.client.reconnect_delay_set(1, 1)
        self.client.connect_async("127.0.0.1", broker.port)
        self.client.loop_start()
        assert self._subscribed.wait(30)

    def _heard(self, client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        heard = Heard(message.topic, message.payload.decode(), message.retain, self._clock())
        with self._lock:
            self.messages.append(heard)

    def on(self, topic: str) -> list[Heard]:
        with self._lock:
            return [m for m in self.messages if m.topic == topic]

    def payloads(self, topic: str) -> list[str]:
        return [m.payload for m in self.on(topic)]

    def wait(self, seen: Callable[[Subscriber], bool], seconds: float = 30.0) -> bool:
        return wait_until(lambda: seen(self), seconds)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

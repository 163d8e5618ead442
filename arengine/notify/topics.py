"""The MQTT topics and payloads of live streams' detections, Home Assistant's discovery included.

With the default prefixes, a stream of source `kitchen` tagged by the `events` model gives:

- `arengine/status` (retained): `online`, or `offline` (also the client's last will);
- `arengine/kitchen/availability` (retained): `online` while a stream of the source is open;
- `arengine/kitchen/events/<label>`: each tag as JSON, with `source` and `model`;
- `arengine/kitchen/events/<label>/state` (retained): `ON` at a tag's start, `OFF` `mqtt_hold_s`
  after its end;
- `homeassistant/binary_sensor/arengine_kitchen/events_<label>/config` (retained): a binary sensor.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from arengine import __version__

ON, OFF = "ON", "OFF"
ONLINE, OFFLINE = "online", "offline"

MAX_LEVEL_CHARS = 200
"""The longest topic level a label or model name becomes (MQTT allows 65,535 bytes in all)."""

_UNSAFE = re.compile(r"[+#/\x00]")
_NOT_ID = re.compile(r"[^a-z0-9_-]+")


def topic_level(text: str) -> str:
    """`text` as one topic level: no wildcard (`+`, `#`), separator (`/`) or NUL, never empty.

    >>> topic_level("Gunshot, gunfire"), topic_level("a/b+#"), topic_level("")
    ('Gunshot, gunfire', 'a_b__', '_')
    """
    return _UNSAFE.sub("_", text)[:MAX_LEVEL_CHARS] or "_"


def object_id(text: str) -> str:
    """`text` as a Home Assistant object id (lowercase letters, digits, `_`, `-`).

    >>> object_id("Smoke detector, smoke alarm")
    'smoke_detector_smoke_alarm'
    """
    return _NOT_ID.sub("_", text.lower()).strip("_")[:MAX_LEVEL_CHARS] or "_"


@dataclass(frozen=True, slots=True)
class Topics:
    """Where each message goes: `prefix` (`mqtt_topic_prefix`) and Home Assistant's
    `discovery` prefix (`mqtt_discovery_prefix`)."""

    prefix: str = "arengine"
    discovery: str = "homeassistant"

    @property
    def status(self) -> str:
        return f"{self.prefix}/status"

    def availability(self, source: str) -> str:
        return f"{self.prefix}/{source}/availability"

    def event(self, source: str, model: str, label: str) -> str:
        """Where a tag of `label` goes.

        >>> Topics().event("hall", "events", "Gunshot, gunfire")
        'arengine/hall/events/Gunshot, gunfire'
        """
        return f"{self.prefix}/{source}/{topic_level(model)}/{topic_level(label)}"

    def state(self, source: str, model: str, label: str) -> str:
        return f"{self.event(source, model, label)}/state"

    def config(self, source: str, model: str, label: str) -> str:
        return f"{self._node(source)}/{object_id(model)}_{object_id(label)}/config"

    def of_source(self, topic: str, source: str) -> bool:
        """Whether `topic` is one of `source`'s own (its availability, states, sensors)."""
        return topic.startswith((f"{self.prefix}/{source}/", f"{self._node(source)}/"))

    def _node(self, source: str) -> str:
        return f"{self.discovery}/binary_sensor/{object_id(self.prefix)}_{source}"

    def sensor(self, source: str, model: str, label: str) -> str:
        """The discovery payload of the binary sensor of `label` heard on `source`."""
        node = f"{object_id(self.prefix)}_{source}"
        config = {
            "name": label,
            "unique_id": f"{node}_{object_id(model)}_{object_id(label)}",
            "state_topic": self.state(source, model, label),
            "payload_on": ON,
            "payload_off": OFF,
            "device_class": "sound",
            "availability": [
                {"topic": self.status},
                {"topic": self.availability(source)},
            ],
            "availability_mode": "all",
            "json_attributes_topic": self.event(source, model, label),
            "device": {
                "identifiers": [node],
                "name": f"{self.prefix} {source}",
                "manufacturer": "arengine",
                "model": f"{model} model",
                "sw_version": __version__,
            },
            "origin": {"name": "arengine", "sw_version": __version__},
        }
        return json.dumps(config)

"""MQTT topics made safe from labels, and the broker's address and credentials from the
settings (never shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arengine.notify.topics import Topics, object_id, topic_level
from arengine.settings import Broker, Settings


@pytest.mark.parametrize(
    ("label", "level"),
    [("Glass", "Glass"), ("a/b", "a_b"), ("x+y#", "x_y_"), ("nul\x00", "nul_"), ("", "_")],
)
def test_a_label_becomes_one_topic_level_without_wildcards(label: str, level: str) -> None:
    assert topic_level(label) == level
    topic = Topics().state("hall", "events", label)
    assert topic.count("/") == 4 and not {"+", "#", "\x00"} & set(topic)


def test_an_object_id_is_what_home_assistant_takes() -> None:
    assert object_id("Gunshot, gunfire") == "gunshot_gunfire"
    assert object_id("+++") == "_"


def test_the_url_gives_host_port_tls_and_credentials() -> None:
    broker = Broker.parse("mqtts://ha%40home:p%3Ass@broker.lan:8884")
    assert (broker.host, broker.port, broker.tls) == ("broker.lan", 8884, True)
    assert (broker.username, broker.password) == ("ha@home", "p:ss")
    assert "p:ss" not in repr(broker) and str(broker) == "mqtts://broker.lan:8884"
    assert Broker.parse("mqtt://10.0.0.2").port == 1883


@pytest.mark.parametrize(
    "url", ["mqtt://", "mqtt://host/topic", "mqtt://host:99999", "mqtt://host?x=1"]
)
def test_a_url_that_is_not_a_broker_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="mqtt_url"):
        Broker.parse(url)


def test_the_password_comes_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENGINE_MQTT_PASSWORD", "from-env")
    broker = Broker.of(Settings(mqtt_url="mqtt://h", mqtt_username="u").mqtt)
    assert broker is not None and broker.password == "from-env"
    monkeypatch.delenv("ARENGINE_MQTT_PASSWORD")
    secret = tmp_path / "password"
    secret.write_text("from-file\n")
    broker = Broker.of(
        Settings(mqtt_url="mqtt://h", mqtt_username="u", mqtt_password_file=secret).mqtt
    )
    assert broker is not None and broker.password == "from-file"
    assert Broker.of(Settings().mqtt) is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mqtt_url": "mqtt://u:p@h", "mqtt_username": "v"}, "not both"),
        ({"mqtt_url": "mqtt://u:p@h", "mqtt_password": "q"}, "not both"),
        ({"mqtt_url": "mqtt://h", "mqtt_password": "q"}, "needs a user name"),
    ],
)
def test_credentials_given_twice_or_half_are_refused_with_the_settings(
    settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(**settings)


def test_a_wrong_url_stops_serve_with_its_message_and_not_its_password() -> None:
    with pytest.raises(ValueError, match="broker's address only") as refused:
        Settings(mqtt_url="mqtt://user:pa55word@host/topic")
    assert "pa55word" not in str(refused.value)


def test_the_password_is_never_a_flag() -> None:
    from arengine.cli.serve import ENV_ONLY

    assert "mqtt_password" in ENV_ONLY
    assert "p" not in repr(Settings(mqtt_password="p").mqtt.mqtt_password)

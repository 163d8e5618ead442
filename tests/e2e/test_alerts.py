"""The example alerting rules (`deploy/prometheus/alerts.yml`): promtool checks them and runs
their unit tests, their labels are the events model's, and a real Prometheus scraping a real
server fires the glass alert when a live stream hears glass."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from websockets.sync.client import connect

from tests.conftest import ROOT, Server, ServerFactory, free_port, wait_until
from tests.recordings import DEBIAN_SOUNDS, mono_16k

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
EVENTS = ROOT / "models" / "events"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, cwd=RULES.parent, timeout=60
    )


def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    checked = _promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout
    tested = _promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _events_labels() -> set[str]:
    """The events model's class names (`index,mid,display_name`) and its groups' names."""
    with (EVENTS / "yamnet_class_map.csv").open(newline="") as table:
        names = {row["display_name"] for row in csv.DictReader(table)}
    manifest = tomllib.loads((EVENTS / "manifest.toml").read_text())
    return names | set(manifest["postprocess"]["groups"])


def test_every_label_a_rule_watches_is_one_the_events_model_gives() -> None:
    known = _events_labels()
    rules = [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]
    watched = [
        label
        for rule in rules
        for pattern in re.findall(r'label=~"([^"]*)"', rule["expr"])
        for label in pattern.split("|")
    ]
    assert len(watched) > 10
    assert sorted(set(watched) - known) == []


def test_every_rule_alerts_per_source_and_names_it() -> None:
    """A camera's glass and another's are two alerts, each saying where (`?source=`)."""
    rules = [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]
    for rule in rules:
        groupings = re.findall(r"sum by \(([^)]*)\)", rule["expr"])
        assert groupings and all("source" in g.split(", ") for g in groupings), rule["alert"]
        assert "{{ $labels.source }}" in rule["annotations"]["summary"], rule["alert"]


@pytest.fixture(scope="module")
def events_server(serve: ServerFactory) -> Server:
    return serve("--models", "events")


@pytest.fixture
def prometheus(events_server: Server, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus scraping the server every second, with the example rules."""
    port = free_port()
    target = events_server.url.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "arengine", "static_configs": [{"targets": [target]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: _up(url), 60), (tmp_path / "prometheus.log").read_text()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _alerts(url: str) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = httpx.get(url + "/api/v1/alerts").json()["data"]["alerts"]
    return alerts


@pytest.mark.slow
def test_a_real_prometheus_fires_the_glass_alert_from_a_live_stream(
    events_server: Server, prometheus: str
) -> None:
    assert wait_until(lambda: _scraped(prometheus), 60)
    assert not _alerts(prometheus)
    # freedesktop's alarm clock is a glassy chime: the events model hears Glass in it.
    chime = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/alarm-clock-elapsed.oga")
    audio = np.concatenate([np.zeros(16000, np.float32), chime, np.zeros(32000, np.float32)])
    url = events_server.url.replace("http://", "ws://") + "/v1/listen?model=events&source=hall"
    with connect(url, open_timeout=30) as ws:
        ws.send(json.dumps({"format": "f32le", "sample_rate": 16000, "channels": 1}))
        data = audio.astype("<f4").tobytes()
        for at in range(0, len(data), 6400):
            ws.send(data[at : at + 6400])
        ws.send(json.dumps({"end": True}))
        lines = [json.loads(message) for message in ws]
    assert "Glass" in {line.get("label") for line in lines}
    assert wait_until(lambda: _firing(prometheus, "ArengineGlassBreaking"), 60)
    firing = [a for a in _alerts(prometheus) if a["labels"]["alertname"] == "ArengineGlassBreaking"]
    assert firing[0]["labels"]["label"] == "Glass"
    assert firing[0]["labels"]["model"] == "events"
    assert firing[0]["labels"]["source"] == "hall"
    assert not _firing(prometheus, "ArengineGunfire")


def _scraped(url: str) -> bool:
    answer = httpx.get(url + "/api/v1/query", params={"query": "up"}).json()
    return any(item["value"][1] == "1" for item in answer["data"]["result"])


def _firing(url: str, name: str) -> bool:
    return any(
        alert["labels"]["alertname"] == name and alert["state"] == "firing"
        for alert in _alerts(url)
    )

"""The Compose stack, up for real: two replicas behind nginx on one PostgreSQL, Prometheus
scraping both, the dashboard's queries answered by that Prometheus, 40 files through a small
admission limit with none lost, a job seen by both replicas, and a replica killed mid-request."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import soundfile as sf
import yaml

from arengine.client import Client, Recognition, RetryPolicy
from arengine.outputs.formats import FORMATS
from tests.conftest import RecordingFactory, free_port
from tests.container.docker import ROOT, docker
from tests.container.test_image import _long_wav

COMPOSE = ROOT / "deploy" / "compose"
PROJECT = "arengine-test-compose"
DASHBOARD = ROOT / "deploy" / "grafana" / "arengine.json"


def _compose_command() -> list[str]:
    if docker("compose", "version", check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither docker compose nor docker-compose (deploy/setup.sh --test installs it)")


SCRAPE_INTERVAL = "2s"
"""The tests' Prometheus scrapes this often (the stack's own file says 15 s): a rate needs two
scrapes that saw requests between them, and the dashboard test waited 30 s for them."""


@dataclass
class Stack:
    command: list[str]
    env: dict[str, str]
    balancer: str
    prometheus: str
    override: Path
    """The tests' own compose file, applied last (`_override`)."""

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        files = ["-f", str(COMPOSE / "docker-compose.yml")]
        files += ["-f", str(COMPOSE / "docker-compose.local.yml"), "-f", str(self.override)]
        return subprocess.run(
            [*self.command, "-p", PROJECT, *files, *args],
            capture_output=True, text=True, check=False, timeout=timeout, env=self.env,
        )  # fmt: skip

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

    def replica_url(self, service: str) -> str:
        template = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        address = docker("inspect", "-f", template, self.container(service)).stdout.strip()
        return f"http://{address}:8000"

    def query(self, expr: str) -> list[dict[str, object]]:
        answer = httpx.get(self.prometheus + "/api/v1/query", params={"query": expr}).json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    command = _compose_command()
    built = subprocess.run(
        [str(COMPOSE / "local" / "build.sh")], capture_output=True, text=True, check=False,
        timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    balancer, prometheus = free_port(), free_port()
    # The database's password, as an operator makes it once (the stack's secret file).
    password = tmp_path_factory.mktemp("secrets") / "database-password"
    password.write_text(os.urandom(24).hex() + "\n")
    password.chmod(0o644)  # read by postgres and by the image's user, as the secret's bind mount
    env = {
        **os.environ,
        "ARENGINE_DATABASE_PASSWORD_FILE": str(password),
        "ARENGINE_MAX_PENDING_REQUESTS": "2",
        "ARENGINE_BALANCER_PORT": str(balancer),
        "ARENGINE_PROMETHEUS_PORT": str(prometheus),
    }
    override = _override(tmp_path_factory.mktemp("compose"))
    running = Stack(
        command, env, f"http://127.0.0.1:{balancer}", f"http://127.0.0.1:{prometheus}", override
    )
    running.compose("down", "-v")
    up = running.compose("up", "-d")
    assert up.returncode == 0, up.stderr
    try:
        deadline = time.monotonic() + 120
        while not all(_ready(running.replica_url(s)) for s in ("arengine-a", "arengine-b")):
            assert time.monotonic() < deadline, running.compose("logs").stdout[-4000:]
            time.sleep(0.5)
        yield running
    finally:
        running.compose("down", "-v", "-t", "5")


def _override(folder: Path) -> Path:
    """A compose file giving Prometheus the stack's own configuration at `SCRAPE_INTERVAL`."""
    shipped = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    shipped["global"]["scrape_interval"] = SCRAPE_INTERVAL
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump(shipped))
    config.chmod(0o644)  # read by the image's own user
    mount = f"{config}:/etc/prometheus/prometheus.yml:ro"  # replaces the stack's (same target)
    override = folder / "docker-compose.test.yml"
    override.write_text(yaml.safe_dump({"services": {"prometheus": {"volumes": [mount]}}}))
    return override


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_forty_files_through_the_balancer_lose_none(
    stack: Stack, tmp_path: Path, recording: RecordingFactory
) -> None:
    """max_pending_requests=2 per replica, 8 uploads at a time: 503s are retried, none lost."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    clip = recording("talk.flac", pieces=[("silence", 0.5), ("speech", 0), ("silence", 0.5)])
    for index in range(40):
        shutil.copy(clip.path, inputs / f"file{index:02d}.flac")
    done = subprocess.run(
        [sys.executable, "-m", "arengine", "recognize", str(inputs), "--server", stack.balancer,
         "--concurrency", "8", "--format", "csv", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in outputs] == [f"file{i:02d}.csv" for i in range(40)]
    for output in outputs:
        assert [t.label for t in FORMATS["csv"].parse(output.read_text())] == ["speech"]
    # Both replicas served: their own counters (read directly, not through the balancer).
    served = {}
    for service in ("arengine-a", "arengine-b"):
        text = httpx.get(stack.replica_url(service) + "/metrics").text
        served[service] = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("arengine_requests_total{") and 'status="200"' in line
        )
    assert all(count > 0 for count in served.values()), served
    assert sum(served.values()) >= 40


def test_a_job_through_the_balancer_is_seen_done_by_both_replicas(
    stack: Stack, recording: RecordingFactory
) -> None:
    """The jobs are in the `postgres` service and their files on the shared volume: a job sent
    through the balancer is found, done, with the same result, by each replica asked directly."""
    clip = recording("talk.flac")
    with clip.path.open("rb") as body:
        response = httpx.post(
            stack.balancer + "/v1/jobs", params={"model": "speech"}, files={"file": body}
        )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    results = {}
    for service in ("arengine-a", "arengine-b"):
        url = f"{stack.replica_url(service)}/v1/jobs/{job_id}"
        deadline = time.monotonic() + 120
        while (state := httpx.get(url).json()["state"]) != "done":
            assert state in {"queued", "running"} and time.monotonic() < deadline, state
            time.sleep(0.5)
        results[service] = httpx.get(url + "/result").json()["tags"]
    assert results["arengine-a"] == results["arengine-b"]
    assert {tag["label"] for tag in results["arengine-a"]} == {"speech"}


def test_prometheus_scrapes_both_replicas(stack: Stack) -> None:
    deadline = time.monotonic() + 60
    while True:
        targets = httpx.get(stack.prometheus + "/api/v1/targets").json()["data"]["activeTargets"]
        health = {t["labels"]["instance"]: t["health"] for t in targets}
        if health == {"arengine-a:8000": "up", "arengine-b:8000": "up"}:
            break
        assert time.monotonic() < deadline, health
        time.sleep(1)


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def test_every_dashboard_query_returns_data(stack: Stack, recording: RecordingFactory) -> None:
    """Each panel query, as Grafana would send it ($__rate_interval as a 5-minute window), gives
    at least one series with a number while traffic goes through the balancer (a rate needs two
    scrapes, `SCRAPE_INTERVAL` apart, that saw requests between them)."""
    queries = _panel_queries()
    assert len(queries) >= 10
    clip = recording("talk.wav")
    deadline = time.monotonic() + 150
    with Client(stack.balancer, retry=RetryPolicy(retries=10)) as client:
        while True:
            for _ in range(4):
                client.recognize(clip.path)
            # The live panels need a live stream's tags, under a source name.
            for _ in client.listen(_pcm_chunks(clip.path), source="hall"):
                pass
            empty = _empty_panels(stack, queries)
            if not empty:
                break
            assert time.monotonic() < deadline, "panels without data:\n" + "\n".join(empty)
            time.sleep(2)


def _pcm_chunks(path: Path) -> Iterator[bytes]:
    """The recording as 16 kHz mono s16le, 0.1 s a chunk (what `listen` sends by default)."""
    samples, rate = sf.read(path, dtype="int16")
    assert rate == 16000 and samples.ndim == 1
    data = samples.tobytes()
    for start in range(0, len(data), 3200):
        yield data[start : start + 3200]


def _empty_panels(stack: Stack, queries: list[tuple[str, str]]) -> list[str]:
    empty = []
    for title, expr in queries:
        # As Grafana sends them: a 5-minute rate window, every source ("All").
        result = stack.query(expr.replace("$__rate_interval", "5m").replace("$source", ".*"))
        values = [float(item["value"][1]) for item in result]  # type: ignore[index]
        if not any(value == value for value in values):  # all NaN, or no series
            empty.append(f"{title}: {expr}")
    return empty


def test_a_replica_killed_mid_request(stack: Stack, tmp_path: Path) -> None:
    """The request on the killed replica gets its answer (nginx, holding the body, sends it to
    the other; the client would retry a 502 too); new requests go to the survivor; nothing
    hangs."""
    recording = _long_wav(tmp_path / "hour.wav", 3600)
    # A replica spends about 3 s on the hour; on a loaded machine the polls below can miss that
    # window, or the kill can come after the request has ended (nginx then cut nothing): the
    # request is sent again, the killed replica started again first. Neither miss says anything
    # about the balancer.
    busy: str | None = None
    for _ in range(3):
        outcome: list[Recognition | BaseException] = []
        sender = threading.Thread(target=_send, args=(stack, recording, outcome))
        sender.start()
        busy = _busy_replica(stack, sender)
        if busy is None:
            sender.join(60)
            continue
        cuts = _cuts(stack)
        docker("kill", stack.container(busy))
        sender.join(300)
        assert not sender.is_alive(), "the request on the killed replica hangs"
        assert len(outcome) == 1 and isinstance(outcome[0], Recognition), outcome
        assert outcome[0].audio.duration_s == pytest.approx(3600)
        if _cuts(stack) > cuts:
            break
        _start_again(stack, busy)
    else:
        pytest.fail(f"no request was cut by a replica's kill in three tries (last: {busy})")
    survivor = {"arengine-a", "arengine-b"}.difference({busy}).pop()
    with Client(stack.balancer, retry=RetryPolicy(retries=0)) as client:
        for _ in range(4):
            assert client.info()["ready"] is True
    assert _ready(stack.replica_url(survivor))


def _cuts(stack: Stack) -> int:
    """How many recognitions nginx has seen cut by their replica (its error log's lines)."""
    logs = stack.compose("logs", "balancer").stdout
    return len(re.findall(r'upstream: "http://[^"]+/v1/recognize', logs))


def _start_again(stack: Stack, service: str) -> None:
    started = stack.compose("start", service)
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 120
    while not _ready(stack.replica_url(service)):
        assert time.monotonic() < deadline, stack.compose("logs", service).stdout[-4000:]
        time.sleep(0.5)


def _send(stack: Stack, recording: Path, outcome: list[Recognition | BaseException]) -> None:
    with Client(stack.balancer, retry=RetryPolicy(retries=3, backoff_s=0.2)) as client:
        try:
            outcome.append(client.recognize(recording))
        except BaseException as error:  # reported by the test's assertions
            outcome.append(error)


def _busy_replica(stack: Stack, sender: threading.Thread) -> str | None:
    """The replica receiving the sender's upload or running it; None once the sender is done
    without one being seen."""
    deadline = time.monotonic() + 60
    while sender.is_alive():
        for service in ("arengine-a", "arengine-b"):
            info = httpx.get(stack.replica_url(service) + "/v1/info").json()
            # Receiving the upload or in the engine: the hour takes under 2 s of engine time,
            # which a poll on `active_jobs` alone once missed.
            if info["uploading_requests"] + info["pending_requests"] > 0:
                return service
        assert time.monotonic() < deadline, "the request reached no replica in 60 s"
    return None

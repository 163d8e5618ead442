"""Metrics: the class on a fresh registry, then `/metrics` and the access log of a real server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from arengine.errors import ErrorCode
from arengine.system.memory import JEMALLOC_STATS
from arengine.system.metrics import REJECTION_CODES, Metrics
from arengine.types import Stage
from tests.conftest import RecordingFactory, Server, wait_until

STAGES = ("validation", "features", "inference", "postprocess")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


class _Pool:
    threads = 4
    busy = 2
    queued_segments = 5
    active_requests = 3
    held_segments = 7


def test_a_request_counts_its_status_duration_and_audio(metrics: Metrics) -> None:
    metrics.observe_request("speech", 200, seconds=2.0, audio_s=60.0)
    metrics.observe_request("speech", 200, seconds=1.0, audio_s=30.0)
    metrics.observe_request("speech", 500, seconds=0.5)
    value = metrics.registry.get_sample_value
    assert value("arengine_requests_total", {"model": "speech", "status": "200"}) == 2
    assert value("arengine_requests_total", {"model": "speech", "status": "500"}) == 1
    assert value("arengine_audio_seconds_total", {"model": "speech"}) == 90.0
    assert value("arengine_request_duration_seconds_sum", {"model": "speech"}) == 3.5
    assert value("arengine_audio_duration_seconds_count", {"model": "speech"}) == 2
    bucket = "arengine_audio_duration_seconds_bucket"
    assert value(bucket, {"model": "speech", "le": "30.0"}) == 1
    assert value(bucket, {"model": "speech", "le": "14400.0"}) == 2


def test_a_request_for_several_models_counts_once_per_model(metrics: Metrics) -> None:
    """Each combination was its own series (`model="speech,notes,music"`): unbounded labels."""
    metrics.observe_request("speech,notes", 200, seconds=2.0, audio_s=60.0)
    metrics.observe_request("speech", 200, seconds=1.0, audio_s=30.0)
    value = metrics.registry.get_sample_value
    assert value("arengine_requests_total", {"model": "speech", "status": "200"}) == 2
    assert value("arengine_requests_total", {"model": "notes", "status": "200"}) == 1
    assert value("arengine_audio_seconds_total", {"model": "notes"}) == 60.0
    assert value("arengine_requests_total", {"model": "speech,notes", "status": "200"}) is None


def test_stages_and_queue_waits_are_observed_per_task(metrics: Metrics) -> None:
    for seconds in (0.01, 0.02, 0.03):
        metrics.observe_stage("speech", Stage.INFERENCE, seconds)
    metrics.observe_queue_wait("speech", 0.25)
    value = metrics.registry.get_sample_value
    labels = {"model": "speech", "stage": "inference"}
    assert value("arengine_stage_duration_seconds_count", labels) == 3
    assert value("arengine_stage_duration_seconds_sum", labels) == pytest.approx(0.06)
    assert value("arengine_queue_wait_seconds_sum", {"model": "speech"}) == 0.25


def test_rejections_are_counted_by_declared_code(metrics: Metrics) -> None:
    metrics.reject(ErrorCode.EMPTY_FILE)
    metrics.reject(ErrorCode.EMPTY_FILE)
    value = metrics.registry.get_sample_value
    assert value("arengine_rejected_requests_total", {"reason": "empty_file"}) == 2
    # Every refusal code is a series from the start; nothing else ever becomes one.
    reasons = {
        sample.labels["reason"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "arengine_rejected_requests_total"
    }
    assert reasons == {code.value for code in REJECTION_CODES}
    assert "audio_format_changed" in reasons and "internal_error" not in reasons


def test_a_server_fault_is_not_counted_as_a_refusal(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="500"):
        metrics.reject(ErrorCode.INTERNAL_ERROR)


def test_engine_and_memory_gauges_are_read_at_scrape_time(metrics: Metrics) -> None:
    pool = _Pool()
    metrics.watch(pool)
    value = metrics.registry.get_sample_value
    assert value("arengine_engine_threads") == 4
    assert value("arengine_engine_busy_threads") == 2
    assert value("arengine_queued_segments") == 5
    assert value("arengine_inflight_requests") == 3
    assert value("arengine_held_segments") == 7
    pool.busy = 0
    assert value("arengine_engine_busy_threads") == 0
    resident = value("arengine_process_resident_memory_bytes")
    peak = value("arengine_process_peak_resident_memory_bytes")
    assert resident is not None and peak is not None
    assert 10e6 < resident <= peak


def test_metrics_stay_on_their_own_registry() -> None:
    one, two = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    one.observe_request("speech", 200, seconds=1.0, audio_s=1.0)
    labels = {"model": "speech"}
    assert one.registry.get_sample_value("arengine_audio_seconds_total", labels) == 1
    assert two.registry.get_sample_value("arengine_audio_seconds_total", labels) is None


def _scrape(server: Server) -> Samples:
    response = httpx.get(server.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_recognition_moves_the_counters(server: Server, recording: RecordingFactory) -> None:
    clip = recording("counted.flac", rate=44100)
    before = _scrape(server)
    with server.client() as client, clip.path.open("rb") as body:
        response = client.post("/v1/recognize", files={"file": (clip.path.name, body)})
    assert response.status_code == 200, response.text
    after = _scrape(server)

    def delta(name: str, **labels: str) -> float:
        return _get(after, name, **labels) - _get(before, name, **labels)

    assert delta("arengine_requests_total", model="speech", status="200") == 1
    assert delta("arengine_audio_seconds_total", model="speech") == pytest.approx(
        clip.duration_s, abs=0.01
    )
    assert delta("arengine_audio_duration_seconds_count", model="speech") == 1
    assert delta("arengine_request_duration_seconds_count", model="speech") == 1
    segments = delta("arengine_queue_wait_seconds_count", model="speech")
    # The server cuts 4 s segments: each one is an inference of its own.
    assert segments == pytest.approx(clip.duration_s // 4 + 1, abs=1)
    # One observation per forward call: a call may take a batch of the request's segments.
    inference = delta("arengine_stage_duration_seconds_count", model="speech", stage="inference")
    assert 1 <= inference <= segments
    for stage in STAGES:
        assert delta("arengine_stage_duration_seconds_count", model="speech", stage=stage) >= 1


def test_a_rejected_request_counts_its_reason(server: Server) -> None:
    before = _scrape(server)
    with server.client() as client:
        response = client.post("/v1/recognize", files={"file": ("empty.wav", b"")})
        unknown = client.post("/v1/recognize?model=nope", files={"file": ("a.wav", b"x")})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "empty_file"
    assert unknown.status_code == 404
    after = _scrape(server)
    for reason in ("empty_file", "unknown_model"):
        name = "arengine_rejected_requests_total"
        assert _get(after, name, reason=reason) - _get(before, name, reason=reason) == 1
    # An unknown model is refused before admission: it makes no `model` label.
    assert not any(dict(labels).get("model") == "nope" for _, labels in after)


def test_gauges_and_build_info(server: Server) -> None:
    info = httpx.get(server.url + "/v1/info").json()
    gauges = ("queued_segments", "inflight_requests", "held_segments")

    def idle() -> bool:
        """Nothing queued, in flight or held: once the requests of the tests before (this
        server is shared, and a cancelled one may still be ending) are over."""
        scraped = _scrape(server)
        return all(scraped[(f"arengine_{gauge}", ())] == 0 for gauge in gauges)

    assert wait_until(idle), _scrape(server)
    samples = _scrape(server)
    assert _get(samples, "arengine_engine_threads") == info["engine_threads"]
    assert 0 <= _get(samples, "arengine_engine_busy_threads") <= info["engine_threads"]
    resident = _get(samples, "arengine_process_resident_memory_bytes")
    assert 10e6 < resident <= _get(samples, "arengine_process_peak_resident_memory_bytes")
    build = {
        "version": info["version"],
        "torch_version": info["torch_version"],
        "allocator": info["allocator"],
        "intra_op_threads": str(info["intra_op_threads"]),
        "inter_op_threads": str(info["inter_op_threads"]),
        "engine_threads": str(info["engine_threads"]),
    }
    assert _get(samples, "arengine_build_info", **build) == 1
    jemalloc = {
        name: _get(samples, f"arengine_jemalloc_{name}_bytes")
        for name in ("allocated", "active", "resident", "retained", "mapped")
    }
    if info["allocator"] == "jemalloc":
        assert 0 < jemalloc["allocated"] <= jemalloc["active"] <= jemalloc["mapped"]
        assert jemalloc["resident"] >= jemalloc["active"]
    else:
        assert not any(name.startswith("arengine_jemalloc_") for name, _ in samples)


def test_each_request_logs_one_json_line_with_its_id(
    server: Server, recording: RecordingFactory
) -> None:
    clip = recording("logged.wav")
    with server.client() as client, clip.path.open("rb") as body:
        response = client.post(
            "/v1/recognize",
            files={"file": (clip.path.name, body)},
            headers={"X-Request-ID": "metrics-test-42"},
        )
    assert response.status_code == 200

    def logged() -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for line in server.log.read_text().splitlines()
            if line.startswith("{") and "metrics-test-42" in line
        ]

    # The line is written once the answer is sent: under load the client can read the answer
    # before the server's log reaches the file (0 lines were found), so wait for it.
    assert wait_until(lambda: len(logged()) > 0)
    lines = logged()
    assert len(lines) == 1
    line = lines[0]
    assert line["logger"] == "arengine.access"
    assert line["request_id"] == "metrics-test-42"
    assert line["status"] == 200
    assert line["model"] == "speech"
    assert line["audio_s"] == pytest.approx(clip.duration_s, abs=0.01)
    timings = response.json()["timings"]
    assert line["timings"] == pytest.approx(timings, abs=1e-5)
    assert line["rtf"] == pytest.approx(clip.duration_s / timings["total_s"], rel=0.01)


def test_the_dashboard_shows_live_tags_per_source_picked_by_a_variable() -> None:
    dashboard = json.loads(Path("deploy/grafana/arengine.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "label_values(arengine_live_tags_total, source)" in json.dumps(variables["source"])
    assert variables["source"]["includeAll"] and variables["source"]["multi"]
    live = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel["targets"]
        if "arengine_live_" in target["expr"]
    ]
    assert len(live) >= 2
    for expr in live:
        assert 'source=~"$source"' in expr and "by (source," in expr, expr


def test_the_dashboard_queries_only_metrics_that_exist(metrics: Metrics) -> None:
    dashboard = json.loads(Path("deploy/grafana/arengine.json").read_text())
    metrics.observe_request("speech", 200, seconds=1.0, audio_s=1.0)
    metrics.observe_stage("speech", Stage.INFERENCE, 0.1)
    metrics.observe_queue_wait("speech", 0.1)
    metrics.reject(ErrorCode.EMPTY_FILE)
    metrics.watch(_Pool())
    metrics.observe_live_tag("events", "Glass", 0.5, source="hall")
    exposed = {s.name for family in metrics.registry.collect() for s in family.samples}
    exposed |= {f"arengine_jemalloc_{name}_bytes" for name in JEMALLOC_STATS}
    variables = {v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"}
    assert variables == {"datasource"}
    targets = [target for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(dashboard["panels"]) >= 10
    for target in targets:
        assert target["datasource"]["uid"] == "${datasource}"
        names = set(re.findall(r"arengine_[a-z_]+", target["expr"]))
        assert names and names <= exposed, target["expr"]

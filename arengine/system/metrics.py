"""Prometheus metrics, bound to a registry the application owns; nothing is created on import.

The engine reports through `StageObserver` (which `Metrics` implements); gauges that describe the
engine and the process are read when Prometheus scrapes, so they cost nothing between scrapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from arengine.errors import ErrorCode
from arengine.system.memory import Jemalloc, resident_memory
from arengine.types import Stage

REJECTION_CODES = frozenset(
    code for code in ErrorCode if 400 <= code.status < 500 or code.status == 503
)
"""Values of the `reason` label: the codes answered with a 4xx or 503 (bounded by `ErrorCode`)."""

_STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_WAIT_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_LAG_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
_AUDIO_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800, 14400)


class EngineState(Protocol):
    """What the engine gauges read (`EnginePool` provides it)."""

    @property
    def threads(self) -> int: ...
    @property
    def busy(self) -> int: ...
    @property
    def queued_segments(self) -> int: ...
    @property
    def active_requests(self) -> int: ...
    @property
    def held_segments(self) -> int: ...


class AdmissionState(Protocol):
    """What the admission gauges read (`Admission` provides it)."""

    @property
    def uploading(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def uploading_bytes(self) -> int: ...
    @property
    def upload_bytes_total(self) -> int: ...
    @property
    def listening(self) -> int: ...


class JobsState(Protocol):
    """What the job gauges read (`JobStore` provides it)."""

    def counts(self) -> Mapping[str, int]:
        """Jobs by state (every state, zero included)."""
        ...

    def oldest_active(self) -> float | None:
        """When the oldest job queued or running was accepted (Unix time)."""
        ...

    def size(self) -> int:
        """Bytes of the store's files."""
        ...


class OutboxState(Protocol):
    """What the webhook gauges read (`Outbox` provides it)."""

    def depth(self) -> int:
        """Webhooks not yet delivered nor given up."""
        ...

    def oldest(self) -> float | None:
        """When the oldest of them was made (Unix time)."""
        ...


class PoolState(Protocol):
    """What the database pool's gauge reads (`arengine.db.engine.PoolReading` provides it)."""

    def in_use(self) -> int:
        """Connections checked out of the pool now."""
        ...

    def idle(self) -> int:
        """Connections open in the pool, waiting for use."""
        ...


QUERY_OPERATIONS = ("select", "insert", "update", "delete", "other")
"""Values of `arengine_db_query_seconds`' `operation`: a statement's first word, else other."""
_QUERY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


WEBHOOK_OUTCOMES = ("delivered", "rejected", "refused", "exhausted")
"""Values of `arengine_webhook_deliveries_total`'s `outcome` (`arengine.jobs.webhooks.Outcome`)."""
WEBHOOK_RESULTS = ("2xx", "3xx", "4xx", "5xx", "error")
"""Values of `arengine_webhook_attempts_total`'s `result` (`arengine.jobs.webhooks.Attempt`)."""


class Metrics:
    """Every arengine metric, registered on `registry`.

    >>> from prometheus_client import generate_latest
    >>> metrics = Metrics(CollectorRegistry())
    >>> metrics.observe_request("speech", 200, seconds=0.8, audio_s=60.0)
    >>> b'arengine_audio_seconds_total{model="speech"} 60.0' in generate_latest(metrics.registry)
    True
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "arengine_requests",
            "Recognition requests by model and HTTP status.",
            ["model", "status"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "arengine_request_duration_seconds",
            "Wall time of recognition requests.",
            ["model"],
            buckets=_REQUEST_BUCKETS,
            registry=registry,
        )
        self.audio_seconds = Counter(
            "arengine_audio_seconds",
            "Seconds of audio recognised by successful requests.",
            ["model"],
            registry=registry,
        )
        self.audio_duration = Histogram(
            "arengine_audio_duration_seconds",
            "Duration of the audio of successful requests.",
            ["model"],
            buckets=_AUDIO_BUCKETS,
            registry=registry,
        )
        self.stage_duration = Histogram(
            "arengine_stage_duration_seconds",
            "Time of one engine task (one segment) per stage.",
            ["model", "stage"],
            buckets=_STAGE_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "arengine_queue_wait_seconds",
            "Time a decoded segment waits for an engine thread.",
            ["model"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.gate_skipped = Counter(
            "arengine_gate_skipped_seconds",
            "Seconds of audio a model did not infer because the request's gate (a loudness "
            "model) heard nothing loud there.",
            ["model"],
            registry=registry,
        )
        self.rejected = Counter(
            "arengine_rejected_requests",
            "Requests refused with a 4xx or 503, by error code.",
            ["reason"],
            registry=registry,
        )
        for code in sorted(REJECTION_CODES):  # every series exists from the start, at 0
            self.rejected.labels(code.value)
        self.live_tags = Counter(
            "arengine_live_tags",
            "Tags sent to live streams (WS /v1/listen), by model, label and source (?source=; "
            "past max_sources names, other): what alerts watch.",
            ["model", "label", "source"],
            registry=registry,
        )
        self.live_lag = Histogram(
            "arengine_live_lag_seconds",
            "Audio a live stream had sent past a tag's end when the tag was sent: how late tags "
            "come.",
            ["model", "source"],
            buckets=_LAG_BUCKETS,
            registry=registry,
        )
        self.webhook_deliveries = Counter(
            "arengine_webhook_deliveries",
            "Job webhooks ended, by outcome: delivered (2xx), rejected (a 4xx but 408 and 429), "
            "refused (its host resolved to a refused address), exhausted (every attempt failed).",
            ["outcome"],
            registry=registry,
        )
        self.webhook_attempts = Counter(
            "arengine_webhook_attempts",
            "Job webhook attempts, by result: 2xx, 3xx, 4xx, 5xx, or error (no answer).",
            ["result"],
            registry=registry,
        )
        for outcome in WEBHOOK_OUTCOMES:  # every series exists from the start, at 0
            self.webhook_deliveries.labels(outcome)
        for result in WEBHOOK_RESULTS:
            self.webhook_attempts.labels(result)
        self.mqtt_published = Counter(
            "arengine_mqtt_published_messages",
            "Messages handed to the MQTT broker (mqtt_url).",
            registry=registry,
        )
        self.mqtt_dropped = Counter(
            "arengine_mqtt_dropped_messages",
            "MQTT events dropped, oldest first, past mqtt_max_queued while the broker was away "
            "or slow.",
            registry=registry,
        )
        self.mqtt_connected = Gauge(
            "arengine_mqtt_connected",
            "1 while the MQTT broker (mqtt_url) is connected, else 0.",
            registry=registry,
        )
        self.mqtt_queued = Gauge(
            "arengine_mqtt_queued_messages",
            "MQTT messages waiting for the broker.",
            registry=registry,
        )
        self.db_query = Histogram(
            "arengine_db_query_seconds",
            "Time of each statement sent to the jobs' database (database_url), by operation.",
            ["operation"],
            buckets=_QUERY_BUCKETS,
            registry=registry,
        )
        self.lease_takeovers = Counter(
            "arengine_job_lease_takeovers",
            "Running jobs this server queued again because their replica stopped renewing its "
            "lease (job_lease_s): each is run again from its kept scores.",
            registry=registry,
        )
        self.build = Info("arengine_build", "Versions and thread settings.", registry=registry)
        registry.register(ProcessMemoryCollector())

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        self.stage_duration.labels(model, stage.value).observe(seconds)

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        self.queue_wait.labels(model).observe(seconds)

    def observe_skipped(self, model: str, seconds: float) -> None:
        self.gate_skipped.labels(model).inc(seconds)

    def observe_request(
        self, model: str, status: int, seconds: float, audio_s: float | None = None
    ) -> None:
        """One recognition request; `audio_s` is the audio's duration when it succeeded.

        A request for several models (`speech,notes`) counts for each of them: one series per
        model, never one per combination (their number grows with every model added)."""
        for name in model.split(","):
            self.requests.labels(name, str(status)).inc()
            self.request_duration.labels(name).observe(seconds)
            if audio_s is not None:
                self.audio_seconds.labels(name).inc(audio_s)
                self.audio_duration.labels(name).observe(audio_s)

    def observe_live_tag(self, model: str, label: str, lag_s: float, source: str = "") -> None:
        """A tag sent to a live stream `lag_s` audio seconds after its end had arrived.

        The label values are bounded by the loaded models' vocabularies, the sources by
        `max_sources` (`arengine.live.sources.SourceLabels`)."""
        self.live_tags.labels(model, label, source).inc()
        self.live_lag.labels(model, source).observe(max(lag_s, 0.0))

    def observe_mqtt(self, published: int = 0, dropped: int = 0) -> None:
        """Messages handed to the MQTT broker, and messages dropped (the oldest, past
        `mqtt_max_queued`, while the broker was away or slow)."""
        self.mqtt_published.inc(published)
        self.mqtt_dropped.inc(dropped)

    def reject(self, code: ErrorCode) -> None:
        """A request refused with error `code` (a 4xx or 503)."""
        if code not in REJECTION_CODES:
            raise ValueError(f"{code} is answered with {code.status}, not counted as a refusal")
        self.rejected.labels(code.value).inc()

    def observe_webhook_attempt(self, result: str) -> None:
        """One webhook attempt: `result` is one of `WEBHOOK_RESULTS`."""
        self.webhook_attempts.labels(result).inc()

    def observe_webhook_outcome(self, outcome: str) -> None:
        """A webhook ended: `outcome` is one of `WEBHOOK_OUTCOMES`."""
        self.webhook_deliveries.labels(outcome).inc()

    def watch_webhooks(self, outbox: OutboxState) -> None:
        """Report the webhook outbox's gauges."""
        self.registry.register(OutboxCollector(outbox))

    def observe_query(self, statement: str, seconds: float) -> None:
        """A statement ran on the jobs' database in `seconds`."""
        first = statement.lstrip().split(None, 1)[0].lower() if statement.strip() else ""
        operation = first if first in QUERY_OPERATIONS else "other"
        self.db_query.labels(operation).observe(seconds)

    def observe_takeovers(self, count: int) -> None:
        """`count` jobs of silent replicas were queued again."""
        self.lease_takeovers.inc(count)

    def watch_pool(self, pool: PoolState) -> None:
        """Report the database pool's connections."""
        self.registry.register(PoolCollector(pool))

    def watch_jobs(self, jobs: JobsState) -> None:
        """Report the job store's gauges."""
        self.registry.register(JobsCollector(jobs))

    def watch_models(self, held: Callable[[], Mapping[str, int]]) -> None:
        """Report what each model holds in memory besides its weights (`held()`: by model, read
        at each scrape)."""
        self.registry.register(HeldCollector(held))

    def watch(
        self,
        engine: EngineState,
        jemalloc: Jemalloc | None = None,
        admission: AdmissionState | None = None,
    ) -> None:
        """Report `engine`'s gauges, and jemalloc's and `admission`'s when they are given."""
        self.registry.register(EngineCollector(engine))
        if admission is not None:
            self.registry.register(AdmissionCollector(admission))
        if jemalloc is not None:
            self.registry.register(JemallocCollector(jemalloc))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class EngineCollector(Collector):
    """Engine gauges, read from the pool at scrape time."""

    def __init__(self, engine: EngineState) -> None:
        self._engine = engine

    def collect(self) -> Iterable[Metric]:
        engine = self._engine
        yield _gauge("arengine_engine_threads", "Engine worker threads.", engine.threads)
        yield _gauge("arengine_engine_busy_threads", "Engine threads running a task.", engine.busy)
        yield _gauge(
            "arengine_queued_segments",
            "Decoded segments waiting for inference.",
            engine.queued_segments,
        )
        yield _gauge(
            "arengine_inflight_requests",
            "Requests admitted to the engine and not finished.",
            engine.active_requests,
        )
        yield _gauge(
            "arengine_held_segments",
            "Decoded segments held in memory, not yet post-processed.",
            engine.held_segments,
        )


class AdmissionCollector(Collector):
    """Requests uploading and in the engine, and the bytes uploads have received."""

    def __init__(self, admission: AdmissionState) -> None:
        self._admission = admission

    def collect(self) -> Iterable[Metric]:
        admission = self._admission
        yield _gauge(
            "arengine_uploading_requests",
            "Recognition requests receiving their upload.",
            admission.uploading,
        )
        yield _gauge(
            "arengine_uploading_bytes",
            "Bytes received so far by the uploads in progress.",
            admission.uploading_bytes,
        )
        yield CounterMetricFamily(
            "arengine_upload_bytes",
            "Bytes received by uploads, finished or not.",
            value=admission.upload_bytes_total,
        )
        yield _gauge(
            "arengine_live_streams",
            "Live streams open (WS /v1/listen).",
            admission.listening,
        )
        yield _gauge(
            "arengine_pending_requests",
            "Recognition requests uploaded and not yet answered (queued or processing).",
            admission.pending,
        )


class JobsCollector(Collector):
    """Jobs by state, the queue's length, the oldest waiting job's age and the store's size,
    read from the job store at scrape time."""

    def __init__(self, jobs: JobsState, clock: Callable[[], float] = time.time) -> None:
        self._jobs = jobs
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        counts = self._jobs.counts()
        by_state = GaugeMetricFamily(
            "arengine_jobs", "Jobs in the store by state.", labels=["state"]
        )
        for state, count in counts.items():
            by_state.add_metric([str(state)], count)
        yield by_state
        yield _gauge("arengine_jobs_queued", "Jobs waiting for a runner.", counts.get("queued", 0))
        oldest = self._jobs.oldest_active()
        age = 0.0 if oldest is None else max(self._clock() - oldest, 0.0)
        yield _gauge(
            "arengine_jobs_oldest_age_seconds",
            "Age of the oldest job queued or running (0 when none is).",
            age,
        )
        size = self._jobs.size()
        yield _gauge("arengine_jobs_storage_bytes", "Bytes of the job store's files.", size)


class PoolCollector(Collector):
    """The database pool's connections in use and idle, read at scrape time."""

    def __init__(self, pool: PoolState) -> None:
        self._pool = pool

    def collect(self) -> Iterable[Metric]:
        connections = GaugeMetricFamily(
            "arengine_db_pool_connections",
            "Connections of this server's pool to the jobs' database, by state: in_use (a "
            "statement or transaction holds it) or idle (open, waiting).",
            labels=["state"],
        )
        connections.add_metric(["in_use"], self._pool.in_use())
        connections.add_metric(["idle"], self._pool.idle())
        yield connections


class OutboxCollector(Collector):
    """The webhook outbox's depth and its oldest webhook's age, read at scrape time."""

    def __init__(self, outbox: OutboxState, clock: Callable[[], float] = time.time) -> None:
        self._outbox = outbox
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        yield _gauge(
            "arengine_webhook_outbox_depth",
            "Job webhooks waiting in the outbox (not yet delivered nor given up).",
            self._outbox.depth(),
        )
        oldest = self._outbox.oldest()
        age = 0.0 if oldest is None else max(self._clock() - oldest, 0.0)
        yield _gauge(
            "arengine_webhook_outbox_oldest_age_seconds",
            "Age of the oldest webhook in the outbox, from its job's end (0 when none is).",
            age,
        )


class HeldCollector(Collector):
    """`arengine_model_held_bytes{model}`: a fingerprint model's library in memory."""

    def __init__(self, held: Callable[[], Mapping[str, int]]) -> None:
        self._held = held

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "arengine_model_held_bytes",
            "Memory a model holds besides its weights: a fingerprint model's library.",
            labels=["model"],
        )
        for model, held in sorted(self._held().items()):
            family.add_metric([model], held)
        yield family


class ProcessMemoryCollector(Collector):
    """Resident set size and its peak, from /proc/self/status."""

    def collect(self) -> Iterator[Metric]:
        memory = resident_memory()
        for key, what in [("resident", "Resident set size"), ("peak_resident", "Peak RSS")]:
            if key in memory:
                yield _gauge(f"arengine_process_{key}_memory_bytes", f"{what}.", memory[key])


class JemallocCollector(Collector):
    """jemalloc's allocated, active, resident, retained and mapped bytes."""

    def __init__(self, jemalloc: Jemalloc) -> None:
        self._jemalloc = jemalloc

    def collect(self) -> Iterator[Metric]:
        for name, value in self._jemalloc.stats().items():
            yield _gauge(f"arengine_jemalloc_{name}_bytes", f"jemalloc stats.{name}.", value)

"""All of arengine's settings, each declared once in its section: environment (`ARENGINE_*`,
flat or nested), then CLI flags.

The limits that are not settings (no deployment needs another value) are declared here too, as
named constants after the class: every limit has one place, and the error descriptions
(`arengine/errors.py`), messages and README quote these declarations.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

HTTP_PARSERS = ("httptools", "h11")
"""The HTTP/1.1 parsers `ServerSettings.http_parser` takes (`arengine/http/protocol.py`); the
first is the default."""

ENV_PREFIX = "ARENGINE_"
"""What every variable's name starts with, flat (`ARENGINE_PORT`) or nested
(`ARENGINE_SERVER__PORT`)."""


class _Section(BaseModel):
    """A section of the settings; its fields keep their flat names (`ARENGINE_PORT`,
    `Settings(port=9000)`) beside the nested ones (`ARENGINE_SERVER__PORT`)."""

    # hide_input_in_errors: a refusal must not print what came in, keys and passwords (an
    # mqtt_url's user:pass@) among it.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class ServerSettings(_Section):
    """Where and how the server listens, stops and logs."""

    host: str = Field(
        "127.0.0.1", description="Interface to bind; anything but loopback is an explicit choice."
    )
    port: int = Field(8000, ge=1, le=65535, description="TCP port to listen on.")
    http_parser: str = Field(
        HTTP_PARSERS[0],
        pattern=f"^({'|'.join(HTTP_PARSERS)})$",
        description="HTTP/1.1 parser: httptools (llhttp, in C: the least time under the GIL per body byte, and refuses request-smuggling shapes h11 accepts) or h11 (pure Python); both get the same connection limits.",
    )
    upload_dir: Path | None = Field(
        None, description="Directory for spooled uploads; default: the system temporary directory."
    )
    shutdown_delay_s: float = Field(
        2.0,
        ge=0,
        le=300,
        description="On SIGTERM, seconds of 503 on /readyz before the listener closes (lets load balancers drain).",
    )
    shutdown_timeout_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="On SIGTERM, seconds in-flight requests get to finish before the process exits.",
    )
    jemalloc: bool = Field(
        True,
        description="Re-execute `serve` with the system jemalloc preloaded when it is installed.",
    )
    malloc_conf: str = Field(
        "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000",
        description="MALLOC_CONF given to jemalloc when arengine preloads it.",
    )
    log_level: str = Field(
        "info",
        pattern="^(critical|error|warning|info|debug)$",
        description="Log level: critical, error, warning, info or debug.",
    )


class LimitSettings(_Section):
    """What a request or a connection may be: sizes, counts, rates and deadlines."""

    max_upload_bytes: int = Field(
        2 * 1024**3, ge=1024, description="Largest accepted upload, in bytes (413 above it)."
    )
    max_duration_s: float = Field(
        4 * 3600.0,
        gt=0,
        description="Longest accepted recording, in seconds, checked from the header and while decoding (413 above it).",
    )
    max_channels: int = Field(
        8, ge=1, le=64, description="Most audio channels accepted (422 above it)."
    )
    min_sample_rate: int = Field(
        8000, ge=1000, description="Lowest accepted sample rate in Hz (422 below it)."
    )
    max_sample_rate: int = Field(
        192000, le=768000, description="Highest accepted sample rate in Hz (422 above it)."
    )
    max_uploading_requests: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Recognition requests receiving their upload at once, counted apart from the engine's so that slow uploads cannot starve it; beyond it 503 with Retry-After.",
    )
    max_pending_requests: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Recognition requests uploaded and in the engine at once (queued or processing); beyond it 503 with Retry-After, before the body is read.",
    )
    request_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="Deadline of a recognition request in seconds, from its first byte: headers, upload and processing (408 while uploading, 504 after); clients may ask for less with timeout_s.",
    )
    render_timeout_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Longest a POST /v1/render may work, in seconds, from its body's end (waiting for a turn included); past it the render stops and answers 504 render_timeout.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Longest wait for the next chunk of a request body, in seconds (408 past it).",
    )
    min_upload_bytes_per_s: int = Field(
        16 * 1024,
        ge=0,
        le=1024**3,
        description="Slowest accepted average upload rate in bytes per second, once upload_grace_s has passed (408 below it; 0 turns the check off).",
    )
    upload_grace_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="Seconds an upload may take before min_upload_bytes_per_s applies.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Longest time for a request line and headers to arrive, from the connection's opening or the request's first byte (408 and the connection closed past it).",
    )
    max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        le=1024**2,
        description="Largest request line plus headers in bytes, however they arrive (431 and the connection closed above it).",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Client connections open at once; beyond it a new connection gets 503 and is closed. Lowered at start-up to fit the open-file limit (RLIMIT_NOFILE).",
    )


class EngineSettings(_Section):
    """The engine: its threads, its models and how audio reaches them."""

    engine_threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="Engine worker threads; 0 means the CPUs available to the process (affinity mask and cgroup quota).",
    )
    intra_op_threads: int = Field(
        1,
        ge=1,
        le=1024,
        description="LibTorch intra-op threads (1 avoids oversubscription; higher only for experiments).",
    )
    inter_op_threads: int = Field(
        1,
        ge=1,
        le=1024,
        description="LibTorch inter-op threads (1 avoids oversubscription; higher only for experiments).",
    )
    models_dir: Path | None = Field(
        None,
        description="Folder of model sub-folders, each with a manifest.toml; default: the built-in models (installed with the package; the repository's models/).",
    )
    models: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.,-]+$",
        description="Comma-separated names of the models to load; default: every model in the folder.",
    )
    segment_s: float | None = Field(
        None,
        ge=1.0,
        le=600.0,
        description="Segment length in seconds for every model, overriding the manifests (for experiments).",
    )
    segments_ahead: int = Field(
        4,
        ge=1,
        le=256,
        description="Decoded segments a request may hold ahead of the workers; bounds memory per request.",
    )
    parallel_decoding: bool = Field(
        True,
        description="Decode a long MP3, M4A/MP4, FLAC or Opus-in-WebM upload (at least two minutes by its header) in parts (segments_ahead // 2, each at least a minute), each by its own child process with decode_in_child's chain and checks, all at once, while the request is the only one in the engine; beside another request, one child. Off, or with decode_in_child off: one decoder per request.",
    )
    decode_in_child: bool = Field(
        True,
        description="Decode compressed uploads (every format FFmpeg decodes) in a child process forked per request, which writes the mono samples to the server through a pipe: the per-packet Python runs off the server's GIL, the samples and every check are the in-process decoder's, and a crash ends that request alone. Off: in the server's process (PyAV).",
    )
    read_while_uploading: bool = Field(
        True,
        description="Start recognising a PCM WAV of declared length once its header has arrived, each segment once its bytes have (the response still comes after the whole body). Off: every upload is recognised once complete.",
    )


class JobSettings(_Section):
    """The job store: where jobs are kept, how many run, how long they stay."""

    data_dir: Path | None = Field(
        None,
        description="Directory of the job store (jobs.sqlite3, uploads/, results/): jobs survive restarts there. Unset turns POST /v1/jobs and the other job endpoints off.",
    )
    max_running_jobs: int = Field(
        1,
        ge=1,
        le=64,
        description="Jobs run on the engine at once; the rest wait queued. Keep it below engine_threads' worth of work so interactive requests keep their share.",
    )
    job_threads: int = Field(
        0,
        ge=0,
        le=1024,
        description="Engine threads the running jobs may hold at once; the others stay free for requests, which would otherwise wait for a job's segment to end (seconds with a heavy model). 0 means engine threads - 1, at least 1; engine threads gives jobs an idle server's every thread.",
    )
    max_queued_jobs: int = Field(
        100,
        ge=1,
        le=100_000,
        description="Jobs queued or running at once; beyond it POST /v1/jobs answers 503 with Retry-After.",
    )
    replica_name: str | None = Field(
        None,
        max_length=200,
        description="This server's name among the replicas sharing a data_dir (default: host name and port): at start it takes up again the jobs it was running when it stopped.",
    )
    job_lease_s: float = Field(
        30.0,
        ge=2,
        le=3600,
        description="A running job whose server has not reported for this long is queued again, for any replica sharing the data_dir to take over.",
    )
    job_retention_s: float = Field(
        7 * 86_400.0,
        ge=60,
        le=10 * 365 * 86_400,
        description="Seconds an ended job (done or failed) is kept, with its result and scores, after it ended; then it is removed from the database and the disk.",
    )
    job_storage_bytes: int = Field(
        50 << 30,
        ge=1 << 20,
        le=1 << 50,
        description="Disk budget of the job store's files (uploads, results, kept scores): past it the ended jobs whose outcome has been read (result fetched, error seen) are removed, oldest first. Jobs queued, running or not yet read are never removed before job_retention_s; while they alone pass it, POST /v1/jobs answers 507 job_storage_full.",
    )


class DatabaseSettings(_Section):
    """The database that the replicas share."""

    database_url: SecretStr | None = Field(
        None,
        description="Database of the jobs (and their leases and events) that every replica shares, and on PostgreSQL of every fingerprint model's references too (on SQLite each model folder keeps its library file): sqlite:///PATH or postgresql://USER@HOST:PORT/NAME (psycopg 3); or database_url_file. Default: sqlite:///DATA_DIR/jobs.sqlite3. A secret: never logged nor shown, its password hidden in every message; prefer ARENGINE_DATABASE_PASSWORD (or its file, or libpq's PGPASSWORD) to a password in a flag.",
    )
    database_url_file: Path | None = Field(
        None,
        description="File holding database_url (a mounted secret); its surrounding whitespace is ignored.",
    )
    database_password: SecretStr | None = Field(
        None,
        description="Password of database_url's user, when the URL holds none (environment only, never a flag nor logged); or database_password_file.",
    )
    database_password_file: Path | None = Field(
        None,
        description="File holding database_password (a mounted secret); its surrounding whitespace is ignored.",
    )
    database_pool_size: int = Field(
        5,
        ge=1,
        le=100,
        description="Connections to the database each server keeps open (up to as many again while busy); PostgreSQL's max_connections must hold every replica's share.",
    )
    database_migrate: bool = Field(
        True,
        description="Bring the database's schema up to date at start (Alembic migrations); off: an operator runs `arengine db upgrade` first, and a server refuses to start on an older schema.",
    )


class WebhookSettings(_Section):
    """The webhooks sent when a job ends."""

    webhook_url: str | None = Field(
        None,
        max_length=2048,
        description="Default callback_url of every job created without one (there are no per-key settings): the server POSTs there when the job ends. Needs webhook_secret.",
    )
    webhook_secret: SecretStr | None = Field(
        None,
        description="Secret that signs webhooks (Standard Webhooks: whsec_ and base64 of 24 to 64 random bytes; environment only, never a flag nor logged); or webhook_secret_file. Unset turns callback_url off (422).",
    )
    webhook_secret_file: Path | None = Field(
        None,
        description="File holding webhook_secret (a mounted secret); its surrounding whitespace is ignored.",
    )
    webhook_allowed_hosts: str | None = Field(
        None,
        max_length=8192,
        description="Comma-separated hosts a callback_url may name: names (a.example.com), wildcards (*.example.com, * for any) and addresses or networks (10.1.0.0/16). Loopback, link-local, private, shared (CGNAT), multicast, unspecified, reserved and cloud metadata addresses are refused, checked on the resolved address at creation and again at each delivery, unless a network here holds them. Default: any public host.",
    )
    webhook_max_attempts: int = Field(
        12,
        ge=1,
        le=100,
        description="Attempts a webhook gets before it is given up (a 2xx ends it sooner; a 4xx other than 408 and 429 stops it).",
    )
    webhook_backoff_s: float = Field(
        10.0,
        ge=0.001,
        le=3600,
        description="Wait after a webhook's first failed attempt, in seconds; it doubles with each attempt (up to webhook_max_backoff_s), less a random part of up to half (jitter). The defaults retry for about 3.5 hours.",
    )
    webhook_max_backoff_s: float = Field(
        3600.0,
        ge=0.001,
        le=86_400,
        description="Longest wait between two attempts of a webhook, in seconds.",
    )
    webhook_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Connect timeout, and read timeout, of a webhook attempt in seconds (the whole attempt ends within three times it); past either the attempt failed and is retried.",
    )

    @model_validator(mode="after")
    def _webhook_signed(self) -> WebhookSettings:
        if self.webhook_url is not None and (
            self.webhook_secret is None and self.webhook_secret_file is None
        ):
            raise ValueError(
                "webhook_url needs a secret to sign its webhooks: set ARENGINE_WEBHOOK_SECRET "
                "or webhook_secret_file"
            )
        return self


class LiveSettings(_Section):
    """Live streams (WS /v1/listen)."""

    max_listen_streams: int = Field(
        16,
        ge=1,
        le=10_000,
        description="Live streams (WS /v1/listen) open at once; beyond it a new one is closed with 4503 too_many_listeners.",
    )
    listen_segment_s: float = Field(
        0.5,
        ge=0.1,
        le=30.0,
        description="Segment length of a live stream in seconds (rounded to each model's step): shorter gives tags sooner and costs more per second of audio (each segment repeats its model's pre-roll).",
    )
    listen_buffer_s: float = Field(
        10.0,
        ge=1.0,
        le=600.0,
        description="Audio seconds a live stream may have sent ahead of recognition; past it the server reads no more until the engine catches up (back-pressure).",
    )
    listen_max_duration_s: float = Field(
        4 * 3600.0,
        gt=0,
        le=7 * 86_400,
        description="Longest live stream in audio seconds; then its tags are sent and it is closed with 4413 listen_too_long (spooled to upload_dir meanwhile: 115 MB an hour at 16 kHz, 16 bits).",
    )
    listen_idle_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Longest wait for a live stream's next message in seconds; past it the stream is closed with 4408 listen_idle.",
    )
    listen_max_message_bytes: int = Field(
        1024**2,
        ge=1024,
        le=64 * 1024**2,
        description="Largest WebSocket message in bytes; a larger one closes the connection with 1009 (message too big).",
    )
    max_sources: int = Field(
        100,
        ge=1,
        le=10_000,
        description='Live stream sources (?source=) the arengine_live_* metrics name; the names seen after the first this many are counted as source="other" (a client inventing names cannot grow the series).',
    )


class MqttSettings(_Section):
    """The MQTT broker that live streams' detections are published to."""

    mqtt_url: str | None = Field(
        None,
        max_length=2048,
        pattern=r"^mqtts?://",
        description="MQTT broker that live streams' detections are published to: mqtt://host:1883, or mqtts://host:8883 for TLS (user:pass@ may come in it, but mqtt_username and ARENGINE_MQTT_PASSWORD keep them off the command line; never logged). Unset turns MQTT off.",
    )
    mqtt_username: str | None = Field(
        None, max_length=256, description="MQTT user name (instead of one in mqtt_url)."
    )
    mqtt_password: SecretStr | None = Field(
        None,
        description="MQTT password (environment only, never a flag nor logged); or mqtt_password_file.",
    )
    mqtt_password_file: Path | None = Field(
        None,
        description="File holding mqtt_password (a mounted secret); its surrounding whitespace is ignored.",
    )
    mqtt_ca_file: Path | None = Field(
        None,
        description="CA certificates (PEM) that an mqtts:// broker's certificate is checked against; unset: the system's.",
    )
    mqtt_topic_prefix: str = Field(
        "arengine",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="First level of the MQTT topics: <prefix>/<source>/<model>/<label> (events), .../state (ON/OFF), <prefix>/<source>/availability, <prefix>/status.",
    )
    mqtt_labels: str | None = Field(
        None,
        max_length=8192,
        description="Labels separated by ';' (Glass;Smoke detector, smoke alarm) that get an ON/OFF state topic and a Home Assistant binary sensor (announced when a stream of a source starts); unset: every label, each announced at its first detection. Events are published for every tag either way.",
    )
    mqtt_hold_s: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="Seconds a label's state stays ON after its last tag ends (then OFF, unless it was heard again).",
    )
    mqtt_discovery: bool = Field(
        True,
        description="Publish Home Assistant MQTT discovery: a binary sensor per source and watched label.",
    )
    mqtt_discovery_prefix: str = Field(
        "homeassistant",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="Home Assistant's discovery prefix.",
    )
    mqtt_max_queued: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Events kept for the MQTT broker while it is away or slow; past it the oldest are dropped and counted (arengine_mqtt_dropped_messages_total): recognition never waits for the broker.",
    )
    mqtt_reconnect_max_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="Longest wait between two attempts to reconnect to the MQTT broker, in seconds (the wait doubles from 1 s).",
    )

    @model_validator(mode="after")
    def _mqtt_broker(self) -> MqttSettings:
        if self.mqtt_password is not None and self.mqtt_password_file is not None:
            raise ValueError("set mqtt_password or mqtt_password_file, not both")
        if self.mqtt_url is not None:
            # A wrong URL or credentials stop `serve` at once, with the message, rather than in
            # the app's start.
            Broker.of(self)
        return self


class SecuritySettings(_Section):
    """Who may call the server: API keys, CORS and accepted host names."""

    api_keys: str | None = Field(
        None,
        description="Comma-separated API keys (environment only, never a flag: command lines are visible to every user); when set, every endpoint but /healthz, /readyz and (with metrics_public) /metrics needs Authorization: Bearer <key>. Unset turns authentication off; set but empty, or with an empty entry, refuses to start.",
    )
    admin_keys: str | None = Field(
        None,
        description="Comma-separated administrator keys (environment only, as api_keys), apart from the users' keys: POST and DELETE /v1/models/{name}/references need Authorization: Bearer <admin key> (a user's key gets 403); an admin key also passes where a user key is asked for. Unset: references change only with `arengine references`.",
    )
    metrics_public: bool = Field(
        True,
        description="Serve /metrics without an API key (for Prometheus inside a private network).",
    )
    cors_origins: str | None = Field(
        None, description="Comma-separated origins allowed by CORS; CORS is off when unset."
    )
    allowed_hosts: str | None = Field(
        None,
        description="Comma-separated Host header names accepted (any port; * for any), against DNS rebinding; default: localhost, 127.0.0.1 and ::1 when bound to loopback, else any.",
    )

    @field_validator("api_keys", "admin_keys")
    @classmethod
    def _strict_keys(cls, value: str | None, info: ValidationInfo) -> str | None:
        variable = f"ARENGINE_{(info.field_name or '').upper()}"
        return None if value is None else ",".join(parse_api_keys(value, variable))

    @model_validator(mode="after")
    def _keys_apart(self) -> SecuritySettings:
        if set(self.api_key_list()) & set(self.admin_key_list()):
            raise ValueError(
                "a key is both in ARENGINE_API_KEYS and ARENGINE_ADMIN_KEYS: administrator "
                "keys are kept apart from users' keys, so give each its own"
            )
        return self

    def api_key_list(self) -> tuple[str, ...]:
        """The configured API keys; empty when authentication is off."""
        return () if self.api_keys is None else tuple(self.api_keys.split(","))

    def admin_key_list(self) -> tuple[str, ...]:
        """The administrator keys; empty when references cannot be changed over HTTP."""
        return () if self.admin_keys is None else tuple(self.admin_keys.split(","))


SECTIONS: dict[str, type[_Section]] = {
    "server": ServerSettings,
    "limits": LimitSettings,
    "engine": EngineSettings,
    "jobs": JobSettings,
    "database": DatabaseSettings,
    "webhooks": WebhookSettings,
    "live": LiveSettings,
    "mqtt": MqttSettings,
    "security": SecuritySettings,
}
"""The sections in the order `arengine serve --help` and the settings reference show them."""

FIELDS: dict[str, str] = {
    name: section for section, model in SECTIONS.items() for name in model.model_fields
}
"""Each setting's (flat) name and the section it is in."""


class Settings(BaseSettings):
    """Server, engine and limit settings in sections; `arengine serve --help` lists them as flags,
    grouped the same way.

    A setting keeps its flat names (`ARENGINE_PORT`, `Settings(port=9000)`) beside the nested
    ones (`ARENGINE_SERVER__PORT`, `Settings(server={"port": 9000})`); both forms of one setting
    with different values are refused.

    >>> Settings(port=9000).server.port
    9000
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
        hide_input_in_errors=True,
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    live: LiveSettings = Field(default_factory=LiveSettings)
    mqtt: MqttSettings = Field(default_factory=MqttSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)

    def __init__(self, **values: Any) -> None:
        """Flat settings (`port=9000`) or sections (`server={"port": 9000}`), which `_nest` joins;
        declared so that type checkers take the flat names too."""
        super().__init__(**values)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keywords (the CLI's flags among them) win over the environment, as before the sections.
        if isinstance(init_settings, InitSettingsSource):
            init_settings = InitSettingsSource(settings_cls, _nest(init_settings.init_kwargs))
        flat = _FlatEnvironment(settings_cls)
        return init_settings, env_settings, flat, dotenv_settings, file_secret_settings


def _nest(given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` with each flat setting (`port=9000`) moved into its section (`server`); refuses a
    setting given both ways with different values.

    >>> _nest({"port": 9000, "server": {"host": "::1"}})
    {'server': {'host': '::1', 'port': 9000}}
    """
    nested = {key: _given(value) for key, value in given.items() if key not in FIELDS}
    for name, value in given.items():
        if name not in FIELDS:
            continue
        section = nested.setdefault(FIELDS[name], {})
        if not isinstance(section, dict):
            raise SettingsError(f"{FIELDS[name]} is a section: give it as a mapping of settings")
        if name in section and section[name] != value:
            raise SettingsError(
                f"{name} is given twice, flat and in {FIELDS[name]}, with different values: "
                "give one"
            )
        section[name] = value
    return nested


def _given(value: Any) -> Any:
    """A section's given fields as a mapping, so that flat settings can join them."""
    if isinstance(value, _Section):
        return {name: getattr(value, name) for name in value.model_fields_set}
    return dict(value) if isinstance(value, Mapping) else value


class _FlatEnvironment(PydanticBaseSettingsSource):
    """The flat variables (`ARENGINE_PORT`) in their sections; one also set nested
    (`ARENGINE_SERVER__PORT`) with another value is refused, naming both."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads every section at once

    def __call__(self) -> dict[str, Any]:
        environ = {name.upper(): value for name, value in os.environ.items()}
        nested: dict[str, dict[str, str]] = {}
        for name, section in FIELDS.items():
            flat = f"{ENV_PREFIX}{name.upper()}"
            if flat not in environ:
                continue
            other = f"{ENV_PREFIX}{section.upper()}__{name.upper()}"
            if environ.get(other, environ[flat]) != environ[flat]:
                raise SettingsError(
                    f"{flat} and {other} are one setting with different values: set one"
                )
            nested.setdefault(section, {})[name] = environ[flat]
        return nested


@dataclass(frozen=True, slots=True)
class Broker:
    """Where to connect and as whom; `str()` never shows the credentials.

    >>> b = Broker.parse("mqtts://ha:secret@broker.lan")
    >>> str(b), b.port, b.username
    ('mqtts://broker.lan:8883', 8883, 'ha')
    """

    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None

    @classmethod
    def parse(cls, url: str) -> Broker:
        parts = urlsplit(url)
        if parts.scheme not in ("mqtt", "mqtts"):
            raise ValueError("mqtt_url must start with mqtt:// or mqtts:// (TLS)")
        if not parts.hostname:
            raise ValueError("mqtt_url names no host: mqtt://host:1883")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError("mqtt_url is a broker's address only: mqtt[s]://[user:pass@]host:port")
        tls = parts.scheme == "mqtts"
        try:
            port = parts.port or (8883 if tls else 1883)
        except ValueError:
            raise ValueError("mqtt_url's port is not a number from 1 to 65535") from None
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        return cls(parts.hostname, port, tls, username, password)

    @classmethod
    def of(cls, mqtt: MqttSettings) -> Broker | None:
        """The broker `mqtt` names, credentials from the URL, the settings or the file."""
        if mqtt.mqtt_url is None:
            return None
        broker = cls.parse(mqtt.mqtt_url)
        username, password = broker.username, broker.password
        if mqtt.mqtt_username is not None:
            if username is not None:
                raise ValueError("give the MQTT user in mqtt_url or in mqtt_username, not both")
            username = mqtt.mqtt_username
        secret = mqtt.mqtt_password
        file = mqtt.mqtt_password_file
        if (secret is not None or file is not None) and password is not None:
            raise ValueError(
                "give the MQTT password in mqtt_url or ARENGINE_MQTT_PASSWORD, not both"
            )
        if secret is not None:
            password = secret.get_secret_value()
        elif file is not None:
            password = Path(file).read_text().strip()
        if password is not None and username is None:
            raise ValueError("an MQTT password needs a user name (mqtt_username)")
        return cls(broker.host, broker.port, broker.tls, username, password, mqtt.mqtt_ca_file)

    def __str__(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"


def parse_api_keys(raw: str, variable: str = "ARENGINE_API_KEYS") -> tuple[str, ...]:
    """`raw`'s comma-separated keys, each stripped; refuses what was clearly meant to set keys
    but sets none, since an empty list would start a server nobody can use (or an open one).

    >>> parse_api_keys("alpha-key-123, beta-key-456")
    ('alpha-key-123', 'beta-key-456')
    """
    keys = tuple(entry.strip() for entry in raw.split(","))
    for position, key in enumerate(keys, 1):
        if not key:
            raise ValueError(
                f"API key {position} of {len(keys)} is empty: give comma-separated non-empty "
                f"keys, or leave {variable} unset"
            )
        if not all("!" <= char <= "~" for char in key):
            raise ValueError(
                f"API key {position} of {len(keys)} has a space, a control or a non-ASCII "
                f"character: keys in {variable} are printable ASCII without spaces"
            )
    return tuple(dict.fromkeys(keys))


MAX_MULTIPART_PARTS = 16
"""Parts a multipart body may have: the `file` part and a few form fields."""

MAX_FIELD_BYTES = 64 << 10
"""Bytes a multipart part other than `file` may hold (name, headers and value)."""

MAX_RESULT_BYTES = 32 << 20
"""The largest result `POST /v1/render` takes: a 2-hour notes transcription is a few MB."""
MAX_RESULT_TAGS = 200_000
"""The most tags a result `POST /v1/render` takes: the slowest writers (EAF, TextGrid) take ~15 s
for them."""

MAX_STREAMS = 64
"""Streams a container may have: a phone or video recording has a few; hundreds is an attack on
the demuxer's and the analyser's memory."""

MAX_PACKET_BYTES = 16 << 20
"""Float32 bytes one compressed packet may decode to (a real one: well under 1 MiB)."""

MAX_METADATA_DEPTH = 16
"""How deep a reference's `metadata` may nest (the object itself is level 1): a few fields, not
a document. Nested some hundreds deep, JSON is read back but cannot be answered (every listing of
the library failed), and deeper still it is not even read."""

MAX_STREAM_TEXT_BYTES = 4 << 10
"""Bytes a live stream's text message (its opening, its end) may have: both take a few dozen."""

MAX_STREAM_TEXT_DEPTH = 4
"""Nesting a live stream's text message may have: both are flat objects; deeper JSON is refused
before it is parsed, so no message can make the parser recurse."""


def size_text(size: int) -> str:
    """A byte count as messages and docs write it.

    >>> size_text(MAX_RESULT_BYTES), size_text(MAX_FIELD_BYTES), size_text(1000)
    ('32 MiB', '64 KiB', '1000 bytes')
    """
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"

"""All of arengine's settings, each declared once: environment (`ARENGINE_*`), then CLI flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Server, engine and limit settings; `arengine serve --help` lists them as flags.

    >>> Settings(port=9000).port
    9000
    """

    model_config = SettingsConfigDict(env_prefix="ARENGINE_", frozen=True, extra="forbid")

    host: str = Field(
        "127.0.0.1", description="Interface to bind; anything but loopback is an explicit choice."
    )
    port: int = Field(8000, ge=1, le=65535, description="TCP port to listen on.")
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
        description="Folder of model sub-folders, each with a manifest.toml; default: the repository's models/.",
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
    upload_dir: Path | None = Field(
        None, description="Directory for spooled uploads; default: the system temporary directory."
    )
    max_pending_requests: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Recognition requests admitted at once (uploading or processing); beyond it 503 with Retry-After.",
    )
    request_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="Deadline of a recognition request in seconds (504 past it); clients may ask for less with timeout_s.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Longest wait for the next chunk of a request body, in seconds (408 past it).",
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
    api_keys: str | None = Field(
        None,
        description="Comma-separated API keys (environment only, never a flag: command lines are visible to every user); when set, every endpoint but /healthz, /readyz and (with metrics_public) /metrics needs Authorization: Bearer <key>.",
    )
    metrics_public: bool = Field(
        True,
        description="Serve /metrics without an API key (for Prometheus inside a private network).",
    )
    cors_origins: str | None = Field(
        None, description="Comma-separated origins allowed by CORS; CORS is off when unset."
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

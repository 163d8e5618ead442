"""The FastAPI application: lifespan (engine start, model loading, shutdown) and middleware."""

from __future__ import annotations

import logging
import re
import socket
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
import torch
from anyio import to_thread
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from arengine import __version__
from arengine.db.engine import PoolReading, open_engine, time_queries
from arengine.db.migrate import up_to_date, upgrade
from arengine.db.url import database_url, is_postgresql
from arengine.http import jobs, listen, references, render, routes, web
from arengine.http.access import AccessLogMiddleware
from arengine.http.auth import ApiKeyMiddleware
from arengine.http.errors import (
    InternalErrorMiddleware,
    install_error_handlers,
    with_any_request_errors,
)
from arengine.http.security import LOOPBACK_HOSTS, SecurityMiddleware, is_loopback
from arengine.http.upload_dir import UploadDir
from arengine.jobs.runner import JobRunner, Replica, Retention
from arengine.jobs.store import JobStore
from arengine.jobs.webhooks import Webhooks, start_webhooks
from arengine.live.sources import SourceLabels
from arengine.notify.mqtt import start_mqtt
from arengine.service.engine import Engine
from arengine.settings import Settings
from arengine.system.allocator import active_allocator
from arengine.system.memory import Jemalloc
from arengine.system.metrics import Metrics

log = logging.getLogger(__name__)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def create_app(settings: Settings) -> FastAPI:
    """The application for `settings`; the engine starts and the models load in its lifespan.

    Example: `uvicorn.run(create_app(Settings()), host="127.0.0.1", port=8000)`; `arengine serve`
    does this with its signal handling and jemalloc.
    """

    metrics = Metrics(CollectorRegistry())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Every handler is async and heavy work runs on the engine pool: AnyIO's worker threads
        # (40 by default) are never needed for more than a few small blocking calls.
        to_thread.current_default_thread_limiter().total_tokens = 4
        uploads = UploadDir.claim(settings.server.upload_dir)  # sweeps what a crashed server left
        engine = Engine(settings, metrics)
        app.state.engine = engine
        _watch(metrics, engine)
        runner = _jobs(settings, engine, metrics)
        app.state.jobs = runner
        if runner is not None:
            metrics.watch_jobs(runner.store)
        app.state.webhooks = _webhooks(settings, metrics, runner)
        app.state.mqtt = start_mqtt(settings, metrics)
        database, own = _shared_database(settings, runner)
        # Loading runs beside the server so that /healthz answers and /readyz says 503 meanwhile.
        loading = (engine, database, settings.database.database_migrate)
        threading.Thread(target=_load, args=loading, name="arengine-loader", daemon=True).start()
        try:
            yield
        finally:
            if app.state.mqtt is not None:
                app.state.mqtt.close()
            if app.state.webhooks is not None:
                app.state.webhooks.close()
            if runner is not None:
                runner.close()
            engine.close()
            if database is not None and own:
                database.dispose()
            uploads.close()

    app = _App(
        title="arengine",
        version=__version__,
        lifespan=lifespan,
        description="Timestamped tags from audio files of any length.",
        docs_url=None,  # served by `web` from the package: no CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.mqtt = None
    app.state.sources = SourceLabels(settings.live.max_sources)
    app.include_router(routes.router)
    app.include_router(render.router)
    app.include_router(jobs.router)
    app.include_router(listen.router)
    app.include_router(references.router)
    app.include_router(web.router)
    install_error_handlers(app)
    if keys := settings.security.api_key_list():
        public = ["/healthz", "/readyz", *web.PUBLIC_PATHS]
        public += ["/metrics"] if settings.security.metrics_public else []
        # An administrator may do what a user may: the references endpoints check for the
        # administrator keys themselves.
        keys = (*keys, *settings.security.admin_key_list())
        app.add_middleware(
            ApiKeyMiddleware, keys=keys, public_paths=public, public_prefixes=web.PUBLIC_PREFIXES
        )
    if settings.security.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.security.cors_origins.split(","),
            allow_methods=["GET", "POST"],
            allow_headers=["*"],
        )
    app.add_middleware(
        SecurityMiddleware,
        hosts=_allowed_hosts(settings),
        origins=(settings.security.cors_origins or "").split(",")
        if settings.security.cors_origins
        else (),
        csp={"/docs": web.DOCS_CSP, web.SITE_PATH: web.SITE_CSP},
    )
    app.add_middleware(InternalErrorMiddleware)  # inside the access log: it logs the 500
    app.add_middleware(AccessLogMiddleware)
    app.add_middleware(RequestIdMiddleware)  # added last, so outermost: the access log sees the id
    return app


class _App(FastAPI):
    """FastAPI, whose OpenAPI document also lists what any request may be answered before a
    route sees it (a 431 from the protocol, a bad Host), on every operation."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            self.openapi_schema = with_any_request_errors(super().openapi())
        return self.openapi_schema


def _jobs(settings: Settings, engine: Engine, metrics: Metrics) -> JobRunner | None:
    """The job runner over the store in `data_dir` (None: jobs off), started."""
    if settings.jobs.data_dir is None:
        return None
    retention = Retention(settings.jobs.job_retention_s, settings.jobs.job_storage_bytes)
    replica = Replica(_replica_name(settings), settings.jobs.job_lease_s)
    url = database_url(settings)
    assert url is not None  # the data directory gives one at least
    database = open_engine(url, settings.database.database_pool_size)
    store = JobStore.open(
        settings.jobs.data_dir, database, migrate=settings.database.database_migrate
    )
    metrics.watch_pool(PoolReading(database))
    time_queries(database, metrics.observe_query)
    runner = JobRunner(
        store, engine, settings.jobs.max_running_jobs, retention, replica, metrics.observe_takeovers
    )
    runner.start()
    return runner


def _replica_name(settings: Settings) -> str:
    return settings.jobs.replica_name or f"{socket.gethostname()}:{settings.server.port}"


def _webhooks(settings: Settings, metrics: Metrics, runner: JobRunner | None) -> Webhooks | None:
    """The job webhooks' senders (None: jobs off, or no webhook secret), their gauges watched."""
    if runner is None:
        return None
    webhooks = start_webhooks(settings, runner.store.engine, metrics, _replica_name(settings))
    if webhooks is not None:
        metrics.watch_webhooks(webhooks.outbox)
        runner.store.on_webhook = webhooks.notify  # a job ended here: its webhook goes now
    return webhooks


def _allowed_hosts(settings: Settings) -> list[str]:
    """`allowed_hosts`, or by default the loopback names on loopback and any name elsewhere."""
    if settings.security.allowed_hosts:
        return settings.security.allowed_hosts.split(",")
    return list(LOOPBACK_HOSTS) if is_loopback(settings.server.host) else ["*"]


def _watch(metrics: Metrics, engine: Engine) -> None:
    allocator = active_allocator()
    jemalloc = Jemalloc.load() if allocator == "jemalloc" else None
    metrics.watch(engine.pool, jemalloc, engine.admission)
    metrics.watch_models(
        lambda: {name: loaded.recognizer.held_bytes() for name, loaded in engine.models.items()}
    )
    metrics.build.info(
        {
            "version": __version__,
            "torch_version": torch.__version__,
            "allocator": allocator,
            "intra_op_threads": str(torch.get_num_threads()),
            "inter_op_threads": str(torch.get_num_interop_threads()),
            "engine_threads": str(engine.pool.threads),
        }
    )


def _shared_database(settings: Settings, runner: JobRunner | None) -> tuple[sa.Engine | None, bool]:
    """The database every replica shares when `database_url` names a PostgreSQL server: the
    fingerprint models' references live there (the job store's engine when jobs are on: one
    pool); None with SQLite (each model's folder holds its library file) or no database at all.
    And whether it is this server's own to dispose of."""
    url = database_url(settings)
    if url is None or not is_postgresql(url):
        return None, False
    if runner is not None:
        return runner.store.engine, False
    return open_engine(url, settings.database.database_pool_size), True


def _load(engine: Engine, database: sa.Engine | None, migrate: bool) -> None:
    try:
        if database is not None and migrate:
            upgrade(database)  # the references' tables before a fingerprint model looks them up
        elif database is not None and not up_to_date(database):
            engine.not_ready_reason = (
                "the database's schema is older than this release's: run `arengine db upgrade` "
                "(or start without --no-database-migrate)"
            )
            log.error("%s; the server stays not ready", engine.not_ready_reason)
            return
        engine.load_models(database)
    except Exception:
        log.exception("loading the models failed; the server stays not ready")


class RequestIdMiddleware:
    """Accept a sane `X-Request-ID` or make one; expose it as `scope["state"]` and echo it back."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_id)

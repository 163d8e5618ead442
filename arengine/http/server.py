"""The HTTP server's lifecycle: a uvicorn server that drains on SIGTERM and exits 0.

First SIGTERM or SIGINT: the engine stops being ready (`/readyz` 503, new requests 503) at once; the
listener stays open `shutdown_delay_s` so load balancers see it, then uvicorn stops accepting and
gives in-flight requests `shutdown_timeout_s` to finish. A second signal exits at once. Requests cut
off either way answer 503 `shutting_down` (`arengine.http.errors.InternalErrorMiddleware`); an
NDJSON stream already under way ends with a `{"error": {"code": "shutting_down", ...}}` line.

Connections are limited by `arengine.http.protocol`; the cap is lowered to fit the open-file limit,
and when descriptors run out anyway, asyncio's accept error is logged once a minute, not in a loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import socket
import threading
import time
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from arengine.http.protocol import ConnectionLimits, WebSocketProtocol, protocol_class
from arengine.settings import Settings

log = logging.getLogger(__name__)

FILES_RESERVED = 64
"""Descriptors kept for the process itself (models, logs, the event loop, libraries)."""

ACCEPT_ERROR = "socket.accept() out of system resource"


class GracefulServer(uvicorn.Server):
    """uvicorn's server with arengine's shutdown sequence (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, delay_s: float) -> None:
        super().__init__(config)
        self._app = app
        self._delay_s = delay_s
        self._signalled = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(QuietAcceptErrors())
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's sequence, except that requests still running when the drain ends (the
        timeout, or a second signal) are cancelled and given a moment to answer 503 before the
        engine closes, and the engine closes on a forced exit too (uvicorn skips the lifespan's
        shutdown then, and its cancelled task logs a traceback)."""
        log.info("shutting down: listener closed")
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        await asyncio.sleep(0.1)
        try:
            await asyncio.wait_for(
                self._wait_tasks_to_complete(), timeout=self.config.timeout_graceful_shutdown
            )
        except TimeoutError:
            log.warning("shutdown_timeout_s passed with requests still running")
        await self._cut_off()
        await self.lifespan.shutdown()

    async def _cut_off(self) -> None:
        tasks = set(self.server_state.tasks)
        if not tasks:
            return
        log.warning("cutting off %d request(s) still running", len(tasks))
        # Requests in the engine end with 503 `shutting_down` through their jobs, so a stream
        # already under way can still say so in its last line; the rest (uploads) are
        # cancelled, and answer the same as soon as they run (InternalErrorMiddleware).
        engine = getattr(self._app.state, "engine", None)
        if engine is not None:
            engine.cut_off()
            _, tasks = await asyncio.wait(tasks, timeout=1.0)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's handler: it re-raises the signal after shutdown, so the exit code would
        # say "killed by SIGTERM" instead of 0.
        if self._signalled:
            log.warning("second signal %d: exiting now", sig)
            self.should_exit = self.force_exit = True
            return
        self._signalled = True
        engine = getattr(self._app.state, "engine", None)
        if engine is not None:
            engine.stop_accepting()
        log.info("signal %d: not ready; closing the listener in %.1f s", sig, self._delay_s)
        timer = threading.Timer(self._delay_s, self._stop)
        timer.daemon = True
        timer.start()

    def _stop(self) -> None:
        self.should_exit = True


class QuietAcceptErrors:
    """An event-loop exception handler: asyncio's "out of system resource" accept error (EMFILE)
    once a minute with a count, without its traceback; anything else to asyncio's own handler.

    asyncio retries `accept()` every second while descriptors are out, logging a traceback each
    time; from several listening sockets and for as long as the exhaustion lasts, that is a log
    flood on top of the outage.
    """

    def __init__(self, interval_s: float = 60.0) -> None:
        self._interval_s = interval_s
        self._last = -math.inf
        self._missed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _retry_on_a_closed_listener(context):
            log.debug("accept retry after the listener closed: %s", context.get("exception"))
            return
        if context.get("message") != ACCEPT_ERROR:
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._missed += 1
            return
        log.error(
            "cannot accept connections: %s (%d more times since the last report); "
            "lower --max-connections or raise the open-file limit",
            context.get("exception"),
            self._missed,
        )
        self._last = now
        self._missed = 0


def open_file_limit() -> int:
    """The soft RLIMIT_NOFILE after raising it to the hard limit (as Go's runtime does): the
    default soft limit (often 1024) is a relic of select(), which the event loop does not use."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1_048_576 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(settings: Settings, files: int) -> int:
    """`max_connections`, lowered so that connections, upload files and decoders fit in `files`
    descriptors (each upload holds a file, each engine request a decoder, besides its socket)."""
    spare = (
        files
        - FILES_RESERVED
        - settings.limits.max_uploading_requests
        - settings.limits.max_pending_requests
    )
    return max(1, min(settings.limits.max_connections, spare))


def run(app: FastAPI, settings: Settings) -> None:
    """Serve `app` until a signal; returns when the shutdown sequence is complete."""
    files = open_file_limit()
    cap = connection_cap(settings, files)
    if cap < settings.limits.max_connections:
        log.warning(
            "max_connections lowered from %d to %d to fit the open-file limit of %d",
            settings.limits.max_connections,
            cap,
            files,
        )
    limits = ConnectionLimits(
        header_timeout_s=settings.limits.header_timeout_s,
        max_header_bytes=settings.limits.max_header_bytes,
        max_connections=cap,
    )
    config = uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        http=protocol_class(limits, app.state.metrics, settings.server.http_parser),
        timeout_graceful_shutdown=math.ceil(settings.server.shutdown_timeout_s),
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=settings.limits.max_header_bytes,
        # uvicorn's sans-I/O protocol (`WebSocketProtocol`) reads no further message until the
        # application has taken the last one: the back-pressure of `WS /v1/listen`
        # (`arengine/http/listen.py`).
        ws=WebSocketProtocol,
        ws_max_size=settings.live.listen_max_message_bytes,
        # No keep-alive pings: a stream held back by that back-pressure reads no frame, pongs
        # included, so a ping would time out and drop a stream that is only being slowed down. A
        # stream's progress line every second keeps proxies from idling it out, and a client
        # that is gone is found by `listen_idle_timeout_s`.
        ws_ping_interval=None,
    )
    GracefulServer(config, app, settings.server.shutdown_delay_s).run()


def _retry_on_a_closed_listener(context: dict[str, Any]) -> bool:
    """Whether `context` is asyncio's accept retry failing because the listener closed.

    After an accept error asyncio stops watching the listener and starts again a second later
    from a timer; when the server shuts down within that second, the socket is closed first and
    the retry fails on descriptor -1 with a traceback. The listener was closed on purpose, so
    nothing is lost and there is nothing to report.
    """
    callback = getattr(context.get("handle"), "_callback", None)
    return isinstance(context.get("exception"), ValueError) and (
        getattr(callback, "__name__", "") == "_start_serving"
    )

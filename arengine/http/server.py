"""The HTTP server's lifecycle: a uvicorn server that drains on SIGTERM and exits 0.

First SIGTERM or SIGINT: the engine stops being ready (`/readyz` 503, new requests 503) at once; the
listener stays open `shutdown_delay_s` so load balancers see it, then uvicorn stops accepting and
gives in-flight requests `shutdown_timeout_s` to finish. A second signal exits at once.
"""

from __future__ import annotations

import logging
import threading
from types import FrameType

import uvicorn
from fastapi import FastAPI

from arengine.settings import Settings

log = logging.getLogger(__name__)


class GracefulServer(uvicorn.Server):
    """uvicorn's server with arengine's shutdown sequence (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, delay_s: float) -> None:
        super().__init__(config)
        self._app = app
        self._delay_s = delay_s
        self._signalled = False

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


def run(app: FastAPI, settings: Settings) -> None:
    """Serve `app` until a signal; returns when the shutdown sequence is complete."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=int(settings.shutdown_timeout_s),
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=64 * 1024,
    )
    GracefulServer(config, app, settings.shutdown_delay_s).run()

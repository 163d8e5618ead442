"""The access log: one JSON line per HTTP request on logger `arengine.access`."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from arengine.types import Result, timings_dict

log = logging.getLogger("arengine.access")


class AccessLogMiddleware:
    """Log method, path, status and wall time; for a recognition, model, audio and stage timings.

    The route leaves `request.state.model` and `request.state.result` for this middleware to read;
    it sits inside `RequestIdMiddleware`, so `request_id` is already in the scope's state.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before starting a response

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            fields = access_fields(scope, status, time.perf_counter() - started)
            log.info("request", extra={"fields": fields})


def access_fields(scope: Scope, status: int, seconds: float) -> dict[str, Any]:
    """The keys of one access-log line."""
    state = scope.get("state", {})
    fields: dict[str, Any] = {
        "request_id": state.get("request_id"),
        "method": scope["method"],
        "path": scope["path"],
        "status": status,
        "duration_s": round(seconds, 6),
    }
    if "model" in state:
        fields["model"] = state["model"]
    result = state.get("result")
    if isinstance(result, Result):
        fields["audio_s"] = result.audio.duration_s
        fields["timings"] = timings_dict(result.timings)
        # Seconds of audio per second of wall time: 100 means an hour is tagged in 36 s.
        fields["rtf"] = round(result.audio.duration_s / max(result.timings.total_s, 1e-9), 3)
    return fields

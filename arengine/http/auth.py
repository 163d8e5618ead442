"""Optional API keys: `Authorization: Bearer <key>`, compared in constant time, as plain ASGI."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from arengine.errors import Unauthorized
from arengine.http.errors import error_response


class ApiKeyMiddleware:
    """Refuse every HTTP request and WebSocket handshake outside `public_paths` that lacks one
    of `keys` (401; a WebSocket handshake gets the same HTTP answer, before it is accepted)."""

    def __init__(self, app: ASGIApp, keys: Iterable[str], public_paths: Iterable[str]) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        if not self.keys:
            raise ValueError("ApiKeyMiddleware needs at least one key")
        self.public_paths = frozenset(public_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or scope["path"] in self.public_paths
            or self._allowed(scope)
        ):
            await self.app(scope, receive, send)
            return
        error = Unauthorized("send Authorization: Bearer <API key>")
        scope["app"].state.metrics.reject(error.code)
        await error_response(error.code, error.message)(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token:
            return False
        matched = False
        for key in self.keys:  # every key is compared, so timing does not tell which one matched
            matched |= hmac.compare_digest(token.strip(), key)
        return matched

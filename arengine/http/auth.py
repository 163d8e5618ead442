"""Optional API keys: `Authorization: Bearer <key>`, compared in constant time, as plain ASGI.

A page's WebSocket cannot send headers, so a handshake may carry its key as the subprotocol
`KEY_SUBPROTOCOL` + the key in unpadded base64url (a subprotocol is a token: a key's other
characters could not go in it), beside the subprotocol the endpoint answers with
(`arengine.http.listen.SUBPROTOCOL`), which the server names back instead of the key.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from arengine.errors import Unauthorized
from arengine.http.errors import error_response

KEY_SUBPROTOCOL = "arengine.key."
"""A WebSocket subprotocol of this prefix carries the API key (base64url, no padding)."""


class ApiKeyMiddleware:
    """Refuse every HTTP request and WebSocket handshake outside `public_paths` that lacks one
    of `keys` (401; a WebSocket handshake gets the same HTTP answer, before it is accepted), or
    under one of `public_prefixes` (the documentation site's files)."""

    def __init__(
        self,
        app: ASGIApp,
        keys: Iterable[str],
        public_paths: Iterable[str],
        public_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        if not self.keys:
            raise ValueError("ApiKeyMiddleware needs at least one key")
        self.public_paths = frozenset(public_paths)
        self.public_prefixes = public_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or scope["path"] in self.public_paths
            or scope["path"].startswith(self.public_prefixes)
            or self._allowed(scope)
        ):
            await self.app(scope, receive, send)
            return
        error = Unauthorized("send Authorization: Bearer <API key>")
        scope["app"].state.metrics.reject(error.code)
        await error_response(error.code, error.message)(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        token = _token(scope)
        if not token:
            return False
        matched = False
        for key in self.keys:  # every key is compared, so timing does not tell which one matched
            matched |= hmac.compare_digest(token, key)
        return matched


def _token(scope: Scope) -> bytes:
    """The key a request or handshake sends: `Authorization: Bearer`, else a WebSocket's
    `KEY_SUBPROTOCOL`; empty when none."""
    header: bytes = dict(scope["headers"]).get(b"authorization", b"")
    scheme, _, token = header.partition(b" ")
    if scheme.lower() == b"bearer":
        return token.strip()
    protocols: Iterable[str] = scope.get("subprotocols", ())
    for protocol in protocols:
        if protocol.startswith(KEY_SUBPROTOCOL):
            encoded = protocol[len(KEY_SUBPROTOCOL) :]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            except (binascii.Error, ValueError):
                return b""
    return b""

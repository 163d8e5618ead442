"""Optional API keys: `Authorization: Bearer <key>`, compared in constant time, as plain ASGI.

A page's WebSocket cannot send headers, so a handshake may carry its key as the subprotocol
`KEY_SUBPROTOCOL` + the key in unpadded base64url (a subprotocol is a token: a key's other
characters could not go in it), beside the subprotocol the endpoint answers with
(`arengine.http.listen.SUBPROTOCOL`), which the server names back instead of the key.

A request carries one credential or none: two (two `Authorization` headers, or a header and a
key subprotocol) are refused with 401 `ambiguous_credentials`, since one check could pass on
one while another reader took the other. The key that passed is the request's identity
(`identity`): what owns the jobs it creates.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from arengine.errors import ErrorCode, Unauthorized
from arengine.http.errors import error_response

KEY_SUBPROTOCOL = "arengine.key."
"""A WebSocket subprotocol of this prefix carries the API key (base64url, no padding)."""
IDENTITY = "identity"
"""The scope's `state` key under which the middleware leaves the checked key's identity."""


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
        ):
            await self.app(scope, receive, send)
            return
        try:
            token = credential(scope)
            if not self._allowed(token):
                raise Unauthorized("send Authorization: Bearer <API key>")
        except Unauthorized as error:
            await self._refuse(error, scope, receive, send)
            return
        scope.setdefault("state", {})[IDENTITY] = identity(token)
        await self.app(scope, receive, send)

    async def _refuse(
        self, error: Unauthorized, scope: Scope, receive: Receive, send: Send
    ) -> None:
        scope["app"].state.metrics.reject(error.code)
        await error_response(error.code, error.message)(scope, receive, send)

    def _allowed(self, token: bytes) -> bool:
        if not token:
            return False
        matched = False
        for key in self.keys:  # every key is compared, so timing does not tell which one matched
            matched |= hmac.compare_digest(token, key)
        return matched


def identity(token: bytes) -> str:
    """Who a key is, for what the request creates: a hash, so the store never holds a key.

    >>> identity(b"alpha-key-123") == identity(b"alpha-key-123") != identity(b"beta-key-456")
    True
    """
    return hashlib.sha256(token).hexdigest()[:32]


def credential(scope: Scope) -> bytes:
    """The one key a request or handshake sends: `Authorization: Bearer`, else a WebSocket's
    `KEY_SUBPROTOCOL`; empty when none. Two credentials raise `Unauthorized`
    (`ambiguous_credentials`)."""
    headers = [value for name, value in scope["headers"] if name.lower() == b"authorization"]
    protocols: Iterable[str] = scope.get("subprotocols", ())
    keyed = [protocol for protocol in protocols if protocol.startswith(KEY_SUBPROTOCOL)]
    if len(headers) + len(keyed) > 1:
        raise Unauthorized(
            "the request sends more than one credential (Authorization headers or key "
            "subprotocols): send one",
            code=ErrorCode.AMBIGUOUS_CREDENTIALS,
        )
    if headers:
        scheme, _, token = headers[0].partition(b" ")
        return token.strip() if scheme.lower() == b"bearer" else b""
    if keyed:
        encoded = keyed[0][len(KEY_SUBPROTOCOL) :]
        try:
            return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            return b""
    return b""

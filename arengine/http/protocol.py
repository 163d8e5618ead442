"""uvicorn's h11 protocol with the connection limits it lacks, and the one JSON error body for
what it refuses before the application sees a request.

uvicorn (0.5x) has keep-alive timeouts, but no timeout on a request's headers (a connection that
never finishes them stays open for ever), no cap on open connections (`limit_concurrency` answers
503 but still accepts), a header-size limit that h11 applies only to headers arriving in pieces,
and it takes a request with both `Content-Length` and `Transfer-Encoding`. Protocol-level errors
come back as plain text. This subclass adds each at the protocol, where they cost nothing per byte.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from arengine.errors import ErrorCode
from arengine.system.metrics import Metrics

log = logging.getLogger(__name__)

_H11_CODES = {
    "bad Content-Length": ErrorCode.BAD_CONTENT_LENGTH,
    "conflicting Content-Length headers": ErrorCode.BAD_CONTENT_LENGTH,
    "Receive buffer too long": ErrorCode.HEADERS_TOO_LARGE,
}


LINGER_S = 2.0
"""After the last answer of a connection, how long it keeps reading (and dropping) what the
client still sends before it closes. Closing with unread bytes makes the kernel send a reset,
which can destroy the answer before the client reads it: a 413 found in a header while the body
was still coming arrived as "connection reset" under load (nginx's lingering close)."""


class _LingeringTransport:
    """A transport whose `close`, while the client may still be sending (`unread()`), sends the
    end of the answer (FIN) at once, keeps reading for `LINGER_S` (the protocol drops the bytes)
    and closes then, or when the client does. A connection with nothing unread (idle, refused
    on arrival, timed out before its first byte) closes at once: lingering there would only hold
    a descriptor, which is what a flood of idle connections is after."""

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        unread: Callable[[], bool],
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._unread = unread
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if (
            self.lingering
            or transport.is_closing()
            or not transport.can_write_eof()
            or not self._unread()
        ):
            transport.close()
            return
        self.lingering = True
        transport.write_eof()
        transport.resume_reading()  # flow control may have paused it: read what is left
        self._loop.call_later(LINGER_S, transport.close)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one connection may do before the application sees its request."""

    header_timeout_s: float
    max_header_bytes: int
    max_connections: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused at the protocol: its error code and message."""

    code: ErrorCode
    message: str


def refusal_bytes(refusal: Refusal) -> bytes:
    """A complete HTTP/1.1 response with the one JSON error body, closing the connection."""
    body = json.dumps({"error": {"code": refusal.code.value, "message": refusal.message}})
    status = refusal.code.status
    head = [
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if status == 503:
        head.append("retry-after: 1")
    return ("\r\n".join(head) + "\r\n\r\n" + body).encode()


class _Connection(h11.Connection):
    """h11's server connection, which also refuses what h11 lets through (see the module)."""

    def __init__(self, max_header_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self.max_header_bytes = max_header_bytes
        self.refusal: Refusal | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as error:
            code = _H11_CODES.get(str(error), ErrorCode.BAD_REQUEST)
            self.refusal = Refusal(code, _h11_message(code, str(error), self.max_header_bytes))
            raise
        if isinstance(event, h11.Request):
            self.refusal = _check_request(event, self.max_header_bytes)
            if self.refusal is not None:
                raise h11.RemoteProtocolError(self.refusal.message, self.refusal.code.status)
        return event


def _h11_message(code: ErrorCode, reason: str, max_header_bytes: int) -> str:
    if code == ErrorCode.HEADERS_TOO_LARGE:
        return f"the request line and headers passed {max_header_bytes} bytes"
    if code == ErrorCode.BAD_CONTENT_LENGTH:
        return f"Content-Length is not one byte count ({reason})"
    return f"malformed HTTP request ({reason})"


def _check_request(event: h11.Request, max_header_bytes: int) -> Refusal | None:
    """h11 checks the size only of headers that arrive in pieces; this checks them all."""
    size = len(event.method) + len(event.target) + 12
    size += sum(len(name) + len(value) + 4 for name, value in event.headers.raw_items())
    if size > max_header_bytes:
        message = f"the request line and headers are {size} bytes; the limit is {max_header_bytes}"
        return Refusal(ErrorCode.HEADERS_TOO_LARGE, message)
    names = {name for name, _ in event.headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        # RFC 9112 6.3: a proxy and this server could frame the body differently (smuggling).
        message = "send Content-Length or Transfer-Encoding, not both"
        return Refusal(ErrorCode.AMBIGUOUS_LENGTH, message)
    return None


class LimitedH11Protocol(H11Protocol):
    """`H11Protocol` with a header timeout, a connection cap and JSON refusals.

    Made for one server by `protocol_class`, which binds the limits and the metrics.
    """

    limits: ClassVar[ConnectionLimits]
    metrics: ClassVar[Metrics | None] = None
    _capped_since: ClassVar[float] = -1e9

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _Connection(self.limits.max_header_bytes)
        self._header_timer: asyncio.TimerHandle | None = None
        self._request_bytes = 0
        self._first_byte_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        lingering = _LingeringTransport(transport, asyncio.get_running_loop(), self._unread)
        super().connection_made(lingering)  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            self._note_cap()
            message = f"{self.limits.max_connections} connections are open; retry shortly"
            self._refuse(Refusal(ErrorCode.TOO_MANY_CONNECTIONS, message))
            return
        self._arm_header_timer()

    def _unread(self) -> bool:
        """Whether the client may still be sending: part of a request's head, or a body."""
        return self._request_bytes > 0 or self.conn.their_state is h11.SEND_BODY

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if isinstance(self.transport, _LingeringTransport) and self.transport.lingering:
            return  # the rest of a body no one will read: dropped
        if self.conn.their_state is h11.IDLE:
            if self._request_bytes == 0:
                self._first_byte_at = time.monotonic()
                self._arm_header_timer()  # a keep-alive connection's next request starts now
            self._request_bytes += len(data)
        super().data_received(data)

    def handle_events(self) -> None:
        scope = self.scope
        super().handle_events()
        if self.scope is not scope:  # a request's headers arrived: the application has it
            self._disarm_header_timer()
            self._request_bytes = 0
            self.scope["state"]["received_at"] = self._first_byte_at or time.monotonic()
            self._first_byte_at = 0.0

    def send_400_response(self, msg: str) -> None:
        refusal = self.conn.refusal if isinstance(self.conn, _Connection) else None
        self._refuse(refusal or Refusal(ErrorCode.BAD_REQUEST, "malformed HTTP request"))

    def _refuse(self, refusal: Refusal) -> None:
        self._disarm_header_timer()
        if not self.transport.is_closing():
            self.transport.write(refusal_bytes(refusal))
            self.transport.close()
        if self.metrics is not None:
            self.metrics.reject(refusal.code)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(
            self.limits.header_timeout_s, self._headers_timed_out
        )

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self._request_bytes == 0:  # an idle connection: nothing to answer
            self.transport.close()
            return
        message = f"the request's headers did not arrive within {self.limits.header_timeout_s:g} s"
        self._refuse(Refusal(ErrorCode.HEADER_TIMEOUT, message))

    @classmethod
    def _note_cap(cls) -> None:
        # One warning a minute at most: a flood of connections must not become a flood of logs.
        now = time.monotonic()
        if now - cls._capped_since > 60:
            cls._capped_since = now
            cap = cls.limits.max_connections
            log.warning("max_connections (%d) reached: refusing new connections", cap)


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, quiet about a client that broke the protocol.

    A message over `ws_max_size` makes the protocol send its 1009 close and close the
    connection, which lingers (`_LingeringTransport`) while the client is still sending the
    message: uvicorn handled each later read as a new failure and wrote after the end it had
    sent, logging an asyncio "Fatal error" per read. Here what comes while the connection closes
    is dropped, and the application, whose connection uvicorn closed under it, sees a client that
    went away (`ClientDisconnected`) rather than a `RuntimeError` on its next send.
    """

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # the rest of what the client sends after the close: dropped
        super().data_received(data)

    def handle_parser_exception(self) -> None:
        super().handle_parser_exception()
        self.disconnected = True


def protocol_class(limits: ConnectionLimits, metrics: Metrics | None) -> type[LimitedH11Protocol]:
    """A `LimitedH11Protocol` bound to `limits` and `metrics`, for `uvicorn.Config(http=...)`."""
    return type(
        "ArengineH11Protocol",
        (LimitedH11Protocol,),
        {"limits": limits, "metrics": metrics},
    )

"""uvicorn's HTTP protocols with the connection limits they lack, and the one JSON error body for
what they refuse before the application sees a request.

uvicorn (0.5x) has keep-alive timeouts, but no timeout on a request's headers (a connection that
never finishes them stays open for ever), no cap on open connections (`limit_concurrency` answers
503 but still accepts), and protocol-level errors come back as plain text. Its h11 protocol
applies a header-size limit only to headers arriving in pieces and takes a request with both
`Content-Length` and `Transfer-Encoding`; its httptools protocol has no header-size limit at all
(a header or a trailer arriving in pieces is buffered without bound). `ConnectionGuard` adds each
rule once, at the protocol, where they cost nothing per byte; `LimitedH11Protocol` and
`LimitedHttpToolsProtocol` only tell it where a request stands.

httptools (llhttp, in C) is the default parser: it parses a body without the GIL-bound Python per
event that h11 runs, and it refuses the request-smuggling shapes that h11 lets through (bare LF
line endings, obs-fold, chunk lines ending in a bare LF; `tests/http/test_protocol.py`).
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import sys
import time
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from arengine.errors import ErrorCode
from arengine.settings import HTTP_PARSERS
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

READ_BYTES = 1 << 20
"""The most a connection whose body the application reads takes from its socket in one call,
where asyncio reads 256 KiB: each read is a turn of the event loop under the GIL (the read, the
parser, uvicorn's flow control pausing and resuming the socket, the body handed to the upload),
so a 67-MB upload takes a quarter of the turns. Nine alternating runs of
`loadtests.threads_vs_processes` on the 35-minute WAV each way (2 quiet AMD EPYC vCPUs): the one
process 4238x against 4004x on average, the two 4395x against 4245x. A read is held until the
application takes it, so the larger reads start only once it has taken one (an admitted upload,
at most `max_uploading_requests` of them): a flood of connections whose requests wait or are
refused holds what asyncio's reads hold, not four times as much."""


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

    def resume_reading(self) -> None:
        """Flow control resumes the socket once the application has taken the body read so far:
        from then on, reads of `READ_BYTES` (asyncio's socket transport; others read their own)."""
        if hasattr(self._transport, "max_size"):
            self._transport.max_size = READ_BYTES
        self._transport.resume_reading()

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


def head_refusal(
    method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], max_header_bytes: int
) -> Refusal | None:
    """What a parser lets through in a complete request head: a size checked however the head
    arrived (h11 checks only heads that arrive in pieces), both framings at once, and more than
    one Host (httptools takes several, and none in HTTP/1.1, which h11 refuses before this)."""
    size = len(method) + len(target) + 12
    names = set()
    hosts = 0
    for name, value in headers:
        size += len(name) + len(value) + 4
        lowered = name.lower()
        names.add(lowered)
        hosts += lowered == b"host"
    if size > max_header_bytes:
        message = f"the request line and headers are {size} bytes; the limit is {max_header_bytes}"
        return Refusal(ErrorCode.HEADERS_TOO_LARGE, message)
    if b"content-length" in names and b"transfer-encoding" in names:
        # RFC 9112 6.3: a proxy and this server could frame the body differently (smuggling).
        return ambiguous_length()
    if hosts > 1:
        # RFC 9112 3.2: a proxy and this server could take different ones (the Host check).
        return Refusal(ErrorCode.BAD_REQUEST, "malformed HTTP request (more than one Host)")
    return None


def ambiguous_length() -> Refusal:
    return Refusal(ErrorCode.AMBIGUOUS_LENGTH, "send Content-Length or Transfer-Encoding, not both")


def parser_refusal(code: ErrorCode, reason: str, max_header_bytes: int) -> Refusal:
    """The refusal of a request its parser found malformed for `reason`."""
    if code == ErrorCode.HEADERS_TOO_LARGE:
        return Refusal(code, f"the request line and headers passed {max_header_bytes} bytes")
    if code == ErrorCode.BAD_CONTENT_LENGTH:
        return Refusal(code, f"Content-Length is not one byte count ({reason})")
    if code == ErrorCode.AMBIGUOUS_LENGTH:
        return ambiguous_length()
    return Refusal(code, f"malformed HTTP request ({reason})")


class ConnectionGuard(asyncio.Protocol, metaclass=ABCMeta):
    """The connection rules, for a uvicorn HTTP protocol (a mixin before it in the bases): a
    header timeout, a connection cap, a header-size limit however the head arrives, JSON
    refusals, and a lingering close. The protocol says where its request stands
    (`_head_pending`, `_in_body`), calls `_head_arrived` when a request's head is complete, and
    keeps the refusal its parser's error means in `_refusal`.

    Made for one server by `protocol_class`, which binds the limits and the metrics.
    """

    limits: ClassVar[ConnectionLimits]
    metrics: ClassVar[Metrics | None] = None
    _capped_since: ClassVar[float] = -1e9

    # The parts of uvicorn's protocols this uses.
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._request_bytes = 0
        self._first_byte_at = 0.0
        self._refusal: Refusal | None = None

    @abstractmethod
    def _head_pending(self) -> bool:
        """Whether the next bytes belong to a request's head (or are the first of one)."""

    @abstractmethod
    def _in_body(self) -> bool:
        """Whether a request's body is still arriving."""

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
        return self._request_bytes > 0 or self._in_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if isinstance(self.transport, _LingeringTransport) and self.transport.lingering:
            return  # the rest of a body no one will read: dropped
        if self._head_pending():
            if self._request_bytes == 0:
                self._first_byte_at = time.monotonic()
                self._arm_header_timer()  # a keep-alive connection's next request starts now
            self._request_bytes += len(data)
        super().data_received(data)
        if (
            self._head_pending()
            and self._request_bytes > self.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            # A head still incomplete past the limit: its parser would buffer it without end.
            refusal = parser_refusal(ErrorCode.HEADERS_TOO_LARGE, "", self.limits.max_header_bytes)
            self._refuse(refusal)

    def _head_arrived(self, scope: dict[str, Any]) -> None:
        """A request's head is complete: the application has it, stamped with its first byte."""
        self._disarm_header_timer()
        self._request_bytes = 0
        scope["state"]["received_at"] = self._first_byte_at or time.monotonic()
        self._first_byte_at = 0.0

    def send_400_response(self, msg: str) -> None:
        self._refuse(self._refusal or Refusal(ErrorCode.BAD_REQUEST, "malformed HTTP request"))

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


class _Connection(h11.Connection):
    """h11's server connection, which keeps the refusal each error means, and refuses what h11
    lets through in a complete head (`head_refusal`)."""

    def __init__(self, max_header_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self.max_header_bytes = max_header_bytes
        self.refusal: Refusal | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as error:
            code = _H11_CODES.get(str(error), ErrorCode.BAD_REQUEST)
            self.refusal = parser_refusal(code, str(error), self.max_header_bytes)
            raise
        if isinstance(event, h11.Request):
            raw = event.headers.raw_items()
            self.refusal = head_refusal(event.method, event.target, raw, self.max_header_bytes)
            if self.refusal is not None:
                raise h11.RemoteProtocolError(self.refusal.message, self.refusal.code.status)
        return event


class LimitedH11Protocol(ConnectionGuard, H11Protocol):
    """uvicorn's `H11Protocol` under the `ConnectionGuard` rules."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _Connection(self.limits.max_header_bytes)

    def _head_pending(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def _in_body(self) -> bool:
        return self.conn.their_state is h11.SEND_BODY

    def handle_events(self) -> None:
        scope = self.scope
        super().handle_events()
        if self.scope is not scope:  # a request's headers arrived: the application has it
            self._head_arrived(self.scope)  # type: ignore[arg-type]

    def send_400_response(self, msg: str) -> None:
        self._refusal = self.conn.refusal if isinstance(self.conn, _Connection) else None
        super().send_400_response(msg)


_HTTPTOOLS_CODES = {
    "Content-Length can't be present with Transfer-Encoding": ErrorCode.AMBIGUOUS_LENGTH,
    "Transfer-Encoding can't be present with Content-Length": ErrorCode.AMBIGUOUS_LENGTH,
    "Invalid character in Content-Length": ErrorCode.BAD_CONTENT_LENGTH,
    "Duplicate Content-Length": ErrorCode.BAD_CONTENT_LENGTH,
    "Content-Length overflow": ErrorCode.BAD_CONTENT_LENGTH,
}


class _Refused(Exception):
    """Raised in a parser callback to stop the parser; the refusal is the protocol's `_refusal`."""


class LimitedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
    """uvicorn's `HttpToolsProtocol` under the `ConnectionGuard` rules, which also bounds what
    arrives in a body without being body (chunk lines, trailers), drops trailers (uvicorn adds
    them to the request's headers, after the application has them), and hands each body chunk
    to the application as the parser made it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True
        self._reading_body = False
        self._body_in_read = 0
        self._framing_bytes = 0

    def _head_pending(self) -> bool:
        return self._awaiting_head

    def _in_body(self) -> bool:
        return self._reading_body

    def data_received(self, data: bytes) -> None:
        reading, self._body_in_read = self._reading_body, 0
        super().data_received(data)
        if not (reading and self._reading_body):
            return  # only reads wholly inside a body: one read more is bounded by its size
        # What a read brought that was not body (chunk lines, trailers) since the last read
        # that had body: httptools buffers a trailer line until it ends, without a bound.
        other = len(data) - self._body_in_read
        self._framing_bytes = other if self._body_in_read else self._framing_bytes + other
        if self._framing_bytes > self.limits.max_header_bytes:
            message = (
                f"a chunked body sent {self._framing_bytes} bytes of chunk lines or trailers "
                f"without data; the limit is {self.limits.max_header_bytes}"
            )
            self._refuse(Refusal(ErrorCode.HEADERS_TOO_LARGE, message))

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            error = sys.exception()  # uvicorn calls this while handling the parser's error
            reason = str(error) if isinstance(error, httptools.HttpParserError) else "unparsable"
            if isinstance(error, httptools.HttpParserCallbackError):  # uvicorn's, e.g. the URL
                reason = f"unparsable request line or headers: {error.__context__}"[:200]
            code = _HTTPTOOLS_CODES.get(reason, ErrorCode.BAD_REQUEST)
            self._refusal = parser_refusal(code, reason, self.limits.max_header_bytes)
        super().send_400_response(msg)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._awaiting_head:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        method = self.parser.get_method()
        self._refusal = head_refusal(method, self.url, self.headers, self.limits.max_header_bytes)
        hostless = not any(name == b"host" for name, _ in self.headers)
        if self._refusal is None and hostless and self.parser.get_http_version() == "1.1":
            # RFC 9112 3.2, as h11 does
            self._refusal = Refusal(ErrorCode.BAD_REQUEST, "malformed HTTP request (no Host)")
        if self._refusal is not None:
            raise _Refused(self._refusal.message)
        self._awaiting_head = False
        self._reading_body = not (self.parser.should_upgrade() and self._should_upgrade())
        self._framing_bytes = 0
        super().on_headers_complete()
        self._head_arrived(self.scope)  # type: ignore[arg-type]

    def on_body(self, body: bytes) -> None:
        self._body_in_read += len(body)
        cycle = self.cycle
        if cycle.body or cycle.response_complete or not self._reading_body:
            if isinstance(cycle.body, bytes):  # a second chunk before the application read
                cycle.body = bytearray(cycle.body)
            super().on_body(body)
            return
        # uvicorn copies each chunk into a buffer and out again (`bytes(buffer)`); `bytes()` of
        # the parser's own bytes is the same object: no copy on the way to the spool file.
        cycle.body = body  # type: ignore[assignment]
        if len(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        self._awaiting_head = True
        self._reading_body = False
        super().on_message_complete()


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


def protocol_class(
    limits: ConnectionLimits, metrics: Metrics | None, parser: str = HTTP_PARSERS[0]
) -> type[ConnectionGuard]:
    """The protocol of `parser` bound to `limits` and `metrics`, for `uvicorn.Config(http=...)`."""
    bases: dict[str, type[ConnectionGuard]] = {
        "httptools": LimitedHttpToolsProtocol,
        "h11": LimitedH11Protocol,
    }
    if parser not in HTTP_PARSERS:
        raise ValueError(f"unknown HTTP parser {parser!r}; expected {' or '.join(HTTP_PARSERS)}")
    base = bases[parser]
    name = f"Arengine{base.__name__}"
    return type(name, (base,), {"limits": limits, "metrics": metrics})

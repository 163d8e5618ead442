"""The protocol on a real socket, under each parser (`parser`: httptools and h11).

The lingering close: a connection lingers exactly while the client may still be sending
(`_unread()`). A refusal sent before the body ended used to close with unread bytes, and the
kernel's reset destroyed the answer ("connection reset" under load); then every close lingered,
so idle and refused connections held their descriptors for `LINGER_S`, which a flood of them is
after.

What the parsers let through: the request-smuggling shapes (both framings, bare LF line endings,
obs-fold, chunk lines ending in a bare LF), a trailer that never ends, and the JSON refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from arengine.http.protocol import READ_BYTES, ConnectionGuard, ConnectionLimits, protocol_class
from arengine.settings import HTTP_PARSERS

Scenario = Callable[[Any, socket.socket], Awaitable[None]]


@pytest.fixture(params=HTTP_PARSERS)
def parser(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


async def _refuse_at_once(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 413 without reading the body, as a refusal found in the headers does."""
    headers = [(b"content-length", b"7"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": b"refused"})


def _run(
    scenario: Scenario, parser: str, header_timeout_s: float = 10.0, app: Any = _refuse_at_once
) -> None:
    """`scenario(protocol, client)` against one `parser` server connection on a socket pair."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        config = Config(app=app, lifespan="off", log_level="warning")
        limits = ConnectionLimits(header_timeout_s, max_header_bytes=16384, max_connections=8)
        made: list[ConnectionGuard] = []

        def factory() -> ConnectionGuard:
            made.append(protocol_class(limits, None, parser)(config, ServerState(), {}, _loop=loop))
            return made[0]

        server, client = socket.socketpair()
        client.setblocking(False)
        with server, client:
            await loop.connect_accepted_socket(factory, server)
            await scenario(made[0], client)
            client.close()  # a lingering connection closes when the client does
            await _until(lambda: made[0] not in made[0].connections)

    asyncio.run(main())


async def _read_to_eof(client: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    received = b""
    while chunk := await asyncio.wait_for(loop.sock_recv(client, 65536), 30):
        received += chunk
    return received


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def test_unread_follows_what_the_client_may_still_send(parser: str) -> None:
    async def scenario(protocol: Any, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        assert not protocol._unread()  # connected, nothing sent
        await loop.sock_sendall(client, b"POST /v1/recognize HTTP/1.1\r\nHost: x\r\n")
        await _until(lambda: protocol._request_bytes > 0)
        assert protocol._unread()  # part of a head
        await loop.sock_sendall(client, b"Content-Length: 100000\r\n\r\n" + b"x" * 10)
        await _until(lambda: protocol.transport.is_closing())  # answered before the body ended
        assert protocol._unread()  # the rest of the body may still come

    _run(scenario, parser)


def test_an_answer_before_the_body_ended_lingers_and_arrives_whole(parser: str) -> None:
    async def scenario(protocol: Any, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"
        await loop.sock_sendall(client, head + b"x" * 65536)
        answer = await _read_to_eof(client)  # the server's FIN came after the answer
        assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b"refused")
        # The client, not yet reading, goes on sending: read and dropped, never a reset.
        for _ in range(32):
            await loop.sock_sendall(client, b"x" * 65536)
        assert protocol.transport.lingering
        client.shutdown(socket.SHUT_WR)  # the client's end: the connection closes then
        await _until(lambda: protocol.transport._transport.is_closing())

    _run(scenario, parser)


@pytest.mark.parametrize("how", ["a whole request answered", "idle past header_timeout_s"])
def test_a_connection_with_nothing_unread_closes_at_once(how: str, parser: str) -> None:
    async def scenario(protocol: Any, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        if how == "a whole request answered":
            await loop.sock_sendall(client, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await _read_to_eof(client)
        assert answer.startswith(b"HTTP/1.1 413 ") or (how != "a whole request answered")
        assert not protocol._unread()
        assert not protocol.transport.lingering
        assert protocol.transport._transport.is_closing()

    _run(scenario, parser, header_timeout_s=0.2)


async def _read_body(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body, then answers its length and digest."""
    digest = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        digest.update(message.get("body", b""))
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = f"{size} {digest.hexdigest()}".encode()
    headers = [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _refusal(reply: bytes) -> tuple[int, str]:
    assert reply.count(b"HTTP/1.1 ") == 1, reply[:300]  # closed after it: nothing else read
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), reply[:300]
    return int(head.split()[1]), json.loads(body)["error"]["code"]


def _exchange(parser: str, request: bytes, app: Any = _refuse_at_once, pieces: int = 1) -> bytes:
    """What the server answers to `request`, sent in `pieces` writes."""
    replies: list[bytes] = []

    async def scenario(protocol: Any, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        step = -(-len(request) // pieces)
        try:
            for start in range(0, len(request), step):
                await loop.sock_sendall(client, request[start : start + step])
        except OSError:  # refused and closed before the rest was sent
            pass
        replies.append(await _read_to_eof(client))

    _run(scenario, parser, app=app)
    return replies[0]


POST = b"POST /v1/recognize HTTP/1.1\r\nHost: x\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"

SMUGGLING = {
    "Content-Length, then Transfer-Encoding": (
        POST + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nRIFF\r\n0\r\n\r\n",
        "ambiguous_length",
    ),
    "Transfer-Encoding, then Content-Length": (
        POST + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n4\r\nRIFF\r\n0\r\n\r\n",
        "ambiguous_length",
    ),
    "two Content-Lengths": (
        POST + b"Content-Length: 4\r\nContent-Length: 5\r\n\r\nRIFFx",
        "bad_content_length",
    ),
    "a negative Content-Length": (POST + b"Content-Length: -1\r\n\r\nRIFF", "bad_content_length"),
    "a space before the colon": (POST + b"Content-Length : 4\r\n\r\nRIFF", "bad_request"),
    "a transfer coding other than chunked": (
        POST + b"Transfer-Encoding: gzip, chunked, identity\r\n\r\nRIFF",
        "bad_request",
    ),
    "chunk data ending in a bare LF": (CHUNKED + b"4\r\nRIFF\n0\r\n\r\n", "bad_request"),
    "a bare CR in the headers": (b"GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", "bad_request"),
    "a NUL in a header": (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", "bad_request"),
    "two Hosts": (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", "bad_request"),
    "no Host in HTTP/1.1": (b"GET / HTTP/1.1\r\nX: y\r\n\r\n", "bad_request"),
}
"""Request shapes a proxy and a server may frame differently, refused by both parsers."""

SMUGGLING_H11_TAKES = {
    "a chunk size line ending in a bare LF": (CHUNKED + b"4\nRIFF\r\n0\r\n\r\n", "bad_request"),
    "headers ending in bare LFs": (b"GET / HTTP/1.1\nHost: x\n\n", "bad_request"),
    "one header ending in a bare LF": (b"GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", "bad_request"),
    "an obs-fold": (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", "bad_request"),
    "an obs-fold in Transfer-Encoding": (
        POST + b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
        "bad_request",
    ),
    "a chunk size past 64 bits": (
        CHUNKED + b"1" + b"0" * 16 + b"4\r\nRIFF\r\n0\r\n\r\n",
        "bad_request",
    ),
}
"""Shapes h11 accepts (it reads a bare LF as a line end, unfolds an obs-fold, and takes a chunk
size of any length), and httptools, the default, refuses: a reason it is the default."""


@pytest.mark.parametrize("shape", SMUGGLING)
def test_the_smuggling_shapes_are_refused_with_the_json_400(shape: str, parser: str) -> None:
    request, code = SMUGGLING[shape]
    assert _refusal(_exchange(parser, request)) == (400, code)


@pytest.mark.parametrize("shape", SMUGGLING_H11_TAKES)
def test_httptools_refuses_what_h11_takes(shape: str) -> None:
    request, code = SMUGGLING_H11_TAKES[shape]
    assert _refusal(_exchange("httptools", request)) == (400, code)


def test_a_target_uvicorn_cannot_parse_gets_the_json_400_naming_why() -> None:
    reply = _exchange("httptools", b"GET http://[::1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _refusal(reply) == (400, "bad_request")
    assert b"invalid url" in reply


@pytest.mark.parametrize("value", [b"-1", b"abc", b"1e3", b"0x10", b"12, 13", b"9" * 20 + b"x"])
def test_a_malformed_content_length_is_refused(value: bytes, parser: str) -> None:
    request = POST + b"Content-Length: " + value + b"\r\n\r\nRIFF"
    assert _refusal(_exchange(parser, request)) == (400, "bad_content_length")


@pytest.mark.parametrize("pieces", [1, 40])
def test_headers_past_the_limit_are_refused_however_they_arrive(pieces: int, parser: str) -> None:
    request = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Piece: " + b"a" * 20_000 + b"\r\n\r\n"
    assert _refusal(_exchange(parser, request, pieces=pieces)) == (431, "headers_too_large")


def test_a_trailer_that_never_ends_is_refused(parser: str) -> None:
    # httptools buffers a trailer line until it ends, and uvicorn adds trailers to the request's
    # headers: without a bound, a chunked body's trailer grew the server's memory at will.
    request = CHUNKED + b"4\r\nRIFF\r\n0\r\nX-Trailer: " + b"a" * 2_000_000
    reply = _exchange(parser, request, app=_read_body, pieces=500)
    assert _refusal(reply) == (431, "headers_too_large")


@pytest.mark.parametrize("framing", ["Content-Length", "many small chunks"])
def test_a_body_arrives_whole(framing: str, parser: str) -> None:
    body = bytes(range(256)) * 4096
    if framing == "Content-Length":
        request = POST + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    else:  # several pieces of body in one read: they are joined, not handed on one by one
        chunks = [body[i : i + 1000] for i in range(0, len(body), 1000)]
        framed = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks)
        request = CHUNKED + framed + b"0\r\nX-Trailer: 1\r\n\r\n"
    reply = _exchange(parser, request, app=_read_body, pieces=7)
    expected = f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode()
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(expected), reply[-200:]


@pytest.mark.parametrize("app", [_read_body, _refuse_at_once], ids=["read", "refused"])
def test_reads_grow_to_a_mebibyte_once_the_application_takes_the_body(
    parser: str, app: Any
) -> None:
    body = bytes(range(256)) * 16384  # 4 MiB: flow control pauses and resumes the socket
    sizes: list[int] = []

    async def scenario(protocol: Any, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        sizes.append(protocol.transport.max_size)
        head = POST + f"Content-Length: {len(body)}\r\n\r\n".encode()
        with contextlib.suppress(OSError):  # refused and closed before the rest was sent
            await loop.sock_sendall(client, head + body)
        reply = await _read_to_eof(client)
        assert reply.startswith(b"HTTP/1.1 200 " if app is _read_body else b"HTTP/1.1 413 ")
        sizes.append(protocol.transport.max_size)

    _run(scenario, parser, app=app)
    assert sizes[0] == 256 * 1024  # asyncio's own, while no body has been taken
    assert sizes[1] == (READ_BYTES if app is _read_body else 256 * 1024)
    assert READ_BYTES == 1 << 20

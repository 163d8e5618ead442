"""The protocol's lingering close, on a real socket: a connection lingers exactly while the
client may still be sending (`_unread()`).

A refusal sent before the body ended used to close with unread bytes, and the kernel's reset
destroyed the answer ("connection reset" under load); then every close lingered, so idle and
refused connections held their descriptors for `LINGER_S`, which a flood of them is after.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from arengine.http.protocol import ConnectionLimits, LimitedH11Protocol, protocol_class

Scenario = Callable[[LimitedH11Protocol, socket.socket], Awaitable[None]]


async def _refuse_at_once(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 413 without reading the body, as a refusal found in the headers does."""
    headers = [(b"content-length", b"7"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": b"refused"})


def _run(scenario: Scenario, header_timeout_s: float = 10.0) -> None:
    """`scenario(protocol, client)` against one server connection on a socket pair."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        config = Config(app=_refuse_at_once, lifespan="off", log_level="warning")
        limits = ConnectionLimits(header_timeout_s, max_header_bytes=16384, max_connections=8)
        made: list[LimitedH11Protocol] = []

        def factory() -> LimitedH11Protocol:
            made.append(protocol_class(limits, None)(config, ServerState(), {}, _loop=loop))
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


def test_unread_follows_what_the_client_may_still_send() -> None:
    async def scenario(protocol: LimitedH11Protocol, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        assert not protocol._unread()  # connected, nothing sent
        await loop.sock_sendall(client, b"POST /v1/recognize HTTP/1.1\r\nHost: x\r\n")
        await _until(lambda: protocol._request_bytes > 0)
        assert protocol._unread()  # part of a head
        await loop.sock_sendall(client, b"Content-Length: 100000\r\n\r\n" + b"x" * 10)
        await _until(lambda: protocol.transport.is_closing())  # answered before the body ended
        assert protocol._unread()  # the rest of the body may still come

    _run(scenario)


def test_an_answer_before_the_body_ended_lingers_and_arrives_whole() -> None:
    async def scenario(protocol: LimitedH11Protocol, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"
        await loop.sock_sendall(client, head + b"x" * 65536)
        answer = await _read_to_eof(client)  # the server's FIN came after the answer
        assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b"refused")
        # The client, not yet reading, goes on sending: read and dropped, never a reset.
        for _ in range(32):
            await loop.sock_sendall(client, b"x" * 65536)
        assert protocol.transport.lingering  # type: ignore[attr-defined]
        client.shutdown(socket.SHUT_WR)  # the client's end: the connection closes then
        await _until(lambda: protocol.transport._transport.is_closing())  # type: ignore[attr-defined]

    _run(scenario)


@pytest.mark.parametrize("how", ["a whole request answered", "idle past header_timeout_s"])
def test_a_connection_with_nothing_unread_closes_at_once(how: str) -> None:
    async def scenario(protocol: LimitedH11Protocol, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        if how == "a whole request answered":
            await loop.sock_sendall(client, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await _read_to_eof(client)
        assert answer.startswith(b"HTTP/1.1 413 ") or (how != "a whole request answered")
        assert not protocol._unread()
        assert not protocol.transport.lingering  # type: ignore[attr-defined]
        assert protocol.transport._transport.is_closing()  # type: ignore[attr-defined]

    _run(scenario, header_timeout_s=0.2)

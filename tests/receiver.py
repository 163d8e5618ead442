"""A real webhook receiver on 127.0.0.1 for the tests: it answers each POST as its script says
(a status, a redirect, a huge body, or holding the request) and records what it was sent."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HUGE = -1
"""A 200 whose body claims a GiB and streams until the client goes away."""
DRIP = -2
"""An answer's status line sent a byte at a time, a byte every 50 ms, for ever."""


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    path: str


@dataclass
class Receiver:
    """What the receiver was sent (in order), and what it answers next."""

    port: int = 0
    script: list[int] = field(default_factory=list)
    """Statuses for the next requests, in order (then 200); a 3xx redirects to /elsewhere."""
    received: list[Received] = field(default_factory=list)
    gave_up_streaming: threading.Event = field(default_factory=threading.Event)
    """Set when the client closed its connection in the middle of a HUGE answer."""
    condition: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def wait_for(self, count: int, seconds: float = 60.0) -> bool:
        """Whether `count` requests have come within `seconds` (woken by each)."""
        with self.condition:
            return self.condition.wait_for(lambda: len(self.received) >= count, seconds)

    def _next(self) -> int:
        with self.condition:
            return self.script.pop(0) if self.script else 200


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            status = receiver._next()
            with receiver.condition:
                headers = {key.lower(): value for key, value in self.headers.items()}
                receiver.received.append(Received(headers, body, self.path))
                receiver.condition.notify_all()
            if status == HUGE:
                self._huge()
                return
            if status == DRIP:
                self._drip()
                return
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("location", f"http://127.0.0.1:{receiver.port}/elsewhere")
            self.send_header("content-length", "0")
            self.end_headers()

        def _huge(self) -> None:
            self.send_response(200)
            self.send_header("content-length", str(1 << 30))
            self.end_headers()
            chunk = bytes(64 << 10)
            try:
                for _ in range((1 << 30) // len(chunk)):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:  # the client closed the connection without reading it all
                receiver.gave_up_streaming.set()

        def _drip(self) -> None:
            try:
                while True:
                    self.wfile.write(b"H")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                receiver.gave_up_streaming.set()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def receiving(
    receiver: Receiver | None = None, tls: ssl.SSLContext | None = None
) -> Iterator[Receiver]:
    """`receiver` listening on 127.0.0.1 (its port, or a free one) until the block ends; over
    TLS with `tls` (a server context)."""
    receiver = receiver or Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", receiver.port), _handler(receiver))
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()

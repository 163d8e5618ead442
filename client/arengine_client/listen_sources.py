"""`arengine listen --server URL --sources sources.toml`: every source of a sources file
(`sources.py`) read here (`capture.py`) and sent to the server as its own live stream,
`?source=<name>`, all at once.

One event loop runs a task per source; each source's blocking reads run on a thread of its own,
so a stalled camera holds up nobody else. A source that ends or fails, and a server that goes
away or ends the stream, are reconnected after a wait that doubles with jitter (`Backoff`); it
starts over once a connection has carried `STABLE_S` of audio. A recording (a file's path) is
read once at real speed. An answer that no retry can change (an unknown model, a refused key)
stops that source only. Tags are printed as `arengine listen` prints them (JSON lines, each with
its `source`); a status line per source goes to standard error at each change and every
`status_s` seconds.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from websockets.exceptions import WebSocketException

from arengine_client._async import AsyncClient
from arengine_client.capture import Capture, CaptureError
from arengine_client.errors import ArengineError
from arengine_client.remote import Remote
from arengine_client.sources import Source

STABLE_S = 10.0
"""A connection that carried this much audio resets its source's backoff."""

RETRIED_STATUSES = frozenset({408, 413, 429})
"""4xx answers a reconnection can change: a stream idle or at `listen_max_duration_s`, a limit."""

T = TypeVar("T")


@dataclass
class Status:
    """What a source is doing, for its status line (changed by its task only)."""

    name: str
    state: str = "starting"
    streamed_s: float = 0.0
    last_tag: str = ""
    note: str = ""

    def line(self) -> str:
        tag = f", last tag {self.last_tag}" if self.last_tag else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.name}: {self.state}{note}, {self.streamed_s:.1f} s streamed{tag}"


def listen_sources(
    remote: Remote,
    sources: Sequence[Source],
    out: TextIO | None = None,
    progress: bool = False,
    status_s: float = 10.0,
) -> int:
    """Stream every source until each has ended (recordings) or failed for good, or until
    SIGINT or SIGTERM: 0, or 1 when a source failed for good."""
    statuses = [Status(source.name) for source in sources]
    run = _Run(AsyncClient(remote.url, remote.api_key), out or sys.stdout, progress)
    with suppress(KeyboardInterrupt):
        asyncio.run(run.all(sources, statuses, status_s))
    return 1 if any(status.state == "failed" for status in statuses) else 0


class _Run:
    def __init__(self, client: AsyncClient, out: TextIO, progress: bool) -> None:
        self.client, self.out, self.progress = client, out, progress

    async def all(self, sources: Sequence[Source], statuses: list[Status], status_s: float) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            with suppress(NotImplementedError, RuntimeError):  # Windows; not the main thread
                loop.add_signal_handler(number, stop.set)
        async with self.client:
            pairs = zip(sources, statuses, strict=True)
            streams = [asyncio.create_task(self.keep(s, status)) for s, status in pairs]
            every = asyncio.create_task(_report(statuses, status_s))
            stopped = asyncio.create_task(stop.wait())
            ended = asyncio.gather(*streams, return_exceptions=True)
            waited: list[asyncio.Future[Any]] = [stopped, ended]
            await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            for task in (*streams, every, stopped):
                task.cancel()
            await asyncio.gather(ended, every, stopped, return_exceptions=True)
        for outcome in ended.result():
            if isinstance(outcome, Exception):  # a defect here, not a source's failure
                raise outcome

    async def keep(self, source: Source, status: Status) -> None:
        """Stream `source` again and again, waiting longer after each failure in a row."""
        worker = _Worker(f"source-{source.name}")
        attempt = 0
        try:
            while True:
                status.state, status.note = "connecting", ""  # announced once connected
                carried = status.streamed_s
                reason = await self.once(source, status, worker)
                if reason is None:
                    _change(status, "finished")
                    return
                if status.streamed_s - carried >= STABLE_S:
                    attempt = 0
                wait_s = source.backoff.delay_s(attempt)
                attempt += 1
                _change(status, "reconnecting", f"in {wait_s:.1f} s: {reason}")
                await asyncio.sleep(wait_s)
        except _Lasting as error:
            _change(status, "failed", str(error))
        finally:
            worker.stop()

    async def once(self, source: Source, status: Status, worker: _Worker) -> str | None:
        """One connection: why it ended, or None when a recording was sent whole."""
        try:
            capture = await worker.call(Capture, source)
        except CaptureError as error:
            if error.lasting:
                raise _Lasting(f"cannot read the source: {error}") from None
            return f"cannot read the source: {error}"
        feed = _Feed(capture, worker, status, source)
        opening = {"format": "s16le", "sample_rate": source.sample_rate, "channels": 1}
        lines = self.client.listen_lines(
            feed.chunks(), opening, model=source.models, source=source.name, **source.parameters
        )
        try:
            async for item in lines:
                self.write(item, status, source.name)
        except ArengineError as error:
            if 400 <= error.status < 500 and error.status not in RETRIED_STATUSES:
                raise _Lasting(f"the server refused it: {error.code}: {error.message}") from None
            return f"the server ended the stream: {error.code}: {error.message}"
        except (OSError, WebSocketException) as error:  # TimeoutError is an OSError
            return f"cannot reach the server: {error or type(error).__name__}"
        finally:
            await worker.call(capture.close)
        if feed.error is not None:
            return f"the source failed: {feed.error}"
        return None if source.kind == "file" else "the source ended"

    def write(self, item: dict[str, Any], status: Status, name: str) -> None:
        if "progress" in item or "summary" in item:
            # Several streams' lines interleave: each says its source, as the tags do.
            item = {**item, "source": name}
        if "progress" in item:
            if self.progress:
                print(json.dumps(item), file=sys.stderr, flush=True)
            return
        if "label" in item:
            status.last_tag = f"{item['label']} at {float(item.get('start', 0.0)):.1f} s"
        print(json.dumps(item), file=self.out, flush=True)


class _Lasting(Exception):
    """A failure no reconnection can change: the source stops."""


class _Feed:
    """A capture's chunks for the stream, counted into its status. A source that fails ends
    the chunks (the server then sends what it holds, the summary last) with `error` set."""

    def __init__(self, capture: Capture, worker: _Worker, status: Status, source: Source) -> None:
        self.capture, self.worker, self.status = capture, worker, status
        self.rate = 2 * source.sample_rate
        self.paced = source.kind == "file"
        self.error: CaptureError | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        started, sent = time.monotonic(), 0
        while True:
            try:
                chunk = await self.worker.call(self.capture.read)
            except CaptureError as error:
                self.error = error
                return
            if not chunk:
                return
            if sent == 0:
                _change(self.status, "connected")
            yield chunk
            sent += len(chunk)
            self.status.streamed_s += len(chunk) / self.rate
            if self.paced:
                await asyncio.sleep(max(0.0, started + sent / self.rate - time.monotonic()))


class _Worker:
    """A daemon thread running one source's blocking calls in order. Not an executor: its
    threads are joined when the program exits, and a capture blocked on a silent camera would
    hold the exit for its whole read timeout."""

    def __init__(self, name: str) -> None:
        self._calls: list[tuple[Callable[..., Any], tuple[Any, ...], Future[Any]]] = []
        self._ready = threading.Condition()
        self._stopped = False
        threading.Thread(target=self._run, name=name, daemon=True).start()

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        future: Future[T] = Future()
        with self._ready:
            self._calls.append((function, args, future))
            self._ready.notify()
        return await asyncio.wrap_future(future)

    def stop(self) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._calls or self._stopped)
                if not self._calls:
                    return
                function, args, future = self._calls.pop(0)
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args))
                except BaseException as error:  # handed to the awaiting task
                    future.set_exception(error)


def _change(status: Status, state: str, note: str = "") -> None:
    """A new state, announced on its status line."""
    status.state, status.note = state, note
    print(f"arengine: {status.line()}", file=sys.stderr, flush=True)


async def _report(statuses: Sequence[Status], every_s: float) -> None:
    """Every source's status line every `every_s` seconds (never when it is 0)."""
    while every_s > 0:
        await asyncio.sleep(every_s)
        for status in statuses:
            print(f"arengine: {status.line()}", file=sys.stderr, flush=True)

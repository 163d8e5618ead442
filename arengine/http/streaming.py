"""The NDJSON tag stream of `POST /v1/recognize`: tags from the engine threads to the client."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi.responses import StreamingResponse

from arengine.engine.request import EngineRequest
from arengine.errors import ArengineError, Cancelled, DeadlineExceeded
from arengine.types import Result, Tag, result_dict, tag_dict

log = logging.getLogger(__name__)


def stop(recognition: EngineRequest) -> None:
    """Cancel the recognition unless it is over."""
    if not recognition.future.done():
        recognition.cancel()


class TagFeed:
    """Tags from an engine thread to the event loop, and the recognition's result when it is done.

    Example, inside a request handler::

        feed = TagFeed()
        recognition = engine.recognize(path, speech, {}, "r1", feed.listener())
        feed.watch(recognition)
        first = await feed.next(deadline)
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[list[Tag]] = asyncio.Queue()
        self._result: asyncio.Future[Result] | None = None
        self._recognition: EngineRequest | None = None

    def listener(self) -> Callable[[list[Tag]], None]:
        def hear(tags: list[Tag]) -> None:  # runs on an engine thread
            self._loop.call_soon_threadsafe(self._queue.put_nowait, tags)

        return hear

    def watch(self, recognition: EngineRequest) -> None:
        self._recognition = recognition
        self._result = asyncio.wrap_future(recognition.future)
        # A cancelled recognition's exception is expected: read it so asyncio does not log it.
        self._result.add_done_callback(lambda future: future.cancelled() or future.exception())

    def progress(self) -> dict[str, Any]:
        """The recognition's progress as the stream's `progress` line."""
        assert self._recognition is not None
        done, duration = self._recognition.progress
        return {"progress": {"audio_s": round(done, 3), "duration_s": duration}}

    async def next(
        self, deadline: float, gone: asyncio.Future[Any] | None = None, tick: float | None = None
    ) -> list[Tag] | Result | None:
        """The next batch of final tags, or the result once the recognition is done (with every
        tag); None when `tick` seconds pass first."""
        assert self._result is not None  # watch() comes right after submitting
        if not self._queue.empty():
            return self._queue.get_nowait()
        getter = asyncio.ensure_future(self._queue.get())
        waiting: set[asyncio.Future[Any]] = {getter, self._result}
        if gone is not None:
            waiting.add(gone)
        left = max(deadline - time.monotonic(), 0.0)
        try:
            done, _ = await asyncio.wait(
                waiting,
                timeout=left if tick is None else min(left, tick),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            getter.cancel()
        if getter in done:
            tags: list[Tag] = getter.result()
            return tags
        if self._result in done:
            return self._result.result()
        if gone is not None and gone in done:
            raise Cancelled("the client disconnected")
        if tick is not None and time.monotonic() < deadline:
            return None
        raise DeadlineExceeded("the request's deadline passed; its remaining work was dropped")


PROGRESS_EVERY_S = 1.0
"""How often a stream that asked for `progress` gets a progress line."""


async def lines(
    feed: TagFeed,
    first: list[Tag] | Result | None,
    deadline: float,
    finish: Callable[[int, Result | None], None],
    progress: bool = False,
) -> AsyncIterator[bytes]:
    """NDJSON: the tags in order (with `{"progress": ...}` lines when `progress`: one first,
    about one a second, and one with all the audio done before the summary), then
    `{"summary": ...}` or `{"error": ...}`."""
    event: list[Tag] | Result | None = first
    sent, status, result = 0, 499, None
    tick = PROGRESS_EVERY_S if progress else None
    reported = time.monotonic()
    try:
        if progress:
            yield ndjson([feed.progress()])
        while not isinstance(event, Result):
            if event:
                yield tag_lines(event)
                sent += len(event)
            if progress and time.monotonic() - reported >= PROGRESS_EVERY_S:
                reported = time.monotonic()
                yield ndjson([feed.progress()])
            event = await feed.next(deadline, tick=tick)
        result = event
        if progress:
            yield ndjson([feed.progress()])
        yield ending(result, sent)
        status = 200
    except ArengineError as error:
        status = error.status
        log.info("request stream ended by %s: %s", error.code, error.message)
        yield error_line(error.code, error.message)
    finally:
        finish(status, result)


def tag_lines(tags: Sequence[Tag]) -> bytes:
    """Tags as NDJSON lines, one a line."""
    return ndjson([tag_dict(tag) for tag in tags])


def ending(result: Result, sent: int) -> bytes:
    """A stream's last lines: the tags after the `sent` first, then `{"summary": ...}`."""
    body = {key: value for key, value in result_dict(result).items() if key != "tags"}
    summary = {"summary": {**body, "tag_count": len(result.tags)}}
    return tag_lines(result.tags[sent:]) + ndjson([summary])


def error_line(code: str, message: str) -> bytes:
    """A stream's last line when it ends in an error."""
    return ndjson([{"error": {"code": code, "message": message}}])


def ndjson(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


class TagStream(StreamingResponse):
    """A streaming response that releases the request's resources even if it never starts."""

    def __init__(
        self, lines: AsyncIterator[bytes], release: Callable[[], None], media_type: str
    ) -> None:
        super().__init__(lines, media_type=media_type)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()

"""The NDJSON tag stream of `POST /v1/recognize`: tags from the engine threads to the client."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

from arengine.engine.job import Job
from arengine.errors import ArengineError, Cancelled, DeadlineExceeded
from arengine.types import Result, Tag, result_dict, tag_dict

log = logging.getLogger(__name__)


def stop(job: Job) -> None:
    """Cancel the job unless it is over."""
    if not job.future.done():
        job.cancel()


class TagFeed:
    """Tags from an engine thread to the event loop, and the job's result when it is done.

    Example, inside a request handler::

        feed = TagFeed()
        job = engine.recognize(path, speech, {}, "r1", feed.listener())
        feed.watch(job)
        first = await feed.next(deadline)
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[list[Tag]] = asyncio.Queue()
        self._result: asyncio.Future[Result] | None = None

    def listener(self) -> Callable[[list[Tag]], None]:
        def hear(tags: list[Tag]) -> None:  # runs on an engine thread
            self._loop.call_soon_threadsafe(self._queue.put_nowait, tags)

        return hear

    def watch(self, job: Job) -> None:
        self._result = asyncio.wrap_future(job.future)
        # A cancelled job's exception is expected: read it so asyncio does not log it.
        self._result.add_done_callback(lambda future: future.cancelled() or future.exception())

    async def next(
        self, deadline: float, gone: asyncio.Future[Any] | None = None
    ) -> list[Tag] | Result:
        """The next batch of final tags, or the result once the job is done (with every tag)."""
        assert self._result is not None  # watch() comes right after submitting
        if not self._queue.empty():
            return self._queue.get_nowait()
        getter = asyncio.ensure_future(self._queue.get())
        waiting: set[asyncio.Future[Any]] = {getter, self._result}
        if gone is not None:
            waiting.add(gone)
        try:
            done, _ = await asyncio.wait(
                waiting,
                timeout=max(deadline - time.monotonic(), 0.0),
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
        raise DeadlineExceeded("the request's deadline passed; its remaining work was dropped")


async def lines(
    feed: TagFeed,
    first: list[Tag] | Result,
    deadline: float,
    finish: Callable[[int, Result | None], None],
) -> AsyncIterator[bytes]:
    """NDJSON: the tags in order, then `{"summary": ...}` or `{"error": ...}`."""
    event, sent, status, result = first, 0, 499, None
    try:
        while isinstance(event, list):
            yield _ndjson([tag_dict(tag) for tag in event])
            sent += len(event)
            event = await feed.next(deadline)
        result = event
        yield _ndjson([tag_dict(tag) for tag in result.tags[sent:]])
        body = {key: value for key, value in result_dict(result).items() if key != "tags"}
        yield _ndjson([{"summary": {**body, "tag_count": len(result.tags)}}])
        status = 200
    except ArengineError as error:
        status = error.status
        log.info("request stream ended by %s: %s", error.code, error.message)
        yield _ndjson([{"error": {"code": error.code, "message": error.message}}])
    finally:
        finish(status, result)


def _ndjson(items: list[dict[str, Any]]) -> bytes:
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

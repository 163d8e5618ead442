"""`WS /v1/listen`'s own logic, in-process: what its hostile-message tests must cover, and a
task of a stream that dies. The protocol itself is tested on a real server
(`tests/e2e/test_listen.py`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.routing import APIWebSocketRoute

from arengine.errors import ArengineError
from arengine.http import listen
from arengine.http.app import create_app
from arengine.live.spool import StreamFormat, parse_message
from arengine.settings import MAX_STREAM_TEXT_BYTES, MAX_STREAM_TEXT_DEPTH, Settings


def _websocket_paths(routes: list[Any]) -> Iterator[str]:
    for route in routes:
        if isinstance(route, APIWebSocketRoute):
            yield route.path
        original: APIRouter | None = getattr(route, "original_router", None)
        if original is not None:
            yield from _websocket_paths(original.routes)


def test_the_only_websocket_endpoint_is_the_one_the_hostile_tests_cover() -> None:
    """The deep-nesting, bad-opening and oversized-message tests (`tests/e2e/test_listen.py`)
    run against `WS /v1/listen`: a new WebSocket endpoint fails this test until they cover it."""
    app = create_app(Settings())
    assert sorted(_websocket_paths(app.routes)) == ["/v1/listen"]


@pytest.mark.parametrize(
    "text",
    [
        "[" * (MAX_STREAM_TEXT_DEPTH + 1) + "]" * (MAX_STREAM_TEXT_DEPTH + 1),
        "[" * 100_000,
        '{"end": "' + "x" * MAX_STREAM_TEXT_BYTES + '"}',
        '{"end": "\u00e9' + "x" * (MAX_STREAM_TEXT_BYTES - 12) + '"}',  # over in bytes, not chars
    ],
)
def test_a_message_past_the_bounds_is_refused_before_it_is_parsed(text: str) -> None:
    with pytest.raises(ArengineError) as refused:
        parse_message(text, "the message")
    assert refused.value.code == "invalid_stream_message"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [[["x"]]]}',
        '{"format": "s16le", "note": "[[[[[[[[{{{{{{{{"}',  # brackets in a string do not count
        '{"format": "s16le", "note": "\\"[[[[[[[[[[[["}',
    ],
)
def test_a_message_within_the_bounds_is_parsed(text: str) -> None:
    assert isinstance(parse_message(text, "the message"), dict)


@pytest.mark.parametrize(
    "opening",
    ['{"format": ["s16le"]}', '{"format": {"a": 1}}', '{"format": null}', '{"format": 16}'],
)
def test_an_opening_whose_format_is_not_a_name_is_refused(opening: str) -> None:
    """Before: a list or a dict was looked up in the formats' dict, a TypeError (1006)."""
    with pytest.raises(ArengineError, match="is not accepted") as refused:
        StreamFormat.parse(opening, 8, (8000, 192000))
    assert refused.value.code == "invalid_stream_message"


class _Job:
    def __init__(self) -> None:
        self.errors: list[ArengineError] = []

    def abort(self, error: ArengineError) -> None:
        self.errors.append(error)


def test_a_task_that_dies_ends_its_stream_with_an_internal_error() -> None:
    """Before: a reading task that raised anything but the errors it expected died unnoticed;
    nothing read the client any more, and the stream went on until its deadline."""

    async def dies() -> None:
        raise RecursionError("maximum recursion depth exceeded")

    async def ends() -> None:
        pass

    async def run() -> list[ArengineError]:
        job = _Job()
        for work in (dies(), ends()):
            task = asyncio.ensure_future(work)
            task.add_done_callback(functools.partial(listen._noticed, job, "r1"))  # type: ignore[arg-type]
            await asyncio.wait([task])
        await asyncio.sleep(0)
        return job.errors

    (error,) = asyncio.run(run())
    assert error.code == "internal_error" and "r1" in error.message

"""`POST /v1/render`: a result the client already has, written in another format.

The page (and any client) downloads a format without sending the recording again: it posts the
JSON result it already holds (`POST /v1/recognize`'s answer, or a stream's tags with its
summary) and gets the file, named as a download of the recognition would be.

A render is work like a recognition's, bounded the same way: its body takes an upload slot and
its work an engine slot (`Admission`: 503 beyond them); it runs off the event loop, at most
`RENDERS_AT_ONCE` at a time; its size bounds its time (32 MiB, `MAX_RESULT_TAGS` tags, every
writer linear in the tags); and `render_timeout_s` bounds it again on a slow or busy machine: the
render stops at its next check and answers 504 `render_timeout`. A thread cannot be stopped from
outside, so the render checks the clock itself: between parsing, checking and writing, and every
`_CHECK_EVERY` tags that a writer reads (`_Timed`).
"""

from __future__ import annotations

import dataclasses
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError

from arengine.engine.admission import UploadProgress
from arengine.errors import (
    DeadlineExceeded,
    ErrorCode,
    InvalidInput,
    TooLarge,
    UnsupportedFormat,
)
from arengine.http.errors import error_responses, problem_text
from arengine.http.schemas import RecognizeResponse, format_enum
from arengine.outputs.formats import STREAM, Format, get_format, known_formats
from arengine.service.engine import Engine
from arengine.settings import MAX_RESULT_BYTES, MAX_RESULT_TAGS, size_text
from arengine.types import Result, Tag

router = APIRouter()

RENDERS_AT_ONCE = 2
"""Renders running at once, each on a thread of its own; more wait for one to finish."""

_RESULT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/RecognizeResponse"}}
        },
    }
}


@router.post(
    "/v1/render",
    responses=error_responses(),
    openapi_extra=_RESULT_BODY,
    response_class=Response,
)
async def render(
    request: Request,
    format: Annotated[
        str,
        Query(max_length=16, description=f"One of: {known_formats()} but {STREAM}.",
              json_schema_extra=format_enum(ndjson=False)),
    ],
    name: Annotated[
        str | None,
        Query(max_length=255, description="The recording's file name: the download is named "
              "after it (`recording` if not given)."),
    ] = None,
) -> Response:  # fmt: skip
    """A result (the JSON of `POST /v1/recognize`) as a file in `format`."""
    fmt = _format(format)
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":  # a form or text/plain a page may send unasked
        raise UnsupportedFormat(
            f"send the result as application/json, not {media_type or 'no content type'}",
            code=ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        )
    engine: Engine = request.app.state.engine
    engine.admission.check_room()
    with engine.admission.uploading_slot() as progress:
        body = await _body(request, progress)
    deadline = _Deadline(engine.settings.limits.render_timeout_s)
    with engine.admission.pending_slot():
        limiter = _limiter(request.app)
        return await to_thread.run_sync(_write, fmt, body, name, deadline, limiter=limiter)


def _limiter(app: FastAPI) -> CapacityLimiter:
    limiter: CapacityLimiter | None = getattr(app.state, "render_limiter", None)
    if limiter is None:  # made on the event loop, on the first render
        limiter = app.state.render_limiter = CapacityLimiter(RENDERS_AT_ONCE)
    return limiter


class _Deadline:
    """When a render must have stopped; `check` raises `render_timeout` past it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise DeadlineExceeded(
                f"the render took longer than render_timeout_s ({self.seconds:g} s) and was "
                "stopped; render fewer tags, or a lighter format (csv, json)",
                code=ErrorCode.RENDER_TIMEOUT,
            )


_CHECK_EVERY = 256
"""Tags a writer reads between two looks at the clock."""


class _Timed(tuple[Tag, ...]):
    """A result's tags that look at the render's deadline as a writer goes through them: every
    writer reads `result.tags` in its own loops, so they all stop without a check of their own."""

    deadline: _Deadline

    def __new__(cls, tags: tuple[Tag, ...], deadline: _Deadline) -> _Timed:
        timed = super().__new__(cls, tags)
        timed.deadline = deadline
        return timed

    def __iter__(self) -> Iterator[Tag]:
        for index, tag in enumerate(super().__iter__()):
            if index % _CHECK_EVERY == 0:
                self.deadline.check()
            yield tag


def _write(fmt: Format, body: bytes, name: str | None, deadline: _Deadline) -> Response:
    """Parse, check and write, on a worker thread: none of it runs on the event loop."""
    deadline.check()  # the turn may have come late
    result = _result(body)
    deadline.check()
    result = dataclasses.replace(result, tags=_Timed(result.tags, deadline))
    if not fmt.accepts([tag.label for tag in result.tags]):
        raise InvalidInput(
            f"format {fmt.name} holds only notes and this result has other tags",
            code=ErrorCode.INVALID_PARAMETER,
        )
    try:
        written = download(fmt, result, name)
    except (ValueError, OverflowError, struct.error) as error:
        raise InvalidInput(
            f"the result cannot be written as {fmt.name}: {error}", code=ErrorCode.INVALID_RESULT
        ) from None
    deadline.check()  # a writer's last step (its library's output) reads no tags
    return written


def _result(body: bytes) -> Result:
    """The result a body holds; `InvalidInput` (`invalid_result`) saying where it is not one."""
    try:
        result = RecognizeResponse.model_validate_json(body).to_result()
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        message = problem_text(str(first["msg"]))
        raise InvalidInput(
            f"not a recognition result: {where}: {message}", code=ErrorCode.INVALID_RESULT
        ) from None
    except (ValueError, OverflowError) as error:
        raise InvalidInput(
            f"not a recognition result: {error}", code=ErrorCode.INVALID_RESULT
        ) from None
    if len(result.tags) > MAX_RESULT_TAGS:
        raise TooLarge(
            f"the result holds {len(result.tags)} tags; at most {MAX_RESULT_TAGS}",
            code=ErrorCode.RESULT_TOO_LARGE,
        )
    return result


def download(fmt: Format, result: Result, upload_name: str | None) -> Response:
    """`result` as a file in `fmt`, named after the upload."""
    stem = re.sub(r"[^A-Za-z0-9._ -]", "_", Path(upload_name or "").stem).strip(" .")
    name = f"{stem or 'recording'}.{fmt.extension}"
    media_type = fmt.media_type
    if media_type.startswith("text/"):
        media_type += "; charset=utf-8"
    return Response(
        fmt.encode(result, stem or "recording"),
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _format(name: str) -> Format:
    try:
        return get_format(name)
    except ValueError as error:
        raise InvalidInput(str(error), code=ErrorCode.INVALID_PARAMETER) from None


async def _body(request: Request, progress: UploadProgress) -> bytes:
    """The request body, refused past `MAX_RESULT_BYTES` as soon as it gets there."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        progress.add(len(chunk))
        if size > MAX_RESULT_BYTES:
            raise TooLarge(
                f"the result passed {size_text(MAX_RESULT_BYTES)}", code=ErrorCode.RESULT_TOO_LARGE
            )
        chunks.append(chunk)
    return b"".join(chunks)

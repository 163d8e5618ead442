"""Uploads spooled to a temporary file while they stream in, with the byte cap counted as they do.

Two shapes are accepted: `multipart/form-data` with one part named `file`, or a raw body with an
audio content type. Nothing is held in memory beyond one chunk; the file is the caller's to delete.

A multipart body costs about what a raw one does: python-multipart finds the next boundary in a
body chunk with one `bytes.find` (C), and the part's bytes go to the file as a view of the
chunk, in one write (`tests/http/test_uploads.py`). streaming-form-data (Cython) was tried
in its place and kept out: with the boundaries clients send (httpx's 32 hex digits, browsers'
`----WebKitFormBoundary...`) its scan was no faster per chunk, it copies each chunk twice (a
leftover joined to the next chunk, each emitted slice), it re-copies a part's headers per chunk
until they end (no bound on them: quadratic), drops the data of a part without a name uncounted,
and cannot say whether the closing boundary came.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header
from starlette.requests import ClientDisconnect

from arengine.audio.arrival import Arrival
from arengine.engine.admission import UploadProgress
from arengine.errors import (
    ArengineError,
    BodyTimeout,
    Cancelled,
    CorruptAudio,
    ErrorCode,
    InsufficientStorage,
    InvalidInput,
    TooLarge,
    UnsupportedFormat,
)
from arengine.settings import MAX_FIELD_BYTES, MAX_MULTIPART_PARTS, size_text

FILE_FIELD = "file"
RAW_TYPES = ("audio/", "video/", "application/octet-stream", "application/ogg")
"""Content types accepted for a raw body (video: its audio track is decoded)."""


@dataclass(frozen=True, slots=True)
class UploadLimits:
    """Caps on what a client may send."""

    max_bytes: int
    max_parts: int = MAX_MULTIPART_PARTS
    max_field_bytes: int = MAX_FIELD_BYTES


@dataclass(frozen=True, slots=True)
class UploadPace:
    """How slowly a body may arrive: a gap of at most `idle_timeout_s`, the whole of it before
    `deadline` (monotonic), and after `grace_s` an average of at least `min_bytes_per_s` (0: any).

    >>> pace = UploadPace(idle_timeout_s=30, deadline=100.0, min_bytes_per_s=16384, grace_s=10)
    >>> pace.next_wait(started=0.0, now=4.0, received=0)[0]  # the grace period ends at 10 s
    6.0
    """

    idle_timeout_s: float
    deadline: float
    min_bytes_per_s: int = 0
    grace_s: float = 0.0

    def next_wait(self, started: float, now: float, received: int) -> tuple[float, BodyTimeout]:
        """How long to wait for the next chunk, and the error to raise if it does not come."""
        at, limit = self.due(started, now, received)
        return max(at - now, 0.0), self.error(limit, started, at, received)

    def due(self, started: float, now: float, received: int) -> tuple[float, str]:
        """When the next chunk is due (monotonic) and the limit that says so: "idle",
        "deadline" or "rate". Per chunk, this builds no error (`error` does, when one is due)."""
        at, limit = now + self.idle_timeout_s, "idle"
        if self.deadline < at:
            at, limit = self.deadline, "deadline"
        if self.min_bytes_per_s > 0:
            rate_due = started + max(self.grace_s, received / self.min_bytes_per_s)
            if rate_due < at:
                at, limit = rate_due, "rate"
        return at, limit

    def error(self, limit: str, started: float, due: float, received: int) -> BodyTimeout:
        """The error for a chunk that `due` said was due at `due` and did not come."""
        if limit == "idle":
            return BodyTimeout(f"no body data for {self.idle_timeout_s:g} s")
        if limit == "deadline":
            return BodyTimeout(
                "the body was still arriving at the request's deadline",
                code=ErrorCode.UPLOAD_TOO_SLOW,
            )
        return BodyTimeout(
            f"the body arrived at {received / max(due - started, 1e-9):.0f} bytes/s; "
            f"the minimum is {self.min_bytes_per_s} bytes/s after {self.grace_s:g} s",
            code=ErrorCode.UPLOAD_TOO_SLOW,
        )


@dataclass(frozen=True, slots=True)
class Upload:
    """A spooled upload: `path` is a private temporary file; `filename` is only reported."""

    path: Path
    size: int
    filename: str | None


def check_declared_length(content_length: str | None, limits: UploadLimits) -> None:
    """Refuse a body whose `Content-Length` is malformed or over the cap, before reading it."""
    if content_length is None:
        return
    if not content_length.isdigit():
        raise InvalidInput(
            f"Content-Length {content_length[:32]!r} is not a byte count",
            code=ErrorCode.BAD_CONTENT_LENGTH,
        )
    if int(content_length) > limits.max_bytes:
        raise TooLarge(
            f"the body is {content_length} bytes; the limit is {limits.max_bytes}",
            code=ErrorCode.UPLOAD_TOO_LARGE,
        )


async def spool(
    body: AsyncIterator[bytes],
    content_type: str | None,
    limits: UploadLimits,
    directory: Path | None,
    pace: UploadPace,
    progress: UploadProgress | None = None,
    arrival: Arrival | None = None,
) -> Upload:
    """Write the audio of a request body to a temporary file in `directory`, at `pace` or
    faster, counting the bytes in `progress`, and the audio's bytes on disk in `arrival`.

    The file is removed if anything goes wrong, the client disconnecting included; `arrival`
    then fails with the error (or `Cancelled`).
    """
    arrival = arrival or Arrival()
    try:
        upload = await _spool(body, content_type, limits, directory, pace, progress, arrival)
    except ArengineError as error:
        arrival.fail(error)
        raise
    except BaseException:
        arrival.fail(Cancelled("the upload was cancelled"))
        raise
    arrival.finish()
    return upload


async def _spool(
    body: AsyncIterator[bytes],
    content_type: str | None,
    limits: UploadLimits,
    directory: Path | None,
    pace: UploadPace,
    progress: UploadProgress | None,
    arrival: Arrival,
) -> Upload:
    media_type, options = parse_options_header(content_type or "")
    media = media_type.decode("latin-1").lower()
    boundary = options.get(b"boundary")
    if media == "multipart/form-data" and not 1 <= len(boundary or b"") <= 70:
        # RFC 2046 allows 1 to 70 characters; longer ones are an attack on the parser.
        raise CorruptAudio(
            "the multipart boundary must be 1 to 70 characters", code=ErrorCode.BAD_MULTIPART
        )
    if media != "multipart/form-data" and not media.startswith(RAW_TYPES):
        raise UnsupportedFormat(
            f"content type {media or 'none'!r}: send multipart/form-data with a "
            f"{FILE_FIELD!r} field, or a raw body with an audio/* content type",
            code=ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        )
    chunks = _paced(body, pace, progress)
    try:
        fd, name = tempfile.mkstemp(prefix="arengine-", suffix=".upload", dir=directory)
    except OSError as error:
        raise _no_room(error) from None
    path = Path(name)
    arrival.opened(path)
    try:
        with os.fdopen(fd, "wb") as file:
            target = _Sink(file, arrival)
            if boundary and media == "multipart/form-data":
                filename, size = await _MultipartSpooler(boundary, target, limits).run(chunks)
            else:
                filename, size = None, await _copy(chunks, target, limits)
    except ClientDisconnect:
        path.unlink(missing_ok=True)
        raise Cancelled("the client disconnected during the upload") from None
    except OSError as error:
        path.unlink(missing_ok=True)
        raise _no_room(error) from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Upload(path=path, size=size, filename=filename)


def _no_room(error: OSError) -> InsufficientStorage:
    reason = "the upload directory is full" if error.errno == errno.ENOSPC else "it is unwritable"
    return InsufficientStorage(f"the upload could not be stored: {reason}")


async def _paced(
    body: AsyncIterator[bytes], pace: UploadPace, progress: UploadProgress | None
) -> AsyncIterator[bytes]:
    """The body's chunks; `BodyTimeout` as soon as they arrive slower than `pace` allows."""
    chunks = aiter(body)
    started = time.monotonic()
    received = 0
    while True:
        # `asyncio.timeout`, not `wait_for`: in Python 3.11 `wait_for` wraps each chunk's read in
        # a new task, and the event loop's turns for it held the GIL on every chunk; the error
        # is built only when it is due.
        due, limit = pace.due(started, time.monotonic(), received)
        try:
            async with asyncio.timeout_at(due):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise pace.error(limit, started, due, received) from None
        received += len(chunk)
        if progress is not None:
            progress.add(len(chunk))
        yield chunk


class _Sink:
    """The spool file: what each body chunk brought is flushed and counted in `arrival`, so a
    reader of the file (the engine, for a WAV read as it arrives) sees it."""

    def __init__(self, file: BinaryIO, arrival: Arrival) -> None:
        self._file = file
        self._arrival = arrival
        self._unflushed = 0

    def write(self, data: bytes | memoryview) -> None:
        self._file.write(data)
        self._unflushed += len(data)

    def flush(self) -> None:
        if self._unflushed:
            self._file.flush()
            self._arrival.add(self._unflushed)
            self._unflushed = 0

    def named(self, name: str | None) -> None:
        """The file's name from its part's headers, known before its first byte."""
        self._arrival.name = name


async def _copy(body: AsyncIterator[bytes], target: _Sink, limits: UploadLimits) -> int:
    size = 0
    async for chunk in body:
        size += len(chunk)
        _check_size(size, limits)
        target.write(chunk)
        target.flush()
    return size


def _check_size(size: int, limits: UploadLimits) -> None:
    if size > limits.max_bytes:
        raise TooLarge(
            f"the upload passed the limit of {limits.max_bytes} bytes",
            code=ErrorCode.UPLOAD_TOO_LARGE,
        )


class _MultipartSpooler:
    """python-multipart callbacks that write the `file` part and only count the others."""

    def __init__(self, boundary: bytes, target: _Sink, limits: UploadLimits) -> None:
        self._target = target
        self._limits = limits
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._on_part_begin,
                "on_header_field": self._on_header_field,
                "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
                "on_headers_finished": self._on_headers_finished,
                "on_part_data": self._on_part_data,
            },
        )
        self._parts = 0
        self._field = bytearray()
        self._value = bytearray()
        self._disposition = b""
        self._names: list[str] = []
        self._writing = False
        self._found = False
        self._filename: str | None = None
        self._part_bytes = 0
        self._size = 0
        self._error: ArengineError | None = None

    async def run(self, body: AsyncIterator[bytes]) -> tuple[str | None, int]:
        total = 0
        async for chunk in body:
            total += len(chunk)
            _check_size(total, self._limits)
            try:
                self._parser.write(chunk)
            except MultipartParseError as error:
                raise CorruptAudio(
                    f"malformed multipart body: {error}", code=ErrorCode.BAD_MULTIPART
                ) from None
            if self._error is not None:
                raise self._error
            self._target.flush()
        with contextlib.suppress(MultipartParseError):
            self._parser.finalize()
        self._target.flush()
        if not self._found:
            got = ", ".join(repr(name) for name in self._names) or "no parts"
            raise InvalidInput(
                f"expected a multipart field named {FILE_FIELD!r}; got {got}",
                code=ErrorCode.MISSING_FILE,
            )
        if self._parser.state != MultipartState.END:
            # Without its closing boundary the body may have been cut short: refuse it rather
            # than recognise part of a file as if it were the whole.
            raise CorruptAudio(
                "the multipart body ended before its closing boundary: the upload is incomplete",
                code=ErrorCode.BAD_MULTIPART,
            )
        return self._filename, self._size

    def _fail(self, error: ArengineError) -> None:
        self._error = self._error or error

    def _on_part_begin(self) -> None:
        self._parts += 1
        self._disposition = b""
        self._writing = False
        self._part_bytes = 0
        if self._parts > self._limits.max_parts:
            self._fail(
                TooLarge(
                    f"more than {self._limits.max_parts} multipart parts",
                    code=ErrorCode.TOO_MANY_PARTS,
                )
            )

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _on_header_end(self) -> None:
        if bytes(self._field).lower() == b"content-disposition":
            self._disposition = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = options.get(b"name", b"").decode("utf-8", "replace")
        self._names.append(name[:64])
        if name != FILE_FIELD:
            if b"filename" in options:
                self._fail(
                    InvalidInput(
                        f"expected the audio in a multipart field named "
                        f"{FILE_FIELD!r}, got {name[:64]!r}",
                        code=ErrorCode.MISSING_FILE,
                    )
                )
            return
        if self._found:
            self._fail(
                InvalidInput(f"send exactly one {FILE_FIELD!r} part", code=ErrorCode.TOO_MANY_FILES)
            )
            return
        self._found = self._writing = True
        filename = options.get(b"filename")
        self._filename = filename.decode("utf-8", "replace")[:255] if filename else None
        self._target.named(self._filename)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._writing:
            # A view, not a copy: the slice of each body chunk was a memcpy under the GIL.
            self._target.write(memoryview(data)[start:end])
            self._size += end - start
            return
        self._part_bytes += end - start
        if self._part_bytes > self._limits.max_field_bytes:
            self._fail(
                TooLarge(
                    f"a form field passed {size_text(self._limits.max_field_bytes)}",
                    code=ErrorCode.FIELD_TOO_LARGE,
                )
            )


AUDIO_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
            "audio/*": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}
"""The OpenAPI request body of every endpoint that takes a recording: multipart `file` or raw
audio."""

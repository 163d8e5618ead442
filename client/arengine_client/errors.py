"""The errors arengine raises, on the server and in the client: one hierarchy for both.

Each class is a family of answers by HTTP status; an instance carries the `status`, the stable
`code` (the README's error table; `arengine.errors.ErrorCode` declares every one) and the
`message`. The server's errors (`arengine.errors`) subclass these, so one `except` catches an
error whether an in-process engine raised it or a server answered it::

    try:
        client.recognize("long.flac")
    except TooLarge as error:
        print(error.status, error.code, error.message)  # 413 audio_too_long ...
"""

from __future__ import annotations

import json
from typing import ClassVar

HTTP_ERROR = "http_error"
"""The code of an answer without arengine's error body (a balancer's own page)."""

STREAM_CLOSED = "closed"
"""The code of a live stream that closed without an error line (a dropped connection)."""

JOB_CANCELLED = "job_cancelled"
"""The code `JobFailed` carries for a job that was cancelled (it has no error of its own)."""


class ArengineError(Exception):
    """An error answer, or its cause: `status` (HTTP), `code` (stable) and `message`."""

    statuses: ClassVar[tuple[int, ...]] = ()
    """The HTTP statuses whose answers the client raises as this class (none: the base)."""

    def __init__(self, message: str, *, code: str, status: int) -> None:
        super().__init__(message)
        self.message, self.code, self.status = message, code, status


ServerError = ArengineError
"""The client's earlier name of the base class."""


class BadRequest(ArengineError):
    """400: corrupt audio or a malformed request."""

    statuses = (400,)


class Unauthorized(ArengineError):
    """401: no API key (or administrator key, where one is needed), or not a configured one."""

    statuses = (401,)


class Forbidden(ArengineError):
    """403: a request this key or this page may not make (another origin; not an admin key)."""

    statuses = (403,)


class NotFound(ArengineError):
    """404: unknown model, job or endpoint."""

    statuses = (404,)


class BodyTimeout(ArengineError):
    """408: the upload stalled or came too slowly."""

    statuses = (408,)


class TooLarge(ArengineError):
    """413: over `max_upload_bytes`, `max_duration_s` or another cap (the code says which)."""

    statuses = (413,)


class UnsupportedFormat(ArengineError):
    """415: not a container, codec or content type the server decodes."""

    statuses = (415,)


class InvalidInput(ArengineError):
    """422: a parameter or a property of the audio outside what is accepted."""

    statuses = (422,)


class Unavailable(ArengineError):
    """503 (or a balancer's 502): overloaded, loading or stopping; the client retries it first."""

    statuses = (502, 503)


class DeadlineExceeded(ArengineError):
    """504: the request's deadline passed on the server."""

    statuses = (504,)


class InsufficientStorage(ArengineError):
    """507: the server could not spool the upload."""

    statuses = (507,)


class JobFailed(ArengineError):
    """A job ended in an error (409): `code` and `message` are the job's (`GET /v1/jobs/{id}`)."""


FAMILIES: tuple[type[ArengineError], ...] = (
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    BodyTimeout,
    TooLarge,
    UnsupportedFormat,
    InvalidInput,
    Unavailable,
    DeadlineExceeded,
    InsufficientStorage,
)
"""The classes an answer's status maps to."""

BY_STATUS: dict[int, type[ArengineError]] = {
    status: family for family in FAMILIES for status in family.statuses
}


def error_for(status: int, code: str, message: str) -> ArengineError:
    """The exception of an answer's status (the base class for a status of no family)."""
    return BY_STATUS.get(status, ArengineError)(message, code=code, status=status)


def error_of(status: int, body: bytes) -> ArengineError:
    """The exception for an error answer (arengine's JSON body, or a balancer's own page)."""
    try:
        detail = json.loads(body)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        code, message = HTTP_ERROR, body[:200].decode("utf-8", "replace").strip()
    return error_for(status, code, message or f"HTTP {status}")

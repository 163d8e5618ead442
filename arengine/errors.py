"""The one error hierarchy: each error carries its HTTP status and a stable machine code.

Stages raise these; only `arengine.http` turns them into responses, so no stage imports FastAPI.
"""

from __future__ import annotations


class ArengineError(Exception):
    """Base class: `status` is the HTTP status, `code` a stable identifier for clients."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class CorruptAudio(ArengineError):
    """The upload is not decodable audio (truncated, damaged, lying header)."""

    status = 400
    code = "corrupt_audio"


class TooLarge(ArengineError):
    """The upload or the recording exceeds a configured cap."""

    status = 413
    code = "too_large"


class UnsupportedFormat(ArengineError):
    """The container, codec or content type is not one arengine decodes."""

    status = 415
    code = "unsupported_format"


class InvalidInput(ArengineError):
    """A parameter, a form field or a property of the audio is outside what is accepted."""

    status = 422
    code = "invalid_input"


class UnknownModel(ArengineError):
    """The requested model is not loaded."""

    status = 404
    code = "unknown_model"


class NotReady(ArengineError):
    """The server is starting (models not loaded) or stopping."""

    status = 503
    code = "not_ready"


class Unauthorized(ArengineError):
    """No API key, or not one of the configured keys."""

    status = 401
    code = "unauthorized"


class BodyTimeout(ArengineError):
    """The client stopped sending its body."""

    status = 408
    code = "body_timeout"


class InsufficientStorage(ArengineError):
    """The upload could not be spooled: the upload directory is full or unwritable."""

    status = 507
    code = "insufficient_storage"


class Overloaded(ArengineError):
    """Admission control: the server holds as much pending work as it is allowed; retry later."""

    status = 503
    code = "overloaded"


class DeadlineExceeded(ArengineError):
    """The request's deadline passed; its remaining work was dropped."""

    status = 504
    code = "deadline_exceeded"


class Cancelled(ArengineError):
    """The client went away or the server is stopping; nobody reads this job's answer."""

    status = 499
    code = "cancelled"


class StageFailed(ArengineError):
    """A stage failed on valid input: a server fault, reported with stage and request id."""

    status = 500
    code = "stage_failed"

    def __init__(self, stage: str, request_id: str, cause: BaseException) -> None:
        # The cause goes to the log, never to the client: it may name server paths or internals.
        super().__init__(f"{stage} failed for request {request_id}; the server log has the cause")
        self.stage = stage

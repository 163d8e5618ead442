"""The one error hierarchy: every stable error code is declared once, in `ErrorCode`.

Each code carries its HTTP status and a one-line description (a fixed limit it names is formatted
from its declaration in `arengine/settings.py`); the README's error table, the
metrics' `reason` label values and the OpenAPI responses of every route are derived from it (and a
test checks the README against it). Stages raise these errors; only `arengine.http` turns them
into responses, so no stage imports FastAPI.

Each error class subclasses the client's family of its status (`arengine_client.errors`, shared
with the client distribution): `except arengine_client.TooLarge` catches the server's `TooLarge`
raised in-process as well as a 413 answer.
"""

from __future__ import annotations

from enum import StrEnum

from arengine.settings import (
    MAX_FIELD_BYTES,
    MAX_MULTIPART_PARTS,
    MAX_PACKET_BYTES,
    MAX_RESULT_BYTES,
    MAX_RESULT_TAGS,
    MAX_STREAM_TEXT_BYTES,
    MAX_STREAM_TEXT_DEPTH,
    MAX_STREAMS,
    size_text,
)
from arengine_client import errors as shared


class ErrorCode(StrEnum):
    """A stable, machine-readable error code, with its HTTP status and when it is answered."""

    status: int
    description: str

    def __new__(cls, value: str, status: int, description: str) -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.description = description
        return member

    CORRUPT_AUDIO = (
        "corrupt_audio",
        400,
        "the audio cannot be decoded (truncated, damaged, lying header)",
    )
    BAD_MULTIPART = "bad_multipart", 400, "the multipart body is malformed"
    BAD_CONTENT_LENGTH = "bad_content_length", 400, "`Content-Length` is not a byte count"
    BAD_REQUEST = "bad_request", 400, "the request is malformed at the HTTP level"
    AMBIGUOUS_LENGTH = (
        "ambiguous_length",
        400,
        "both `Content-Length` and `Transfer-Encoding` (a request-smuggling ambiguity); the connection is closed",
    )
    FORBIDDEN_HOST = (
        "forbidden_host",
        400,
        "the `Host` header names no host in `allowed_hosts` (a DNS-rebinding page, or a setting to widen)",
    )
    FORBIDDEN_ORIGIN = (
        "forbidden_origin",
        403,
        "a `POST` or a WebSocket handshake from a web page of another origin than the server's or `cors_origins`",
    )
    UNAUTHORIZED = (
        "unauthorized",
        401,
        "API keys are configured and the request has none of them (`WWW-Authenticate: Bearer`)",
    )
    AMBIGUOUS_CREDENTIALS = (
        "ambiguous_credentials",
        401,
        "the request sends more than one credential (two `Authorization` headers, or a header and a WebSocket key subprotocol): it is refused, whichever would pass",
    )
    ADMIN_REQUIRED = (
        "admin_required",
        401,
        "changing a model's references needs an administrator key (`admin_keys`) and the request sent none (`WWW-Authenticate: Bearer`)",
    )
    NOT_ADMIN = (
        "not_admin",
        403,
        "the request's key is not one of `admin_keys`: users' keys cannot change references",
    )
    ADMIN_DISABLED = (
        "admin_disabled",
        403,
        "no `admin_keys` are set: references are changed with `arengine references` only",
    )
    UNKNOWN_MODEL = (
        "unknown_model",
        404,
        "the model is not loaded; the message lists the loaded ones",
    )
    NOT_FOUND = "not_found", 404, "no such endpoint"
    NOT_A_LIBRARY = (
        "not_a_library",
        404,
        "the model is loaded but is not a `fingerprint` model: it has no references",
    )
    REFERENCE_NOT_FOUND = (
        "reference_not_found",
        404,
        "the fingerprint model has no reference with this id (or it was removed)",
    )
    JOB_NOT_FOUND = (
        "job_not_found",
        404,
        "no such job, or one another API key created",
    )
    JOBS_DISABLED = (
        "jobs_disabled",
        404,
        "jobs are off: the server has no `data_dir`",
    )
    METHOD_NOT_ALLOWED = "method_not_allowed", 405, "the endpoint does not take this method"
    BODY_TIMEOUT = "body_timeout", 408, "the client stopped sending its body for `body_timeout_s`"
    UPLOAD_TOO_SLOW = (
        "upload_too_slow",
        408,
        "the body arrived slower than `min_upload_bytes_per_s` after `upload_grace_s`, or was still arriving at the request's deadline",
    )
    HEADER_TIMEOUT = (
        "header_timeout",
        408,
        "the request line and headers did not arrive within `header_timeout_s`; the connection is closed",
    )
    LISTEN_IDLE = (
        "listen_idle",
        408,
        "a live stream (`WS /v1/listen`) sent nothing for `listen_idle_timeout_s`",
    )
    UPLOAD_TOO_LARGE = (
        "upload_too_large",
        413,
        "the body passed `max_upload_bytes` (checked on `Content-Length` and while streaming)",
    )
    RESULT_TOO_LARGE = (
        "result_too_large",
        413,
        f"the result sent to `POST /v1/render` passed {size_text(MAX_RESULT_BYTES)} or "
        f"{MAX_RESULT_TAGS:,} tags",
    )
    AUDIO_TOO_LONG = (
        "audio_too_long",
        413,
        "the recording passed `max_duration_s` (checked on the header and while decoding)",
    )
    LISTEN_TOO_LONG = (
        "listen_too_long",
        413,
        "a live stream reached `listen_max_duration_s` of audio; its tags are all sent: reconnect to go on",
    )
    DECODE_BOMB = (
        "decode_bomb",
        413,
        f"one compressed packet decodes to more than {size_text(MAX_PACKET_BYTES)} of samples",
    )
    TOO_MANY_PARTS = (
        "too_many_parts",
        413,
        f"the multipart body has more than {MAX_MULTIPART_PARTS} parts",
    )
    FIELD_TOO_LARGE = (
        "field_too_large",
        413,
        f"a form field other than `file` passed {size_text(MAX_FIELD_BYTES)}",
    )
    JOB_NOT_DONE = (
        "job_not_done",
        409,
        "the job's result is asked for while it is queued, running or failed (the message says which)",
    )
    SCORES_NOT_KEPT = (
        "scores_not_kept",
        409,
        "new post-processing parameters for a job whose scores were not kept (its models changed, it ended before they were kept, or their file is damaged)",
    )
    HEADERS_TOO_LARGE = (
        "headers_too_large",
        431,
        "the request line and headers passed `max_header_bytes`; the connection is closed",
    )
    UNSUPPORTED_FORMAT = (
        "unsupported_format",
        415,
        "not a recognised container; the message lists the accepted ones",
    )
    UNSUPPORTED_CODEC = (
        "unsupported_codec",
        415,
        "a recognised container whose audio codec is not one arengine decodes; the message lists the accepted ones",
    )
    UNSUPPORTED_MEDIA_TYPE = (
        "unsupported_media_type",
        415,
        "the body is neither multipart nor an audio content type (`POST /v1/render`: not JSON)",
    )
    INVALID_STREAM_MESSAGE = (
        "invalid_stream_message",
        422,
        "a live stream's message is not what the protocol takes at that point (the message names what it takes), or a text message passed "
        f"{size_text(MAX_STREAM_TEXT_BYTES)} or nests deeper than {MAX_STREAM_TEXT_DEPTH} levels",
    )
    INVALID_SOURCE = (
        "invalid_source",
        422,
        "a live stream's `source` is not a short slug (1 to 64 characters of a-z, 0-9, _ and -)",
    )
    INVALID_PARAMETER = (
        "invalid_parameter",
        422,
        "a query parameter is unknown, repeated or outside its range (the message names it and the range)",
    )
    INVALID_GATE = (
        "invalid_gate",
        422,
        "a request's `gate` names a model that is not a loudness model, or one of the models it gates (the message lists the loudness models loaded)",
    )
    CALLBACK_URL_REFUSED = (
        "callback_url_refused",
        422,
        "a job's `callback_url` is not an http(s) URL, names a host `webhook_allowed_hosts` does not list, or resolves to a loopback, private, link-local or metadata address (the message names the rule); or the server has no `webhook_secret`",
    )
    MISSING_FILE = (
        "missing_file",
        422,
        "no multipart field named `file`, or the audio in another field",
    )
    TOO_MANY_FILES = "too_many_files", 422, "more than one `file` part"
    INVALID_RESULT = (
        "invalid_result",
        422,
        "the body of `POST /v1/render` is not a result of `POST /v1/recognize` (the message says where)",
    )
    EMPTY_FILE = "empty_file", 422, "the uploaded file has no bytes"
    EMPTY_AUDIO = "empty_audio", 422, "the recording has no audio frames"
    NO_LANDMARKS = (
        "no_landmarks",
        422,
        "a reference upload has nothing to find: silence, or too short for a landmark pair",
    )
    UNSUPPORTED_CHANNELS = (
        "unsupported_channels",
        422,
        "the channel count is outside 1 to `max_channels`",
    )
    UNSUPPORTED_SAMPLE_RATE = (
        "unsupported_sample_rate",
        422,
        "the sample rate is outside `min_sample_rate` to `max_sample_rate`",
    )
    NON_FINITE_AUDIO = "non_finite_audio", 422, "the audio has NaN or infinite samples"
    NO_AUDIO_STREAM = "no_audio_stream", 422, "the file has no audio stream (a video without sound)"
    UNKNOWN_STREAM = (
        "unknown_stream",
        422,
        "`stream` names an audio stream the file does not have (the message gives the range)",
    )
    TOO_MANY_STREAMS = (
        "too_many_streams",
        422,
        f"the container has more than {MAX_STREAMS} streams",
    )
    AUDIO_FORMAT_CHANGED = (
        "audio_format_changed",
        422,
        "the stream changes codec, sample rate or channels midway (chained Ogg, concatenated WebM, ADTS or MP3)",
    )
    CANCELLED = (
        "cancelled",
        499,
        "the client went away (logged and counted; nobody reads the answer)",
    )
    INTERNAL_ERROR = (
        "internal_error",
        500,
        "an unexpected server fault; the message has the request id, the log the traceback",
    )
    JOB_RESULT_DAMAGED = (
        "job_result_damaged",
        500,
        "a done job's stored result file cannot be read (damaged, or removed outside the server): submit the recording again",
    )
    STAGE_FAILED = (
        "stage_failed",
        500,
        "a stage failed on valid input; the message names the stage and the request id",
    )
    NOT_READY = "not_ready", 503, "the models are still loading (with `Retry-After`)"
    SHUTTING_DOWN = (
        "shutting_down",
        503,
        "the server is stopping: a new request, or one cut off by a second signal or by `shutdown_timeout_s` (with `Retry-After`)",
    )
    OVERLOADED = (
        "overloaded",
        503,
        "`max_uploading_requests` or `max_pending_requests` reached (with `Retry-After`)",
    )
    TOO_MANY_JOBS = (
        "too_many_jobs",
        503,
        "`max_queued_jobs` jobs are queued or running (with `Retry-After`)",
    )
    TOO_MANY_LISTENERS = (
        "too_many_listeners",
        503,
        "`max_listen_streams` live streams are open",
    )
    TOO_MANY_CONNECTIONS = (
        "too_many_connections",
        503,
        "`max_connections` reached; the connection is closed (with `Retry-After`)",
    )
    DEADLINE_EXCEEDED = (
        "deadline_exceeded",
        504,
        "the request's deadline (`request_timeout_s`, or less with `?timeout_s=`) passed; its remaining segments were dropped",
    )
    RENDER_TIMEOUT = (
        "render_timeout",
        504,
        "`POST /v1/render` worked longer than `render_timeout_s` (from its body's end); the render was stopped",
    )
    INSUFFICIENT_STORAGE = (
        "insufficient_storage",
        507,
        "the upload directory or the job store's data directory is full or unwritable; the partial file is removed (a job's `error` when its files could not be written)",
    )
    JOB_STORAGE_FULL = (
        "job_storage_full",
        507,
        "the job store's files pass `job_storage_bytes` with only jobs queued, running or not yet read: no new job until some are read, deleted or past `job_retention_s`",
    )


class ArengineError(shared.ArengineError):
    """Base class: `code` is the stable identifier for clients, `status` its HTTP status.

    A subclass names a family of errors and may give a default code; raise sites pick a more
    precise member of `ErrorCode` with `code=`.
    """

    default_code: ErrorCode | None = None
    code: ErrorCode

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        chosen = code or self.default_code
        if chosen is None:
            raise TypeError(f"{type(self).__name__} needs an explicit ErrorCode")
        super().__init__(message, code=chosen, status=chosen.status)


class CorruptAudio(ArengineError, shared.BadRequest):
    """The upload is not decodable audio, or not a well-formed body."""

    default_code = ErrorCode.CORRUPT_AUDIO


class TooLarge(ArengineError, shared.TooLarge):
    """The upload or the recording exceeds a configured cap (the code says which)."""


class UnsupportedFormat(ArengineError, shared.UnsupportedFormat):
    """The container, codec or content type is not one arengine decodes."""

    default_code = ErrorCode.UNSUPPORTED_FORMAT


class InvalidInput(ArengineError, shared.InvalidInput):
    """A parameter, a form field or a property of the audio is outside what is accepted."""

    default_code = ErrorCode.INVALID_PARAMETER


class UnknownModel(ArengineError, shared.NotFound):
    """The requested model is not loaded."""

    default_code = ErrorCode.UNKNOWN_MODEL


class NotReady(ArengineError, shared.Unavailable):
    """The server is starting (models not loaded) or stopping."""

    default_code = ErrorCode.NOT_READY


class Forbidden(ArengineError, shared.Forbidden):
    """A request this client may not make: one a browser was made to send (a foreign Host or
    Origin), or a change that needs an administrator key."""

    default_code = ErrorCode.FORBIDDEN_ORIGIN


class Unauthorized(ArengineError, shared.Unauthorized):
    """No API key (or administrator key, where one is needed), or not a configured one."""

    default_code = ErrorCode.UNAUTHORIZED


class BodyTimeout(ArengineError, shared.BodyTimeout):
    """The client stopped sending its body, or sent it too slowly (the code says which)."""

    default_code = ErrorCode.BODY_TIMEOUT


class InsufficientStorage(ArengineError, shared.InsufficientStorage):
    """A file could not be written: the upload directory or the job store's is full or
    unwritable."""

    default_code = ErrorCode.INSUFFICIENT_STORAGE


class Overloaded(ArengineError, shared.Unavailable):
    """Admission control: the server holds as much pending work as it is allowed; retry later."""

    default_code = ErrorCode.OVERLOADED


class DeadlineExceeded(ArengineError, shared.DeadlineExceeded):
    """The request's deadline passed; its remaining work was dropped."""

    default_code = ErrorCode.DEADLINE_EXCEEDED


class Cancelled(ArengineError):
    """The client went away or the server is stopping; nobody reads this job's answer."""

    default_code = ErrorCode.CANCELLED


class StageFailed(ArengineError):
    """A stage failed on valid input: a server fault, reported with stage and request id."""

    default_code = ErrorCode.STAGE_FAILED

    def __init__(self, stage: str, request_id: str, cause: BaseException) -> None:
        # The cause goes to the log, never to the client: it may name server paths or internals.
        super().__init__(f"{stage} failed for request {request_id}; the server log has the cause")
        self.stage = stage

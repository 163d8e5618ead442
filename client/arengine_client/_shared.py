"""What `Client` and `AsyncClient` share that is not I/O: the retry policy, a request's query and
upload, what an answer or a live stream's line means, and the two ways to run the sender of a
live stream beside its reader (a task, a thread)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from arengine_client.errors import (
    JOB_CANCELLED,
    STREAM_CLOSED,
    ArengineError,
    JobFailed,
    error_for,
)
from arengine_client.types import Result, Tag, tag_of

Audio = str | Path | IO[bytes]
"""A path, or a binary file object (seekable, so that a retry can send it again)."""

Chunks = Iterable[bytes]
"""A live stream's audio for `Client.listen`: chunks of bytes, read as they come."""

AsyncChunks = AsyncIterable[bytes] | Iterable[bytes]
"""A live stream's audio for `AsyncClient.listen`: an async iterable, or a plain one."""

Recognition = Result
"""A `POST /v1/recognize` answer, typed: the engine's own `Result` (read by `types.result_of`)."""

RETRY_STATUSES = frozenset({502, 503})
"""502: the balancer lost its replica mid-request; 503: the server asks to come back later."""

RETRY_ERRORS = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""Transport failures where the replica went away; a timeout is not retried (it would repeat)."""

LISTEN_CLOSE_BASE = 4000
"""A live stream ended by an error closes with this plus the error's HTTP status."""

# The name it had as `arengine.client`: logging configurations that name it keep working.
log = logging.getLogger("arengine.client")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before sending a refused request again."""

    retries: int = 4
    max_wait_s: float = 30.0
    """Cap on one wait, whatever `Retry-After` says."""
    backoff_s: float = 0.5
    """First wait when the answer names none (a refused connection, a 502); doubles each time."""
    refused_retries: int = 2
    """A refused connection is retried at most this often: nothing listens there (a mistyped
    port, a server that is down), and waiting out every retry took a batch 12 minutes to say so."""

    def gives_up(self, attempt: int, error: Exception) -> bool:
        """Whether the attempt numbered `attempt` (from 0) failing with `error` is the last."""
        if attempt >= self.retries:
            return True
        return isinstance(error, httpx.ConnectError) and attempt >= self.refused_retries

    def wait_s(self, attempt: int, response: httpx.Response | None) -> float:
        stated = None if response is None else response.headers.get("retry-after")
        try:
            seconds = float(stated) if stated is not None else self.backoff_s * 2**attempt
        except ValueError:  # an HTTP date: not sent by arengine; fall back to backoff
            seconds = self.backoff_s * 2**attempt
        return min(max(seconds, 0.0), self.max_wait_s)


def retrying(
    request: httpx.Request,
    attempt: int,
    retry: RetryPolicy,
    error: Exception | None,
    response: httpx.Response | None,
) -> float:
    """Log what is retried and why, at once; the seconds to wait first."""
    wait = retry.wait_s(attempt, response)
    why = f"HTTP {response.status_code}" if response is not None else f"{type(error).__name__}"
    if error is not None and str(error):
        why += f": {error}"
    log.warning(
        "%s %s: %s; retry %d of at most %d in %.1f s",
        request.method, request.url.copy_with(query=None), why, attempt + 1, retry.retries, wait,
    )  # fmt: skip
    return wait


def query_of(
    model: str, format: str | None, timeout_s: float | None, overrides: Any
) -> dict[str, Any]:
    """A recognition's query: the model, the format, the deadline and the overrides."""
    query: dict[str, Any] = {"model": model, **overrides}
    if format is not None:
        query["format"] = format
    if timeout_s is not None:
        query["timeout_s"] = timeout_s
    return query


def upload(audio: Audio, stack: ExitStack) -> dict[str, tuple[str, IO[bytes]]]:
    """The multipart `file` field, rewound so that each attempt sends the whole file."""
    if isinstance(audio, str | Path):
        handle: IO[bytes] = stack.enter_context(Path(audio).open("rb"))  # noqa: SIM115
        name = Path(audio).name
    else:
        handle = audio
        name = Path(str(getattr(audio, "name", "") or "recording")).name
    handle.seek(0)
    return {"file": (name, handle)}


def headers(api_key: str | None) -> dict[str, str]:
    return {} if api_key is None else {"Authorization": f"Bearer {api_key}"}


def timeout(timeout_s: float) -> httpx.Timeout:
    # Connect fast (another replica may answer); reading waits for a long recording's answer.
    return httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))


def job_outcome(job: dict[str, Any]) -> bool:
    """Whether a job (`GET /v1/jobs/{id}`) is done; False while it runs; `JobFailed` if it
    failed or was cancelled."""
    if job["state"] in ("failed", "cancelled"):
        why = job.get("error") or {"code": JOB_CANCELLED, "message": "cancelled"}
        raise JobFailed(str(why["message"]), code=str(why["code"]), status=409)
    return bool(job["state"] == "done")


def stream_line(line: str) -> Iterator[Tag]:
    """The tag of one NDJSON line (none for the summary); its error line raised."""
    if not line.strip():
        return
    item = json.loads(line)
    if "error" in item:
        detail = item["error"]
        raise ArengineError(str(detail["message"]), code=str(detail["code"]), status=200)
    if "summary" not in item:
        yield tag_of(item)


def listen_url(base: httpx.URL, query: dict[str, Any]) -> str:
    """The `ws://` (or `wss://`) address of `WS /v1/listen` on the server at `base`."""
    scheme = "wss" if base.scheme == "https" else "ws"
    url = base.copy_with(scheme=scheme).join("/v1/listen").copy_merge_params(query)
    return str(url)


def listen_error(item: dict[str, Any], close_code: int | None) -> ArengineError:
    """A live stream's `{"error": ...}` line (or a close without one) as its exception."""
    detail = item.get("error") or {}
    code = close_code or 1006
    status = code - LISTEN_CLOSE_BASE if 4100 <= code < 4600 else 502
    message = str(detail.get("message") or f"the stream closed with {code} before its end")
    return error_for(status, str(detail.get("code", STREAM_CLOSED)), message)


def listen_headers(http: httpx.Client | httpx.AsyncClient) -> dict[str, str] | None:
    """The API key of the client's HTTP requests, for the WebSocket handshake."""
    key = http.headers.get("authorization")
    return {"Authorization": key} if key else None


async def aiter_chunks(audio: AsyncChunks) -> AsyncIterator[bytes]:
    """The chunks of an async or a plain iterable."""
    if isinstance(audio, AsyncIterable):
        async for chunk in audio:
            yield chunk
    else:
        for chunk in audio:
            yield chunk


def iter_chunks(audio: Chunks) -> Iterator[bytes]:
    """The chunks of a plain iterable (what `aiter_chunks` is for `Client`)."""
    yield from audio


class AsyncBackground:
    """A coroutine run as a task beside the caller's (a live stream's sender)."""

    def __init__(self, function: Callable[..., Awaitable[None]], *args: Any) -> None:
        self._task = asyncio.ensure_future(function(*args))

    def cancel(self) -> None:
        self._task.cancel()


class Background:
    """A function run in a thread beside the caller's (a live stream's sender)."""

    def __init__(self, function: Callable[..., None], *args: Any) -> None:
        # A daemon: a thread cannot be cancelled, and a source that blocks (a microphone) must
        # not hold the program open; it ends at its next send on the closed connection.
        self._thread = threading.Thread(target=function, args=args, daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Nothing to do: the sender stops at its next send once the connection is closed."""

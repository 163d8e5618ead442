"""A client for one arengine server or a cluster behind a load balancer (httpx).

Example (it needs a running server, so it is prose, not a doctest)::

    with Client("http://127.0.0.1:8000", api_key=os.environ.get("ARENGINE_API_KEY")) as client:
        result = client.recognize("talk.flac", model="speech", threshold=0.6)
        print([(tag.start, tag.end, tag.label) for tag in result.tags])

`AsyncClient` has the same methods as coroutines (`stream` is an async iterator), and `listen`:
a live stream of raw PCM sent over `WS /v1/listen`, its tags as they become final. Requests the
server refuses for now (503: overloaded, loading, stopping; 502 from a balancer whose replica
went away; a refused or reset connection) are retried a bounded number of times, waiting what
`Retry-After` says (capped); a recognition is a pure function of its upload, so a retry is safe.
Every other error answer raises the `ServerError` subclass of its HTTP status, carrying the
server's stable `code` (the README's error table) and message.

This module imports httpx, websockets and `arengine.types` only (no torch): all a client program
needs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from arengine.live.formats import CONTAINER_FORMATS
from arengine.types import AudioInfo as AudioInfo  # what `Recognition.audio` is
from arengine.types import Result, Tag, result_of, tag_of

Audio = str | Path | IO[bytes]
"""A path, or a binary file object (seekable, so that a retry can send it again)."""

RETRY_STATUSES = frozenset({502, 503})
"""502: the balancer lost its replica mid-request; 503: the server asks to come back later."""

log = logging.getLogger(__name__)


Recognition = Result
"""A `POST /v1/recognize` answer, typed: the engine's own `Result` (read by `types.result_of`)."""


class ServerError(Exception):
    """An error answer: `status` (HTTP), `code` (stable, see the README) and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class BadRequest(ServerError):
    """400: corrupt audio or a malformed request."""


class Unauthorized(ServerError):
    """401: no API key or not one of the server's."""


class NotFound(ServerError):
    """404: unknown model or endpoint."""


class BodyTimeout(ServerError):
    """408: the upload stalled."""


class TooLarge(ServerError):
    """413: over `max_upload_bytes` or `max_duration_s`."""


class UnsupportedFormat(ServerError):
    """415: not a container, codec or content type the server decodes."""


class InvalidInput(ServerError):
    """422: a parameter or a property of the audio outside what is accepted."""


class Unavailable(ServerError):
    """503 (or a balancer's 502) after every retry: overloaded, loading or stopping."""


class DeadlineExceeded(ServerError):
    """504: the request's deadline passed on the server."""


class InsufficientStorage(ServerError):
    """507: the server could not spool the upload."""


class JobFailed(ServerError):
    """A job ended in an error: `code` and `message` are the job's (`GET /v1/jobs/{id}`)."""


_BY_STATUS: dict[int, type[ServerError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    408: BodyTimeout,
    413: TooLarge,
    415: UnsupportedFormat,
    422: InvalidInput,
    502: Unavailable,
    503: Unavailable,
    504: DeadlineExceeded,
    507: InsufficientStorage,
}


def error_of(status: int, body: bytes) -> ServerError:
    """The exception for an error answer (arengine's JSON body, or a balancer's own page)."""
    try:
        detail = json.loads(body)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", body[:200].decode("utf-8", "replace").strip()
    return _BY_STATUS.get(status, ServerError)(status, code, message or f"HTTP {status}")


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


def _retrying(
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


def _params(
    model: str, format: str | None, timeout_s: float | None, overrides: Any
) -> dict[str, Any]:
    params: dict[str, Any] = {"model": model, **overrides}
    if format is not None:
        params["format"] = format
    if timeout_s is not None:
        params["timeout_s"] = timeout_s
    return params


def _upload(audio: Audio, stack: ExitStack) -> dict[str, tuple[str, IO[bytes]]]:
    """The multipart `file` field, rewound so that each attempt sends the whole file."""
    if isinstance(audio, str | Path):
        handle: IO[bytes] = stack.enter_context(Path(audio).open("rb"))  # noqa: SIM115
        name = Path(audio).name
    else:
        handle = audio
        name = Path(str(getattr(audio, "name", "") or "recording")).name
    handle.seek(0)
    return {"file": (name, handle)}


_RETRY_ERRORS = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""Transport failures where the replica went away; a timeout is not retried (it would repeat)."""


def _headers(api_key: str | None) -> dict[str, str]:
    return {} if api_key is None else {"Authorization": f"Bearer {api_key}"}


def _timeout(timeout_s: float) -> httpx.Timeout:
    # Connect fast (another replica may answer); reading waits for a long recording's answer.
    return httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))


class Client:
    """Blocking client; one connection pool, safe to share between threads."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 900.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=url,
            headers=_headers(api_key),
            timeout=_timeout(timeout_s),
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def info(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v1/info"))

    def models(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/models")["models"])

    def recognize(
        self,
        audio: Audio,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> Recognition:
        """Tag one recording; `overrides` are the post-processing parameters (`threshold`...)."""
        params = _params(model, None, timeout_s, overrides)
        return result_of(self._json("POST", "/v1/recognize", audio, params))

    def download(
        self,
        audio: Audio,
        format: str,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> bytes:
        """The recording's tags as the bytes of a file in `format`: json, csv, txt, raven, rttm,
        vtt, srt, textgrid, eaf, jams, midi, birdnet or kaleidoscope (or an alias, see
        `GET /v1/formats`).

        Bytes, as the server sent them, so that a binary format (midi) is not corrupted; a text
        format is UTF-8 (`.decode()` for a `str`).
        """
        params = _params(model, format, timeout_s, overrides)
        return self._send("POST", "/v1/recognize", audio, params).content

    def submit(self, audio: Audio, *, model: str = "speech", **overrides: float | str) -> str:
        """Send a recording as a job (`POST /v1/jobs`): its id, once the server has it on disk.
        The job runs whether or not this client stays, and across the server's restarts."""
        params = _params(model, None, None, overrides)
        return str(self._json("POST", "/v1/jobs", audio, params)["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        """A job's state and progress (`GET /v1/jobs/{id}`)."""
        return dict(self._json("GET", f"/v1/jobs/{job_id}"))

    def job_result(self, job_id: str, **overrides: float | str) -> Recognition:
        """A done job's result; with post-processing parameters (`threshold=0.7`), its tags
        derived again from the scores it kept, without running the model."""
        return result_of(self._json("GET", f"/v1/jobs/{job_id}/result", params=overrides))

    def wait(self, job_id: str, *, poll_s: float = 2.0, patience_s: float = 900.0) -> Recognition:
        """A job's result once it is done, polling its state every `poll_s`. A dropped
        connection or a server that is away (restarting: refused, 502, 503) is waited out for
        up to `patience_s` in a row; a failed job raises `JobFailed`."""
        away_since: float | None = None
        while True:
            try:
                job = self.job(job_id)
            except (httpx.TransportError, Unavailable) as error:
                now = time.monotonic()
                away_since = away_since or now
                if now - away_since > patience_s:
                    raise
                log.info("job %s: the server is away (%s); waiting", job_id, error)
                time.sleep(poll_s)
                continue
            away_since = None
            if job["state"] == "done":
                return self.job_result(job_id)
            if job["state"] in ("failed", "cancelled"):
                why = job.get("error") or {"code": "job_cancelled", "message": "cancelled"}
                raise JobFailed(409, str(why["code"]), str(why["message"]))
            time.sleep(poll_s)

    def recognize_job(
        self, audio: Audio, *, model: str = "speech", poll_s: float = 2.0, **overrides: float | str
    ) -> Recognition:
        """`recognize` through a job, for long recordings: no request is held open for the
        whole run, and a dropped connection or a server restart does not lose the work."""
        return self.wait(self.submit(audio, model=model, **overrides), poll_s=poll_s)

    def stream(
        self,
        audio: Audio,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> Iterator[Tag]:
        """Tags as the server finalises them (NDJSON); retried only before the first byte."""
        params = _params(model, "ndjson", timeout_s, overrides)
        with ExitStack() as stack:
            response = self._send("POST", "/v1/recognize", audio, params, stack=stack)
            for line in response.iter_lines():
                yield from _stream_line(line)

    def _json(
        self,
        method: str,
        path: str,
        audio: Audio | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        return self._send(method, path, audio, params).json()

    def _send(
        self,
        method: str,
        path: str,
        audio: Audio | None,
        params: dict[str, Any] | None,
        stack: ExitStack | None = None,
    ) -> httpx.Response:
        """The response of the first attempt that is not refused; an error answer raises."""
        for attempt in range(self.retry.retries + 1):
            with ExitStack() as files:
                files_field = None if audio is None else _upload(audio, files)
                request = self._http.build_request(method, path, params=params, files=files_field)
                try:
                    response = self._http.send(request, stream=stack is not None)
                except _RETRY_ERRORS as error:
                    if self.retry.gives_up(attempt, error):
                        raise
                    time.sleep(_retrying(request, attempt, self.retry, error, None))
                    continue
            if response.status_code in RETRY_STATUSES and attempt < self.retry.retries:
                response.close()
                time.sleep(_retrying(request, attempt, self.retry, None, response))
                continue
            if response.is_error:
                body = response.read()
                response.close()
                raise error_of(response.status_code, body)
            if stack is not None:
                stack.callback(response.close)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")


def _stream_line(line: str) -> Iterator[Tag]:
    if not line.strip():
        return
    item = json.loads(line)
    if "error" in item:
        detail = item["error"]
        raise ServerError(200, str(detail["code"]), str(detail["message"]))
    if "summary" not in item:
        yield tag_of(item)


LISTEN_CLOSE_BASE = 4000
"""A live stream ended by an error closes with this plus the error's HTTP status."""


def _listen_url(base: httpx.URL, params: dict[str, Any]) -> str:
    """The `ws://` (or `wss://`) address of `WS /v1/listen` on the server at `base`."""
    scheme = "wss" if base.scheme == "https" else "ws"
    url = base.copy_with(scheme=scheme).join("/v1/listen").copy_merge_params(params)
    return str(url)


def _listen_error(item: dict[str, Any], close_code: int | None) -> ServerError:
    """A live stream's `{"error": ...}` line (or a close without one) as its exception."""
    detail = item.get("error") or {}
    code = close_code or 1006
    status = code - LISTEN_CLOSE_BASE if 4100 <= code < 4600 else 502
    message = str(detail.get("message") or f"the stream closed with {code} before its end")
    return _BY_STATUS.get(status, ServerError)(status, str(detail.get("code", "closed")), message)


async def _send_audio(
    connection: ClientConnection,
    opening: dict[str, Any],
    audio: AsyncIterable[bytes] | Iterable[bytes],
) -> None:
    """Send the opening, every chunk of `audio`, then the end; stops quietly if the server
    closed first (it refused the query, or ended the stream with an error)."""
    try:
        await connection.send(json.dumps(opening))
        if isinstance(audio, AsyncIterable):
            async for chunk in audio:
                await connection.send(chunk)
        else:
            for chunk in audio:
                await connection.send(chunk)
        await connection.send(json.dumps({"end": True}))
    except ConnectionClosed:
        pass


class AsyncClient:
    """The same client for asyncio; `stream` is an async iterator, and so is `listen`."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 900.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=url,
            headers=_headers(api_key),
            timeout=_timeout(timeout_s),
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def info(self) -> dict[str, Any]:
        return dict((await self._send("GET", "/v1/info", None, None)).json())

    async def models(self) -> list[dict[str, Any]]:
        return list((await self._send("GET", "/v1/models", None, None)).json()["models"])

    async def recognize(
        self,
        audio: Audio,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> Recognition:
        params = _params(model, None, timeout_s, overrides)
        return result_of((await self._send("POST", "/v1/recognize", audio, params)).json())

    async def download(
        self,
        audio: Audio,
        format: str,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> bytes:
        """As `Client.download`: json, csv, txt, raven, rttm, vtt, srt, textgrid, eaf, jams,
        midi, birdnet or kaleidoscope, as bytes."""
        params = _params(model, format, timeout_s, overrides)
        return (await self._send("POST", "/v1/recognize", audio, params)).content

    async def submit(self, audio: Audio, *, model: str = "speech", **overrides: float | str) -> str:
        """As `Client.submit`: a job's id once the server has its recording on disk."""
        params = _params(model, None, None, overrides)
        return str((await self._send("POST", "/v1/jobs", audio, params)).json()["id"])

    async def job(self, job_id: str) -> dict[str, Any]:
        return dict((await self._send("GET", f"/v1/jobs/{job_id}", None, None)).json())

    async def job_result(self, job_id: str, **overrides: float | str) -> Recognition:
        """As `Client.job_result`: new parameters derive the tags again without the model."""
        path = f"/v1/jobs/{job_id}/result"
        return result_of((await self._send("GET", path, None, dict(overrides))).json())

    async def wait(
        self, job_id: str, *, poll_s: float = 2.0, patience_s: float = 900.0
    ) -> Recognition:
        """As `Client.wait`: polls, waiting out a server that is away for up to `patience_s`."""
        away_since: float | None = None
        while True:
            try:
                job = await self.job(job_id)
            except (httpx.TransportError, Unavailable) as error:
                now = time.monotonic()
                away_since = away_since or now
                if now - away_since > patience_s:
                    raise
                log.info("job %s: the server is away (%s); waiting", job_id, error)
                await asyncio.sleep(poll_s)
                continue
            away_since = None
            if job["state"] == "done":
                return await self.job_result(job_id)
            if job["state"] in ("failed", "cancelled"):
                why = job.get("error") or {"code": "job_cancelled", "message": "cancelled"}
                raise JobFailed(409, str(why["code"]), str(why["message"]))
            await asyncio.sleep(poll_s)

    async def recognize_job(
        self, audio: Audio, *, model: str = "speech", poll_s: float = 2.0, **overrides: float | str
    ) -> Recognition:
        """As `Client.recognize_job`."""
        job_id = await self.submit(audio, model=model, **overrides)
        return await self.wait(job_id, poll_s=poll_s)

    async def stream(
        self,
        audio: Audio,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> AsyncIterator[Tag]:
        params = _params(model, "ndjson", timeout_s, overrides)
        response = await self._send("POST", "/v1/recognize", audio, params, stream=True)
        try:
            async for line in response.aiter_lines():
                for tag in _stream_line(line):
                    yield tag
        finally:
            await response.aclose()

    async def listen(
        self,
        audio: AsyncIterable[bytes] | Iterable[bytes],
        *,
        format: str = "s16le",
        sample_rate: int = 16000,
        channels: int = 1,
        model: str = "speech",
        **overrides: float | str,
    ) -> AsyncIterator[Tag]:
        """The tags of a live stream as each becomes final (`WS /v1/listen`).

        `audio`: chunks of raw PCM (`s16le` or `f32le`, interleaved channels), for example read
        from a sound card or `ffmpeg -f s16le -`; or with `format="webm"` (or `"ogg"`) the
        pieces of a WebM/Opus stream such as a browser's MediaRecorder gives, whose rate and
        channels the stream states (`sample_rate` and `channels` are not sent). The stream ends
        when the chunks do. Example::

            async for tag in client.listen(chunks, sample_rate=16000, model="events"):
                print(tag.start, tag.end, tag.label)
        """
        opening: dict[str, Any] = {"format": format}
        if format not in CONTAINER_FORMATS:
            opening.update(sample_rate=sample_rate, channels=channels)
        async for item in self.listen_lines(audio, opening, model=model, **overrides):
            if "label" in item:
                yield tag_of(item)

    async def listen_lines(
        self,
        audio: AsyncIterable[bytes] | Iterable[bytes],
        opening: dict[str, Any],
        *,
        model: str = "speech",
        **overrides: float | str,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every line a live stream sends (tags, `progress`, the `summary`) as a dict; its
        `{"error": ...}` line is raised as the `ServerError` of its status. `opening`: the
        stream's description, `{"format": "s16le", "sample_rate": 16000, "channels": 1}`."""
        url = _listen_url(self._http.base_url, {"model": model, **overrides})
        key = self._http.headers.get("authorization")
        headers = {"Authorization": key} if key else None
        try:
            # No keep-alive pings: the server reads no frame while it holds a fast sender back.
            connection = await connect(
                url, additional_headers=headers, max_size=None, ping_interval=None
            )
        except InvalidStatus as refused:
            body = bytes(refused.response.body or b"")
            raise error_of(refused.response.status_code, body) from None
        async with connection:
            sender = asyncio.ensure_future(_send_audio(connection, opening, audio))
            last: dict[str, Any] = {}
            try:
                async for message in connection:  # until the server closes
                    last = json.loads(message)
                    if "error" not in last:
                        yield last
            except ConnectionClosed:
                pass  # closed with an error's code (its line came first), or dropped
            finally:
                sender.cancel()
        if "summary" not in last:
            raise _listen_error(last, connection.close_code)

    async def _send(
        self,
        method: str,
        path: str,
        audio: Audio | None,
        params: dict[str, Any] | None,
        stream: bool = False,
    ) -> httpx.Response:
        for attempt in range(self.retry.retries + 1):
            with ExitStack() as files:
                files_field = None if audio is None else _upload(audio, files)
                request = self._http.build_request(method, path, params=params, files=files_field)
                try:
                    response = await self._http.send(request, stream=stream)
                except _RETRY_ERRORS as error:
                    if self.retry.gives_up(attempt, error):
                        raise
                    await asyncio.sleep(_retrying(request, attempt, self.retry, error, None))
                    continue
            if response.status_code in RETRY_STATUSES and attempt < self.retry.retries:
                await response.aclose()
                await asyncio.sleep(_retrying(request, attempt, self.retry, None, response))
                continue
            if response.is_error:
                body = await response.aread()
                await response.aclose()
                raise error_of(response.status_code, body)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

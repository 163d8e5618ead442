"""`AsyncClient`: every call of the client, written once; `Client` (`_sync.py`) is generated from
this module by `client/unasync.py` (edit this one, then run that script; a test checks that the
two agree).

Requests the server refuses for now (503: overloaded, loading, stopping; 502 from a balancer
whose replica went away; a refused or reset connection) are retried a bounded number of times,
waiting what `Retry-After` says (capped); a recognition is a pure function of its upload, so a
retry is safe. Every other error answer raises the `arengine_client.errors` class of its status.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from arengine_client._shared import (
    RETRY_ERRORS,
    RETRY_STATUSES,
    AsyncBackground,
    AsyncChunks,
    Audio,
    Recognition,
    RetryPolicy,
    aiter_chunks,
    headers,
    job_outcome,
    listen_error,
    listen_headers,
    listen_url,
    log,
    query_of,
    retrying,
    stream_line,
    timeout,
    upload,
)
from arengine_client.errors import Unavailable, error_of
from arengine_client.live import CONTAINER_FORMATS
from arengine_client.types import Result, Tag, result_dict, result_of, tag_of


class AsyncClient:
    """A client of one server, or of a cluster behind a balancer, with one connection pool.

    Example (it needs a running server, so it is prose, not a doctest)::

        async with AsyncClient("http://127.0.0.1:8000", os.environ.get("ARENGINE_API_KEY")) as c:
            result = await c.recognize("talk.flac", model="speech", threshold=0.6)
            print([(tag.start, tag.end, tag.label) for tag in result.tags])
    """

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
            base_url=url, headers=headers(api_key), timeout=timeout(timeout_s), transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def info(self) -> dict[str, Any]:
        """The server's settings and state (`GET /v1/info`)."""
        return dict(await self._json("GET", "/v1/info"))

    async def models(self) -> list[dict[str, Any]]:
        """The loaded models (`GET /v1/models`)."""
        return list((await self._json("GET", "/v1/models"))["models"])

    async def formats(self) -> list[dict[str, Any]]:
        """The output formats `format` takes, with their extensions (`GET /v1/formats`)."""
        return list((await self._json("GET", "/v1/formats"))["formats"])

    async def recognize(
        self,
        audio: Audio,
        *,
        model: str = "speech",
        timeout_s: float | None = None,
        **overrides: float | str,
    ) -> Recognition:
        """Tag one recording; `overrides` are the post-processing parameters (`threshold`...)."""
        query = query_of(model, None, timeout_s, overrides)
        return result_of(await self._json("POST", "/v1/recognize", audio, query))

    async def download(
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
        query = query_of(model, format, timeout_s, overrides)
        return (await self._send("POST", "/v1/recognize", audio, query)).content

    async def render(self, result: Result, format: str, *, name: str = "recording") -> bytes:
        """A result already at hand written by the server in `format`, as `download` would
        have written it for a file named `name` (`POST /v1/render`), without the recording."""
        body = json.dumps(result_dict(result)).encode()
        query = {"format": format, "name": name}
        return (await self._send("POST", "/v1/render", None, query, body=body)).content

    async def submit(self, audio: Audio, *, model: str = "speech", **overrides: float | str) -> str:
        """Send a recording as a job (`POST /v1/jobs`): its id, once the server has it on disk.
        The job runs whether or not this client stays, and across the server's restarts."""
        query = query_of(model, None, None, overrides)
        return str((await self._json("POST", "/v1/jobs", audio, query))["id"])

    async def job(self, job_id: str) -> dict[str, Any]:
        """A job's state and progress (`GET /v1/jobs/{id}`)."""
        return dict(await self._json("GET", f"/v1/jobs/{job_id}"))

    async def job_result(self, job_id: str, **overrides: float | str) -> Recognition:
        """A done job's result; with post-processing parameters (`threshold=0.7`), its tags
        derived again from the scores it kept, without running the model."""
        path = f"/v1/jobs/{job_id}/result"
        return result_of(await self._json("GET", path, params=dict(overrides)))

    async def wait(
        self,
        job_id: str,
        *,
        poll_s: float = 2.0,
        patience_s: float = 900.0,
    ) -> Recognition:
        """A job's result once it is done, polling its state every `poll_s`. A dropped
        connection or a server that is away (restarting: refused, 502, 503) is waited out for
        up to `patience_s` in a row; a failed job raises `JobFailed`."""
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
            if job_outcome(job):
                return await self.job_result(job_id)
            await asyncio.sleep(poll_s)

    async def recognize_job(
        self, audio: Audio, *, model: str = "speech", poll_s: float = 2.0, **overrides: float | str
    ) -> Recognition:
        """`recognize` through a job, for long recordings: no request is held open for the
        whole run, and a dropped connection or a server restart does not lose the work."""
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
        """Tags as the server finalises them (NDJSON); retried only before the first byte."""
        query = query_of(model, "ndjson", timeout_s, overrides)
        response = await self._send("POST", "/v1/recognize", audio, query, stream=True)
        try:
            async for line in response.aiter_lines():
                for tag in stream_line(line):
                    yield tag
        finally:
            await response.aclose()

    async def listen(
        self,
        audio: AsyncChunks,
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
        audio: AsyncChunks,
        opening: dict[str, Any],
        *,
        model: str = "speech",
        **overrides: float | str,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every line a live stream sends (tags, `progress`, the `summary`) as a dict; its
        `{"error": ...}` line is raised as the exception of its status. `opening`: the
        stream's description, `{"format": "s16le", "sample_rate": 16000, "channels": 1}`."""
        url = listen_url(self._http.base_url, {"model": model, **overrides})
        try:
            # No keep-alive pings: the server reads no frame while it holds a fast sender back.
            connection = await connect(
                url,
                additional_headers=listen_headers(self._http),
                max_size=None,
                ping_interval=None,
            )
        except InvalidStatus as refused:
            body = bytes(refused.response.body or b"")
            raise error_of(refused.response.status_code, body) from None
        async with connection:
            sender = AsyncBackground(_send_audio, connection, opening, audio)
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
            raise listen_error(last, connection.close_code)

    async def _json(
        self,
        method: str,
        path: str,
        audio: Audio | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        return (await self._send(method, path, audio, params)).json()

    async def _send(
        self,
        method: str,
        path: str,
        audio: Audio | None,
        params: dict[str, Any] | None,
        stream: bool = False,
        body: bytes | None = None,
    ) -> httpx.Response:
        """The response of the first attempt that is not refused; an error answer raises."""
        sent = None if body is None else {"Content-Type": "application/json"}
        for attempt in range(self.retry.retries + 1):
            with ExitStack() as files:
                field = None if audio is None else upload(audio, files)
                request = self._http.build_request(
                    method, path, params=params, files=field, content=body, headers=sent
                )
                try:
                    response = await self._http.send(request, stream=stream)
                except RETRY_ERRORS as error:
                    if self.retry.gives_up(attempt, error):
                        raise
                    await asyncio.sleep(retrying(request, attempt, self.retry, error, None))
                    continue
            if response.status_code in RETRY_STATUSES and attempt < self.retry.retries:
                await response.aclose()
                await asyncio.sleep(retrying(request, attempt, self.retry, None, response))
                continue
            if response.is_error:
                answer = await response.aread()
                await response.aclose()
                raise error_of(response.status_code, answer)
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")


async def _send_audio(
    connection: ClientConnection,
    opening: dict[str, Any],
    audio: AsyncChunks,
) -> None:
    """Send the opening, every chunk of `audio`, then the end; stops quietly if the server
    closed first (it refused the query, or ended the stream with an error)."""
    try:
        await connection.send(json.dumps(opening))
        async for chunk in aiter_chunks(audio):
            await connection.send(chunk)
        await connection.send(json.dumps({"end": True}))
    except ConnectionClosed:
        pass

"""The recognition flow behind `POST /v1/recognize`: admission, spooling, submitting the recognition
(early for a PCM WAV still arriving), waiting for its result or streaming its tags, and recording
the outcome once. `routes.py` declares the endpoint and calls `answer` or `stream_ndjson`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from arengine.audio.arrival import HEADER_BYTES, Arrival, wav_layout
from arengine.engine.request import EngineRequest, TagListener
from arengine.errors import ArengineError, Cancelled, DeadlineExceeded, ErrorCode, InvalidInput
from arengine.http.streaming import PROGRESS_EVERY_S, TagFeed, TagStream, lines, stop
from arengine.http.uploads import Upload, UploadLimits, UploadPace, check_declared_length, spool
from arengine.kinds.base import Overrides, Recognizer
from arengine.outputs.formats import FORMATS, STREAM, STREAM_MEDIA_TYPE, Format
from arengine.service.engine import Engine
from arengine.settings import Settings
from arengine.system.metrics import Metrics
from arengine.types import Result

log = logging.getLogger(__name__)

Submit = Callable[[Path, Arrival | None], EngineRequest]
"""Submits the request's recognition for the upload at a path (still arriving, with an
`Arrival`)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One recognition request past its checks: the models and overrides checked before the
    body is read, the audio stream to decode, its deadline, and where its outcome is recorded."""

    request: Request
    engine: Engine
    recognizers: tuple[Recognizer, ...]
    overrides: Overrides
    audio_stream: int | None
    """Which audio stream of the upload to decode (None: the first): the `stream` query."""
    deadline: float
    """Monotonic time by which the answer must be complete."""
    record: Record
    gate: str | None = None
    """The loudness model whose quiet segments the models skip (the `gate` query), if any."""

    def submitter(self, on_tags: TagListener | None = None) -> Submit:
        """How the recognition is submitted once its upload (or a WAV's header) is on disk."""

        def submit(path: Path, arrival: Arrival | None) -> EngineRequest:
            request_id: str = self.request.state.request_id
            return self.engine.recognize(
                path,
                self.recognizers,
                self.overrides,
                request_id,
                on_tags,
                audio_stream=self.audio_stream,
                arrival=arrival,
                # The name is known before the body: from the part's headers, for a WAV
                # submitted on its header, and on the finished upload.
                name=getattr(self.request.state, "upload_name", None)
                or (arrival.name if arrival is not None else None),
                gate=self.gate,
            )

        return submit


async def answer(run: Run) -> Result:
    """Admit, spool and submit the upload, then wait for the whole result."""
    try:
        with ExitStack() as cleanup:
            recognition = await _admit_and_submit(run, cleanup, run.submitter())
            result = await _outcome(run.request, recognition, run.deadline)
    except BaseException as error:
        run.record.done(status_of(error), None)
        raise
    run.record.done(200, result)
    return result


async def stream_ndjson(run: Run, progress: bool) -> Response:
    """Admit, spool and submit as `answer` does, then stream the tags as NDJSON.

    Until the first tag (or the result) is known, a failure is an ordinary error response with
    its status; after that it becomes a last `{"error": ...}` line.
    """
    cleanup = ExitStack()
    try:
        feed = TagFeed()
        recognition = await _admit_and_submit(run, cleanup, run.submitter(feed.listener()))
        cleanup.callback(stop, recognition)
        feed.watch(recognition)
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(run.request))
        try:
            first = await feed.next(run.deadline, gone, PROGRESS_EVERY_S if progress else None)
            # With progress lines the stream starts once the upload is validated, not at the
            # first tag (a 2-hour file may have none for minutes); errors before it stay plain.
            while first is None and not recognition.validated:
                first = await feed.next(run.deadline, gone, PROGRESS_EVERY_S)
        finally:
            gone.cancel()
    except BaseException as error:
        cleanup.close()
        run.record.done(status_of(error), None)
        raise

    def finish(status: int, result: Result | None) -> None:
        cleanup.close()
        run.record.done(status, result)

    tags = lines(feed, first, run.deadline, finish, progress)
    return TagStream(tags, lambda: finish(499, None), media_type=STREAM_MEDIA_TYPE)


def check_format(fmt: Format, recognizer: Recognizer) -> None:
    """A notes-only format (MIDI) for a model whose tags are not notes: refused before upload."""
    if not fmt.accepts(recognizer.labels):
        fitting = ", ".join(f.name for f in FORMATS.values() if f.accepts(recognizer.labels))
        raise InvalidInput(
            f"format {fmt.name} holds only notes and model {recognizer.name!r} tags no notes; "
            f"formats for it: {fitting}, {STREAM}",
            code=ErrorCode.INVALID_PARAMETER,
        )


def refuse_repeated(request: Request) -> None:
    """A parameter given twice is ambiguous: refuse it rather than silently take one value."""
    names = [name for name, _ in request.query_params.multi_items()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidInput(
            f"{', '.join(repeated)} given more than once; give each parameter once",
            code=ErrorCode.INVALID_PARAMETER,
        )


class Record:
    """A recognition's outcome, recorded once: its metrics and, on success, the access log's
    result."""

    def __init__(self, request: Request, model: str, started: float) -> None:
        self._request = request
        self._model = model
        self._started = started
        self._done = False

    def done(self, status: int, result: Result | None) -> None:
        if self._done:
            return
        self._done = True
        metrics: Metrics = self._request.app.state.metrics
        audio_s = None if result is None else result.audio.duration_s
        metrics.observe_request(self._model, status, time.monotonic() - self._started, audio_s)
        self._request.state.result = result


def status_of(error: BaseException) -> int:
    if isinstance(error, ArengineError):
        return error.status
    return 499 if isinstance(error, asyncio.CancelledError) else 500


def received_at(request: Request) -> float:
    """When the request's first byte arrived (monotonic), as the server's protocol stamped it;
    the handler's start when nothing did (an in-process transport)."""
    stamped = getattr(request.state, "received_at", None)
    return stamped if isinstance(stamped, float) else time.monotonic()


async def _admit_and_submit(run: Run, cleanup: ExitStack, submit: Submit) -> EngineRequest:
    """Check the declared length, spool the upload in an upload slot, take an engine slot once
    the body is complete, and submit the recognition; `cleanup` releases the slot and deletes the
    file, whatever happens later.

    The engine's fullness is checked before the body is read too, so that a request it has no
    room for is refused at once rather than after its upload. A PCM WAV of declared length is
    submitted as soon as its header is on disk and recognised while it arrives
    (`arengine/audio/arrival.py`); a recognition that fails meanwhile ends the upload with its
    error.
    """
    request = run.request
    settings: Settings = request.app.state.settings
    limits = UploadLimits(max_bytes=settings.limits.max_upload_bytes)
    declared = request.headers.get("content-length")
    check_declared_length(declared, limits)
    admission = run.engine.admission
    admission.check_room()
    pace = UploadPace(
        idle_timeout_s=settings.limits.body_timeout_s,
        deadline=run.deadline,
        min_bytes_per_s=settings.limits.min_upload_bytes_per_s,
        grace_s=settings.limits.upload_grace_s,
    )
    arrival = Arrival()
    recognition: EngineRequest | None = None
    with admission.uploading_slot() as progress:
        body = request.stream()
        content_type = request.headers.get("content-type")
        spooling = asyncio.ensure_future(
            spool(body, content_type, limits, settings.server.upload_dir, pace, progress, arrival)
        )
        try:
            if declared is not None and settings.engine.read_while_uploading:
                recognition = await _submit_early(arrival, spooling, int(declared), submit)
            upload = await _spooled(spooling, recognition)
            cleanup.callback(upload.path.unlink, missing_ok=True)
            cleanup.enter_context(admission.pending_slot())
        except BaseException as error:
            spooling.cancel()  # the spool deletes its file
            if recognition is not None:
                recognition.abort(
                    error if isinstance(error, ArengineError) else Cancelled("cancelled")
                )
            raise
    request.state.upload_name = upload.filename
    return recognition or submit(upload.path, None)


async def _submit_early(
    arrival: Arrival, spooling: asyncio.Future[Upload], declared: int, submit: Submit
) -> EngineRequest | None:
    """Submit a PCM WAV once its header is on disk; None for any other upload, or one whose
    body was complete by then (submitted when complete, as usual)."""
    loop = asyncio.get_running_loop()
    header: asyncio.Future[None] = loop.create_future()
    # Called on this loop's thread: the spool, which writes the bytes, runs here.
    arrival.notify_at(HEADER_BYTES, lambda: _resolve(header, None))
    await asyncio.wait(_either(header, spooling), return_when=asyncio.FIRST_COMPLETED)
    if spooling.done() or arrival.path is None:
        return None
    arrival.layout = wav_layout(arrival.path, declared)
    return None if arrival.layout is None else submit(arrival.path, arrival)


async def _spooled(spooling: asyncio.Future[Upload], recognition: EngineRequest | None) -> Upload:
    """The finished upload; or, if `recognition` (started on the header) fails first, its error."""
    if recognition is not None:
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[BaseException] = loop.create_future()

        def done(future: Future[Result]) -> None:
            error = future.exception()
            if error is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, failed, error)

        recognition.future.add_done_callback(done)
        await asyncio.wait(_either(spooling, failed), return_when=asyncio.FIRST_COMPLETED)
        if not spooling.done():
            raise failed.result()
    return await spooling


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _either(*futures: asyncio.Future[Any]) -> set[asyncio.Future[Any]]:
    return set(futures)


async def _outcome(request: Request, recognition: EngineRequest, deadline: float) -> Result:
    """The recognition's result; cancels it when the `deadline` (monotonic) passes or the client
    leaves."""
    result: asyncio.Future[Any] = asyncio.wrap_future(recognition.future)
    gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait(
            {result, gone},
            timeout=max(deadline - time.monotonic(), 0.0),
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        gone.cancel()
        if not recognition.future.done():
            recognition.cancel()
            # The cancelled recognition's exception is expected: read it so asyncio does not log it.
            result.add_done_callback(lambda future: future.cancelled() or future.exception())
    if result in done:
        outcome: Result = result.result()
        return outcome
    if gone in done:
        log.info(
            "request %s: client disconnected, remaining work cancelled", recognition.spec.request_id
        )
        raise Cancelled("the client disconnected")
    raise DeadlineExceeded("the request's deadline passed; its remaining work was dropped")


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass

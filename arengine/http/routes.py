"""The HTTP endpoints: recognition, model and server info, liveness and readiness."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from arengine import __version__
from arengine.audio.arrival import HEADER_BYTES, Arrival, wav_layout
from arengine.engine.engine import Engine
from arengine.engine.job import Job
from arengine.errors import (
    ArengineError,
    Cancelled,
    DeadlineExceeded,
    ErrorCode,
    InvalidInput,
    NotReady,
)
from arengine.http.errors import error_responses
from arengine.http.render import download
from arengine.http.schemas import (
    DEFAULT_MODEL,
    FailureOut,
    FormatOut,
    FormatsResponse,
    InfoResponse,
    ModelOut,
    ModelsResponse,
    RecognizeQuery,
    RecognizeResponse,
)
from arengine.http.streaming import PROGRESS_EVERY_S, TagFeed, TagStream, lines, stop
from arengine.http.uploads import (
    Upload,
    UploadLimits,
    UploadPace,
    check_declared_length,
    spool,
)
from arengine.models.recognizer import Overrides, Recognizer
from arengine.outputs.formats import (
    FORMATS,
    STREAM,
    STREAM_MEDIA_TYPE,
    Format,
    get_format,
    negotiate,
)
from arengine.settings import Settings
from arengine.system.allocator import active_allocator
from arengine.system.metrics import Metrics
from arengine.system.threads import available_cpus
from arengine.types import Result

router = APIRouter()
log = logging.getLogger(__name__)

_AUDIO_BODY = {
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


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


@router.post(
    "/v1/recognize",
    response_model=RecognizeResponse,
    response_model_exclude_none=True,
    responses=error_responses(),
    openapi_extra=_AUDIO_BODY,
)
async def recognize(
    request: Request, query: Annotated[RecognizeQuery, Query()]
) -> RecognizeResponse | Response:
    """Tag one audio file (multipart field `file`, or a raw body with an audio content type).

    The answer is JSON unless `format` (or the `Accept` header) asks for another format, or for
    `application/x-ndjson`: one tag per line as soon as it is final, then a summary line.
    """
    started = received_at(request)
    _refuse_repeated(request)
    engine = _engine(request)
    settings: Settings = request.app.state.settings
    overrides = query.overrides()
    timeout = min(query.timeout_s or settings.request_timeout_s, settings.request_timeout_s)
    output = query.format or negotiate(request.headers.get("accept")) or "json"
    recognizers = engine.check(query.model, overrides)  # before reading the body: refuse fast
    if output != STREAM:
        for recognizer in recognizers:
            _check_format(get_format(output), recognizer)
    # Loaded models' names, each once: a bounded label value.
    request.state.model = query.model
    request.state.stream = query.stream
    record = _Record(request, query.model, started)
    if output == STREAM:
        deadline = started + timeout
        return await _stream(
            request, engine, recognizers, overrides, record, deadline, query.progress
        )
    try:
        with ExitStack() as cleanup:
            job = await _admit_and_submit(
                request,
                engine,
                cleanup,
                started + timeout,
                lambda path, arrival: engine.recognize(
                    path,
                    recognizers,
                    overrides,
                    request.state.request_id,
                    stream=query.stream,
                    arrival=arrival,
                ),
            )
            result = await _outcome(request, job, started + timeout)
    except BaseException as error:
        record.done(_status_of(error), None)
        raise
    record.done(200, result)
    if output == "json" and query.format is None:  # the plain API answer, not a download
        return RecognizeResponse.of(result)
    return download(get_format(output), result, getattr(request.state, "upload_name", None))


def _check_format(fmt: Format, recognizer: Recognizer) -> None:
    """A notes-only format (MIDI) for a model whose tags are not notes: refused before upload."""
    if not fmt.accepts(recognizer.labels):
        fitting = ", ".join(f.name for f in FORMATS.values() if f.accepts(recognizer.labels))
        raise InvalidInput(
            f"format {fmt.name} holds only notes and model {recognizer.name!r} tags no notes; "
            f"formats for it: {fitting}, {STREAM}",
            code=ErrorCode.INVALID_PARAMETER,
        )


def _refuse_repeated(request: Request) -> None:
    """A parameter given twice is ambiguous: refuse it rather than silently take one value."""
    names = [name for name, _ in request.query_params.multi_items()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidInput(
            f"{', '.join(repeated)} given more than once; give each parameter once",
            code=ErrorCode.INVALID_PARAMETER,
        )


class _Record:
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


def _status_of(error: BaseException) -> int:
    if isinstance(error, ArengineError):
        return error.status
    return 499 if isinstance(error, asyncio.CancelledError) else 500


def received_at(request: Request) -> float:
    """When the request's first byte arrived (monotonic), as the server's protocol stamped it;
    the handler's start when nothing did (an in-process transport)."""
    stamped = getattr(request.state, "received_at", None)
    return stamped if isinstance(stamped, float) else time.monotonic()


Submit = Callable[[Path, Arrival | None], Job]
"""Submits the request's job for the upload at a path (still arriving, with an `Arrival`)."""


async def _admit_and_submit(
    request: Request, engine: Engine, cleanup: ExitStack, deadline: float, submit: Submit
) -> Job:
    """Check the declared length, spool the upload in an upload slot, take an engine slot once
    the body is complete, and submit the job; `cleanup` releases the slot and deletes the file,
    whatever happens later.

    The engine's fullness is checked before the body is read too, so that a request it has no
    room for is refused at once rather than after its upload. A PCM WAV of declared length is
    submitted as soon as its header is on disk and recognised while it arrives
    (`arengine/audio/arrival.py`); a job that fails meanwhile ends the upload with its error.
    """
    settings: Settings = request.app.state.settings
    limits = UploadLimits(max_bytes=settings.max_upload_bytes)
    declared = request.headers.get("content-length")
    check_declared_length(declared, limits)
    admission = engine.admission
    admission.check_room()
    pace = UploadPace(
        idle_timeout_s=settings.body_timeout_s,
        deadline=deadline,
        min_bytes_per_s=settings.min_upload_bytes_per_s,
        grace_s=settings.upload_grace_s,
    )
    arrival = Arrival()
    job: Job | None = None
    with admission.uploading_slot() as progress:
        body = request.stream()
        content_type = request.headers.get("content-type")
        spooling = asyncio.ensure_future(
            spool(body, content_type, limits, settings.upload_dir, pace, progress, arrival)
        )
        try:
            if declared is not None and settings.read_while_uploading:
                job = await _submit_early(arrival, spooling, int(declared), submit)
            upload = await _spooled(spooling, job)
            cleanup.callback(upload.path.unlink, missing_ok=True)
            cleanup.enter_context(admission.pending_slot())
        except BaseException as error:
            spooling.cancel()  # the spool deletes its file
            if job is not None:
                job.abort(error if isinstance(error, ArengineError) else Cancelled("cancelled"))
            raise
    request.state.upload_name = upload.filename
    return job or submit(upload.path, None)


async def _submit_early(
    arrival: Arrival, spooling: asyncio.Future[Upload], declared: int, submit: Submit
) -> Job | None:
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


async def _spooled(spooling: asyncio.Future[Upload], job: Job | None) -> Upload:
    """The finished upload; or, if `job` (started on the header) fails first, its error."""
    if job is not None:
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[BaseException] = loop.create_future()

        def done(future: Future[Result]) -> None:
            error = future.exception()
            if error is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, failed, error)

        job.future.add_done_callback(done)
        await asyncio.wait(_either(spooling, failed), return_when=asyncio.FIRST_COMPLETED)
        if not spooling.done():
            raise failed.result()
    return await spooling


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _either(*futures: asyncio.Future[Any]) -> set[asyncio.Future[Any]]:
    return set(futures)


async def _outcome(request: Request, job: Job, deadline: float) -> Result:
    """The job's result; cancels it when the `deadline` (monotonic) passes or the client leaves."""
    result: asyncio.Future[Any] = asyncio.wrap_future(job.future)
    gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait(
            {result, gone},
            timeout=max(deadline - time.monotonic(), 0.0),
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        gone.cancel()
        if not job.future.done():
            job.cancel()
            # The cancelled job's exception is expected: read it so asyncio does not log it.
            result.add_done_callback(lambda future: future.cancelled() or future.exception())
    if result in done:
        outcome: Result = result.result()
        return outcome
    if gone in done:
        log.info("request %s: client disconnected, remaining work cancelled", job.spec.request_id)
        raise Cancelled("the client disconnected")
    raise DeadlineExceeded("the request's deadline passed; its remaining work was dropped")


async def _stream(
    request: Request,
    engine: Engine,
    recognizers: tuple[Recognizer, ...],
    overrides: Overrides,
    record: _Record,
    deadline: float,
    progress: bool,
) -> Response:
    """Admit, spool and submit as a JSON request does, then stream the tags as NDJSON.

    Until the first tag (or the result) is known, a failure is an ordinary error response with
    its status; after that it becomes a last `{"error": ...}` line.
    """
    cleanup = ExitStack()
    try:
        feed = TagFeed()
        job = await _admit_and_submit(
            request,
            engine,
            cleanup,
            deadline,
            lambda path, arrival: engine.recognize(
                path,
                recognizers,
                overrides,
                request.state.request_id,
                feed.listener(),
                stream=request.state.stream,
                arrival=arrival,
            ),
        )
        cleanup.callback(stop, job)
        feed.watch(job)
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
        try:
            first = await feed.next(deadline, gone, PROGRESS_EVERY_S if progress else None)
            # With progress lines the stream starts once the upload is validated, not at the
            # first tag (a 2-hour file may have none for minutes); errors before it stay plain.
            while first is None and job.progress[1] is None:
                first = await feed.next(deadline, gone, PROGRESS_EVERY_S)
        finally:
            gone.cancel()
    except BaseException as error:
        cleanup.close()
        record.done(_status_of(error), None)
        raise

    def finish(status: int, result: Result | None) -> None:
        cleanup.close()
        record.done(status, result)

    stream = lines(feed, first, deadline, finish, progress)
    return TagStream(stream, lambda: finish(499, None), media_type=STREAM_MEDIA_TYPE)


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.get("/v1/models", response_model=ModelsResponse, responses=error_responses(401))
async def models(request: Request) -> ModelsResponse:
    """The loaded models and their parameters."""
    engine = _engine(request)
    return ModelsResponse(
        models=[ModelOut.of(loaded) for _, loaded in sorted(engine.models.items())],
        unavailable=[
            FailureOut(manifest=str(failure.path), reason=failure.reason)
            for failure in engine.failures
        ],
        default=DEFAULT_MODEL if DEFAULT_MODEL in engine.models else None,
    )


@router.get("/v1/formats", response_model=FormatsResponse, responses=error_responses(401))
async def formats() -> FormatsResponse:
    """The output formats `format` takes (the page's download buttons come from here)."""
    return FormatsResponse(formats=[FormatOut.of(f) for f in FORMATS.values()], stream=STREAM)


@router.get("/v1/info", response_model=InfoResponse, responses=error_responses(401))
async def info(request: Request) -> InfoResponse:
    """Versions, the active allocator, and the effective thread settings."""
    engine = _engine(request)
    settings = engine.settings
    return InfoResponse(
        version=__version__,
        torch_version=torch.__version__,
        allocator=active_allocator(),
        engine_threads=engine.pool.threads,
        cpus_available=available_cpus(),
        intra_op_threads=torch.get_num_threads(),
        inter_op_threads=torch.get_num_interop_threads(),
        ready=engine.ready,
        uploading_requests=engine.admission.uploading,
        pending_requests=engine.admission.pending,
        active_jobs=engine.pool.active_jobs,
        limits={
            "max_upload_bytes": settings.max_upload_bytes,
            "max_duration_s": settings.max_duration_s,
            "max_channels": settings.max_channels,
            "min_sample_rate": settings.min_sample_rate,
            "max_sample_rate": settings.max_sample_rate,
            "segments_ahead": settings.segments_ahead,
        },
    )


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """Prometheus exposition text (a plain `def`: collecting runs in the thread pool)."""
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses=error_responses(503))
async def readyz(request: Request) -> JSONResponse:
    """Readiness: models loaded and warmed up."""
    engine = _engine(request)
    if engine.stopping:
        raise NotReady("the server is shutting down", code=ErrorCode.SHUTTING_DOWN)
    if not engine.ready:
        raise NotReady("the models are still loading")
    return JSONResponse({"status": "ready"})

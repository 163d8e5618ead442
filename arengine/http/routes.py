"""The HTTP endpoints: recognition, model and server info, liveness and readiness.

Each endpoint is declared here; the recognition flow behind `POST /v1/recognize` (admission,
spooling, the job, streaming) is in `arengine/http/recognition.py`.
"""

from __future__ import annotations

from typing import Annotated

import torch
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from arengine import __version__
from arengine.errors import ErrorCode, NotReady
from arengine.http.errors import error_responses
from arengine.http.recognition import (
    Record,
    Run,
    answer,
    check_format,
    received_at,
    refuse_repeated,
    stream_ndjson,
)
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
from arengine.http.uploads import AUDIO_BODY
from arengine.outputs.formats import FORMATS, STREAM, get_format, negotiate
from arengine.service.engine import Engine
from arengine.settings import Settings
from arengine.system.allocator import active_allocator
from arengine.system.threads import available_cpus
from arengine.types import result_dict

router = APIRouter()


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


@router.post(
    "/v1/recognize",
    response_model=RecognizeResponse,
    response_model_exclude_none=True,
    responses=error_responses(),
    openapi_extra=AUDIO_BODY,
)
async def recognize(
    request: Request, query: Annotated[RecognizeQuery, Query()]
) -> RecognizeResponse | Response:
    """Tag one audio file (multipart field `file`, or a raw body with an audio content type).

    The answer is JSON unless `format` (or the `Accept` header) asks for another format, or for
    `application/x-ndjson`: one tag per line as soon as it is final, then a summary line.
    """
    started = received_at(request)
    refuse_repeated(request)
    engine = _engine(request)
    settings: Settings = request.app.state.settings
    overrides = query.overrides()
    timeout = min(
        query.timeout_s or settings.limits.request_timeout_s, settings.limits.request_timeout_s
    )
    output = query.format or negotiate(request.headers.get("accept")) or "json"
    # Before reading the body: refuse fast.
    recognizers = engine.check(query.model, overrides, query.gate)
    if output != STREAM:
        for recognizer in recognizers:
            check_format(get_format(output), recognizer)
    # Loaded models' names, each once: a bounded label value.
    request.state.model = query.model
    request.state.audio_stream = query.audio_stream
    record = Record(request, query.model, started)
    run = Run(
        request,
        engine,
        recognizers,
        overrides,
        query.audio_stream,
        started + timeout,
        record,
        query.gate,
    )
    if output == STREAM:
        return await stream_ndjson(run, query.progress)
    result = await answer(run)
    if output == "json" and query.format is None:  # the plain API answer, not a download
        # A `RecognizeResponse`'s JSON, from the engine's own result (as a job's result is):
        # validating every tag into the model and again on the way out held the GIL while
        # the engine threads wanted it.
        return JSONResponse(result_dict(result))
    return download(get_format(output), result, getattr(request.state, "upload_name", None))


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
        active_jobs=engine.pool.active_requests,
        limits={
            "max_upload_bytes": settings.limits.max_upload_bytes,
            "max_duration_s": settings.limits.max_duration_s,
            "max_channels": settings.limits.max_channels,
            "min_sample_rate": settings.limits.min_sample_rate,
            "max_sample_rate": settings.limits.max_sample_rate,
            "segments_ahead": settings.engine.segments_ahead,
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
        raise NotReady(engine.not_ready_reason)
    return JSONResponse({"status": "ready"})

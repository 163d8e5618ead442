"""The job endpoints: `POST /v1/jobs` stores an upload and answers 202 at once; the job runs on
the engine (`arengine/jobs/runner.py`) whether or not its client stays, and across restarts.

With API keys on, a job belongs to the key that created it: another key's job is a 404, as if it
did not exist. Jobs are off (404 `jobs_disabled`) unless the server has a `data_dir`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from arengine.audio.validation import probe
from arengine.errors import (
    ArengineError,
    ErrorCode,
    InsufficientStorage,
    InvalidInput,
    Overloaded,
    Unauthorized,
)
from arengine.http.auth import IDENTITY
from arengine.http.callbacks import checked_callback, subscribe, unsubscribe
from arengine.http.errors import error_responses
from arengine.http.recognition import received_at, refuse_repeated
from arengine.http.render import download
from arengine.http.schemas import JobQuery, JobResultQuery, RecognizeResponse
from arengine.http.streaming import ending, error_line, ndjson, tag_lines
from arengine.http.uploads import (
    AUDIO_BODY,
    Upload,
    UploadLimits,
    UploadPace,
    check_declared_length,
    spool,
)
from arengine.jobs.retag import retag
from arengine.jobs.runner import JobRunner
from arengine.jobs.scores import DamagedScores, ScoreLog
from arengine.jobs.store import (
    JobError,
    JobRecord,
    JobState,
    JobStore,
    commit_file,
    new_job_id,
    storage_full,
)
from arengine.outputs.formats import STREAM, Format, get_format, negotiate
from arengine.service.engine import Engine
from arengine.settings import Settings, size_text
from arengine.types import Result, result_dict, result_of

log = logging.getLogger(__name__)
router = APIRouter()

_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


class ProgressOut(BaseModel):
    audio_s: float = Field(description="Audio seconds post-processed by every model so far.")
    duration_s: float | None = Field(description="The recording's duration once validated.")


class JobErrorOut(BaseModel):
    code: str
    message: str


class JobOut(BaseModel):
    id: str
    state: JobState = Field(description="queued, running, done, failed or cancelled.")
    model: str
    parameters: dict[str, float | str] = Field(description="The post-processing overrides.")
    gate: str | None = Field(None, description="The loudness model gating its models, if any.")
    progress: ProgressOut
    error: JobErrorOut | None = Field(None, description="Why it failed.")
    created: str = Field(description="When the job was accepted (UTC, ISO 8601).")
    finished: str | None = Field(None, description="When it ended (UTC, ISO 8601).")

    @classmethod
    def of(cls, record: JobRecord) -> JobOut:
        return cls(
            id=record.id,
            state=record.state,
            model=record.model,
            parameters=dict(record.overrides),
            gate=record.gate,
            progress=ProgressOut(audio_s=record.done_s, duration_s=record.duration_s),
            error=None if record.error is None else JobErrorOut(**_error_fields(record)),
            created=_iso(record.created),
            finished=None if record.finished is None else _iso(record.finished),
        )


class JobsResponse(BaseModel):
    jobs: list[JobOut]


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=JobOut,
    responses=error_responses(),
    openapi_extra=AUDIO_BODY,
)
async def create_job(request: Request, query: Annotated[JobQuery, Query()]) -> JSONResponse:
    """Store an upload as a job (the body and parameters of `POST /v1/recognize`): 202 and a
    `Location` once it is safely on disk; the job runs whether or not the client stays."""
    started = received_at(request)
    runner = _runner(request)
    refuse_repeated(request)
    engine: Engine = request.app.state.engine
    settings: Settings = request.app.state.settings
    overrides = query.overrides()
    engine.check(query.model, overrides, query.gate)  # before reading the body: refuse fast
    callback = await checked_callback(request, query.callback_url)
    await to_thread.run_sync(_check_room, runner, settings)
    upload = await _spool(
        request, runner.store, settings, started + settings.limits.request_timeout_s
    )
    try:
        await to_thread.run_sync(probe, upload.path, engine.limits, query.audio_stream)
    except BaseException:
        upload.path.unlink(missing_ok=True)
        raise
    record = JobRecord(
        id=new_job_id(),
        owner=_owner(request),
        model=query.model,
        gate=query.gate,
        overrides=overrides,
        stream=query.audio_stream,
        filename=upload.filename,
        state=JobState.QUEUED,
        done_s=0.0,
        duration_s=None,
        error=None,
        created=time.time(),
        finished=None,
        result=None,
    )
    limit = settings.jobs.max_queued_jobs
    try:
        await subscribe(request, record.id, callback)
    except BaseException:
        upload.path.unlink(missing_ok=True)  # the commit that would have moved it never runs
        raise
    try:
        committed = await to_thread.run_sync(_commit, runner.store, upload.path, record, limit)
    except BaseException:
        await unsubscribe(request, record.id, callback)
        raise
    if not committed:
        await unsubscribe(request, record.id, callback)
        raise _too_many(settings)
    runner.notify()
    body = JobOut.of(record).model_dump(mode="json")
    return JSONResponse(body, 202, headers={"Location": f"/v1/jobs/{record.id}"})


@router.get("/v1/jobs", response_model=JobsResponse, responses=error_responses(401, 404))
async def list_jobs(request: Request) -> JobsResponse:
    """The caller's jobs, oldest first."""
    runner = _runner(request)
    records = await to_thread.run_sync(runner.store.owned_by, _owner(request))
    return JobsResponse(jobs=[JobOut.of(runner.current(record)) for record in records])


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobOut,
    responses=error_responses(401, 404),
)
async def get_job(request: Request, job_id: str) -> JobOut:
    """A job's state, progress and, when it failed, its error."""
    return JobOut.of(await _record(request, job_id))


@router.get(
    "/v1/jobs/{job_id}/result",
    response_model=RecognizeResponse,
    response_model_exclude_none=True,
    responses=error_responses(401, 404, 409, 422),
)
async def job_result(
    request: Request, job_id: str, query: Annotated[JobResultQuery, Query()]
) -> Response:
    """A done job's result, exactly as `POST /v1/recognize` answers it, in `format` (or the
    `Accept` header's) if given; 409 `job_not_done` before. With post-processing parameters
    (`?threshold=0.7`: any of its models'), its tags are derived again from the scores the job
    kept, in milliseconds, as a recognition with those parameters would give them."""
    refuse_repeated(request)
    record = await _record(request, job_id)
    format = query.format
    output = format or negotiate(request.headers.get("accept")) or "json"
    fmt = _format(output)
    if record.state is not JobState.DONE or record.result is None:
        raise ArengineError(_not_done(record), code=ErrorCode.JOB_NOT_DONE)
    store = _runner(request).store
    overrides = query.overrides()
    # New parameters derive the tags again: the stored ones are not made into tags.
    result = await to_thread.run_sync(_stored_result, store, record, not overrides)
    if overrides:
        engine: Engine = request.app.state.engine
        result = await to_thread.run_sync(_retagged, engine, store, record, result, overrides)
    if not fmt.accepts([tag.label for tag in result.tags]):
        raise InvalidInput(
            f"format {fmt.name} holds only notes and this job's result has other tags",
            code=ErrorCode.INVALID_PARAMETER,
        )
    await _mark_read(store, record)
    if output == "json" and format is None:
        # A `RecognizeResponse`'s JSON, from the engine's own result: validating thousands of
        # tags into the model and again on the way out took a third of a 2-hour job's answer.
        return JSONResponse(result_dict(result))
    return download(fmt, result, record.filename)


EVENTS_EVERY_S = 1.0
"""How often `GET /v1/jobs/{id}/events` looks for new tags and sends a progress line."""


@router.get(
    "/v1/jobs/{job_id}/events",
    responses={
        **error_responses(401, 404),
        200: {"content": {"application/x-ndjson": {}}, "description": "NDJSON lines."},
    },
)
async def job_events(request: Request, job_id: str) -> StreamingResponse:
    """NDJSON while the job runs: its tags as they are final, a `{"progress": ...}` line about
    once a second (with the job's `state`), then `{"summary": ...}` when it is done, or
    `{"error": ...}` when it fails or is removed. A client that comes back later gets every
    tag again from the first."""
    record = await _record(request, job_id)
    runner = _runner(request)
    return StreamingResponse(_events(runner, record), media_type="application/x-ndjson")


async def _events(runner: JobRunner, record: JobRecord) -> AsyncIterator[bytes]:
    sent = 0
    current: JobRecord | None = record
    while current is not None and current.state in (JobState.QUEUED, JobState.RUNNING):
        tags = runner.tags(record.id, sent)
        sent += len(tags)
        yield tag_lines(tags) + ndjson([_progress(current)])
        await asyncio.sleep(EVENTS_EVERY_S)
        current = await to_thread.run_sync(runner.store.get, record.id)
        current = None if current is None else runner.current(current)
    if current is None or current.state is JobState.CANCELLED:
        yield error_line(ErrorCode.JOB_NOT_FOUND.value, f"job {record.id} was removed")
    elif current.state is JobState.FAILED or current.result is None:
        error = current.error or JobError(ErrorCode.INTERNAL_ERROR.value, "the job failed")
        yield error_line(error.code, error.message)
        await _mark_read(runner.store, current)
    else:
        try:
            result = await to_thread.run_sync(_stored_result, runner.store, current)
        except ArengineError as damaged:
            yield error_line(damaged.code.value, damaged.message)
            return
        yield ending(result, sent)
        await _mark_read(runner.store, current)


def _progress(record: JobRecord) -> dict[str, Any]:
    progress = {"audio_s": round(record.done_s, 3), "duration_s": record.duration_s}
    return {"progress": progress, "state": record.state.value}


@router.delete("/v1/jobs/{job_id}", status_code=204, responses=error_responses(401, 404))
async def delete_job(request: Request, job_id: str) -> Response:
    """Cancel a job if it has not ended, and remove it with its upload and result."""
    record = await _record(request, job_id)
    await to_thread.run_sync(_runner(request).cancel, record.id)
    return Response(status_code=204)


def _stored_result(store: JobStore, record: JobRecord, tags: bool = True) -> Result:
    """A done job's result from its file (without its tags unless `tags`); 500
    `job_result_damaged` when the file cannot be read as one."""
    try:
        stored = json.loads((store.results / str(record.result)).read_bytes())
        return result_of(stored if tags else {**stored, "tags": []})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        log.error("job %s: its result file cannot be read: %r", record.id, error)
        raise ArengineError(
            f"job {record.id} is done but its stored result cannot be read (damaged, or removed "
            "outside the server): submit the recording again",
            code=ErrorCode.JOB_RESULT_DAMAGED,
        ) from None


def _retagged(
    engine: Engine,
    store: JobStore,
    record: JobRecord,
    result: Result,
    overrides: dict[str, float | str],
) -> Result:
    """The job's tags under its own overrides and `overrides` (which win), from its scores."""
    combined = {**record.overrides, **overrides}
    recognizers = engine.check(record.model, combined)
    path = store.scores_path(record.id)
    if not path.is_file():
        raise ArengineError(
            f"job {record.id} kept no scores: ask for its result without new parameters",
            code=ErrorCode.SCORES_NOT_KEPT,
        )
    try:
        with ScoreLog.reading(path) as (plan, kept):
            return retag(result, recognizers, combined, plan, kept)
    except DamagedScores as error:
        raise ArengineError(
            f"job {record.id}'s kept scores are damaged ({error}): ask for its result without "
            "new parameters",
            code=ErrorCode.SCORES_NOT_KEPT,
        ) from None


def _runner(request: Request) -> JobRunner:
    runner: JobRunner | None = getattr(request.app.state, "jobs", None)
    if runner is None:
        raise ArengineError(
            "jobs are off on this server: start it with --data-dir (ARENGINE_DATA_DIR)",
            code=ErrorCode.JOBS_DISABLED,
        )
    return runner


def _owner(request: Request) -> str | None:
    """The identity of the API key that made the request, as the API key middleware checked
    it (`arengine.http.auth`); None with keys off."""
    settings: Settings = request.app.state.settings
    if not settings.security.api_key_list():
        return None
    owner: str | None = getattr(request.state, IDENTITY, None)
    if owner is None:  # the middleware always leaves one: never fall back to keys-off jobs
        raise Unauthorized("send Authorization: Bearer <API key>")
    return owner


async def _record(request: Request, job_id: str) -> JobRecord:
    """The caller's job `job_id`; 404 `job_not_found` for an unknown id or another key's job."""
    runner = _runner(request)
    store = runner.store
    record = await to_thread.run_sync(store.get, job_id) if _JOB_ID.match(job_id) else None
    if record is None or record.owner != _owner(request):
        raise ArengineError(f"no job {job_id[:64]!r}", code=ErrorCode.JOB_NOT_FOUND)
    record = runner.current(record)
    if record.state is JobState.FAILED:  # its error, about to be told, is its outcome
        await _mark_read(store, record)
    return record


async def _mark_read(store: JobStore, record: JobRecord) -> None:
    """Its owner has its outcome: from now on the disk budget may remove the job."""
    if record.read is None:
        await to_thread.run_sync(store.mark_read, record.id)


def _commit(store: JobStore, spooled: Path, record: JobRecord, limit: int) -> bool:
    """Rename the spooled upload into place and commit the job's row; False when `limit` jobs
    are queued or running. A full disk is a 507; a refusal leaves no file behind."""
    target = store.upload_path(record.id)
    try:
        commit_file(spooled, target)
        if store.add(record, limit):
            return True
    except Exception as error:
        spooled.unlink(missing_ok=True)
        target.unlink(missing_ok=True)
        if not storage_full(error):
            raise
        raise InsufficientStorage(
            "the data directory is full: the job could not be stored; retry once there is room"
        ) from None
    target.unlink(missing_ok=True)
    return False


def _check_room(runner: JobRunner, settings: Settings) -> None:
    if runner.store.active() >= settings.jobs.max_queued_jobs:
        raise _too_many(settings)
    if not runner.within_budget():
        raise ArengineError(
            "the job store's files pass its disk budget "
            f"({size_text(settings.jobs.job_storage_bytes)}, job_storage_bytes) with jobs "
            "queued, running or whose outcome nobody has read yet, which it never removes: retry "
            "once some are read or deleted",
            code=ErrorCode.JOB_STORAGE_FULL,
        )


def _too_many(settings: Settings) -> Overloaded:
    return Overloaded(
        f"{settings.jobs.max_queued_jobs} jobs are queued or running, the limit; retry later",
        code=ErrorCode.TOO_MANY_JOBS,
    )


async def _spool(request: Request, store: JobStore, settings: Settings, deadline: float) -> Upload:
    """The upload spooled into the store's folder, in an upload slot, with the limits and the
    pace of a recognition's upload."""
    limits = UploadLimits(max_bytes=settings.limits.max_upload_bytes)
    check_declared_length(request.headers.get("content-length"), limits)
    pace = UploadPace(
        idle_timeout_s=settings.limits.body_timeout_s,
        deadline=deadline,
        min_bytes_per_s=settings.limits.min_upload_bytes_per_s,
        grace_s=settings.limits.upload_grace_s,
    )
    engine: Engine = request.app.state.engine
    with engine.admission.uploading_slot() as progress:
        content_type = request.headers.get("content-type")
        upload = await spool(request.stream(), content_type, limits, store.uploads, pace, progress)
    request.state.upload_name = upload.filename
    return upload


def _format(name: str) -> Format:
    if name == STREAM:
        raise InvalidInput(
            f"a job's result is a whole file: {STREAM} is for POST /v1/recognize",
            code=ErrorCode.INVALID_PARAMETER,
        )
    try:
        return get_format(name)
    except ValueError as error:
        raise InvalidInput(str(error), code=ErrorCode.INVALID_PARAMETER) from None


def _not_done(record: JobRecord) -> str:
    if record.state is JobState.FAILED and record.error is not None:
        return f"job {record.id} failed: {record.error.code}: {record.error.message}"
    total = "?" if record.duration_s is None else f"{record.duration_s:g}"
    return f"job {record.id} is {record.state} ({record.done_s:g} of {total} s); retry later"


def _error_fields(record: JobRecord) -> dict[str, str]:
    error = record.error
    return {} if error is None else {"code": error.code, "message": error.message}


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds")

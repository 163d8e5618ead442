"""`/v1/models/{name}/references`: list, add and remove a fingerprint model's references.

Reads need what every endpoint needs (a user's key when `api_keys` is set). Writes need an
administrator key (`admin_keys`), kept apart from the users' keys: none sent is 401
`admin_required`, a user's key 403 `not_admin`, and with no `admin_keys` set writes are off (403
`admin_disabled`; `arengine references` still works). An added reference is uploaded as a
recording for recognition is (`uploads.py`: the same caps and pace, counted among the uploading
requests) and decoded by the same decoders under the same limits
(`arengine/kinds/fingerprint/references.py`); adds are done one at a time, off the event loop.
The library is the model's SQLite file: the server's recognitions, running ones included, see a
change from their next segment, without a restart (`arengine/kinds/fingerprint/library.py`).

Example::

    curl -H "Authorization: Bearer $ADMIN_KEY" -F file=@ident.flac \\
        "http://127.0.0.1:8000/v1/models/jingles/references?title=Station%20ident"
"""

from __future__ import annotations

import hmac
import json
from typing import Annotated, Any

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from arengine.errors import (
    ArengineError,
    ErrorCode,
    Forbidden,
    InvalidInput,
    NotReady,
    Unauthorized,
    UnknownModel,
)
from arengine.http.auth import credential
from arengine.http.errors import error_responses
from arengine.http.recognition import received_at, refuse_repeated
from arengine.http.uploads import AUDIO_BODY, UploadLimits, UploadPace, check_declared_length, spool
from arengine.kinds.fingerprint.library import Library, Reference, metadata_depth
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
from arengine.kinds.fingerprint.references import add_file
from arengine.service.engine import Engine
from arengine.settings import MAX_METADATA_DEPTH, Settings

MAX_METADATA_CHARS = 4096
"""The longest `metadata` (JSON text) a reference takes: a few fields, not a document."""
MAX_TITLE_CHARS = 256

router = APIRouter()


class ReferenceOut(BaseModel):
    """One reference of a library."""

    id: str = Field(description="Its id: the `reference` of its tags.")
    title: str = Field(description="Its title: the `label` of its tags.")
    duration_s: float
    metadata: dict[str, Any] = Field(description="What was attached when it was added.")

    @classmethod
    def of(cls, reference: Reference) -> ReferenceOut:
        return cls(
            id=str(reference.id),
            title=reference.title,
            duration_s=round(reference.duration_s, 3),
            metadata=reference.metadata,
        )


class ReferencesResponse(BaseModel):
    """A fingerprint model's references, by id."""

    model: str
    references: list[ReferenceOut]


@router.get(
    "/v1/models/{name}/references",
    response_model=ReferencesResponse,
    responses=error_responses(401, 404, 503),
)
async def list_references(request: Request, name: str) -> ReferencesResponse:
    """The references of fingerprint model `name`, as the library holds them now."""
    library = _library(request, name)
    found = await to_thread.run_sync(library.references)
    return ReferencesResponse(model=name, references=[ReferenceOut.of(ref) for ref in found])


@router.get(
    "/v1/models/{name}/references/{reference}",
    response_model=ReferenceOut,
    responses=error_responses(401, 404, 503),
)
async def get_reference(request: Request, name: str, reference: str) -> ReferenceOut:
    """One reference of fingerprint model `name`."""
    library = _library(request, name)
    found = await to_thread.run_sync(library.reference, _reference_id(reference))
    if found is None:
        raise _no_reference(name, reference)
    return ReferenceOut.of(found)


@router.post(
    "/v1/models/{name}/references",
    status_code=201,
    response_model=ReferenceOut,
    responses=error_responses(),
    openapi_extra=AUDIO_BODY,
)
async def add_reference(
    request: Request,
    name: str,
    title: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_TITLE_CHARS,
            description="Its title (the tags' `label`); default: the uploaded file's name "
            "without its extension.",
        ),
    ] = None,
    metadata: Annotated[
        str | None,
        Query(
            max_length=MAX_METADATA_CHARS,
            description='A JSON object kept with it, e.g. `{"client": "acme"}`, nested at most '
            f"{MAX_METADATA_DEPTH} levels deep.",
        ),
    ] = None,
) -> Response:
    """Add a recording (multipart field `file`, or a raw audio body) to fingerprint model
    `name`; needs an administrator key. 201 with the reference, as `GET` gives it."""
    _require_admin(request)
    refuse_repeated(request)
    library = _library(request, name)
    attached = _metadata(metadata)
    engine = _engine(request)
    settings: Settings = request.app.state.settings
    limits = UploadLimits(max_bytes=settings.limits.max_upload_bytes)
    check_declared_length(request.headers.get("content-length"), limits)
    pace = UploadPace(
        idle_timeout_s=settings.limits.body_timeout_s,
        deadline=received_at(request) + settings.limits.request_timeout_s,
        min_bytes_per_s=settings.limits.min_upload_bytes_per_s,
        grace_s=settings.limits.upload_grace_s,
    )
    content_type = request.headers.get("content-type")
    with engine.admission.uploading_slot() as progress:
        body = request.stream()
        upload = await spool(body, content_type, limits, settings.server.upload_dir, pace, progress)
    try:
        named = title or _stem(upload.filename) or "reference"
        if upload.filename:
            attached = {"file": upload.filename, **attached}
        added = await to_thread.run_sync(
            add_file, library, upload.path, engine.limits, named, attached,
            limiter=_writer(request),
        )  # fmt: skip
    finally:
        upload.path.unlink(missing_ok=True)
    location = f"/v1/models/{name}/references/{added.id}"
    out = ReferenceOut.of(added).model_dump_json()
    return Response(out, 201, {"Location": location}, media_type="application/json")


@router.delete(
    "/v1/models/{name}/references/{reference}",
    status_code=204,
    responses=error_responses(401, 403, 404, 503),
)
async def remove_reference(request: Request, name: str, reference: str) -> Response:
    """Remove a reference and its fingerprints; needs an administrator key. Recognitions
    under way tag it no more from their next segment."""
    _require_admin(request)
    library = _library(request, name)
    removed = await to_thread.run_sync(library.remove, _reference_id(reference))
    if not removed:
        raise _no_reference(name, reference)
    return Response(status_code=204)


def _engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def _library(request: Request, name: str) -> Library:
    """The library of loaded fingerprint model `name`."""
    engine = _engine(request)
    if not engine.ready:
        raise NotReady(engine.not_ready_reason)
    loaded = engine.models.get(name)
    if loaded is None:
        known = ", ".join(sorted(engine.models))
        raise UnknownModel(f"unknown model {name[:64]!r}; loaded models: {known}")
    recognizer = loaded.recognizer
    if not isinstance(recognizer, FingerprintRecognizer):
        libraries = ", ".join(
            sorted(n for n, m in engine.models.items() if m.recognizer.kind == "fingerprint")
        )
        raise ArengineError(
            f"model {name!r} is a {recognizer.kind} model and has no references; fingerprint "
            f"models: {libraries or 'none loaded'}",
            code=ErrorCode.NOT_A_LIBRARY,
        )
    return recognizer.library


def _require_admin(request: Request) -> None:
    """An administrator key in `Authorization: Bearer`, compared in constant time."""
    settings: Settings = request.app.state.settings
    keys = [key.encode() for key in settings.security.admin_key_list()]
    if not keys:
        raise Forbidden(
            "references cannot be changed over HTTP on this server: it has no administrator "
            "keys (ARENGINE_ADMIN_KEYS); use `arengine references add|remove` on its models "
            "folder",
            code=ErrorCode.ADMIN_DISABLED,
        )
    token = credential(request.scope)  # the one the API key middleware checked, if it runs
    if not token:
        raise Unauthorized(
            "send Authorization: Bearer <administrator key> to change references",
            code=ErrorCode.ADMIN_REQUIRED,
        )
    matched = False
    for key in keys:  # every key is compared, so timing does not tell which one matched
        matched |= hmac.compare_digest(token, key)
    if not matched:
        raise Forbidden(
            "this key may not change references: that needs an administrator key",
            code=ErrorCode.NOT_ADMIN,
        )


def _writer(request: Request) -> CapacityLimiter:
    """One add at a time per server: each decodes and fingerprints a whole recording."""
    state = request.app.state
    limiter: CapacityLimiter | None = getattr(state, "reference_writer", None)
    if limiter is None:  # made on the event loop's thread, where every handler runs
        limiter = state.reference_writer = CapacityLimiter(1)
    return limiter


def _metadata(text: str | None) -> dict[str, Any]:
    """The `metadata` query as stored: a JSON object of bounded size (the query's length) and
    depth, refused at the door (stored, a deep one failed every later listing of the library)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise _bad_metadata(f"not JSON ({error.msg} at character {error.pos})") from None
    except RecursionError:  # nested past what the parser reads (about 1,000 levels)
        raise _bad_metadata(f"nested more than {MAX_METADATA_DEPTH} levels deep") from None
    if not isinstance(value, dict):
        raise _bad_metadata(f"a JSON object is needed, got a {type(value).__name__}")
    if metadata_depth(value) > MAX_METADATA_DEPTH:
        raise _bad_metadata(f"nested more than {MAX_METADATA_DEPTH} levels deep")
    return value


def _bad_metadata(problem: str) -> InvalidInput:
    return InvalidInput(f"metadata: {problem}", code=ErrorCode.INVALID_PARAMETER)


def _stem(filename: str | None) -> str | None:
    """A file name without its folders and extension: `c:\\ads\\ident.mp3` is `ident`."""
    if not filename:
        return None
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    stem = base.rsplit(".", 1)[0] if "." in base[1:] else base
    return stem[:MAX_TITLE_CHARS] or None


def _reference_id(text: str) -> int:
    """A reference id from the path; -1 (found nowhere) for anything but a whole number."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else -1


def _no_reference(name: str, reference: str) -> ArengineError:
    return ArengineError(
        f"model {name!r} has no reference {reference[:64]!r} (GET /v1/models/{name}/references "
        "lists them)",
        code=ErrorCode.REFERENCE_NOT_FOUND,
    )

"""`POST /v1/render`: a result the client already has, written in another format.

The page (and any client) downloads a format without sending the recording again: it posts the
JSON result it already holds (`POST /v1/recognize`'s answer, or a stream's tags with its
summary) and gets the file, named as a download of the recognition would be.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError

from arengine.errors import ErrorCode, InvalidInput, TooLarge
from arengine.http.errors import error_responses
from arengine.http.schemas import RecognizeResponse
from arengine.outputs.formats import Format, get_format, known_formats
from arengine.settings import MAX_RESULT_BYTES, size_text
from arengine.types import Result

router = APIRouter()


_RESULT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/RecognizeResponse"}}
        },
    }
}


@router.post(
    "/v1/render",
    responses=error_responses(),
    openapi_extra=_RESULT_BODY,
    response_class=Response,
)
async def render(
    request: Request,
    format: Annotated[str, Query(max_length=16, description=f"One of: {known_formats()}.")],
    name: Annotated[
        str | None,
        Query(max_length=255, description="The recording's file name: the download is named "
              "after it (`recording` if not given)."),
    ] = None,
) -> Response:  # fmt: skip
    """A result (the JSON of `POST /v1/recognize`) as a file in `format`."""
    fmt = _format(format)
    body = await _body(request)
    result = _result(body)
    if not fmt.accepts([tag.label for tag in result.tags]):
        raise InvalidInput(
            f"format {fmt.name} holds only notes and this result has other tags",
            code=ErrorCode.INVALID_PARAMETER,
        )
    try:
        return download(fmt, result, name)
    except (ValueError, OverflowError, struct.error) as error:
        raise InvalidInput(
            f"the result cannot be written as {fmt.name}: {error}", code=ErrorCode.INVALID_RESULT
        ) from None


def _result(body: bytes) -> Result:
    """The result a body holds; `InvalidInput` (`invalid_result`) saying where it is not one."""
    try:
        return RecognizeResponse.model_validate_json(body).to_result()
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInput(
            f"not a recognition result: {where}: {message}", code=ErrorCode.INVALID_RESULT
        ) from None
    except (ValueError, OverflowError) as error:
        raise InvalidInput(
            f"not a recognition result: {error}", code=ErrorCode.INVALID_RESULT
        ) from None


def download(fmt: Format, result: Result, upload_name: str | None) -> Response:
    """`result` as a file in `fmt`, named after the upload."""
    stem = re.sub(r"[^A-Za-z0-9._ -]", "_", Path(upload_name or "").stem).strip(" .")
    name = f"{stem or 'recording'}.{fmt.extension}"
    media_type = fmt.media_type
    if media_type.startswith("text/"):
        media_type += "; charset=utf-8"
    return Response(
        fmt.encode(result, stem or "recording"),
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _format(name: str) -> Format:
    try:
        return get_format(name)
    except ValueError as error:
        raise InvalidInput(str(error), code=ErrorCode.INVALID_PARAMETER) from None


async def _body(request: Request) -> bytes:
    """The request body, refused past `MAX_RESULT_BYTES` as soon as it gets there."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_RESULT_BYTES:
            raise TooLarge(
                f"the result passed {size_text(MAX_RESULT_BYTES)}", code=ErrorCode.RESULT_TOO_LARGE
            )
        chunks.append(chunk)
    return b"".join(chunks)

"""Every error leaves the server as `{"error": {"code": ..., "message": ...}}`, mapped here only."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from arengine.errors import ArengineError, ErrorCode
from arengine.http.schemas import ErrorResponse
from arengine.system.metrics import Metrics

log = logging.getLogger(__name__)

_HTTP_CODES = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}


def install_error_handlers(app: FastAPI) -> None:
    """Map arengine's errors, request validation and routing errors to the one error body."""
    app.add_exception_handler(ArengineError, _arengine_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]


def error_response(code: ErrorCode, message: str, status: int | None = None) -> JSONResponse:
    """The one error body: `{"error": {"code": ..., "message": ...}}`, with `code`'s status."""
    status = status or code.status
    headers = {"Retry-After": "1"} if status == 503 else {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="arengine"'
    if status == 408:  # the body was not read to its end: the connection cannot be reused
        headers["Connection"] = "close"
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for `statuses` (default: every status an error code has), each listing
    its codes: derived from `ErrorCode`, so the schema cannot drift from the errors raised."""
    codes = [
        code
        for code in ErrorCode
        if code.status != 499 and code.status in (statuses or [code.status])
    ]
    by_status: dict[int, list[ErrorCode]] = {}
    for code in codes:
        by_status.setdefault(code.status, []).append(code)
    return {
        status: {
            "model": ErrorResponse,
            "description": "; ".join(f"`{code}`: {code.description}" for code in members),
        }
        for status, members in sorted(by_status.items())
    }


ANY_REQUEST = (
    ErrorCode.BAD_REQUEST,
    ErrorCode.BAD_CONTENT_LENGTH,
    ErrorCode.AMBIGUOUS_LENGTH,
    ErrorCode.FORBIDDEN_HOST,
    ErrorCode.HEADER_TIMEOUT,
    ErrorCode.HEADERS_TOO_LARGE,
    ErrorCode.TOO_MANY_CONNECTIONS,
)
"""What any request may be answered before a route sees it: the protocol's refusals
(`protocol.py`) and the Host check (`security.py`)."""
_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def with_any_request_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (FastAPI's OpenAPI document, changed in place) with `ANY_REQUEST` among the
    responses of every operation, so that a client reads a 431 or a 408 there too."""
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for item in schema.get("paths", {}).values():
        for method, operation in item.items():
            if method not in _OPERATIONS:
                continue
            responses = operation.setdefault("responses", {})
            for code in ANY_REQUEST:
                entry = responses.setdefault(
                    str(code.status), {"description": "", "content": error_body}
                )
                if f"`{code}`" not in entry["description"]:
                    said = [entry["description"]] if entry["description"] else []
                    entry["description"] = "; ".join([*said, f"`{code}`: {code.description}"])
    return schema


def _count_refusal(request: Request, code: ErrorCode) -> None:
    if 400 <= code.status < 500 or code.status == 503:
        metrics: Metrics = request.app.state.metrics
        metrics.reject(code)


async def _arengine_error(request: Request, error: ArengineError) -> JSONResponse:
    _count_refusal(request, error.code)
    return error_response(error.code, error.message)


def problem_text(message: str) -> str:
    """A pydantic error message as a client reads it: without pydantic's `Value error, `."""
    return message.removeprefix("Value error, ")


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in e['loc'][1:]) or e['loc'][0]}: {problem_text(e['msg'])}"
        for e in error.errors()
    )
    _count_refusal(request, ErrorCode.INVALID_PARAMETER)
    return error_response(ErrorCode.INVALID_PARAMETER, problems)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(error.status_code, ErrorCode.BAD_REQUEST)
    _count_refusal(request, code)
    response = error_response(code, str(error.detail), status=error.status_code)
    if error.status_code == 405:  # RFC 9110 15.5.6: a 405 says what the path takes
        response.headers["Allow"] = ", ".join(_allowed_methods(request))
    return response


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route of the request's path takes: Starlette's own `Allow` names only
    those of the first route that matched, where a path often has one route a method. Each
    method is asked of the routes (included routers answer `matches` as a route does)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    ]


class InternalErrorMiddleware:
    """A bug answers the one JSON error body (500 `internal_error`), never a plain-text page.

    The traceback is logged once, with the request id; the client gets only the id. Sits inside
    `RequestIdMiddleware`, so the id is known and echoed in `X-Request-ID`. A request cancelled
    by a forced shutdown (a second signal, or `shutdown_timeout_s` run out) answers 503
    `shutting_down` instead of uvicorn's plain-text 500 and traceback.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except asyncio.CancelledError:
            engine = getattr(scope["app"].state, "engine", None)
            if engine is None or not engine.stopping:
                raise
            # Uvicorn cancels a request's task only to stop the server: answer, then let the
            # task end quietly (re-raising would log the cancellation as an ASGI traceback).
            request_id = scope.get("state", {}).get("request_id", "unknown")
            log.warning("request %s cut off by a forced shutdown", request_id)
            if not started:
                scope["app"].state.metrics.reject(ErrorCode.SHUTTING_DOWN)
                message = "the server stopped before this request finished; retry shortly"
                response = error_response(ErrorCode.SHUTTING_DOWN, message)
                response.headers["Connection"] = "close"
                await response(scope, receive, send)
        except Exception:
            request_id = scope.get("state", {}).get("request_id", "unknown")
            log.exception("unexpected error in request %s", request_id)
            if started:  # the status line is gone; closing the stream is all that is left
                return
            message = f"an unexpected error; the server log has it under request id {request_id}"
            await error_response(ErrorCode.INTERNAL_ERROR, message)(scope, receive, send)

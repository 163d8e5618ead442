"""Every error leaves the server as `{"error": {"code": ..., "message": ...}}`, mapped here only."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from arengine.errors import ArengineError
from arengine.metrics import Metrics


def install_error_handlers(app: FastAPI) -> None:
    """Map arengine's errors, request validation and routing errors to the one error body."""
    app.add_exception_handler(ArengineError, _arengine_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """The one error body: `{"error": {"code": ..., "message": ...}}`."""
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


def _count_refusal(request: Request, status: int, code: str) -> None:
    if 400 <= status < 500 or status == 503:
        metrics: Metrics = request.app.state.metrics
        metrics.reject(code)


async def _arengine_error(request: Request, error: ArengineError) -> JSONResponse:
    _count_refusal(request, error.status, error.code)
    return error_response(error.status, error.code, error.message)


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in e['loc'][1:]) or e['loc'][0]}: {e['msg']}"
        for e in error.errors()
    )
    _count_refusal(request, 422, "invalid_parameter")
    return error_response(422, "invalid_parameter", problems)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
    _count_refusal(request, error.status_code, code)
    return error_response(error.status_code, code, str(error.detail))

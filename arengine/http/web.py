"""The browser page at `/`: its files are served from the package, nothing from a CDN, no build
step (plain ES modules)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.exceptions import HTTPException

STATIC = Path(__file__).parent / "static"
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "timeline.js": "text/javascript; charset=utf-8",
    "recorder.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
PUBLIC_PATHS = ("/", *(f"/static/{name}" for name in ASSETS))
"""The page holds no data, so API keys do not guard it (its API calls still need one)."""

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> FileResponse:
    """The upload page."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


@router.get("/static/{name}")
async def asset(name: str) -> FileResponse:
    """One of the page's files; only those listed in `ASSETS`."""
    if name not in ASSETS:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name])

"""The browser page at `/`, the API's Swagger UI at `/docs` and, when it was built into the package,
the documentation site at `/docs/site/`: their files are served from the packages, nothing from a
CDN (all work offline), no build step for the page (plain ES modules)."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.exceptions import HTTPException
from swagger_ui_bundle import swagger_ui_path

STATIC = Path(__file__).parent / "static"
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "timeline.js": "text/javascript; charset=utf-8",
    "recorder.js": "text/javascript; charset=utf-8",
    "pcm-worklet.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
SWAGGER = Path(str(swagger_ui_path))
"""Swagger UI 4.15.5 (Apache-2.0) as the `swagger-ui-bundle` package ships it."""
DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
SITE = STATIC / "site"
"""The documentation site as `mkdocs build` writes it (mkdocs.yml's `site_dir`), when it was built
before the package was installed (`make test` builds it; the image then carries it)."""
SITE_PATH = "/docs/site/"
SITE_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'"
)
"""The site: static files of its own; MkDocs' theme starts itself from small inline scripts."""
PUBLIC_PATHS = ("/", *(f"/static/{name}" for name in ASSETS))
"""The page holds no data, so API keys do not guard it (its API calls still need one)."""
PUBLIC_PREFIXES = (SITE_PATH,)
"""Nor the documentation site, every file under it."""
_DOCS_LINK = b'<a id="docs-site" href="/docs/site/index.html" hidden>'
"""The page's footer link to the site, shown only when the site is there."""
_DOCS = get_swagger_ui_html(
    openapi_url="/openapi.json",
    title="arengine API",
    swagger_js_url="/docs/swagger-ui-bundle.js",
    swagger_css_url="/docs/swagger-ui.css",
    swagger_favicon_url="/docs/favicon-32x32.png",
).body
_INLINE = re.search(rb"<script>(.*?)</script>", bytes(_DOCS), re.S)
assert _INLINE is not None  # FastAPI's page starts Swagger UI from one inline script
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'sha256-"
    + base64.b64encode(hashlib.sha256(_INLINE.group(1)).digest()).decode()
    + "'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""`/docs`: its own files, its one inline script by hash; Swagger UI sets inline styles."""

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> Response:
    """The upload page; its footer links to the documentation site when it is built in."""
    html = (STATIC / "index.html").read_bytes()
    if (SITE / "index.html").is_file():
        html = html.replace(_DOCS_LINK, _DOCS_LINK.replace(b" hidden>", b">"))
    return Response(html, media_type="text/html; charset=utf-8")


@router.get("/static/{name}")
async def asset(name: str) -> FileResponse:
    """One of the page's files; only those listed in `ASSETS`."""
    if name not in ASSETS:
        raise HTTPException(404, f"no static file {name!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name])


@router.get("/docs")
async def docs() -> HTMLResponse:
    """Swagger UI over `/openapi.json`."""
    return HTMLResponse(_DOCS)


@router.get("/docs/site/{path:path}")
async def site(path: str) -> FileResponse:
    """A file of the documentation site (`/docs/site/` is its home page); 404 when it is not
    built in. Only files inside the site's folder are served."""
    root = SITE.resolve()
    target = (root / (path or "index.html")).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise HTTPException(404, "no such page of the documentation (is it built in?)")
    return FileResponse(target)


@router.get("/docs/{name}")
async def docs_asset(name: str) -> FileResponse:
    """One of Swagger UI's files; only those listed in `DOCS_ASSETS`."""
    if name not in DOCS_ASSETS:
        raise HTTPException(404, f"no docs file {name!r}")
    return FileResponse(SWAGGER / name, media_type=DOCS_ASSETS[name])

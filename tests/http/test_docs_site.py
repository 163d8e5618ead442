"""The documentation site at `/docs/site/`, when it is built into the package: served from its
folder only, open without an API key, linked from the page's footer; absent, a 404 and no link."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from arengine.http import web
from arengine.http.app import create_app
from arengine.http.security import PAGE_CSP
from arengine.settings import Settings

LINK = 'id="docs-site" href="/docs/site/index.html"'


def _get(paths: list[str], **settings: object) -> list[httpx.Response]:
    app = create_app(Settings(models="speech", **settings))

    async def fetch() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return [await client.get(path) for path in paths]

    return asyncio.run(fetch())


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    (folder / "assets").mkdir(parents=True)
    (folder / "index.html").write_text("<html><script>inline()</script>arengine docs</html>")
    (folder / "assets" / "main.css").write_text("body { margin: 0 }")
    (tmp_path / "secret.txt").write_text("not the site's")
    monkeypatch.setattr(web, "SITE", folder)
    return folder


def test_without_the_site_the_page_has_no_link_and_the_site_is_a_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "SITE", tmp_path / "absent")
    page, home, swagger = _get(["/", "/docs/site/", "/docs"])
    assert f"<a {LINK} hidden>" in page.text
    assert home.status_code == 404 and swagger.status_code == 200


def test_the_site_is_served_and_linked_from_the_page(site: Path) -> None:
    page, home, style, swagger = _get(["/", "/docs/site/", "/docs/site/assets/main.css", "/docs"])
    assert f"<a {LINK}>" in page.text and page.headers["content-security-policy"] == PAGE_CSP
    assert home.status_code == 200 and "arengine docs" in home.text
    assert home.headers["content-security-policy"] == web.SITE_CSP  # its inline scripts run
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    assert swagger.status_code == 200 and "swagger-ui-bundle.js" in swagger.text  # offline still


@pytest.mark.parametrize(
    "path",
    ["/docs/site/%2e%2e/secret.txt", "/docs/site/..%2fsecret.txt", "/docs/site/nowhere.html"],
)
def test_only_files_inside_the_site_are_served(site: Path, path: str) -> None:
    (answer,) = _get([path])
    assert answer.status_code == 404 and "not the site's" not in answer.text


def test_the_site_needs_no_api_key_and_opens_nothing_else(site: Path) -> None:
    home, models, info = _get(["/docs/site/index.html", "/v1/models", "/v1/info"], api_keys="k-1")
    assert home.status_code == 200
    assert models.status_code == 401 and info.status_code == 401

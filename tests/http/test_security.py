"""What a web page must not make a browser do to a local server: headers, Host, Origin, content
types, and `/docs` served from the package."""

from __future__ import annotations

import json

import pytest

from arengine.http.security import PAGE_CSP, host_name
from tests.conftest import RecordingFactory
from tests.http.conftest import InProcessClient

SELF = "http://localhost"


@pytest.mark.parametrize("path", ["/", "/healthz", "/v1/models", "/nowhere", "/docs"])
def test_every_answer_carries_the_browser_headers(client: InProcessClient, path: str) -> None:
    headers = client.get(path).headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    if path == "/":
        assert headers["content-security-policy"] == PAGE_CSP


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8000",
        "127.0.0.1.evil.example",
        "127.0.0.1:1@evil",  # passed as 127.0.0.1: all after the last colon was taken as a port
        "localhost:80:80",
        "[::1]:1@evil",
        "[::1]evil",
        "127.0.0.1:\xb2",  # a superscript 2 is a digit to `str.isdigit`, not a port
    ],
)
def test_a_rebinding_page_is_refused_by_its_host(client: InProcessClient, host: str) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: its Host gives it away."""
    response = client.get("/v1/models", headers={"Host": host.encode("latin-1")})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "forbidden_host"


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST"])
def test_loopback_names_are_accepted(client: InProcessClient, host: str) -> None:
    assert client.get("/healthz", headers={"Host": host}).status_code == 200


def test_host_names_without_their_port() -> None:
    assert [host_name(h) for h in ["a:1", "[::1]:80", "::1", "A.b"]] == ["a", "::1", "::1", "a.b"]
    assert host_name("a:") == "a"  # an empty port is one (RFC 3986)
    assert host_name("a:1@b") == "a:1@b" and host_name("[::1]:x") == "[::1]:x"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "https://evil.example", "Content-Type": "text/plain"},
        {"Origin": "http://localhost:3000", "Host": "localhost:8000"},  # another local page
    ],
)
def test_a_post_from_another_page_is_refused(
    client: InProcessClient, recording: RecordingFactory, headers: dict[str, str]
) -> None:
    """A form post (multipart) or text/plain from another origin needs no preflight: refused
    before the body is read."""
    clip = recording("form.flac")
    response = client.post(
        "/v1/recognize", files={"file": ("form.flac", clip.path.read_bytes())}, headers=headers
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden_origin"
    render = client.post("/v1/render", params={"format": "csv"}, content="{}", headers=headers)
    assert render.status_code == 403


def test_the_page_itself_and_clients_without_origin_may_post(
    client: InProcessClient, recording: RecordingFactory
) -> None:
    clip = recording("same.flac")
    body = clip.path.read_bytes()
    proxied = {"Origin": "http://localhost:8080", "Host": "localhost"}  # nginx's $host: no port
    for headers in ({"Origin": SELF}, proxied, {}):  # the page, behind a proxy; curl -F, the CLI
        response = client.post(
            "/v1/recognize", files={"file": ("same.flac", body)}, headers=headers
        )
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_render_takes_only_json(client: InProcessClient, content_type: str) -> None:
    response = client.post(
        "/v1/render",
        params={"format": "csv"},
        content=json.dumps({"tags": []}),
        headers={"Content-Type": content_type},
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_docs_load_swagger_ui_from_the_server(client: InProcessClient) -> None:
    """Swagger UI came from a CDN (a blank page offline); its files now come from the package
    and the policy allows nothing else."""
    page = client.get("/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text and "https://" not in page.text
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        asset = client.get(f"/docs/{name}")
        assert asset.status_code == 200 and len(asset.content) > 100, name
        assert f"/docs/{name}" in page.text
    assert client.get("/docs/../settings.py").status_code == 404
    policy = page.headers["content-security-policy"]
    assert "script-src 'self' 'sha256-" in policy and "https:" not in policy

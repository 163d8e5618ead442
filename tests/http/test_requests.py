"""Request handling in-process: request ids, body shapes, byte caps, fields and parameters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.http.conftest import InProcessClient
from tests.http.test_app import _wav


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    message: str = body["error"]["message"]
    assert message
    return message


def _post(client: InProcessClient, **params: Any) -> httpx.Response:
    return client.post("/v1/recognize", params=params, files={"file": ("a.wav", _wav())})


def test_the_request_id_is_echoed_or_made(client: InProcessClient) -> None:
    given = client.post(
        "/v1/recognize", files={"file": _wav()}, headers={"X-Request-ID": "abc-123"}
    )
    made = client.get("/healthz")
    odd = client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
    assert given.headers["x-request-id"] == "abc-123"
    assert len(made.headers["x-request-id"]) == 32
    assert odd.headers["x-request-id"] != "bad id\twith spaces"


def test_a_raw_body_with_an_audio_content_type_is_accepted(client: InProcessClient) -> None:
    response = client.post("/v1/recognize", content=_wav(), headers={"Content-Type": "audio/wav"})
    assert response.status_code == 200
    assert response.json()["audio"]["duration_s"] == pytest.approx(1.0)


def test_a_declared_length_over_the_cap_is_refused_before_reading(
    client: InProcessClient,
) -> None:
    cap = client.get("/v1/info").json()["limits"]["max_upload_bytes"]
    response = client.post(
        "/v1/recognize",
        content=b"RIFF",
        headers={"Content-Type": "audio/wav", "Content-Length": str(cap + 1)},
    )
    _error(response, 413, "upload_too_large")


def test_a_chunked_body_over_the_cap_is_refused_as_it_passes(client: InProcessClient) -> None:
    cap = client.get("/v1/info").json()["limits"]["max_upload_bytes"]
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent <= 4 * cap:
            sent += 1 << 20
            yield bytes(1 << 20)

    response = client.post("/v1/recognize", content=body(), headers={"Content-Type": "audio/wav"})
    _error(response, 413, "upload_too_large")
    assert sent < cap + (4 << 20), "the body stopped being read soon after the cap"


def test_the_audio_in_another_field_is_named_in_the_error(client: InProcessClient) -> None:
    message = _error(client.post("/v1/recognize", files={"audio": _wav()}), 422, "missing_file")
    assert "'file'" in message


def test_a_multipart_body_without_a_file_part(client: InProcessClient) -> None:
    response = client.post(
        "/v1/recognize", data={"note": "no audio"}, files={"other": ("x.txt", b"", "text/plain")}
    )
    _error(response, 422, "missing_file")


def test_two_file_parts_are_refused(client: InProcessClient) -> None:
    files = [("file", ("a.wav", _wav())), ("file", ("b.wav", _wav()))]
    _error(client.post("/v1/recognize", files=files), 422, "too_many_files")


def test_a_body_that_is_neither_multipart_nor_audio(client: InProcessClient) -> None:
    response = client.post(
        "/v1/recognize", content=b"{}", headers={"Content-Type": "application/json"}
    )
    _error(response, 415, "unsupported_media_type")


def test_an_unknown_model_lists_the_loaded_ones(client: InProcessClient) -> None:
    message = _error(_post(client, model="whisper"), 404, "unknown_model")
    assert "speech" in message and "faulty" in message


@pytest.mark.parametrize(
    "params",
    [
        {"threshold": 3},
        {"threshold": "high"},
        {"speech_pad_ms": -1},
        {"speech_pad_ms": 2.5},
        {"model": "../../etc/passwd"},
        {"bogus": 1},
        {"format": "docx"},
    ],
)
def test_bad_parameters_are_422(client: InProcessClient, params: dict[str, Any]) -> None:
    _error(_post(client, **params), 422, "invalid_parameter")


def test_an_empty_file_is_422(client: InProcessClient) -> None:
    response = client.post("/v1/recognize", files={"file": ("empty.wav", b"")})
    _error(response, 422, "empty_file")


def test_an_unknown_format_is_named_without_pydantics_prefix(client: InProcessClient) -> None:
    response = client.post("/v1/recognize?format=xml", files={"file": ("a.wav", b"RIFF")})
    message = response.json()["error"]["message"]
    assert response.status_code == 422 and message.startswith("format: unknown format 'xml'")
    assert "Value error" not in message


def test_audio_stream_names_the_stream_and_stream_is_its_former_name(
    client: InProcessClient,
) -> None:
    """A WAV has one audio stream: index 0 is answered and 1 refused, under either name."""
    for name in ("audio_stream", "stream"):
        assert _post(client, **{name: 0}).json()["audio"]["stream"] == 0
        assert "accepts 0" in _error(_post(client, **{name: 1}), 422, "unknown_stream")
    assert _post(client, audio_stream=0, stream=0).status_code == 200
    message = _error(_post(client, audio_stream=0, stream=1), 422, "invalid_parameter")
    assert "give audio_stream alone" in message


def test_the_former_stream_name_is_marked_deprecated(client: InProcessClient) -> None:
    schema = client.get("/openapi.json").json()
    parameters = {p["name"]: p for p in schema["paths"]["/v1/recognize"]["post"]["parameters"]}
    stream = parameters["stream"]
    assert stream.get("deprecated") or stream["schema"].get("deprecated")
    assert "audio_stream" in parameters and "former name" in stream["description"]

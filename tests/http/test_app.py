"""The HTTP layer's own logic, in-process: error bodies, parameters, the schema, metrics."""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from arengine.errors import ErrorCode
from arengine.kinds.catalog import KINDS
from tests.http.conftest import InProcessClient


def _wav(seconds: float = 1.0, amplitude: float = 0.0, rate: int = 16000) -> bytes:
    """A WAV of silence, or of a 440 Hz tone at `amplitude`."""
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(
        buffer,
        (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32),
        rate,
        "PCM_16",
        format="WAV",
    )
    return buffer.getvalue()


def _post(client: InProcessClient, body: bytes, query: str = "") -> tuple[int, dict[str, Any]]:
    response = client.post("/v1/recognize" + query, files={"file": ("clip.wav", body, "audio/wav")})
    return response.status_code, response.json()


def _error(client: InProcessClient, body: bytes, query: str, status: int, code: str) -> str:
    got, answer = _post(client, body, query)
    assert (got, set(answer)) == (status, {"error"}), answer
    assert answer["error"]["code"] == code
    message: str = answer["error"]["message"]
    return message


def test_a_model_that_raises_is_a_500_naming_the_stage_and_the_request(
    client: InProcessClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    response = client.post(
        "/v1/recognize?model=faulty",
        files={"file": ("loud.wav", _wav(amplitude=0.5), "audio/wav")},
        headers={"X-Request-ID": "marker-1"},
    )
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "stage_failed"
    assert "inference" in error["message"] and "marker-1" in error["message"]
    assert "Traceback" not in response.text and "/" not in error["message"]
    logged = [r for r in caplog.records if r.exc_info and "marker-1" in r.getMessage()]
    assert len(logged) == 1, "the traceback is logged once, with the request id"
    # The same model serves the input that is not its marker.
    assert _post(client, _wav(amplitude=0.0), "?model=faulty")[0] == 200


def test_an_unexpected_error_is_a_json_500_with_the_request_id(
    client: InProcessClient, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise ZeroDivisionError("a bug, with /secret/server/paths in its text")

    client.app.add_api_route("/v1/broken", broken)
    caplog.set_level(logging.ERROR)
    response = client.get("/v1/broken", headers={"X-Request-ID": "bug-7"})
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"] == "bug-7"
    error = response.json()["error"]
    assert error["code"] == "internal_error"
    assert "bug-7" in error["message"]
    assert "secret" not in response.text and "Traceback" not in response.text
    logged = [r for r in caplog.records if r.exc_info and "bug-7" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None and logged[0].exc_info[0] is ZeroDivisionError


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("?threshold=7", ["threshold", "0 < x < 1"]),
        ("?threshold=nan", ["threshold", "finite"]),
        ("?threshold=inf", ["threshold", "finite"]),
        ("?max_speech_duration_s=1e-300", ["max_speech_duration_s", "0.5 <= x <= 86400"]),
        ("?speech_pad_ms=-1", ["speech_pad_ms", "0 <= x <= 10000"]),
        ("?threshold=0.3&neg_threshold=0.6", ["neg_threshold", "at most threshold"]),
        ("?threshold=0.5&threshold=0.6", ["threshold", "more than once"]),
        ("?median_frames=3", ["median_frames", "does not apply to speech"]),
    ],
)
def test_a_bad_parameter_is_a_422_naming_it_and_its_range(
    client: InProcessClient, query: str, names: list[str]
) -> None:
    message = _error(client, _wav(), query, 422, "invalid_parameter")
    for name in names:
        assert name in message


def test_parameters_in_range_are_accepted(client: InProcessClient) -> None:
    query = "?threshold=0.6&neg_threshold=0.4&max_speech_duration_s=10&speech_pad_ms=0"
    status, answer = _post(client, _wav(), query)
    assert (status, answer["tags"]) == (200, [])


def test_a_manifest_out_of_bounds_makes_its_model_unavailable_with_the_reason(
    client: InProcessClient,
) -> None:
    listing = client.get("/v1/models").json()
    assert "strict" not in {model["name"] for model in listing["models"]}
    reasons = {
        entry["manifest"].split("/")[-2]: entry["reason"] for entry in listing["unavailable"]
    }
    assert "threshold must be 0 < x < 1, got 7" in reasons["strict"]


def test_the_models_list_states_a_classifiers_input_shape(client: InProcessClient) -> None:
    """0.5-s windows at 16 kHz, n_fft 512, hop 160: 47 frames (not centred), any window count."""
    shapes = {
        model["name"]: model["input_shape"] for model in client.get("/v1/models").json()["models"]
    }
    assert shapes == {"faulty": [None, 32, 47], "speech": None}


def test_the_schema_derives_errors_and_parameter_docs_from_their_declarations(
    client: InProcessClient,
) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/v1/recognize"]["post"]
    statuses = {str(code.status) for code in ErrorCode if code.status != 499}
    assert statuses <= set(operation["responses"])
    for code in ErrorCode:
        if code.status != 499:
            assert f"`{code}`" in operation["responses"][str(code.status)]["description"]
    described = {p["name"]: p.get("description", "") for p in operation["parameters"]}
    for kind in KINDS.values():
        for name, doc in kind.parameters.docs().items():
            assert f"{kind.name}: {doc}" in described[name]


def test_refusals_are_counted_by_their_code(client: InProcessClient) -> None:
    def count() -> float:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith('arengine_rejected_requests_total{reason="invalid_parameter"}'):
                return float(line.split()[-1])
        raise AssertionError("the series exists from the start")

    before = count()
    _error(client, _wav(), "?threshold=2", 422, "invalid_parameter")
    assert count() == before + 1


def test_unknown_routes_and_methods_answer_the_error_body(client: InProcessClient) -> None:
    missing = client.get("/v1/nothing")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    wrong = client.get("/v1/recognize")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (405, "method_not_allowed")

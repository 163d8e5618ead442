"""The HTTP layer's own logic, in-process: error bodies, parameters, the schema, metrics."""

from __future__ import annotations

import io
import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from anyio.from_thread import start_blocking_portal

from arengine.errors import ErrorCode
from arengine.http.app import create_app
from arengine.http.errors import ANY_REQUEST
from arengine.kinds.catalog import KINDS, TAG_FIELDS
from arengine.outputs.formats import ALIASES, FORMATS
from arengine.settings import Settings
from tests.audio.test_recorded import _bext
from tests.conftest import RecordingFactory, wait_until
from tests.http.conftest import InProcessClient
from tests.postgres import PostgreSQL


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


def test_the_schema_describes_every_kind_field_with_its_bounds(client: InProcessClient) -> None:
    """`TagOut` is built from the kinds' declarations (`<kind>/fields.py`): each field is in
    the OpenAPI schema with its description and bounds, as when `TagOut` spelt them out."""
    tag = client.get("/openapi.json").json()["components"]["schemas"]["TagOut"]["properties"]
    for name, declared in TAG_FIELDS.items():
        described = tag[name]
        assert described["description"] == declared.description
        [branch] = [b for b in described["anyOf"] if b.get("type") != "null"]
        inner = branch["items"] if declared.sequence else branch
        limits = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum"}
        for bound, value in declared.bounds.items():
            assert inner[limits.get(bound, "maxLength")] == value, (name, bound)
    assert tag["midi"]["anyOf"][0] == {"type": "integer", "minimum": 0, "maximum": 127}
    assert tag["level_dbfs"]["anyOf"][0]["minimum"] == -120


def test_every_operation_lists_what_any_request_may_be_answered(client: InProcessClient) -> None:
    """A 431 (headers too large), a bad Host or a header timeout can answer any request before
    a route sees it: the schema says so on every operation, not only on the uploads'."""
    schema = client.get("/openapi.json").json()
    operations = [op for item in schema["paths"].values() for op in item.values()]
    assert len(operations) > 10
    for operation in operations:
        for code in ANY_REQUEST:
            described = operation["responses"][str(code.status)]["description"]
            assert f"`{code}`" in described, (operation["operationId"], code)
    ref = operations[0]["responses"]["431"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.rsplit("/", 1)[1] in schema["components"]["schemas"]


def _parameters(schema: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return {p["name"]: p["schema"] for p in schema["paths"][path][method]["parameters"]}


def test_the_schema_lists_the_formats_format_takes(client: InProcessClient) -> None:
    schema = client.get("/openapi.json").json()
    recognize = _parameters(schema, "/v1/recognize", "post")["format"]
    result = _parameters(schema, "/v1/jobs/{job_id}/result", "get")["format"]
    render = _parameters(schema, "/v1/render", "post")["format"]
    names = sorted([*FORMATS, *ALIASES])
    assert sorted(_enum(recognize)) == sorted([*names, "ndjson"])
    assert sorted(_enum(result)) == sorted(_enum(render)) == names


def _enum(schema: dict[str, Any]) -> list[str]:
    """The `enum` of a parameter's schema, optional (`anyOf` with null) or not."""
    for branch in schema.get("anyOf", [schema]):
        if "enum" in branch:
            return list(branch["enum"])
    raise AssertionError(f"no enum in {schema}")


def test_post_jobs_offers_no_parameter_it_refuses(client: InProcessClient) -> None:
    """`format`, `progress` and `timeout_s` are for a client that waits: a job refuses them, so
    its schema does not offer them (schemathesis sent them and got 422s)."""
    schema = client.get("/openapi.json").json()
    job = _parameters(schema, "/v1/jobs", "post")
    recognize = _parameters(schema, "/v1/recognize", "post")
    assert set(recognize) - set(job) == {"format", "progress", "timeout_s"}


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
    assert wrong.headers["allow"] == "POST"


def test_a_405_says_every_method_the_path_takes(client: InProcessClient) -> None:
    """RFC 9110: a 405 carries `Allow`, listing the methods of every route of the path (one
    route a method here), not only those of the first route that matched."""
    answer = client.request("PUT", "/v1/models/speech/references")
    assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed"
    assert answer.headers["allow"] == "GET, POST"
    one = client.request("PATCH", "/v1/models/speech/references/1")
    assert one.headers["allow"] == "DELETE, GET"


@pytest.mark.parametrize(
    ("name", "chunks", "warned", "at"),
    [
        ("SITE_99991231_235959.wav", [], "too late", None),
        ("a.wav", [_bext(b"9999-12-31", b"23:59:59", 0)], "too late", None),
        ("a.wav", [_bext(b"2025-05-01", b"05:31:10", 1 << 52)], "TimeReference",
         "2025-05-01T05:31:10"),
    ],
    ids=["name 9999-12-31", "bext 9999-12-31", "bext TimeReference 2**52"],
)  # fmt: skip
def test_an_impossible_recording_time_is_a_warning_in_every_format(
    client: InProcessClient,
    recording: RecordingFactory,
    name: str,
    chunks: list[bytes],
    warned: str,
    at: str | None,
) -> None:
    """9999-12-31 23:59:59 gave 500 for csv, raven and birdnet; a TimeReference of 2**52
    samples 500 `stage_failed` for every format. Now: 200, a warning, and no wall clock (or the
    bext chunk's OriginationTime)."""
    body = with_chunks(recording("talk.wav").path.read_bytes(), chunks)
    for fmt in (f for f in FORMATS if f not in ("json", "midi")):
        answer = client.post(f"/v1/recognize?format={fmt}", files={"file": (name, body)})
        assert answer.status_code == 200, (fmt, answer.text)
        assert "9999-12-31" not in answer.text, fmt  # no wall clock
    answer = client.post("/v1/recognize", files={"file": (name, body)}).json()
    [warning] = answer["audio"]["warnings"]
    assert warned in warning and answer["audio"].get("recorded_at") == at
    assert answer["tags"]  # tags whose wall clock would have been past the last date


def with_chunks(wav: bytes, chunks: list[bytes]) -> bytes:
    """A RIFF/WAVE file with `chunks` before its `data` chunk."""
    at = wav.index(b"data", 12)
    body = wav[8:at] + b"".join(chunks) + wav[at:]
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_fingerprint_models_wait_for_the_references_tables_when_the_server_may_not_migrate(
    postgresql: PostgreSQL, models_dir: Path, tmp_path: Path
) -> None:
    """With `--no-database-migrate` on a database without the `references` branch, the server
    stays not ready and says which command to run, instead of failing every fingerprint model
    on a missing table."""
    settings = Settings(
        models_dir=models_dir, upload_dir=tmp_path, database_url=postgresql.database(),
        database_migrate=False, models="speech",
    )  # fmt: skip
    app = create_app(settings)
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(app.router.lifespan_context(app)),
    ):
        running = InProcessClient(app, portal)
        assert wait_until(lambda: "arengine db upgrade" in running.get("/readyz").text)
        assert running.get("/readyz").status_code == 503
        running.close()

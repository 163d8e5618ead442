"""A loudness model as the gate of another model through the HTTP API, in-process
(`POST /v1/recognize`, `POST /v1/jobs`): speech skips the silence around a phrase, reports it and
counts it, and tags the phrase as it does ungated; a gate it cannot have is refused."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from arengine.models import DEFAULT_MODELS_DIR
from arengine.settings import Settings
from tests.conftest import Phrases
from tests.http.conftest import InProcessClient, serving
from tests.http.test_jobs import _ended, _submit
from tests.recordings import compose, write

SEGMENT_S = 2.0
QUIET_S = 8.0
"""Digital silence before and after the phrase: four segments each, at least two of them with
nothing loud in anything the speech model hears."""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessClient]:
    models = tmp_path_factory.mktemp("models")
    for name in ("loudness", "speech"):
        shutil.copytree(DEFAULT_MODELS_DIR / name, models / name)
    again = shutil.copytree(DEFAULT_MODELS_DIR / "speech", models / "speech-again")
    manifest = again / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('name = "speech"', 'name = "speech-again"'))
    settings = Settings(
        models_dir=models,
        upload_dir=tmp_path_factory.mktemp("uploads"),
        data_dir=tmp_path_factory.mktemp("data"),
        segment_s=SEGMENT_S,
    )
    with serving(settings) as running:
        yield running


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory, phrases: Phrases) -> bytes:
    """Silence, a spoken phrase, silence."""
    folder = tmp_path_factory.mktemp("talk")
    pieces = [("silence", QUIET_S), ("speech", 0), ("silence", QUIET_S)]
    audio, _ = compose(pieces, 16000, folder, *phrases)
    return write(audio, 16000, folder / "talk.wav").read_bytes()


def _recognize(client: InProcessClient, body: bytes, query: str) -> dict[str, Any]:
    reply = client.post(f"/v1/recognize?{query}", files={"file": ("talk.wav", body)})
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()
    return result


def _skipped_metric(client: InProcessClient) -> float:
    text = client.get("/metrics").text
    found = re.search(r'^arengine_gate_skipped_seconds_total\{model="speech"\} (\S+)$', text, re.M)
    return 0.0 if found is None else float(found.group(1))


def test_the_gated_model_skips_the_silence_and_tags_the_phrase_as_ungated(
    client: InProcessClient, talk: bytes
) -> None:
    plain = _recognize(client, talk, "model=speech")
    assert plain["tags"], "the phrase is speech"
    assert "skipped_s" not in plain, "no gate, nothing reported"
    counted = _skipped_metric(client)
    gated = _recognize(client, talk, "model=speech&gate=loudness")
    skipped = gated["skipped_s"]["speech"]
    assert 2 * SEGMENT_S <= skipped <= 2 * QUIET_S, "whole quiet segments on both sides"
    assert _skipped_metric(client) == pytest.approx(counted + skipped)
    assert gated["tags"] == plain["tags"]
    assert gated["model"] == "speech", "the gate is no model of the answer"
    assert {tag.get("model") for tag in gated["tags"]} == {None}


def test_a_gated_model_beside_an_ungated_one_each_reports_its_own(
    client: InProcessClient, talk: bytes
) -> None:
    """The gate gates every model of `model`; several models' tags still carry their names."""
    plain = _recognize(client, talk, "model=speech")
    models = _recognize(client, talk, "model=speech,speech-again&gate=loudness")
    assert set(models["skipped_s"]) == {"speech", "speech-again"}
    for name in ("speech", "speech-again"):
        own = [{k: v for k, v in t.items() if k != "model"} for t in models["tags"]]
        assert [t for t, m in zip(own, models["tags"], strict=True) if m["model"] == name] == (
            plain["tags"]
        )


def test_a_gated_job_keeps_its_gate_and_answers_as_the_request(
    client: InProcessClient, talk: bytes
) -> None:
    job_id = _submit(client, talk, "?model=speech&gate=loudness")
    ended = _ended(client, job_id)
    assert ended["state"] == "done" and ended["gate"] == "loudness", ended
    assert ended["parameters"] == {}, "the gate is no post-processing parameter"
    result = client.get(f"/v1/jobs/{job_id}/result").json()
    direct = _recognize(client, talk, "model=speech&gate=loudness")
    assert result["tags"] == direct["tags"]
    assert result["skipped_s"] == direct["skipped_s"]
    retagged = client.get(f"/v1/jobs/{job_id}/result", params={"threshold": 0.9})
    assert retagged.status_code == 200, retagged.text


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("model=speech&gate=nope", 404, "unknown_model"),
        ("model=loudness&gate=speech", 422, "invalid_gate"),
        ("model=speech,loudness&gate=loudness", 422, "invalid_gate"),
        ("model=speech&gate=loudness,loudness", 422, "invalid_parameter"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/recognize", "/v1/jobs"])
def test_a_gate_it_cannot_have_is_refused_before_the_upload_is_read(
    client: InProcessClient, path: str, query: str, status: int, code: str
) -> None:
    reply = client.post(f"{path}?{query}", files={"file": ("talk.wav", b"not audio")})
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code
    if code == "unknown_model":
        assert "loudness models loaded: loudness" in reply.json()["error"]["message"]


def test_the_gate_is_declared_once_in_the_openapi_schema(client: InProcessClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in ("/v1/recognize", "/v1/jobs"):
        (gate,) = [p for p in spec["paths"][path]["post"]["parameters"] if p["name"] == "gate"]
        assert "loudness model" in gate["description"]
    response = spec["components"]["schemas"]["RecognizeResponse"]["properties"]
    assert "skipped_s" in response

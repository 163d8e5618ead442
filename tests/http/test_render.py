"""`POST /v1/render`: a result the client holds, as a file, without sending the audio again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arengine.outputs.formats import FORMATS
from arengine.settings import MAX_RESULT_BYTES
from tests.conftest import RecordingFactory
from tests.http.conftest import InProcessClient


def _recognized(
    client: InProcessClient, recording: RecordingFactory
) -> tuple[dict[str, Any], bytes]:
    clip = recording("meeting.flac")
    with clip.path.open("rb") as body:
        response = client.post("/v1/recognize", files={"file": ("meeting.flac", body)})
    assert response.status_code == 200, response.text
    return response.json(), clip.path.read_bytes()


@pytest.mark.parametrize("name", [f.name for f in FORMATS.values() if not f.notes_only])
def test_every_format_renders_as_the_recognition_would_have_written_it(
    client: InProcessClient, recording: RecordingFactory, name: str
) -> None:
    result, audio = _recognized(client, recording)
    direct = client.post(
        "/v1/recognize", params={"format": name}, files={"file": ("meeting.flac", audio)}
    )
    rendered = client.post(
        "/v1/render", params={"format": name, "name": "meeting.flac"}, content=json.dumps(result)
    )
    assert rendered.status_code == 200, rendered.text
    assert rendered.headers["content-disposition"] == direct.headers["content-disposition"]
    assert rendered.headers["content-type"] == direct.headers["content-type"]
    parse = FORMATS[name].parse
    assert parse(rendered.content) == parse(direct.content)
    assert len(parse(rendered.content)) == len(result["tags"]) == 2


def test_a_download_is_named_recording_without_a_name(
    client: InProcessClient, recording: RecordingFactory
) -> None:
    result, _ = _recognized(client, recording)
    rendered = client.post("/v1/render", params={"format": "srt"}, content=json.dumps(result))
    assert rendered.headers["content-disposition"] == 'attachment; filename="recording.srt"'


def _refusal(client: InProcessClient, body: bytes | str, **params: str) -> tuple[int, str, str]:
    response = client.post("/v1/render", params={"format": "csv", **params}, content=body)
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def test_what_is_not_a_result_is_refused_naming_where(
    client: InProcessClient, recording: RecordingFactory
) -> None:
    result, _ = _recognized(client, recording)
    assert _refusal(client, b"not json")[:2] == (422, "invalid_result")
    negative = {**result, "tags": [{**result["tags"][0], "start": -1.0}]}
    status, code, message = _refusal(client, json.dumps(negative))
    assert (status, code) == (422, "invalid_result") and "tags.0.start" in message
    no_rate = {**result, "audio": {**result["audio"], "sample_rate": 0}}
    assert "audio.sample_rate" in _refusal(client, json.dumps(no_rate))[2]
    nan = json.dumps(result).replace('"score": ' + str(result["tags"][0]["score"]), '"score": NaN')
    assert _refusal(client, nan)[:2] == (422, "invalid_result")
    unknown = _refusal(client, json.dumps(result), format="xml")
    assert unknown[:2] == (422, "invalid_parameter") and "known formats" in unknown[2]
    midi = _refusal(client, json.dumps(result), format="midi")
    assert midi[:2] == (422, "invalid_parameter") and "holds only notes" in midi[2]


def test_a_result_past_the_cap_is_refused_while_it_arrives(client: InProcessClient) -> None:
    status, code, message = _refusal(client, b" " * (MAX_RESULT_BYTES + 1))
    assert (status, code) == (413, "result_too_large") and "32 MiB" in message

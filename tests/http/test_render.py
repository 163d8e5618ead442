"""`POST /v1/render`: a result the client holds, as a file, without sending the audio again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from arengine.errors import DeadlineExceeded, ErrorCode
from arengine.http.render import _Deadline, _Timed
from arengine.http.schemas import RecognizeResponse
from arengine.outputs.formats import FORMATS
from arengine.settings import MAX_RESULT_BYTES, MAX_RESULT_TAGS, Settings
from arengine.types import Extra, Tag
from tests.conftest import RecordingFactory
from tests.http.conftest import InProcessClient, serving

JSON = {"Content-Type": "application/json"}


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
        "/v1/render",
        params={"format": name, "name": "meeting.flac"},
        content=json.dumps(result),
        headers=JSON,
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
    rendered = client.post(
        "/v1/render", params={"format": "srt"}, content=json.dumps(result), headers=JSON
    )
    assert rendered.headers["content-disposition"] == 'attachment; filename="recording.srt"'


def _refusal(client: InProcessClient, body: bytes | str, **params: str) -> tuple[int, str, str]:
    response = client.post(
        "/v1/render", params={"format": "csv", **params}, content=body, headers=JSON
    )
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


@pytest.mark.parametrize(
    ("where", "value", "fmt"),
    [
        ("audio.sample_rate", 10**400, "csv"),
        ("audio.duration_s", 1e308, "csv"),
        ("tags.0.start", 1e300, "vtt"),
        ("tags.0.end", 1e300, "eaf"),
        ("tags.0.label", "A" + "9" * 5000, "midi"),
        ("tags.0.end", 0.01, "srt"),  # before its start: a reversed cue
    ],
    ids=["rate 1e400", "duration 1e308", "start 1e300", "end 1e300", "label A999", "reversed"],
)
def test_crafted_numbers_and_labels_are_invalid_results_not_faults(
    client: InProcessClient, recording: RecordingFactory, where: str, value: object, fmt: str
) -> None:
    result, _ = _recognized(client, recording)
    part, field = where.rsplit(".", 1)
    target = result["audio"] if part == "audio" else result["tags"][0]
    target[field] = value
    status, code, message = _refusal(client, json.dumps(result), format=fmt)
    assert (status, code) == (422, "invalid_result"), message
    assert where.split(".")[0] in message and "Value error" not in message


def test_a_million_pitch_bends_on_one_short_note_are_refused(client: InProcessClient) -> None:
    note = {"start": 0.0, "end": 1.0, "label": "A4", "score": 0.9, "midi": 69}
    body = {
        "model": "notes",
        "audio": {"duration_s": 1.0, "sample_rate": 22050, "channels": 1, "format": "WAV",
                  "subtype": "PCM_16", "decoder": "libsndfile", "stream": 0,
                  "truncated": False, "warnings": []},
        "tags": [{**note, "pitch_bend": [1] * 1_000_000}],
        "timings": dict.fromkeys(
            ["validation_s", "features_s", "inference_s", "postprocess_s", "total_s"], 0.0
        ),
    }  # fmt: skip
    status, code, message = _refusal(client, json.dumps(body), format="midi")
    assert (status, code) == (422, "invalid_result") and "pitch bends" in message
    body["tags"] = [{**note, "pitch_bend": [1] * 86}]
    assert client.post("/v1/render", params={"format": "midi"}, json=body).status_code == 200


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [("midi", 128, "less than or equal to 127"), ("level_dbfs", 3.0, "less than or equal to 0"),
     ("speed", 0.0, "greater than 0"), ("reference", "x" * 65, "at most 64 characters")],
)  # fmt: skip
def test_a_kind_field_out_of_its_declared_bounds_is_refused(
    client: InProcessClient, field: str, value: object, bound: str
) -> None:
    """Each kind declares its fields' bounds (`<kind>/fields.py`); `TagOut` is built from them."""
    body = {
        "model": "x",
        "audio": {"duration_s": 1.0, "sample_rate": 22050, "channels": 1, "format": "WAV",
                  "subtype": "PCM_16", "decoder": "libsndfile", "stream": 0,
                  "truncated": False, "warnings": []},
        "tags": [{"start": 0.0, "end": 1.0, "label": "A4", "score": 0.9, field: value}],
        "timings": dict.fromkeys(
            ["validation_s", "features_s", "inference_s", "postprocess_s", "total_s"], 0.0
        ),
    }  # fmt: skip
    status, code, message = _refusal(client, json.dumps(body), format="csv")
    assert (status, code) == (422, "invalid_result") and bound in message, message
    assert f"tags.0.{field}" in message


def _notes_result(tags: list[dict[str, Any]]) -> dict[str, Any]:
    end = max([1.0, *(tag["end"] for tag in tags)])
    return {
        "model": "notes",
        "audio": {"duration_s": end, "sample_rate": 22050, "channels": 1, "format": "WAV",
                  "subtype": "PCM_16", "decoder": "libsndfile", "stream": 0,
                  "truncated": False, "warnings": []},
        "tags": tags,
        "timings": dict.fromkeys(
            ["validation_s", "features_s", "inference_s", "postprocess_s", "total_s"], 0.0
        ),
    }  # fmt: skip


def test_a_render_runs_off_the_event_loop(client: InProcessClient) -> None:
    """While a long render (10,000 overlapping tags as EAF: seconds, many polls) works, /healthz
    is answered: it ran on the event loop and froze every client until it ended."""
    tags = [{"start": i * 0.01, "end": i * 0.01 + 5.0, "label": "A4", "score": 0.5}
            for i in range(10_000)]  # fmt: skip
    body = json.dumps(_notes_result(tags))

    async def render_and_poll() -> tuple[int, int]:
        http = client._client
        rendering = asyncio.ensure_future(
            http.post("/v1/render", params={"format": "eaf"}, content=body, headers=JSON)
        )
        answered = 0
        while not rendering.done():
            await asyncio.sleep(0.001)  # lets the loop run the render's task (and its end)
            health = await http.get("/healthz")
            answered += health.status_code == 200 and not rendering.done()
        return (await rendering).status_code, answered

    status, answered_meanwhile = client._portal.call(render_and_poll)
    assert status == 200 and answered_meanwhile > 0


@pytest.mark.slow  # 200,001 tags parsed before they are counted
def test_a_result_of_too_many_tags_is_refused(client: InProcessClient) -> None:
    tag = {"start": 0.0, "end": 0.0, "label": "x", "score": 0.5}
    body = json.dumps(_notes_result([tag] * (MAX_RESULT_TAGS + 1)))
    status, code, message = _refusal(client, body)
    assert (status, code) == (413, "result_too_large") and "200000" in message


def test_renders_count_as_engine_requests(client: InProcessClient) -> None:
    """A render takes an engine slot: refused with 503 when the engine is full."""
    admission = client.app.state.engine.admission
    body = json.dumps(_notes_result([]))
    with ExitStack() as slots:
        for _ in range(admission.max_pending):
            slots.enter_context(admission.pending_slot())
        refused = client.post("/v1/render", params={"format": "csv"}, content=body, headers=JSON)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "overloaded"
    assert (
        client.post("/v1/render", params={"format": "csv"}, content=body, headers=JSON).status_code
        == 200
    )


def test_a_render_past_render_timeout_s_is_stopped_with_504(
    models_dir: Path, tmp_path: Path
) -> None:
    """Its size bounded a render's time, but not on a slow or busy machine: 40,000 tags as EAF
    cannot be parsed, let alone written, in a millisecond."""
    tags = [{"start": i * 0.01, "end": i * 0.01 + 5.0, "label": "A4", "score": 0.5}
            for i in range(40_000)]  # fmt: skip
    body = json.dumps(_notes_result(tags))
    settings = Settings(models_dir=models_dir, upload_dir=tmp_path, render_timeout_s=0.001)
    with serving(settings) as client:
        status, code, message = _refusal(client, body, format="eaf")
        assert (status, code) == (504, "render_timeout")
        assert "render_timeout_s (0.001 s)" in message and "stopped" in message
        limiter = client.app.state.render_limiter
        assert limiter.borrowed_tokens == 0  # the render's thread has ended
        assert client.app.state.engine.admission.pending == 0


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_writer_stops_at_the_deadline(name: str) -> None:
    """A thread cannot be stopped from outside: each writer stops itself, as it reads the tags,
    once the deadline has passed."""
    notes = tuple(Tag(i * 0.5, i * 0.5 + 0.4, "A4", 0.5, extra=Extra(midi=69)) for i in range(1000))
    result = RecognizeResponse.model_validate(_notes_result([])).to_result()
    deadline = _Deadline(3600)
    timed = dataclasses.replace(result, tags=_Timed(notes, deadline))
    assert len(FORMATS[name].parse(FORMATS[name].encode(timed, "x"))) == 1000
    deadline.at = 0.0  # passed
    with pytest.raises(DeadlineExceeded) as stopped:
        FORMATS[name].encode(timed, "x")
    assert stopped.value.code == ErrorCode.RENDER_TIMEOUT


@pytest.mark.parametrize("name", ["csv", "raven", "birdnet", "kaleidoscope", "textgrid"])
def test_a_late_recording_time_or_a_numbered_label_renders(
    client: InProcessClient, recording: RecordingFactory, name: str
) -> None:
    """A result recorded at 9999-12-31 23:59:59 (500 in the table formats), its labels `A`
    twice overlapping and `A (2)` (500 in TextGrid): written, without the wall clock."""
    result, _ = _recognized(client, recording)
    result["audio"]["recorded_at"] = "9999-12-31T23:59:59"
    tag = {"start": 0.5, "end": 2.0, "score": 0.9}
    result["tags"] = [{**tag, "label": "A"}, {**tag, "label": "A"}, {**tag, "label": "A (2)"}]
    rendered = client.post(
        "/v1/render", params={"format": name}, content=json.dumps(result), headers=JSON
    )
    assert rendered.status_code == 200, rendered.text
    assert sorted(t.label for t in FORMATS[name].parse(rendered.content)) == ["A", "A", "A (2)"]
    assert "9999" not in rendered.text

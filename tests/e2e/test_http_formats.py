"""End to end: other formats by query or `Accept`, and the NDJSON tag stream, on a real server."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from arengine.outputs.formats import FORMATS, known_formats
from tests.conftest import RecordingFactory, Server, ServerFactory, wait_until
from tests.gate import Gate, gated_models, marked


def _post(
    server: Server, path: Path, headers: dict[str, str] | None = None, **params: Any
) -> httpx.Response:
    with server.client() as client, path.open("rb") as body:
        return client.post(
            "/v1/recognize", params=params, headers=headers, files={"file": (path.name, body)}
        )


@pytest.mark.parametrize("name", sorted(n for n, f in FORMATS.items() if not f.notes_only))
def test_every_format_by_query(server: Server, recording: RecordingFactory, name: str) -> None:
    clip = recording("my talk.flac")
    expected = _post(server, clip.path).json()["tags"]
    assert len(expected) == 2
    response = _post(server, clip.path, format=name)
    assert response.status_code == 200, response.text
    fmt = FORMATS[name]
    assert response.headers["content-type"].split(";")[0] == fmt.media_type
    assert response.headers["content-disposition"] == (
        f'attachment; filename="my talk.{fmt.extension}"'
    )
    tags = fmt.parse(response.content)
    assert [t.label for t in tags] == [t["label"] for t in expected]
    for got, want in zip(tags, expected, strict=True):
        assert got.start == pytest.approx(want["start"], abs=fmt.precision_s)
        assert got.end == pytest.approx(want["end"], abs=fmt.precision_s)


@pytest.mark.parametrize(
    ("accept", "name"),
    [("text/csv", "csv"), ("text/vtt", "vtt"), ("application/x-subrip", "srt")],
)
def test_format_by_accept_header(
    server: Server, recording: RecordingFactory, accept: str, name: str
) -> None:
    clip = recording("clip.wav")
    response = _post(server, clip.path, headers={"Accept": accept})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(FORMATS[name].media_type)
    assert len(FORMATS[name].parse(response.text)) == 2


def test_json_stays_the_default(server: Server, recording: RecordingFactory) -> None:
    clip = recording("clip.wav")
    for headers in (None, {"Accept": "*/*"}, {"Accept": "image/png"}):
        response = _post(server, clip.path, headers=headers)
        assert response.headers["content-type"] == "application/json"
        assert "content-disposition" not in response.headers
        assert set(response.json()) == {"model", "audio", "tags", "timings"}


def test_raw_body_is_named_recording(server: Server, recording: RecordingFactory) -> None:
    clip = recording("raw.flac")
    with server.client() as client:
        response = client.post(
            "/v1/recognize",
            params={"format": "rttm"},
            content=clip.path.read_bytes(),
            headers={"Content-Type": "audio/flac"},
        )
    assert response.headers["content-disposition"] == 'attachment; filename="recording.rttm"'
    assert response.text.startswith("SPEAKER recording 1 ")


def test_unknown_format_is_refused_with_the_list(
    server: Server, recording: RecordingFactory
) -> None:
    clip = recording("clip.wav")
    response = _post(server, clip.path, format="xml")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_parameter"
    assert known_formats() in response.json()["error"]["message"]


def test_an_alias_answers_its_format(server: Server, recording: RecordingFactory) -> None:
    clip = recording("labels.wav")
    response = _post(server, clip.path, format="audacity")
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == 'attachment; filename="labels.txt"'
    assert len(FORMATS["txt"].parse(response.text)) == 2


def test_midi_for_a_model_without_notes_is_refused_before_the_upload(server: Server) -> None:
    with server.client() as client:
        response = client.post(
            "/v1/recognize",
            params={"format": "midi", "model": "speech"},
            content=b"not even audio",
            headers={"Content-Type": "audio/wav"},
        )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_parameter"
    assert "holds only notes" in error["message"] and "textgrid" in error["message"]


def test_formats_endpoint_lists_the_declarations(server: Server) -> None:
    with server.client() as client:
        body = client.get("/v1/formats").json()
        models = client.get("/v1/models").json()
    assert [f["name"] for f in body["formats"]] == list(FORMATS)
    txt = next(f for f in body["formats"] if f["name"] == "txt")
    assert txt["aliases"] == ["audacity"] and txt["extension"] == "txt"
    assert next(f for f in body["formats"] if f["name"] == "midi")["binary"] is True
    assert body["stream"] == "ndjson"
    assert models["default"] == "speech"


def _stream_lines(
    server: Server, path: Path, **params: Any
) -> Iterator[tuple[float, dict[str, Any]]]:
    with (
        server.client() as client,
        client.stream(
            "POST",
            "/v1/recognize",
            params=params,
            headers={"Accept": "application/x-ndjson"},
            files={"file": (path.name, path.read_bytes())},
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        for line in response.iter_lines():
            yield time.monotonic(), json.loads(line)


def test_stream_matches_the_json_answer(server: Server, recording: RecordingFactory) -> None:
    clip = recording(
        "clip.flac", pieces=[p for _ in range(4) for p in [("silence", 3.0), ("speech", 0)]]
    )
    expected = _post(server, clip.path).json()
    lines = [line for _, line in _stream_lines(server, clip.path)]
    assert lines[:-1] == expected["tags"]
    summary = lines[-1]["summary"]
    assert summary["tag_count"] == len(expected["tags"]) == 4
    assert summary["model"] == "speech"
    assert summary["audio"] == expected["audio"]
    assert set(summary["timings"]) == set(expected["timings"])


def test_stream_errors_before_the_first_line_are_plain_errors(
    server: Server, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF" + b"\x00" * 100)
    ndjson = {"Accept": "application/x-ndjson"}
    response = _post(server, bad, headers=ndjson)
    assert response.status_code in (400, 415)
    assert set(response.json()) == {"error"}
    response = _post(server, bad, headers=ndjson, model="nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_model"


@pytest.fixture(scope="module")
def slow_server(serve: ServerFactory) -> Server:
    return serve("--models", "speech", "--segment-s", "2", "--engine-threads", "1")


@pytest.fixture
def long_recording(twenty_minutes: Path) -> Path:
    """About 20 minutes at 8 kHz: a phrase every 25 s."""
    return twenty_minutes


@pytest.fixture(scope="module")
def gated(serve: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> tuple[Server, Gate]:
    """A server of `speech` and the `gate` test model (2-s segments), and its gate."""
    models, gate = gated_models(tmp_path_factory.mktemp("gated"))
    return serve("--models-dir", str(models), "--segment-s", "2"), gate


@pytest.fixture
def held_clip(tmp_path: Path) -> Path:
    """A loud second (a tag final by the 2-s segment that follows it), then a second behind the
    gate (the third 2-s segment): a job that stays in the engine while the gate is held."""
    pieces = [("quiet", 1.0), ("loud", 1.0), ("quiet", 2.0), ("mark", 1.0), ("quiet", 1.0)]
    return marked(tmp_path / "held.wav", pieces)


@pytest.mark.slow  # a server of its own
def test_stream_sends_tags_before_the_job_finishes(
    gated: tuple[Server, Gate], held_clip: Path
) -> None:
    server, gate = gated
    lines = []
    jobs_when_first_tag_arrived = None
    with gate.held():
        # A broken stream that held its tags back would end at the deadline, without one.
        for _, line in _stream_lines(server, held_clip, model="gate", timeout_s=60):
            if "label" in line and jobs_when_first_tag_arrived is None:
                # The job cannot end before the gate opens: the tag came while it was running.
                info = httpx.get(server.url + "/v1/info").json()
                jobs_when_first_tag_arrived = info["active_jobs"]
                gate.open()
            lines.append(line)
    assert jobs_when_first_tag_arrived == 1
    assert [(tag["start"], tag["end"]) for tag in lines[:-1]] == [(1.0, 2.0), (4.0, 5.0)]
    assert lines[-1]["summary"]["tag_count"] == 2


@pytest.mark.slow
def test_a_long_stream_sends_every_tag_in_order(slow_server: Server, long_recording: Path) -> None:
    lines = [line for _, line in _stream_lines(slow_server, long_recording)]
    summary = lines[-1]["summary"]
    tags = lines[:-1]
    assert summary["tag_count"] == len(tags) >= 44
    starts = [tag["start"] for tag in tags]
    assert starts == sorted(starts)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(tags))


@pytest.mark.slow  # a server of its own
def test_stream_deadline_ends_with_an_error(gated: tuple[Server, Gate], held_clip: Path) -> None:
    """The job is held behind the gate past its deadline: a 504 if no line was out yet, else a
    last error line; never a summary, however fast the machine."""
    server, gate = gated
    with (
        gate.held(),
        server.client() as client,
        client.stream(
            "POST",
            "/v1/recognize",
            params={"timeout_s": 1, "model": "gate"},
            headers={"Accept": "application/x-ndjson"},
            files={"file": ("held.wav", held_clip.read_bytes())},
        ) as response,
    ):
        if response.status_code == 504:
            response.read()
            assert response.json()["error"]["code"] == "deadline_exceeded"
            return
        lines = [json.loads(line) for line in response.iter_lines()]
    assert response.status_code == 200
    assert lines[-1] == {
        "error": {"code": "deadline_exceeded", "message": lines[-1]["error"]["message"]}
    }
    assert all("summary" not in line for line in lines)
    # The server is free again: its job dropped once the gate let its last task end.
    assert wait_until(lambda: httpx.get(server.url + "/v1/info").json()["active_jobs"] == 0)
    assert httpx.get(server.url + "/readyz").status_code == 200


@pytest.mark.slow
def test_stream_progress_lines_start_before_the_first_tag(
    slow_server: Server, long_recording: Path
) -> None:
    lines = [line for _, line in _stream_lines(slow_server, long_recording, progress="true")]
    progress = [line["progress"] for line in lines if "progress" in line]
    tags = [line for line in lines if "start" in line]
    summary = lines[-1]["summary"]
    duration = summary["audio"]["duration_s"]
    assert "progress" in lines[0], "the stream opens with progress, not with the first tag"
    # However fast the machine, the last progress line before the summary has all the audio.
    assert len(progress) >= 2
    done = [p["audio_s"] for p in progress]
    assert done == sorted(done) and done[-1] == pytest.approx(duration, abs=1e-3)
    assert "progress" in lines[-2]
    assert all(p["duration_s"] == pytest.approx(duration) for p in progress)
    assert summary["tag_count"] == len(tags) >= 44
    # Without `progress`, no progress line: the stream older clients read is unchanged.
    plain = [line for _, line in _stream_lines(slow_server, long_recording)]
    assert not any("progress" in line for line in plain)

"""`?model=speech,notes,music` on a real server: one upload, every model's tags in one order."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from arengine.outputs.formats import FORMATS
from tests.conftest import Server, ServerFactory, run_cli
from tests.music import speech_and_melodies

pytestmark = pytest.mark.slow

MODELS = "speech,notes,music"


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", MODELS, "--segment-s", "6")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return speech_and_melodies(tmp_path_factory.mktemp("several-http"))


def _post(server: Server, path: Path, **params: Any) -> httpx.Response:
    with path.open("rb") as body:
        return httpx.post(
            server.url + "/v1/recognize", params=params, files={"file": body}, timeout=300
        )


def test_one_request_gives_each_models_tags_as_its_own_request_does(
    server: Server, recording: Path
) -> None:
    response = _post(server, recording, model=MODELS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == MODELS
    tags = body["tags"]
    assert [tag["start"] for tag in tags] == sorted(tag["start"] for tag in tags)
    for name in MODELS.split(","):
        alone = _post(server, recording, model=name).json()
        ours = [
            {k: v for k, v in tag.items() if k != "model"} for tag in tags if tag["model"] == name
        ]
        assert alone["tags"] and ours == alone["tags"], name
        assert "model" not in alone["tags"][0], "a one-model answer is unchanged"
        assert "model_timings" not in alone
        assert body["model_timings"][name]["inference_s"] > 0
    assert set(body["model_timings"]) == set(MODELS.split(","))


def test_the_stream_merges_the_models_in_timestamp_order(server: Server, recording: Path) -> None:
    with (
        recording.open("rb") as upload,
        httpx.stream(
            "POST",
            server.url + "/v1/recognize",
            params={"model": "music,speech", "format": "ndjson"},
            files={"file": upload},
            timeout=300,
        ) as response,
    ):
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    *tags, last = lines
    summary = last["summary"]
    assert summary["model"] == "music,speech" and summary["tag_count"] == len(tags)
    assert set(summary["model_timings"]) == {"music", "speech"}
    assert {tag["model"] for tag in tags} == {"music", "speech"}
    assert [tag["start"] for tag in tags] == sorted(tag["start"] for tag in tags)
    whole = _post(server, recording, model="music,speech").json()["tags"]
    assert tags == whole


def test_files_name_each_tags_model_where_the_format_has_room(
    server: Server, recording: Path
) -> None:
    response = _post(server, recording, model="speech,notes", format="csv")
    assert response.status_code == 200, response.text
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert {row["model"] for row in rows} == {"speech", "notes"}
    assert FORMATS["csv"].parse(response.text)[0].model == rows[0]["model"]
    refused = _post(server, recording, model="notes,speech", format="midi")
    assert refused.status_code == 422, refused.text
    assert "model 'speech' tags no notes" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("model", "params", "status", "code", "message"),
    [
        ("speech,notes,speech", {}, 422, "invalid_parameter", "names speech more than once"),
        ("speech,drums", {}, 404, "unknown_model", "unknown model 'drums'"),
        ("speech,music", {"pitch_bends": 1}, 422, "invalid_parameter", "does not apply to any"),
        ("speech,,notes", {}, 422, "invalid_parameter", "model"),
    ],
)
def test_a_bad_list_of_models_is_refused_before_the_upload_is_read(
    server: Server, recording: Path, model: str, params: dict[str, Any], status: int, code: str,
    message: str,
) -> None:  # fmt: skip
    response = _post(server, recording, model=model, **params)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and message in error["message"], error


def test_the_cli_asks_a_server_for_several_models(
    server: Server, tmp_path: Path, recording: Path
) -> None:
    done = run_cli(
        "recognize", str(recording), "--server", server.url, "--model", "notes,speech",
        "--format", "csv", "--out", str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "speech-and-music.csv").read_text())))
    assert {row["model"] for row in rows} == {"notes", "speech"}
    assert [float(row["start"]) for row in rows] == sorted(float(row["start"]) for row in rows)


def test_the_cli_runs_several_models_into_one_file(tmp_path: Path, recording: Path) -> None:
    done = run_cli(
        "recognize", str(recording), "--model", "speech,notes",
        "--format", "json", "--out", str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    body = json.loads((tmp_path / "speech-and-music.json").read_text())
    assert body["model"] == "speech,notes"
    assert {tag["model"] for tag in body["tags"]} == {"speech", "notes"}
    refused = run_cli("recognize", str(recording), "--model", "speech,drums", cwd=tmp_path)
    assert refused.returncode == 2 and "unknown model 'drums'" in refused.stderr

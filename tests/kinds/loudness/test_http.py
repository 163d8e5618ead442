"""The loudness kind through the HTTP API, in-process: the shipped manifest served beside speech,
its parameters listed by `GET /v1/models` and taken from the query."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator

import pytest

from arengine.kinds.loudness.tagger import LoudnessParams
from arengine.models import DEFAULT_MODELS_DIR
from arengine.settings import Settings
from tests.http.conftest import InProcessClient, serving
from tests.http.test_jobs import _ended, _submit
from tests.kinds.loudness.room import ALARM, RATE, SLAM, quiet_room
from tests.recordings import write


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessClient]:
    models = tmp_path_factory.mktemp("models")
    for name in ("loudness", "speech"):
        shutil.copytree(DEFAULT_MODELS_DIR / name, models / name)
    settings = Settings(
        models_dir=models,
        upload_dir=tmp_path_factory.mktemp("uploads"),
        data_dir=tmp_path_factory.mktemp("data"),
        segment_s=4.0,
    )
    with serving(settings) as running:
        yield running


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = write(quiet_room(), RATE, tmp_path_factory.mktemp("room") / "room.flac")
    return path.read_bytes()


def _bounds(body: dict[str, object]) -> list[tuple[float, float]]:
    tags = body["tags"]
    assert isinstance(tags, list)
    assert {tag["label"] for tag in tags} <= {"loud"}
    return [(tag["start"], tag["end"]) for tag in tags]


def test_the_models_list_shows_the_kind_and_its_parameters(client: InProcessClient) -> None:
    (model,) = [m for m in client.get("/v1/models").json()["models"] if m["name"] == "loudness"]
    assert model["kind"] == "loudness"
    assert model["labels"] == ["loud"]
    assert model["parameters"] == LoudnessParams().as_dict()
    assert set(model["parameters"]) >= {"rise_db", "absolute_dbfs", "min_duration_ms", "hold_ms"}


def test_a_quiet_room_gives_the_slam_and_the_alarm(client: InProcessClient, room: bytes) -> None:
    reply = client.post("/v1/recognize?model=loudness", files={"file": room})
    assert reply.status_code == 200, reply.text
    assert _bounds(reply.json()) == [SLAM, ALARM]


def test_the_query_overrides_the_trigger(client: InProcessClient, room: bytes) -> None:
    held = client.post("/v1/recognize?model=loudness&hold_ms=0", files={"file": room})
    assert held.status_code == 200, held.text
    assert len(_bounds(held.json())) == 1 + 16  # the slam, and the alarm beep by beep
    deaf = client.post("/v1/recognize?model=loudness&rise_db=60", files={"file": room})
    assert _bounds(deaf.json()) == []


def test_an_override_out_of_bounds_is_refused_with_its_range(
    client: InProcessClient, room: bytes
) -> None:
    reply = client.post("/v1/recognize?model=loudness&background_s=0.5", files={"file": room})
    assert reply.status_code == 422
    assert reply.json()["error"]["code"] == "invalid_parameter"
    assert "background_s must be 1 <= x <= 600" in reply.json()["error"]["message"]


def test_it_runs_beside_another_model_each_taking_its_parameters(
    client: InProcessClient, room: bytes
) -> None:
    reply = client.post(
        "/v1/recognize?model=speech,loudness&hold_ms=0&threshold=0.6", files={"file": room}
    )
    assert reply.status_code == 200, reply.text
    loud = [tag for tag in reply.json()["tags"] if tag.get("model") == "loudness"]
    assert len(loud) == 17


def test_a_loudness_tag_is_written_with_its_own_level_column(
    client: InProcessClient, room: bytes
) -> None:
    """The shared columns carry it (score: the peak as a fraction of full scale), and its own
    `level_dbfs`, which the kind declares (`loudness/fields.py`), says that peak in dBFS."""
    reply = client.post("/v1/recognize?model=loudness&format=csv", files={"file": room})
    assert reply.status_code == 200, reply.text
    lines = reply.text.strip().splitlines()
    assert lines[0] == "start,end,label,score,level_dbfs"
    rows = [line.split(",") for line in lines[1:]]
    assert [row[:3] for row in rows] == [["5.0", "5.2", "loud"], ["10.0", "17.75", "loud"]]
    for row in rows:
        assert float(row[4]) == pytest.approx(20 * math.log10(float(row[3])), abs=0.005)
    tags = client.post("/v1/recognize?model=loudness", files={"file": room}).json()["tags"]
    assert [tag["level_dbfs"] for tag in tags] == [float(row[4]) for row in rows]
    raven = client.post("/v1/recognize?model=loudness&format=raven", files={"file": room})
    table = [line.split("\t") for line in raven.text.strip().splitlines()]
    column = table[0].index("Level (dBFS)")  # Raven's own column, from the same declaration
    assert [float(row[column]) for row in table[1:]] == [float(row[4]) for row in rows]


def test_a_done_job_answers_new_trigger_parameters_from_its_kept_levels(
    client: InProcessClient, room: bytes
) -> None:
    job_id = _submit(client, room, "?model=loudness")
    assert _ended(client, job_id)["state"] == "done"
    assert _bounds(client.get(f"/v1/jobs/{job_id}/result").json()) == [SLAM, ALARM]
    for query in ({"hold_ms": 0}, {"rise_db": 60}, {"absolute_dbfs": -30, "rise_db": 120}):
        again = client.get(f"/v1/jobs/{job_id}/result", params=query)
        assert again.status_code == 200, again.text
        fresh = client.post(
            "/v1/recognize", params={"model": "loudness", **query}, files={"file": room}
        )
        assert again.json()["tags"] == fresh.json()["tags"], query
    assert len(_bounds(again.json())) == 2  # above -30 dBFS: the slam and the alarm

"""New post-processing parameters for a finished job: its tags derived again from the scores it
kept equal a fresh recognition's with those parameters, for every model kind the server loads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arengine.models import DEFAULT_MODELS_DIR
from arengine.settings import Settings
from tests.conftest import RecordingFactory
from tests.http.conftest import InProcessClient, serving
from tests.http.test_jobs import _ended, _error, _submit

pytestmark = pytest.mark.slow

KINDS = ("speech", "pitch", "notes", "music", "events", "birds")
"""Every kind with a model in `models/` (birds only where its package is installed)."""

PARAMETERS: list[dict[str, Any]] = [
    {"threshold": 0.3},
    {"neg_threshold": 0.2, "min_speech_duration_ms": 100, "speech_pad_ms": 0},
    {"onset_threshold": 0.5, "frame_threshold": 0.2, "pitch_bends": 1, "melodia": 1},
    {"median_frames": 9, "min_duration_ms": 300},
    {"hysteresis": 0.2, "merge_gap_ms": 300, "min_duration_ms": 1500},
    {"min_conf": 0.05, "sensitivity": 1.5},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessClient]:
    settings = Settings(
        models_dir=DEFAULT_MODELS_DIR,
        data_dir=tmp_path_factory.mktemp("data"),
        segment_s=4.0,
        max_upload_bytes=8 << 20,
    )
    with serving(settings) as running:
        yield running


def test_a_done_job_answers_new_parameters_as_a_fresh_recognition_of_every_kind(
    server: InProcessClient, recording: RecordingFactory
) -> None:
    loaded = {model["name"] for model in server.get("/v1/models").json()["models"]}
    models = ",".join(kind for kind in KINDS if kind in loaded)
    assert set(KINDS) - loaded <= {"birds"}, loaded
    pieces = [("silence", 0.5), ("speech", 0), ("tone", 1.5), ("noise", 1.0), ("speech", 0)]
    body = recording("mixed.wav", pieces=pieces).path.read_bytes()
    job_id = _submit(server, body, f"?model={models}")
    assert _ended(server, job_id)["state"] == "done"
    plain = server.get(f"/v1/jobs/{job_id}/result").json()["tags"]
    for parameters in PARAMETERS:
        usable = {
            name: value
            for name, value in parameters.items()
            if name not in ("min_conf", "sensitivity") or "birds" in loaded
        }
        again = server.get(f"/v1/jobs/{job_id}/result", params=usable)
        assert again.status_code == 200, again.text
        fresh = server.post(
            "/v1/recognize",
            params={"model": models, **usable},
            files={"file": ("mixed.wav", body, "audio/wav")},
        )
        assert fresh.status_code == 200, fresh.text
        assert again.json()["tags"] == fresh.json()["tags"], usable
        assert again.json()["tags"] != plain, f"{usable} changes nothing: the test shows nothing"
    kinds_tagged = {tag["model"] for tag in plain}
    assert kinds_tagged >= {"speech", "pitch", "notes", "events"}, kinds_tagged


def test_new_parameters_are_checked_and_need_the_kept_scores(
    server: InProcessClient, recording: RecordingFactory
) -> None:
    job_id = _submit(server, recording("talk.wav").path.read_bytes())
    assert _ended(server, job_id)["state"] == "done"
    _error(server.get(f"/v1/jobs/{job_id}/result?threshold=7"), 422, "invalid_parameter")
    _error(server.get(f"/v1/jobs/{job_id}/result?onset_threshold=0.5"), 422, "invalid_parameter")
    csv = server.get(f"/v1/jobs/{job_id}/result?threshold=0.9&format=csv")
    assert csv.status_code == 200 and csv.text.startswith("start,"), csv.text
    data = Path(server.app.state.settings.jobs.data_dir)
    (data / "results" / f"{job_id}.scores").unlink()
    _error(server.get(f"/v1/jobs/{job_id}/result?threshold=0.9"), 409, "scores_not_kept")
    assert server.get(f"/v1/jobs/{job_id}/result").status_code == 200

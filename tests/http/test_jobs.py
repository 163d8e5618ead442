"""Jobs in-process: a job's result equals the recognition's, in every format; its states and
errors; ownership by API key; the queue's bound; a restart that finds jobs left running; and the
files a crash leaves behind."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from arengine.jobs.store import DATABASE, JobRecord, JobState, JobStore
from arengine.settings import Settings
from tests.conftest import RecordingFactory, wait_until
from tests.gate import gated_models, marked
from tests.http.conftest import InProcessClient, serving
from tests.http.test_app import _wav

ALPHA = {"Authorization": "Bearer alpha-key-123"}
BETA = {"Authorization": "Bearer beta-key-456"}


@contextmanager
def _serving(models_dir: Path, data_dir: Path | None, **options: Any) -> Iterator[InProcessClient]:
    """The app in-process over `data_dir`, models loaded; stopped (lifespan shutdown) after."""
    settings = Settings(
        models_dir=models_dir, data_dir=data_dir, segment_s=4.0, engine_threads=1, **options
    )
    with serving(settings) as running:
        yield running


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def jobs(models_dir: Path, data_dir: Path) -> Iterator[InProcessClient]:
    with _serving(models_dir, data_dir) as client:
        yield client


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == code
    return error["message"]


def _submit(client: InProcessClient, body: bytes, query: str = "", **options: Any) -> str:
    response = client.post(
        "/v1/jobs" + query, files={"file": ("talk.wav", body, "audio/wav")}, **options
    )
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    assert job["state"] == "queued" and response.headers["location"] == f"/v1/jobs/{job['id']}"
    return str(job["id"])


def _ended(client: InProcessClient, job_id: str, **options: Any) -> dict[str, Any]:
    """The job once it has ended (done or failed)."""
    seen: dict[str, Any] = {}

    def ended() -> bool:
        seen.update(client.get(f"/v1/jobs/{job_id}", **options).json())
        return seen["state"] in ("done", "failed")

    assert wait_until(ended, 120), seen
    return seen


def test_a_job_answers_what_the_recognition_answers_in_every_format(
    jobs: InProcessClient, recording: RecordingFactory
) -> None:
    body = recording("talk.wav").path.read_bytes()
    job_id = _submit(jobs, body, "?threshold=0.6")
    job = _ended(jobs, job_id)
    assert job["state"] == "done" and job["parameters"] == {"threshold": 0.6}
    assert job["progress"]["audio_s"] == job["progress"]["duration_s"] > 0
    direct = jobs.post(
        "/v1/recognize?threshold=0.6", files={"file": ("talk.wav", body, "audio/wav")}
    ).json()
    result = jobs.get(f"/v1/jobs/{job_id}/result").json()
    assert result["tags"] and result["tags"] == direct["tags"]
    assert result["audio"] == direct["audio"] and result["model"] == direct["model"]
    for fmt in ("csv", "srt", "rttm", "textgrid"):
        got = jobs.get(f"/v1/jobs/{job_id}/result", params={"format": fmt})
        want = jobs.post(
            f"/v1/recognize?threshold=0.6&format={fmt}",
            files={"file": ("talk.wav", body, "audio/wav")},
        )
        assert got.status_code == 200 and got.content == want.content, fmt
        assert got.headers["content-disposition"] == want.headers["content-disposition"]
    by_accept = jobs.get(f"/v1/jobs/{job_id}/result", headers={"Accept": "text/vtt"})
    assert by_accept.text.startswith("WEBVTT")
    _error(jobs.get(f"/v1/jobs/{job_id}/result?format=ndjson"), 422, "invalid_parameter")
    _error(jobs.get(f"/v1/jobs/{job_id}/result?format=midi"), 422, "invalid_parameter")


def test_a_failed_job_says_why_and_has_no_result(jobs: InProcessClient) -> None:
    job_id = _submit(jobs, _wav(amplitude=0.5), "?model=faulty")
    job = _ended(jobs, job_id)
    assert job["state"] == "failed" and job["error"]["code"] == "stage_failed"
    message = _error(jobs.get(f"/v1/jobs/{job_id}/result"), 409, "job_not_done")
    assert "failed" in message and "stage_failed" in message


def test_damaged_kept_scores_or_result_say_so(jobs: InProcessClient, data_dir: Path) -> None:
    """Damaged kept scores made new parameters a 500 rather than 409 `scores_not_kept`, and a
    damaged result file a 500 with no hint."""
    job_id = _submit(jobs, _wav(seconds=2.0))
    assert _ended(jobs, job_id)["state"] == "done"
    scores, result = (
        data_dir / "results" / f"{job_id}.scores",
        data_dir / "results" / f"{job_id}.json",
    )
    for damage in (b"", random.Random(7).randbytes(5000)):
        scores.write_bytes(damage)
        message = _error(
            jobs.get(f"/v1/jobs/{job_id}/result?threshold=0.7"), 409, "scores_not_kept"
        )
        assert "damaged" in message
    for damage in (b"", b'{"model": "speech"', b"[1, 2]", random.Random(8).randbytes(500)):
        result.write_bytes(damage)
        for query in ("", "?format=csv", "?threshold=0.7"):
            response = jobs.get(f"/v1/jobs/{job_id}/result{query}")
            assert "submit the recording again" in _error(response, 500, "job_result_damaged")
        last = json.loads(jobs.get(f"/v1/jobs/{job_id}/events").text.splitlines()[-1])
        assert last["error"]["code"] == "job_result_damaged"


def test_repeated_parameters_and_labels_given_twice_are_refused_as_a_recognition_does(
    tmp_path: Path,
) -> None:
    """A job's result took `threshold=0.7&threshold=0.2` (one of them, silently) and a per-label
    list naming a label twice in any case."""
    models, _ = gated_models(tmp_path / "gated")
    with _serving(models, tmp_path / "data") as client:
        job_id = _submit(client, _wav(), "?model=gate")
        assert _ended(client, job_id)["state"] == "done"
        for query in ("threshold=0.7&threshold=0.2", "format=csv&format=json"):
            response = client.get(f"/v1/jobs/{job_id}/result?{query}")
            assert "more than once" in _error(response, 422, "invalid_parameter")
        wav = {"file": ("a.wav", _wav(), "audio/wav")}
        for twice in ("loud:0.2;LOUD:0.7", "loud:0.2;loud:0.2"):
            for response in (
                client.get(f"/v1/jobs/{job_id}/result", params={"thresholds": twice}),
                client.post(
                    "/v1/recognize", params={"model": "gate", "thresholds": twice}, files=wav
                ),
            ):
                assert "more than once" in _error(response, 422, "invalid_parameter")
        once = client.get(f"/v1/jobs/{job_id}/result", params={"thresholds": "loud:0.2"})
        assert once.status_code == 200


def test_deleting_a_job_removes_its_row_and_files(jobs: InProcessClient, data_dir: Path) -> None:
    job_id = _submit(jobs, _wav(seconds=2.0))
    assert _ended(jobs, job_id)["state"] == "done"
    # A done job keeps its result and scores, not the recording.
    assert not (data_dir / "uploads" / f"{job_id}.upload").exists()
    assert (data_dir / "results" / f"{job_id}.json").exists()
    assert (data_dir / "results" / f"{job_id}.scores").exists()
    assert jobs.request("DELETE", f"/v1/jobs/{job_id}").status_code == 204
    _error(jobs.get(f"/v1/jobs/{job_id}"), 404, "job_not_found")
    _error(jobs.request("DELETE", f"/v1/jobs/{job_id}"), 404, "job_not_found")
    assert not list((data_dir / "uploads").glob(f"{job_id}*"))
    assert not list((data_dir / "results").glob(f"{job_id}*"))
    assert job_id not in [job["id"] for job in jobs.get("/v1/jobs").json()["jobs"]]


def test_deleting_a_running_job_stops_its_engine_work(tmp_path: Path) -> None:
    """The job is held behind the gate (`tests/gate.py`) when it is deleted, on any machine:
    once let go, it infers none of the segments after the one it was held at."""
    models, gate = gated_models(tmp_path / "gated")
    clip = marked(tmp_path / "held.wav", [("quiet", 8.0), ("mark", 1.0), ("quiet", 60.0)])
    data = tmp_path / "data"
    with _serving(models, data) as client, gate.held():
        job_id = _submit(client, clip.read_bytes(), "?model=gate")

        def under_way() -> bool:
            job = client.get(f"/v1/jobs/{job_id}").json()
            return bool(job["state"] == "running" and job["progress"]["audio_s"] > 0)

        assert wait_until(under_way, 60)  # two 4-s segments done, the third held
        assert client.request("DELETE", f"/v1/jobs/{job_id}").status_code == 204
        gate.open()
        engine = client.app.state.engine
        assert wait_until(lambda: engine.pool.active_requests == 0)
        inferred = client.get("/metrics").text
        _error(client.get(f"/v1/jobs/{job_id}"), 404, "job_not_found")
    found = re.search(r'^arengine_queue_wait_seconds_count\{model="gate"\} (\S+)$', inferred, re.M)
    # Of 18 segments: the two done, the held one and at most the 4 decoded ahead of it.
    assert found is not None and float(found[1]) <= 7
    assert not list((data / "uploads").glob(f"{job_id}*"))
    assert not list((data / "results").glob(f"{job_id}*"))


def test_a_job_s_events_give_its_tags_and_progress_then_its_summary(
    jobs: InProcessClient, recording: RecordingFactory
) -> None:
    pieces = [p for _ in range(8) for p in [("silence", 6.0), ("speech", 0)]]
    body = recording("talk.flac", rate=8000, pieces=pieces).path.read_bytes()
    job_id = _submit(jobs, body)
    lines = [json.loads(line) for line in jobs.get(f"/v1/jobs/{job_id}/events").text.splitlines()]
    result = jobs.get(f"/v1/jobs/{job_id}/result").json()
    assert [line for line in lines if "label" in line] == result["tags"]
    assert len(result["tags"]) >= 8
    # Progress lines come only while the job is queued or running: whether it still was when
    # the events were asked for depends on the machine (tests/e2e/test_jobs.py holds a job
    # behind the gate to see them for certain).
    progress = [line for line in lines if "progress" in line]
    assert {line["state"] for line in progress} <= {"queued", "running"}
    assert lines[-1]["summary"]["tag_count"] == len(result["tags"])
    assert lines[-1]["summary"]["audio"] == result["audio"]
    # Once the job is done, its events are its tags and its summary at once.
    again = [json.loads(line) for line in jobs.get(f"/v1/jobs/{job_id}/events").text.splitlines()]
    assert again == [*result["tags"], lines[-1]]


def test_a_failed_job_s_events_end_with_its_error(jobs: InProcessClient) -> None:
    job_id = _submit(jobs, _wav(amplitude=0.5), "?model=faulty")
    last = json.loads(jobs.get(f"/v1/jobs/{job_id}/events").text.splitlines()[-1])
    assert last["error"]["code"] == "stage_failed"


def test_the_metrics_count_jobs_by_state_and_the_oldest_waiting_one_s_age(
    models_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with _serving(models_dir, data) as client:
        job_id = _submit(client, _wav())
        assert _ended(client, job_id)["state"] == "done"
        with sqlite3.connect(data / DATABASE) as db:  # a job another process is running
            db.execute(
                "INSERT INTO jobs (id, model, overrides, state, created) VALUES (?,?,?,?,?)",
                ("r" * 22, "speech", "{}", "running", time.time() - 3600),
            )
        metrics = client.get("/metrics").text
    assert 'arengine_jobs{state="done"} 1.0' in metrics
    assert 'arengine_jobs{state="running"} 1.0' in metrics
    assert "arengine_jobs_queued 0.0" in metrics
    age = re.search(r"^arengine_jobs_oldest_age_seconds (\S+)$", metrics, re.M)
    assert age is not None and 3600 <= float(age[1]) < 7200
    size = re.search(r"^arengine_jobs_storage_bytes (\S+)$", metrics, re.M)
    assert size is not None and float(size[1]) > 0


def test_what_is_refused_is_refused_before_a_job_is_stored(
    jobs: InProcessClient, data_dir: Path
) -> None:
    before = sorted((data_dir / "uploads").iterdir())
    wav = {"file": ("a.wav", _wav(), "audio/wav")}
    _error(jobs.post("/v1/jobs?model=nothing", files=wav), 404, "unknown_model")
    _error(jobs.post("/v1/jobs?format=csv", files=wav), 422, "invalid_parameter")
    _error(jobs.post("/v1/jobs?threshold=7", files=wav), 422, "invalid_parameter")
    _error(jobs.post("/v1/jobs?stream=3", files=wav), 422, "unknown_stream")
    garbage = {"file": ("a.wav", b"not audio at all" * 64, "audio/wav")}
    assert jobs.post("/v1/jobs", files=garbage).status_code in (400, 415)
    _error(jobs.get("/v1/jobs/../../etc/passwd"), 404, "not_found")
    _error(jobs.get("/v1/jobs/" + "x" * 22), 404, "job_not_found")
    _error(jobs.get("/v1/jobs/short"), 404, "job_not_found")
    assert sorted((data_dir / "uploads").iterdir()) == before


def test_jobs_are_off_without_a_data_dir(client: InProcessClient) -> None:
    message = _error(client.get("/v1/jobs"), 404, "jobs_disabled")
    assert "--data-dir" in message
    files = {"file": ("a.wav", _wav(), "audio/wav")}
    _error(client.post("/v1/jobs", files=files), 404, "jobs_disabled")


def test_a_key_sees_and_touches_only_its_own_jobs(models_dir: Path, tmp_path: Path) -> None:
    keys = "alpha-key-123,beta-key-456"
    with _serving(models_dir, tmp_path / "data", api_keys=keys) as client:
        job_id = _submit(client, _wav(), headers=ALPHA)
        assert _ended(client, job_id, headers=ALPHA)["state"] == "done"
        _error(client.get(f"/v1/jobs/{job_id}", headers=BETA), 404, "job_not_found")
        _error(client.get(f"/v1/jobs/{job_id}/result", headers=BETA), 404, "job_not_found")
        _error(client.request("DELETE", f"/v1/jobs/{job_id}", headers=BETA), 404, "job_not_found")
        assert client.get("/v1/jobs", headers=BETA).json() == {"jobs": []}
        mine = client.get("/v1/jobs", headers=ALPHA).json()["jobs"]
        assert [job["id"] for job in mine] == [job_id]
        assert client.get(f"/v1/jobs/{job_id}/result", headers=ALPHA).status_code == 200
        _error(client.get(f"/v1/jobs/{job_id}"), 401, "unauthorized")


def test_a_request_with_two_keys_is_refused_and_reaches_no_job(
    models_dir: Path, tmp_path: Path
) -> None:
    """A job's owner came from the first `Authorization` header and the key check from the last:
    `[Bearer x, Bearer beta]` made a job owned by `x` that any key sending `Bearer x` first
    could read and delete."""
    keys = "alpha-key-123,beta-key-456"
    data = tmp_path / "data"
    beta = BETA["Authorization"]
    with _serving(models_dir, data, api_keys=keys) as client:
        wav = {"file": ("a.wav", _wav(), "audio/wav")}
        smuggled = [("Authorization", "Bearer x"), ("Authorization", beta)]
        _error(client.post("/v1/jobs", files=wav, headers=smuggled), 401, "ambiguous_credentials")
        assert list((data / "uploads").iterdir()) == []
        job_id = _submit(client, _wav(), headers=BETA)
        for first in ("Bearer x", ALPHA["Authorization"], beta):
            headers = [("Authorization", first), ("Authorization", beta)]
            for method, path in (("GET", ""), ("GET", "/result"), ("DELETE", "")):
                response = client.request(method, f"/v1/jobs/{job_id}{path}", headers=headers)
                _error(response, 401, "ambiguous_credentials")
        assert _ended(client, job_id, headers=BETA)["state"] == "done"


def test_past_the_queue_bound_a_job_is_refused_with_retry_after(
    models_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with _serving(models_dir, data, max_queued_jobs=2) as client:
        # Two jobs another process is running (rows only this test writes): the bound is reached.
        with sqlite3.connect(data / DATABASE) as db:
            for job_id in ("a" * 22, "b" * 22):
                db.execute(
                    "INSERT INTO jobs (id, model, overrides, state, created) VALUES (?,?,?,?,?)",
                    (job_id, "speech", "{}", "running", time.time()),
                )
        response = client.post("/v1/jobs", files={"file": ("a.wav", _wav(), "audio/wav")})
        _error(response, 503, "too_many_jobs")
        assert response.headers["retry-after"]
        assert sorted(path.name for path in (data / "uploads").iterdir()) == []


def test_queued_uploads_past_the_budget_remove_no_unread_job_and_refuse_new_ones(
    tmp_path: Path,
) -> None:
    """The budget counted queued uploads, so past it every job was removed as it finished and
    its client got 404. A finished job now stays until it is read; new jobs get 507 while the
    files pass the budget; a job read is what the budget removes."""
    models, gate = gated_models(tmp_path / "gated")
    clip = marked(tmp_path / "held.wav", [("quiet", 4.0), ("mark", 1.0), ("quiet", 3.0)])
    data = tmp_path / "data"
    with _serving(models, data, job_storage_bytes=1 << 20) as client, gate.held():
        job_id = _submit(client, clip.read_bytes(), "?model=gate")
        assert wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "running")
        # Meanwhile another replica took in two large jobs: the uploads alone pass the budget.
        with sqlite3.connect(data / DATABASE) as db:
            for other in ("a" * 22, "b" * 22):
                db.execute(
                    "INSERT INTO jobs (id, model, overrides, state, created) VALUES (?,?,?,?,?)",
                    (other, "speech", "{}", "running", time.time()),
                )
                (data / "uploads" / f"{other}.upload").write_bytes(b"R" * (600 << 10))
        gate.open()

        def finished() -> bool:  # or removed, as it was
            job = client.get(f"/v1/jobs/{job_id}").json()
            return job.get("state") not in ("queued", "running")

        assert wait_until(finished, 120)
        assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "done"
        client.app.state.jobs.expire()  # what the upkeep does every minute
        refused = client.post("/v1/jobs", files={"file": ("a.wav", _wav(), "audio/wav")})
        assert "job_storage_bytes" in _error(refused, 507, "job_storage_full")
        assert client.get(f"/v1/jobs/{job_id}/result").json()["tags"]
        # Read, it is the budget's to remove (at the next look: here, the next job refused).
        again = client.post("/v1/jobs", files={"file": ("a.wav", _wav(), "audio/wav")})
        _error(again, 507, "job_storage_full")
        _error(client.get(f"/v1/jobs/{job_id}"), 404, "job_not_found")


class _FullDatabase:
    """The store's database on a full disk: every write fails with SQLITE_FULL, as SQLite's
    own do when its files cannot grow; reads go through."""

    def __init__(self, engine: Any) -> None:
        self.full = True
        event.listen(engine, "before_cursor_execute", self._execute)

    def _execute(self, connection: Any, cursor: Any, sql: str, *rest: Any) -> None:
        if self.full and sql.split()[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            raise _sqlite_full()


def _sqlite_full() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL
    return error


def _no_room(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_data_directory_fails_a_running_job_visibly_and_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With the data directory full mid-job, the job stayed `running` at 0 s with no error for
    as long as the disk was full, and the upkeep logged a traceback every 10 s."""
    models, gate = gated_models(tmp_path / "gated")
    clip = marked(tmp_path / "held.wav", [("quiet", 4.0), ("mark", 1.0), ("quiet", 8.0)])
    caplog.set_level(logging.INFO, "arengine.jobs")
    with _serving(models, tmp_path / "data") as client, gate.held():
        job_id = _submit(client, clip.read_bytes(), "?model=gate")
        assert wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "running")
        runner = client.app.state.jobs
        database = _FullDatabase(runner.store.engine)
        with monkeypatch.context() as full:
            full.setattr(os, "fsync", _no_room)
            gate.open()
            assert wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "failed")
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["error"]["code"] == "insufficient_storage", job
            assert "full" in job["error"]["message"] and job["finished"]
            [listed] = client.get("/v1/jobs").json()["jobs"]
            assert listed == job
            for _ in range(3):  # the upkeep's rounds while the disk stays full
                runner.look_after()
            refused = client.post("/v1/jobs", files={"file": ("a.wav", _wav(), "audio/wav")})
            _error(refused, 507, "insufficient_storage")
            database.full = False
        runner.look_after()  # the disk has room again: the job's end is recorded
        stored = runner.store.get(job_id)
        assert stored is not None and stored.state is JobState.FAILED
        assert stored.error is not None and stored.error.code == "insufficient_storage"
        assert client.get(f"/v1/jobs/{job_id}").json() == job
    logged = [r for r in caplog.records if r.name.startswith("arengine.jobs")]
    assert not [r for r in logged if r.exc_info], "no traceback for a full disk"
    warned = [r for r in logged if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "is full" in warned[0].getMessage()
    assert any("has room again" in r.getMessage() for r in logged)
    assert sorted(path.name for path in (tmp_path / "data" / "uploads").iterdir()) == [
        f"{job_id}.upload"
    ]


@pytest.mark.slow  # an app of its own, and three recognitions
def test_a_restart_runs_again_what_was_left_and_sweeps_what_no_row_names(
    models_dir: Path, tmp_path: Path, recording: RecordingFactory
) -> None:
    data = tmp_path / "data"
    talk = recording("talk.wav")
    store = JobStore.open(data)
    # Left by this same server (its replica name): its restart queues them again at once. One
    # left by another replica waits for its lease to pass (`job_lease_s`), tested in e2e.
    left = [_left_job(store, talk.path, state) for state in ("queued", "running", "cancelled")]
    (data / "uploads" / "arengine-spooling.upload").write_bytes(b"RIFF")  # a spool cut short
    (data / "results" / ".orphan.json.tmp").write_bytes(b"{")
    (data / "uploads" / "NoRowNamesThisOne0000.upload").write_bytes(b"RIFF")
    store.close()
    with _serving(models_dir, data, replica_name=REPLICA) as client:
        direct = client.post(
            "/v1/recognize", files={"file": ("talk.wav", talk.path.read_bytes(), "audio/wav")}
        ).json()
        for job_id in left[:2]:
            assert _ended(client, job_id)["state"] == "done"
            assert client.get(f"/v1/jobs/{job_id}/result").json()["tags"] == direct["tags"]
        _error(client.get(f"/v1/jobs/{left[2]}"), 404, "job_not_found")
        assert list((data / "uploads").iterdir()) == []
        assert {path.name for path in (data / "results").iterdir()} == {
            f"{job_id}.{suffix}" for job_id in left[:2] for suffix in ("json", "scores")
        }


REPLICA = "restarted:8000"
"""The name of the server that left the jobs, and of the one started again."""


def _left_job(store: JobStore, audio: Path, state: str) -> str:
    """A job as a stopped process left it, in `state`, with its upload in place."""
    job_id = (state * 22)[:22]
    store.upload_path(job_id).write_bytes(audio.read_bytes())
    record = JobRecord(
        id=job_id,
        owner=None,
        model="speech",
        overrides={},
        stream=None,
        filename="talk.wav",
        state=JobState.QUEUED,
        done_s=0.0,
        duration_s=None,
        error=None,
        created=time.time(),
        finished=None,
        result=None,
    )
    assert store.add(record, limit=100)
    if state == "running":
        assert store.claim_next(REPLICA) is not None
    elif state == "cancelled":
        with sqlite3.connect(store.folder / DATABASE) as db:
            db.execute("UPDATE jobs SET state = 'cancelled' WHERE id = ?", (job_id,))
    return job_id


def test_a_job_recorded_at_an_impossible_time_answers_in_every_table_format(
    jobs: InProcessClient, recording: RecordingFactory
) -> None:
    """A recording named for 9999-12-31 23:59:59: its job's result gave 500 for csv, raven and
    birdnet (a wall clock past the last date), and so did its tags derived again."""
    body = recording("talk.wav").path.read_bytes()
    files = {"file": ("SITE_99991231_235959.wav", body, "audio/wav")}
    job_id = jobs.post("/v1/jobs", files=files).json()["id"]
    assert _ended(jobs, job_id)["state"] == "done"
    result = jobs.get(f"/v1/jobs/{job_id}/result").json()
    assert result["tags"] and "recorded_at" not in result["audio"]
    assert "too late" in result["audio"]["warnings"][0]
    for fmt in ("csv", "raven", "birdnet", "kaleidoscope"):
        for query in ({}, {"threshold": 0.6}):
            got = jobs.get(f"/v1/jobs/{job_id}/result", params={"format": fmt, **query})
            assert got.status_code == 200, (fmt, got.text)
            assert "9999-12-31" not in got.text


def test_a_job_takes_no_parameter_only_a_waiting_client_uses(jobs: InProcessClient) -> None:
    wav = {"file": ("a.wav", _wav(), "audio/wav")}
    for query in ("format=csv", "progress=true", "timeout_s=5"):
        message = _error(jobs.post(f"/v1/jobs?{query}", files=wav), 422, "invalid_parameter")
        assert "do not apply to a job" in message and "GET /v1/jobs/{id}/result" in message

"""Jobs on every replica: two real servers on one PostgreSQL and one shared data directory.
Jobs posted to one are run by both; `kill -9` of the one running a job leaves it to the other,
which finishes it from its checkpoint exactly once; a job removed through one replica stops on
the one running it."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from arengine.db.engine import open_engine
from arengine.db.schema import jobs
from arengine.db.url import parse
from tests.conftest import Phrases, Server, stop_server, wait_until
from tests.e2e.test_jobs import MODEL, _start, write_long_file
from tests.gate import Gate, gated_models
from tests.postgres import PostgreSQL

pytestmark = pytest.mark.slow  # two servers of their own


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Gate]:
    return gated_models(tmp_path_factory.mktemp("gated"))


@pytest.fixture(scope="module")
def long_file(tmp_path_factory: pytest.TempPathFactory, phrases: Phrases) -> Path:
    return write_long_file(tmp_path_factory.mktemp("long"), phrases)


@pytest.fixture
def replicas(
    tmp_path: Path, postgresql: PostgreSQL, models: tuple[Path, Gate]
) -> Iterator[tuple[dict[str, Server], str]]:
    """Replicas `a` and `b` (one running job each), their database's URL."""
    url = postgresql.database()
    shared = ("--data-dir", str(tmp_path / "data"), "--job-lease-s", "3")
    servers: dict[str, Server] = {}
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers[name] = _start(
                tmp_path / name, models, *shared, "--database-url", url, "--replica-name", name
            )
        yield servers, url
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                stop_server(server)


def _runners(url: str) -> dict[str, str]:
    """Each job's replica, read from the shared database ("" before a claim)."""
    engine = open_engine(parse(url), 1)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(jobs.c.id, jobs.c.runner)).all()
    finally:
        engine.dispose()
    return {str(job_id): str(runner or "") for job_id, runner in rows}


def _post(server: Server, audio: Path) -> str:
    with server.client() as client:
        posted = client.post(
            "/v1/jobs",
            params={"model": MODEL},
            files={"file": (audio.name, audio.read_bytes(), "audio/flac")},
        )
    assert posted.status_code == 202, posted.text
    return str(posted.json()["id"])


def _running(server: Server, job_id: str) -> bool:
    with server.client() as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
    return bool(job["state"] == "running" and job["progress"]["audio_s"] > 0)


def _ended(server: Server, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def ended() -> bool:
        with server.client() as client:
            job.update(client.get(f"/v1/jobs/{job_id}").json())
        return job["state"] in ("done", "failed")

    assert wait_until(ended, 600), job
    return job


def test_jobs_posted_to_one_replica_run_on_both_and_a_killed_ones_job_ends_once(
    replicas: tuple[dict[str, Server], str], long_file: Path, models: tuple[Path, Gate]
) -> None:
    servers, url = replicas
    gate = models[1]
    with gate.held():
        # Both to `a`, which runs one job at a time: `b` must take the other.
        posted = [_post(servers["a"], long_file) for _ in range(2)]
        assert wait_until(lambda: all(_running(servers["b"], job) for job in posted), 180)
        runners = _runners(url)
        assert {runners[job] for job in posted} == {"a", "b"}, runners
        killed = runners[posted[0]]
        servers[killed].process.kill()
        servers[killed].process.wait(timeout=60)
    survivor = servers["b" if killed == "a" else "a"]
    for job_id in posted:
        assert _ended(survivor, job_id)["state"] == "done"
    with survivor.client() as client:
        results = [client.get(f"/v1/jobs/{job}/result").json() for job in posted]
        direct = client.post(
            "/v1/recognize",
            params={"model": MODEL},
            files={"file": ("long.flac", long_file.read_bytes(), "audio/flac")},
            timeout=httpx.Timeout(600),
        ).json()
        metrics = client.get("/metrics").text
    assert all(result["tags"] == direct["tags"] for result in results)
    assert re.search(r"^arengine_job_lease_takeovers_total 1\.0$", metrics, re.M), metrics
    assert 'arengine_db_query_seconds_count{operation="update"}' in metrics
    log = survivor.log.read_text()
    taken = posted[0]
    assert f"job {taken}: its server stopped reporting; queued again" in log
    assert f"job {taken}: resumed from its checkpoint" in log
    for job_id in posted:  # done exactly once, by the survivor (the killed one never ended it)
        assert len(re.findall(rf"job {job_id}: done", log)) == 1, log
        assert f"job {job_id}: done" not in servers[killed].log.read_text()


def test_a_job_removed_through_one_replica_stops_on_the_one_running_it(
    replicas: tuple[dict[str, Server], str], long_file: Path, models: tuple[Path, Gate]
) -> None:
    servers, url = replicas
    with models[1].held():
        job_id = _post(servers["a"], long_file)
        assert wait_until(lambda: _running(servers["a"], job_id), 180)
        runner = servers[_runners(url)[job_id]]
        other = servers["b"] if runner is servers["a"] else servers["a"]
        removed = time.monotonic()
        with other.client() as client:
            assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
        stopped = f"job {job_id}: no longer this server's (removed or taken over); stopped"
        assert wait_until(lambda: stopped in runner.log.read_text(), 60)
        # How long the removal took to reach the runner: reported, never asserted.
        print(f"removal seen by the running replica after {time.monotonic() - removed:.2f} s")
        with runner.client() as client:
            assert client.get(f"/v1/jobs/{job_id}").status_code == 404

"""`arengine db copy`: one host's SQLite store (jobs, a webhook waiting, a fingerprint model's
library file) into an empty PostgreSQL database, every row kept; a non-empty target refused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from arengine.db.engine import open_engine
from arengine.db.url import parse
from arengine.jobs.outbox import Outbox
from arengine.jobs.store import JobError, JobRecord, JobState, JobStore, new_job_id
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.references import library_of
from tests.postgres import PostgreSQL


def _job(created: float) -> JobRecord:
    return JobRecord(
        new_job_id(), "owner", "speech", {"threshold": 0.6}, None, "a.wav", JobState.QUEUED,
        0.0, None, None, created, None, None,
    )  # fmt: skip


def _copy(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "arengine", "db", "copy", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_a_hosts_jobs_and_references_move_to_postgresql_and_a_full_target_is_refused(
    tmp_path: Path, postgresql: PostgreSQL
) -> None:
    data, models = tmp_path / "data", tmp_path / "models"
    store = JobStore.open(data)
    outbox = Outbox(store.engine)
    done, failed, queued = _job(time.time()), _job(time.time() + 1), _job(time.time() + 2)
    outbox.subscribe(queued.id, "https://example.com/hook")
    for record in (done, failed, queued):
        assert store.add(record, limit=10)
    outbox.subscribe(done.id, "https://example.com/done")
    assert store.claim_next("a") is not None and store.claim_next("a") is not None
    assert store.finish(done.id, result=f"{done.id}.json", duration_s=3.0, runner="a")
    assert store.finish(failed.id, error=JobError("stage_failed", "broke"), runner="a")
    store.mark_read(done.id)
    before = {record.id: record for record in store.owned_by("owner")}
    store.close()
    library = library_of(models / "jingles", create=True)
    rng = np.random.default_rng(3)
    kept = library.add("Ident", 10.0, {"client": "acme"}, rng.integers(0, 1 << 30, (50, 2)))
    gone = library.add("Old promo", 5.0, {}, rng.integers(0, 1 << 30, (20, 2)))
    assert library.remove(gone)

    target = postgresql.database()
    source = f"sqlite:///{data / 'jobs.sqlite3'}"
    copied = _copy("--from", source, "--to", target, "--models-dir", str(models))
    assert copied.returncode == 0, copied.stderr
    assert "3 jobs" in copied.stdout and "1 webhook_outbox" in copied.stdout

    engine = open_engine(parse(target))
    moved = JobStore.open(data, engine)
    try:
        after = {record.id: record for record in moved.owned_by("owner")}
        assert after == before
        assert Outbox(engine).depth() == 1  # done's webhook; queued's subscription waits
        shared = Library.shared(engine, "jingles")
        assert [(ref.id, ref.title) for ref in shared.references()] == [(kept, "Ident")]
        assert shared.add("New", 1.0, {}, rng.integers(0, 1 << 30, (5, 2))) == gone + 1
        # The subscription of the job still queued moved too: its end is a webhook.
        claimed = moved.claim_next("b")
        assert claimed is not None and claimed.id == queued.id
        assert moved.finish(queued.id, result="x.json", runner="b")
        assert Outbox(engine).depth() == 2
    finally:
        moved.close()

    again = _copy("--from", source, "--to", target, "--models-dir", str(models))
    assert again.returncode == 1 and "is not empty" in again.stderr


@pytest.mark.parametrize("missing", ["--from", "--to"])
def test_a_copy_needs_both_databases(missing: str) -> None:
    args = {"--from": "sqlite:///a.sqlite3", "--to": "sqlite:///b.sqlite3"}
    del args[missing]
    done = _copy(*[item for pair in args.items() for item in pair])
    assert done.returncode == 2 and "--from URL and --to URL" in done.stderr

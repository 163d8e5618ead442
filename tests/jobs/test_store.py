"""The job store on its own: the queue's bound, oldest first, a removal racing a finish, and what
`recover` does with what a stopped process left."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from arengine.jobs.outbox import Outbox
from arengine.jobs.store import (
    SWEEP_GRACE_S,
    JobError,
    JobRecord,
    JobState,
    JobStore,
    new_job_id,
    write_durably,
)
from tests.jobs.conftest import StoreFactory


def _record(created: float) -> JobRecord:
    return JobRecord(
        id=new_job_id(),
        owner=None,
        model="speech",
        overrides={"threshold": 0.6},
        stream=None,
        filename="a.wav",
        state=JobState.QUEUED,
        done_s=0.0,
        duration_s=None,
        error=None,
        created=created,
        finished=None,
        result=None,
    )


def test_jobs_are_claimed_oldest_first_and_the_bound_counts_queued_and_running(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    now = time.time()
    late, early = _record(now + 1), _record(now)
    assert store.add(late, limit=2) and store.add(early, limit=2)
    assert not store.add(_record(now + 2), limit=2)
    claimed = store.claim_next()
    assert claimed is not None and claimed.id == early.id and claimed.state is JobState.RUNNING
    assert not store.add(_record(now + 3), limit=2), "a running job still counts"
    assert store.finish(early.id, error=JobError("stage_failed", "broke"))
    assert store.add(_record(now + 4), limit=2)
    failed = store.get(early.id)
    assert failed is not None and failed.error == JobError("stage_failed", "broke")
    assert dict(failed.overrides) == {"threshold": 0.6} and failed.finished is not None


def test_a_job_removed_while_it_runs_cannot_be_finished(open_store: StoreFactory) -> None:
    store = open_store()
    record = _record(time.time())
    assert store.add(record, limit=1) and store.claim_next() is not None
    store.remove(record.id)
    assert not store.finish(record.id, result="x.json", duration_s=1.0)
    assert store.get(record.id) is None and store.owned_by(None) == []


def test_recover_queues_running_jobs_again_from_the_start(open_store: StoreFactory) -> None:
    store = open_store()
    record = _record(time.time())
    assert store.add(record, limit=1) and store.claim_next() is not None
    store.progress(record.id, 30.0, 60.0)
    store.close()
    reopened = open_store()
    assert reopened.recover() == [record.id]
    again = reopened.get(record.id)
    assert again is not None and again.state is JobState.QUEUED and again.done_s == 0.0


def test_a_finish_needs_a_result_or_an_error(open_store: StoreFactory) -> None:
    store = open_store()
    with pytest.raises(ValueError, match="either"):
        store.finish("x", error=None, result=None)


def test_a_durable_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    write_durably(tmp_path / "r.json", b"{}")
    assert [path.name for path in tmp_path.iterdir()] == ["r.json"]


def _ended_job(store: JobStore, created: float, size: int) -> str:
    """A done job with `size` bytes of result and scores, ended now."""
    record = _record(created)
    assert store.add(record, limit=100)
    claimed = store.claim_next()
    assert claimed is not None and claimed.id == record.id
    store.result_path(record.id).write_bytes(b"{}")
    store.scores_path(record.id).write_bytes(b"x" * (size - 2))
    assert store.finish(record.id, result=f"{record.id}.json", duration_s=1.0)
    return record.id


def test_ended_jobs_past_the_retention_time_or_the_budget_go_oldest_first(
    tmp_path: Path, open_store: StoreFactory
) -> None:
    store = open_store()
    now = time.time()
    first, second, third = (_ended_job(store, now + i, 1000) for i in range(3))
    for job_id in (first, second, third):
        store.mark_read(job_id)
    waiting = _record(now + 3)
    assert store.add(waiting, limit=100)
    store.upload_path(waiting.id).write_bytes(b"y" * 5000)
    assert store.counts() == {"queued": 1, "running": 0, "done": 3, "failed": 0, "cancelled": 0}
    assert store.size() == 8000
    # Within the time and the budget: nothing goes.
    assert store.expire(ended_before=now - 60, max_bytes=8000) == []
    # Over the budget: the job that ended first goes, files and row alike; a queued one stays.
    assert store.expire(ended_before=now - 60, max_bytes=7500) == [first]
    assert store.get(first) is None and store.size() == 7000
    assert not list(tmp_path.glob(f"*/{first}*"))
    assert store.expire(ended_before=now - 60, max_bytes=100) == [second, third]
    assert store.get(waiting.id) is not None and store.size() == 5000
    # Past the retention time.
    fourth = _ended_job(store, now - 10, 10)
    assert store.expire(ended_before=time.time() + 1, max_bytes=1 << 30) == [fourth]
    assert store.oldest_active() == waiting.created


def test_an_ended_job_past_its_retention_is_never_seen_cancelled(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its row went to `cancelled` while its files were deleted: a client (or a load test)
    polling the done job at its retention time read it as cancelled."""
    store = open_store()
    job_id = _ended_job(store, time.time() - 10, 10)
    seen: list[JobRecord | None] = []
    delete_files = store._delete

    def deleting(job: str) -> None:
        seen.append(store.get(job))
        delete_files(job)

    monkeypatch.setattr(store, "_delete", deleting)
    assert store.expire(ended_before=time.time(), max_bytes=1 << 30) == [job_id]
    assert seen == [None] and store.get(job_id) is None
    assert store.counts()["cancelled"] == 0


def test_the_budget_never_removes_an_ended_job_nobody_has_read(open_store: StoreFactory) -> None:
    """Queued uploads past the budget made every job deleted as it finished: its client, told
    its job was stored, then got 404. Unread, a job waits for its retention time."""
    store = open_store()
    now = time.time()
    unread, read = _ended_job(store, now + 1, 1000), _ended_job(store, now + 2, 1000)
    waiting = _record(now + 3)
    assert store.add(waiting, limit=100)
    store.upload_path(waiting.id).write_bytes(b"y" * 5000)
    store.mark_read(read)
    assert store.expire(ended_before=now - 60, max_bytes=100) == [read]
    job = store.get(unread)
    assert job is not None and job.state is JobState.DONE and job.read is None
    assert store.result_path(unread).exists()
    store.mark_read(unread)
    first_read = store.get(unread)
    assert first_read is not None and first_read.read is not None
    store.mark_read(unread)  # the first time counts
    assert store.get(unread) == first_read
    assert store.expire(ended_before=now - 60, max_bytes=100) == [unread]
    # The retention time removes even a job nobody read.
    forgotten = _ended_job(store, now - 1, 10)
    assert store.expire(ended_before=time.time() + 1, max_bytes=1 << 30) == [forgotten]


def test_a_starting_replica_leaves_what_another_is_still_writing(
    open_store: StoreFactory, backend: str
) -> None:
    """Replicas share a data directory: one starting must not sweep another's upload while it
    arrives, nor one renamed into place just before its row is committed (that replica then
    answered 500)."""
    serving = open_store()
    arriving = serving.uploads / "arengine-abcd1234.upload"  # as the spooler names it
    arriving.write_bytes(b"RIFF")
    renamed = serving.upload_path(new_job_id())
    renamed.write_bytes(b"RIFF")
    result = serving.results / f".{new_job_id()}.json.tmp"  # a result being written
    result.write_bytes(b"{")
    starting = open_store()
    assert starting.recover("other:8000") == []
    assert arriving.exists() and renamed.exists() and result.exists()
    serving.close()
    starting.close()
    alone = open_store()
    if backend == "sqlite":
        # Once no other server holds the directory, a start sweeps what a dead one left.
        alone.recover()
        assert list(alone.uploads.iterdir()) == list(alone.results.iterdir()) == []
    else:
        # On PostgreSQL the replicas may be on other hosts, whose locks on a shared volume this
        # one may not see: only what is older than the grace goes.
        alone.recover()
        assert arriving.exists() and renamed.exists() and result.exists()
        _age(arriving, renamed, result)
        alone.recover()
        assert list(alone.uploads.iterdir()) == list(alone.results.iterdir()) == []
    alone.close()


def _age(*paths: Path) -> None:
    """Make `paths` look last written longer ago than the sweep's grace."""
    past = time.time() - SWEEP_GRACE_S - 60
    for path in paths:
        os.utime(path, (past, past))


def test_files_no_row_names_go_once_older_than_the_grace_whoever_holds_the_directory(
    open_store: StoreFactory,
) -> None:
    """With many replicas one is always running, so a sweep that waited to be alone never
    came: a crashed replica's spool files and unnamed uploads stayed for ever."""
    serving, starting = open_store(), open_store()
    kept = serving.upload_path(new_job_id())
    kept.write_bytes(b"RIFF")
    left = [serving.uploads / "arengine-dead.upload", serving.results / f".{new_job_id()}.json.tmp"]
    for path in left:
        path.write_bytes(b"x")
    named = _record(time.time())
    assert serving.add(named, limit=10)
    serving.upload_path(named.id).write_bytes(b"RIFF")
    _age(*left, serving.upload_path(named.id))
    assert starting.recover("other:8000") == []
    assert kept.exists() and serving.upload_path(named.id).exists()
    assert not any(path.exists() for path in left)


def test_two_replicas_never_claim_the_same_job(open_store: StoreFactory) -> None:
    first, second = open_store(), open_store()
    now = time.time()
    queued = [_record(now + i / 1000) for i in range(40)]
    for record in queued:
        assert first.add(record, limit=100)
    claimed: list[str] = []

    def claim(store: JobStore, runner: str) -> None:
        while (record := store.claim_next(runner)) is not None:
            claimed.append(record.id)

    threads = [
        threading.Thread(target=claim, args=(store, f"replica-{i}"))
        for i, store in enumerate((first, second, first, second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == sorted(record.id for record in queued)
    assert first.counts()["running"] == 40


def test_a_silent_replicas_job_is_taken_over_and_the_silent_one_may_not_finish_it(
    open_store: StoreFactory,
) -> None:
    silent, other = open_store(), open_store()
    record = _record(time.time())
    assert silent.add(record, limit=1)
    assert silent.claim_next("silent:8000") is not None
    assert silent.progress(record.id, 5.0, 60.0, "silent:8000")
    assert other.take_over(silent_since=time.time() - 60) == [], "its lease is fresh"
    assert other.take_over(silent_since=time.time() + 1) == [record.id]
    again = other.claim_next("other:8000")
    assert again is not None and again.id == record.id and again.done_s == 5.0
    assert not silent.progress(record.id, 6.0, 60.0, "silent:8000"), "no longer its own"
    assert not silent.finish(record.id, result="x.json", runner="silent:8000")
    assert other.finish(record.id, result="x.json", duration_s=60.0, runner="other:8000")
    done = other.get(record.id)
    assert done is not None and done.state is JobState.DONE


def test_a_removal_through_one_replica_stops_the_one_running_the_job(
    open_store: StoreFactory,
) -> None:
    running, serving = open_store(), open_store()
    record = _record(time.time())
    assert serving.add(record, limit=1) and running.claim_next("a:8000") is not None
    serving.remove(record.id)
    assert not running.progress(record.id, 1.0, 2.0, "a:8000")
    assert running.get(record.id) is None


def test_a_jobs_end_and_its_webhook_are_committed_together(open_store: StoreFactory) -> None:
    store = open_store()
    outbox = Outbox(store.engine)
    done, cancelled = _record(time.time()), _record(time.time() + 1)
    for record in (done, cancelled):
        outbox.subscribe(record.id, f"https://example.com/{record.id}")
        assert store.add(record, limit=10)
    assert store.claim_next() is not None
    assert store.finish(done.id, result="r.json", duration_s=2.0)
    store.remove(cancelled.id)
    store.remove(done.id)  # an ended job's removal sends nothing more
    assert outbox.depth() == 2
    bodies = {}
    while (delivery := outbox.claim("here", time.time() + 1, lambda n: 60.0, 60)) is not None:
        bodies[delivery.job_id] = json.loads(delivery.body)
    assert bodies[done.id]["type"] == "job.done" and bodies[done.id]["error"] is None
    assert bodies[cancelled.id]["state"] == "cancelled"
    assert bodies[done.id]["created"].endswith("+00:00") and bodies[done.id]["model"] == "speech"

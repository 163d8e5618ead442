"""The job store: job rows in the shared database (`arengine/db/`: the data directory's SQLite
file, or PostgreSQL for many replicas), uploads and results as files in the data directory.

A job is acknowledged only once its upload is on disk (written, fsynced, renamed into
`uploads/`) and its row committed; a result is renamed into `results/` before its row says
`done`. Whatever a crash leaves between those steps (a file with no row, a row marked
`cancelled`) is removed by `recover` at the next start. A file no row names may also be another
replica's upload still arriving, or renamed in just before its row is committed: such files are
removed at once only when no other server holds the data directory (each holds a shared lock on
it, `arengine.system.claims`), and otherwise only once they are older than `SWEEP_GRACE_S`; on
PostgreSQL the lock is not trusted at all (the replicas may be on other hosts, whose locks an
NFS server may not share), so only the grace applies.

Many replicas take queued jobs at once: on PostgreSQL a claim locks the oldest queued row that no
other transaction holds (`FOR UPDATE SKIP LOCKED`), so two replicas never take the same job nor
wait for each other; SQLite has one writer at a time (`BEGIN IMMEDIATE`) and needs nothing more.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from arengine.db.engine import open_engine, reading, writing
from arengine.db.migrate import up_to_date, upgrade
from arengine.db.schema import jobs, webhook_outbox, webhook_subscriptions
from arengine.db.url import SQLITE_FILE, redacted
from arengine.system.claims import DirectoryClaim

log = logging.getLogger(__name__)

DATABASE = SQLITE_FILE
UPLOADS = "uploads"
RESULTS = "results"
SWEEP_GRACE_S = 3600.0
"""A file no row names is another replica's work in progress until it is this old (an upload
still arriving is written to all the time; a renamed one gets its row within the second)."""
_ADD_LOCK = 0x6172_656E_6A6F_6273
"""PostgreSQL's advisory lock that makes a job's bound check and insert one step across replicas."""

_READ = (
    jobs.c.id,
    jobs.c.owner,
    jobs.c.model,
    jobs.c.overrides,
    jobs.c.stream,
    jobs.c.filename,
    jobs.c.state,
    jobs.c.done_s,
    jobs.c.duration_s,
    jobs.c.error_code,
    jobs.c.error_message,
    jobs.c.created,
    jobs.c.finished,
    jobs.c.result,
    jobs.c.read,
)
"""What a record is read from."""


class JobState(StrEnum):
    """Where a job is: `queued` and `running` ones are run again after a restart."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class JobError:
    """Why a job failed: an `ErrorCode` value and its message."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's row."""

    id: str
    owner: str | None
    """The API key's identity (a hash, never the key); None when keys are off."""
    model: str
    overrides: Mapping[str, float | str]
    stream: int | None
    filename: str | None
    state: JobState
    done_s: float
    """Audio seconds post-processed by every model so far."""
    duration_s: float | None
    """The recording's duration once validated."""
    error: JobError | None
    created: float
    """Unix time."""
    finished: float | None
    result: str | None
    """The result file's name in `results/`, once done."""
    read: float | None = None
    """When its owner was first given its outcome (a done job's result, a failed job's error;
    Unix time): only then may the disk budget remove it."""
    gate: str | None = None
    """The loudness model gating its models (the `gate` query), if any: kept in the row's
    `overrides` under `GATE_KEY`, which names no parameter, so the table needs no column."""


GATE_KEY = "gate"
"""A job's gate in its row's `overrides`: the query's own name, which no kind's parameter takes."""


def new_job_id() -> str:
    """A random, unguessable job id (128 bits, URL-safe).

    >>> len(new_job_id())
    22
    """
    return secrets.token_urlsafe(16)


class JobStore:
    """Job rows in the database `engine` reaches and their files under `folder`; safe to call
    from any thread.

    >>> import tempfile
    >>> store = JobStore.open(Path(tempfile.mkdtemp()))
    >>> store.get("nothing") is None
    True
    >>> store.close()
    """

    def __init__(self, folder: Path, engine: Engine, claim: DirectoryClaim) -> None:
        self.folder = folder
        self.uploads = folder / UPLOADS
        self.results = folder / RESULTS
        self.engine = engine
        self._claim = claim
        self._shared = engine.dialect.name == "postgresql"
        """Whether replicas on other hosts may share the store (then the directory's lock is
        not trusted to say that none is running)."""
        self.on_webhook: Callable[[], None] | None = None
        """Called after a transaction that put a webhook in the outbox commits (the server
        wakes its senders: the webhook goes now, not at their next look)."""

    @classmethod
    def open(cls, folder: Path, engine: Engine | None = None, migrate: bool = True) -> JobStore:
        """Open (or create) the store: its files in `folder`, its rows in `engine`'s database
        (by default the SQLite file in `folder`), its schema brought up to date unless
        `migrate` is False (then an older one is refused). `StoreUnusable` names the database
        and what to do when it cannot be used (a damaged file, a folder that cannot be
        written, a database that cannot be reached or whose schema is older)."""
        where = str(folder / DATABASE) if engine is None else redacted(engine.url)
        sqlite = engine is None or engine.dialect.name == "sqlite"
        try:
            for path in (folder, folder / UPLOADS, folder / RESULTS):
                path.mkdir(parents=True, exist_ok=True)
            if engine is None:
                engine = open_engine(URL.create("sqlite", database=str(folder / DATABASE)))
            _check(engine)
            if migrate:
                upgrade(engine)
            elif not up_to_date(engine):
                raise SchemaBehind("its schema is older than this release's")
        except SchemaBehind as error:
            assert engine is not None
            engine.dispose()
            raise StoreUnusable(where, error, advice=UPGRADE) from None
        except (SQLAlchemyError, sqlite3.Error, OSError) as error:
            if engine is not None:
                engine.dispose()
            raise StoreUnusable(where, error, advice=DAMAGED if sqlite else UNREACHABLE) from error
        return cls(folder, engine, DirectoryClaim.hold(folder))

    def upload_path(self, job_id: str) -> Path:
        return self.uploads / f"{job_id}.upload"

    def result_path(self, job_id: str) -> Path:
        return self.results / f"{job_id}.json"

    def scores_path(self, job_id: str) -> Path:
        """The job's kept scores (`arengine/jobs/scores.py`): its checkpoint, then what new
        post-processing parameters are applied to."""
        return self.results / f"{job_id}.scores"

    def add(self, record: JobRecord, limit: int) -> bool:
        """Commit a queued job unless `limit` jobs are queued or running already (False)."""
        with self._write() as connection:
            if self._shared:  # the count and the insert as one step, whichever replica adds
                connection.execute(select(func.pg_advisory_xact_lock(_ADD_LOCK)))
            if _active(connection) >= limit:
                return False
            connection.execute(
                insert(jobs).values(
                    id=record.id,
                    owner=record.owner,
                    model=record.model,
                    overrides=json.dumps(_stored_overrides(record)),
                    stream=record.stream,
                    filename=record.filename,
                    state=record.state.value,
                    done_s=record.done_s,
                    duration_s=record.duration_s,
                    created=record.created,
                )
            )
        return True

    def active(self) -> int:
        """Jobs queued or running."""
        with self._read() as connection:
            return _active(connection)

    def get(self, job_id: str) -> JobRecord | None:
        with self._read() as connection:
            row = connection.execute(select(*_READ).where(jobs.c.id == job_id)).first()
        return None if row is None else _record(row)

    def owned_by(self, owner: str | None) -> list[JobRecord]:
        """`owner`'s jobs, oldest first (with keys off, owner None: every job)."""
        query = (
            select(*_READ)
            .where(jobs.c.owner.is_not_distinct_from(owner))
            .order_by(jobs.c.created, jobs.c.id)
        )
        with self._read() as connection:
            return [_record(row) for row in connection.execute(query)]

    def claim_next(self, runner: str = "") -> JobRecord | None:
        """The oldest queued job, now marked running by `runner` (a replica's name); None when
        none is queued (or every queued one is being claimed by another replica right now)."""
        query = (
            select(*_READ)
            .where(jobs.c.state == JobState.QUEUED.value)
            .order_by(jobs.c.created, jobs.c.id)
            .limit(1)
            .with_for_update(skip_locked=True)  # PostgreSQL's; SQLite has one writer anyway
        )
        with self._write() as connection:
            row = connection.execute(query).first()
            if row is None:
                return None
            connection.execute(
                update(jobs)
                .where(jobs.c.id == row.id)
                .values(state=JobState.RUNNING.value, runner=runner, heartbeat=time.time())
            )
        return replace(_record(row), state=JobState.RUNNING)

    def progress(
        self, job_id: str, done_s: float, duration_s: float | None, runner: str = ""
    ) -> bool:
        """Record a running job's progress (and that `runner` is alive: its lease renewed);
        False when the job is no longer `runner`'s to run (removed, through any replica, or
        taken over after `runner` fell silent)."""
        with self._write() as connection:
            done = connection.execute(
                update(jobs)
                .where(_runs(job_id, runner))
                .values(done_s=done_s, duration_s=duration_s, heartbeat=time.time())
            )
            return done.rowcount == 1

    def take_over(self, silent_since: float) -> list[str]:
        """Queue again the running jobs whose runner has not reported since `silent_since`
        (Unix time): another replica sharing this store stopped. Returns their ids."""
        with self._write() as connection:
            rows = connection.execute(
                update(jobs)
                .where(jobs.c.state == JobState.RUNNING.value, jobs.c.heartbeat < silent_since)
                .values(state=JobState.QUEUED.value, runner=None)
                .returning(jobs.c.id)
            )
            return [str(row.id) for row in rows]

    def finish(
        self,
        job_id: str,
        *,
        error: JobError | None = None,
        result: str | None = None,
        duration_s: float | None = None,
        runner: str = "",
        finished: float | None = None,
    ) -> bool:
        """Mark a running job done (with its result file's name and the recording's duration)
        or failed (with `error`), `finished` then (Unix time; default now); False if it is no
        longer running (removed meanwhile). Its webhook, if it has one, is committed with it."""
        if (error is None) == (result is None):
            raise ValueError("a job finishes with either a result or an error")
        state = JobState.DONE if error is None else JobState.FAILED
        with self._write() as connection:
            ended = connection.execute(
                update(jobs)
                .where(_runs(job_id, runner))
                .values(
                    state=state.value,
                    error_code=None if error is None else error.code,
                    error_message=None if error is None else error.message,
                    finished=time.time() if finished is None else finished,
                    result=result,
                    duration_s=func.coalesce(duration_s, jobs.c.duration_s),
                    done_s=func.coalesce(duration_s, jobs.c.done_s),
                )
                .returning(*_READ)
            ).first()
            queued = ended is not None and _webhook(connection, _record(ended))
        if queued:
            self._webhook_queued()
        return ended is not None

    def remove(self, job_id: str) -> None:
        """Cancel and delete a job. One queued or running is marked `cancelled` first (its
        webhook committed with it), so that a crash midway leaves a row `recover` finishes
        removing; then its files, then the row. The replica running it sees at its next
        progress report that the job is no longer its own, and stops. One that has ended keeps
        its state to the end (a client polling it never reads a done job as cancelled): its
        row goes first, then its files (a crash between leaves files no row names, for the
        sweep)."""
        active = (JobState.QUEUED.value, JobState.RUNNING.value)
        with self._write() as connection:
            cancelled = connection.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.state.in_(active))
                .values(state=JobState.CANCELLED.value)
                .returning(*_READ)
            ).first()
            queued = cancelled is not None and _webhook(connection, _record(cancelled))
            if cancelled is None:
                connection.execute(delete(jobs).where(jobs.c.id == job_id))
        if queued:
            self._webhook_queued()
        self._delete(job_id)

    def _webhook_queued(self) -> None:
        if self.on_webhook is not None:
            self.on_webhook()

    def counts(self) -> dict[str, int]:
        """How many jobs are in each state (by its name), every state included."""
        with self._read() as connection:
            rows = connection.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            found = {str(state): int(count) for state, count in rows}
        return {state.value: found.get(state.value, 0) for state in JobState}

    def oldest_active(self) -> float | None:
        """When the oldest job queued or running was accepted (Unix time); None if none is."""
        query = select(func.min(jobs.c.created)).where(
            jobs.c.state.in_((JobState.QUEUED.value, JobState.RUNNING.value))
        )
        with self._read() as connection:
            oldest = connection.execute(query).scalar()
        return None if oldest is None else float(oldest)

    def mark_read(self, job_id: str) -> None:
        """Note that the owner of ended job `job_id` has been given its outcome (the first time
        counts). A full disk leaves it unread: the side on which nothing is lost."""
        try:
            with self._write() as connection:
                connection.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id, jobs.c.read.is_(None))
                    .values(read=time.time())
                )
        except SQLAlchemyError as error:
            if not storage_full(error):
                raise

    def expire(self, ended_before: float, max_bytes: int) -> list[str]:
        """Remove the ended jobs (done, failed) that ended before `ended_before` (Unix time),
        then, while the store's files hold more than `max_bytes`, the ended ones already read
        that ended first: a job nobody has read stays until its retention time. Returns the
        ids removed."""
        query = (
            select(jobs.c.id, jobs.c.finished, jobs.c.read)
            .where(jobs.c.state.in_((JobState.DONE.value, JobState.FAILED.value)))
            .order_by(jobs.c.finished, jobs.c.id)
        )
        with self._read() as connection:
            ended = connection.execute(query).all()
        total = self.size()
        removed: list[str] = []
        for job_id, finished, read in ended:
            past = float(finished or 0) < ended_before
            if past or (total > max_bytes and read is not None):
                total -= self._files_size(str(job_id))
                self.remove(str(job_id))
                removed.append(str(job_id))
        return removed

    def size(self) -> int:
        """Bytes of every file in the store's folders (not the database)."""
        total = 0
        for folder in (self.uploads, self.results):
            for path in folder.iterdir():
                try:
                    total += path.stat().st_size
                except OSError:  # removed meanwhile
                    continue
        return total

    def _files_size(self, job_id: str) -> int:
        paths = (self.upload_path(job_id), self.result_path(job_id), self.scores_path(job_id))
        return sum(path.stat().st_size for path in paths if path.exists())

    def recover(self, runner: str = "") -> list[str]:
        """At start-up of replica `runner`: the jobs it left running when it stopped are queued
        again (they go on from their kept scores), removals left half done are finished, and
        files no row names are deleted (at once when no other server holds the directory, else
        once older than `SWEEP_GRACE_S`). Returns the ids queued again."""
        # Those this replica ran before it stopped, and those no replica claims (a store of
        # an earlier version); another replica's are taken over once it falls silent.
        mine = (jobs.c.state == JobState.RUNNING.value) & (
            jobs.c.runner.is_not_distinct_from(runner) | jobs.c.runner.is_(None)
        )
        with self._write() as connection:
            rows = connection.execute(
                update(jobs)
                .where(mine)
                .values(state=JobState.QUEUED.value, done_s=0, runner=None)
                .returning(jobs.c.id)
            )
            running = [str(row.id) for row in rows]
        for job_id in self.in_state(JobState.CANCELLED):
            self._delete(job_id)
        for job in self.in_state(JobState.DONE):
            # A done job no longer needs its upload; a crash may have come before it was removed.
            self.upload_path(job).unlink(missing_ok=True)
        if self._shared or self._claim.alone(self._sweep) is None:
            self.sweep(older_than=time.time() - SWEEP_GRACE_S)
        return running

    def in_state(self, state: JobState) -> list[str]:
        """The ids of every job in `state`, whoever owns it."""
        with self._read() as connection:
            rows = connection.execute(select(jobs.c.id).where(jobs.c.state == state.value))
            return [str(row.id) for row in rows]

    def close(self) -> None:
        self.engine.dispose()
        self._claim.close()

    def _write(self) -> AbstractContextManager[Connection]:
        return writing(self.engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return reading(self.engine)

    def _delete(self, job_id: str) -> None:
        self.upload_path(job_id).unlink(missing_ok=True)
        self.result_path(job_id).unlink(missing_ok=True)
        self.scores_path(job_id).unlink(missing_ok=True)
        with self._write() as connection:
            connection.execute(delete(jobs).where(jobs.c.id == job_id))

    def _sweep(self) -> None:
        self.sweep(older_than=None)

    def sweep(self, older_than: float | None) -> None:
        """Delete what no row names (temporary spool files, files renamed in just before a
        crash that came ahead of their row's commit), only those last changed before
        `older_than` (Unix time) unless it is None."""
        with self._read() as connection:
            known = {str(row.id) for row in connection.execute(select(jobs.c.id))}
        for folder in (self.uploads, self.results):
            for path in folder.iterdir():
                named = path.name.split(".", 1)[0] in known and path.suffix in (
                    ".upload",
                    ".json",
                    ".scores",
                )
                if named or (older_than is not None and _changed(path) >= older_than):
                    continue
                path.unlink(missing_ok=True)


class StoreUnusable(RuntimeError):
    """The job store cannot be opened: the message names its database (a SQLite file, or a URL
    without its password) and what to do."""

    def __init__(self, where: str, error: BaseException, advice: str = "") -> None:
        reason = getattr(error, "strerror", None) or _reason(error)
        super().__init__(f"the job store {where} cannot be opened ({reason}): {advice or DAMAGED}")


class SchemaBehind(RuntimeError):
    """The database's schema is older than this release's and migrating at start is off."""


DAMAGED = (
    "if it is damaged, move it aside with its -wal and -shm files (its jobs are lost) or "
    "restore it from a backup, then start again; or start with another --data-dir"
)
UNREACHABLE = "check that the database is up and reachable, and its user and password"
UPGRADE = "run `arengine db upgrade` (or start without --no-database-migrate)"


def _reason(error: BaseException) -> str:
    """The driver's message, not SQLAlchemy's statement and link."""
    return str(getattr(error, "orig", None) or error).strip().split("\n")[0]


def _check(engine: Engine) -> None:
    """Connect once: a database that cannot be reached, or a SQLite file that opens but whose
    pages are damaged, fails here, not at its first job."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            problems = [row[0] for row in connection.exec_driver_sql("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError(f"damaged: {'; '.join(problems[:3])}")
        else:
            connection.exec_driver_sql("SELECT 1")


def _active(connection: Connection) -> int:
    query = select(func.count()).where(
        jobs.c.state.in_((JobState.QUEUED.value, JobState.RUNNING.value))
    )
    return int(connection.execute(query).scalar_one())


def _runs(job_id: str, runner: str) -> Any:
    """The row of job `job_id` while `runner` runs it."""
    return (
        (jobs.c.id == job_id)
        & (jobs.c.state == JobState.RUNNING.value)
        & jobs.c.runner.is_not_distinct_from(runner)
    )


def _changed(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile
        return float("inf")


def _webhook(connection: Connection, record: JobRecord) -> bool:
    """Job `record` has just ended (done, failed or cancelled): its callback, if it has one,
    becomes a webhook in the outbox (`arengine/jobs/outbox.py`), in the same transaction;
    whether it had one."""
    subscription = connection.execute(
        select(webhook_subscriptions.c.url).where(webhook_subscriptions.c.job_id == record.id)
    ).first()
    if subscription is None:
        return False
    now = time.time()
    body = {
        "type": f"job.{record.state.value}",
        "id": record.id,
        "state": record.state.value,
        "model": record.model,
        "error": None
        if record.error is None
        else {"code": record.error.code, "message": record.error.message},
        "created": _iso(record.created),
        "finished": _iso(record.finished if record.finished is not None else now),
    }
    connection.execute(
        insert(webhook_outbox).values(
            id=f"msg_{secrets.token_hex(16)}",
            job_id=record.id,
            url=subscription.url,
            body=json.dumps(body, separators=(",", ":")),
            created=now,
            next_at=now,
        )
    )
    connection.execute(
        delete(webhook_subscriptions).where(webhook_subscriptions.c.job_id == record.id)
    )
    return True


def _iso(unix: float) -> str:
    """`2026-11-26T10:00:00.250+00:00`: UTC with milliseconds, as the webhooks have always had.

    >>> _iso(0.25)
    '1970-01-01T00:00:00.250+00:00'
    """
    moment = datetime.fromtimestamp(unix, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+00:00"


def storage_full(error: BaseException) -> bool:
    """Whether `error` says the data directory's disk (or the user's quota) is full: an OSError
    of the file writes, SQLite's SQLITE_FULL of the database's (PostgreSQL's disk_full).

    >>> storage_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    """
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    driver = getattr(error, "orig", None) or error  # SQLAlchemy wraps the driver's error
    if getattr(driver, "sqlstate", None) == DISK_FULL:
        return True
    return getattr(driver, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


DISK_FULL = "53100"
"""PostgreSQL's SQLSTATE of a full disk (disk_full)."""


def write_durably(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the whole file or none: a temporary
    name, fsync, rename, fsync of the folder."""
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    commit_file(temporary, path)


def commit_file(source: Path, target: Path) -> None:
    """Make the complete file `source` durable as `target`: fsync it, rename, fsync the folder."""
    fd = os.open(source, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(source, target)
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _stored_overrides(record: JobRecord) -> dict[str, float | str]:
    """What a job's row keeps in `overrides`: its parameters, and its gate under `GATE_KEY`."""
    gate = {} if record.gate is None else {GATE_KEY: record.gate}
    return {**record.overrides, **gate}


def _record(row: Sequence[Any]) -> JobRecord:
    (job_id, owner, model, overrides, stream, filename, state, done_s, duration_s) = row[:9]
    (error_code, error_message, created, finished, result, read) = row[9:]
    parameters = json.loads(str(overrides))
    gate = parameters.pop(GATE_KEY, None)
    return JobRecord(
        id=str(job_id),
        owner=None if owner is None else str(owner),
        model=str(model),
        gate=None if gate is None else str(gate),
        overrides=MappingProxyType(parameters),
        stream=None if stream is None else int(str(stream)),
        filename=None if filename is None else str(filename),
        state=JobState(str(state)),
        done_s=float(str(done_s)),
        duration_s=None if duration_s is None else float(str(duration_s)),
        error=None if error_code is None else JobError(str(error_code), str(error_message)),
        created=float(str(created)),
        finished=None if finished is None else float(str(finished)),
        result=None if result is None else str(result),
        read=None if read is None else float(str(read)),
    )

"""The job store: one SQLite database (WAL) in the data directory, uploads and results as files
beside it.

A job is acknowledged only once its upload is on disk (written, fsynced, renamed into
`uploads/`) and its row committed; a result is renamed into `results/` before its row says
`done`. Whatever a crash leaves between those steps (a file with no row, a row marked
`cancelled`) is removed by `recover` at the next start, once no other server shares the data
directory: each holds a shared lock on it (`arengine.system.claims`), since another replica's
upload still arriving, or renamed in just before its row is committed, has no row yet either.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from arengine.system.claims import DirectoryClaim

log = logging.getLogger(__name__)

DATABASE = "jobs.sqlite3"
UPLOADS = "uploads"
RESULTS = "results"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    owner TEXT,
    model TEXT NOT NULL,
    overrides TEXT NOT NULL,
    stream INTEGER,
    filename TEXT,
    state TEXT NOT NULL,
    done_s REAL NOT NULL DEFAULT 0,
    duration_s REAL,
    error_code TEXT,
    error_message TEXT,
    created REAL NOT NULL,
    finished REAL,
    result TEXT,
    runner TEXT,
    heartbeat REAL,
    read REAL
)
"""
_ADDED_COLUMNS = {"runner": "TEXT", "heartbeat": "REAL", "read": "REAL"}
"""Columns a store made by an earlier version lacks: added when it is opened."""
_COLUMNS = (
    "id, owner, model, overrides, stream, filename, state, done_s, duration_s, "
    "error_code, error_message, created, finished, result"
)
_READ = f"{_COLUMNS}, read"
"""What a record is read from: the columns a new job is written with, and when it was read."""


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


def new_job_id() -> str:
    """A random, unguessable job id (128 bits, URL-safe).

    >>> len(new_job_id())
    22
    """
    return secrets.token_urlsafe(16)


class JobStore:
    """Job rows and their files under one data directory; safe to call from any thread.

    >>> import tempfile
    >>> store = JobStore.open(Path(tempfile.mkdtemp()))
    >>> store.get("nothing") is None
    True
    """

    def __init__(self, folder: Path, connection: sqlite3.Connection, claim: DirectoryClaim) -> None:
        self.folder = folder
        self.uploads = folder / UPLOADS
        self.results = folder / RESULTS
        self._db = connection
        self._claim = claim
        self._lock = threading.Lock()

    @classmethod
    def open(cls, folder: Path) -> JobStore:
        """Open (or create) the store in `folder`; `StoreUnusable` names the file and what to
        do when it cannot be (a damaged database, a folder that cannot be written)."""
        try:
            for path in (folder, folder / UPLOADS, folder / RESULTS):
                path.mkdir(parents=True, exist_ok=True)
            connection = _connect(folder / DATABASE)
        except (sqlite3.Error, OSError) as error:
            raise StoreUnusable(folder / DATABASE, error) from error
        return cls(folder, connection, DirectoryClaim.hold(folder))

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
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            if self._active() >= limit:
                return False
            self._db.execute(
                f"INSERT INTO jobs ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.id,
                    record.owner,
                    record.model,
                    json.dumps(dict(record.overrides)),
                    record.stream,
                    record.filename,
                    record.state.value,
                    record.done_s,
                    record.duration_s,
                    None,
                    None,
                    record.created,
                    None,
                    None,
                ),
            )
        return True

    def active(self) -> int:
        """Jobs queued or running."""
        with self._lock:
            return self._active()

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_READ} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def owned_by(self, owner: str | None) -> list[JobRecord]:
        """`owner`'s jobs, oldest first (with keys off, owner None: every job)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_READ} FROM jobs WHERE owner IS ? ORDER BY created, rowid", (owner,)
            ).fetchall()
        return [_record(row) for row in rows]

    def claim_next(self, runner: str = "") -> JobRecord | None:
        """The oldest queued job, now marked running by `runner` (a replica's name); None when
        none is queued."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                f"SELECT {_READ} FROM jobs WHERE state = ? ORDER BY created, rowid LIMIT 1",
                (JobState.QUEUED.value,),
            ).fetchone()
            if row is None:
                return None
            self._db.execute(
                "UPDATE jobs SET state = ?, runner = ?, heartbeat = ? WHERE id = ?",
                (JobState.RUNNING.value, runner, time.time(), row[0]),
            )
        return replace(_record(row), state=JobState.RUNNING)

    def progress(
        self, job_id: str, done_s: float, duration_s: float | None, runner: str = ""
    ) -> bool:
        """Record a running job's progress (and that `runner` is alive); False when the job is
        no longer `runner`'s to run (removed, or taken over after `runner` fell silent)."""
        with self._lock, self._db:
            cursor = self._db.execute(
                "UPDATE jobs SET done_s = ?, duration_s = ?, heartbeat = ? "
                "WHERE id = ? AND state = ? AND runner IS ?",
                (done_s, duration_s, time.time(), job_id, JobState.RUNNING.value, runner),
            )
            return cursor.rowcount == 1

    def take_over(self, silent_since: float) -> list[str]:
        """Queue again the running jobs whose runner has not reported since `silent_since`
        (Unix time): another replica sharing this store stopped. Returns their ids."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            stale = [
                str(row[0])
                for row in self._db.execute(
                    "SELECT id FROM jobs WHERE state = ? AND heartbeat < ?",
                    (JobState.RUNNING.value, silent_since),
                )
            ]
            self._db.executemany(
                "UPDATE jobs SET state = ?, runner = NULL WHERE id = ? AND state = ?",
                [(JobState.QUEUED.value, job_id, JobState.RUNNING.value) for job_id in stale],
            )
        return stale

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
        longer running (removed meanwhile)."""
        if (error is None) == (result is None):
            raise ValueError("a job finishes with either a result or an error")
        state = JobState.DONE if error is None else JobState.FAILED
        with self._lock, self._db:
            cursor = self._db.execute(
                "UPDATE jobs SET state = ?, error_code = ?, error_message = ?, finished = ?, "
                "result = ?, duration_s = COALESCE(?, duration_s), done_s = COALESCE(?, done_s) "
                "WHERE id = ? AND state = ? AND runner IS ?",
                (
                    state.value,
                    None if error is None else error.code,
                    None if error is None else error.message,
                    time.time() if finished is None else finished,
                    result,
                    duration_s,
                    duration_s,
                    job_id,
                    JobState.RUNNING.value,
                    runner,
                ),
            )
            return cursor.rowcount == 1

    def remove(self, job_id: str) -> None:
        """Cancel and delete a job: marked `cancelled` first, so that a crash midway leaves a
        row `recover` finishes removing; then its files, then the row."""
        with self._lock, self._db:
            self._db.execute(
                "UPDATE jobs SET state = ? WHERE id = ?", (JobState.CANCELLED.value, job_id)
            )
        self._delete(job_id)

    def counts(self) -> dict[str, int]:
        """How many jobs are in each state (by its name), every state included."""
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        found = {str(state): int(count) for state, count in rows}
        return {state.value: found.get(state.value, 0) for state in JobState}

    def oldest_active(self) -> float | None:
        """When the oldest job queued or running was accepted (Unix time); None if none is."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(created) FROM jobs WHERE state IN (?, ?)",
                (JobState.QUEUED.value, JobState.RUNNING.value),
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def mark_read(self, job_id: str) -> None:
        """Note that the owner of ended job `job_id` has been given its outcome (the first time
        counts). A full disk leaves it unread: the side on which nothing is lost."""
        try:
            with self._lock, self._db:
                self._db.execute(
                    "UPDATE jobs SET read = ? WHERE id = ? AND read IS NULL", (time.time(), job_id)
                )
        except sqlite3.OperationalError as error:
            if not storage_full(error):
                raise

    def expire(self, ended_before: float, max_bytes: int) -> list[str]:
        """Remove the ended jobs (done, failed) that ended before `ended_before` (Unix time),
        then, while the store's files hold more than `max_bytes`, the ended ones already read
        that ended first: a job nobody has read stays until its retention time. Returns the
        ids removed."""
        with self._lock:
            ended = self._db.execute(
                "SELECT id, finished, read FROM jobs WHERE state IN (?, ?) "
                "ORDER BY finished, rowid",
                (JobState.DONE.value, JobState.FAILED.value),
            ).fetchall()
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
        files no row names are deleted. Returns the ids queued again."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            # Those this replica ran before it stopped, and those no replica claims (a store of
            # an earlier version); another replica's are taken over once it falls silent.
            mine = "state = ? AND (runner IS ? OR runner IS NULL)"
            running = [
                row[0]
                for row in self._db.execute(
                    f"SELECT id FROM jobs WHERE {mine}", (JobState.RUNNING.value, runner)
                )
            ]
            self._db.execute(
                f"UPDATE jobs SET state = ?, done_s = 0, runner = NULL WHERE {mine}",
                (JobState.QUEUED.value, JobState.RUNNING.value, runner),
            )
            cancelled = [
                row[0]
                for row in self._db.execute(
                    "SELECT id FROM jobs WHERE state = ?", (JobState.CANCELLED.value,)
                )
            ]
        for job_id in cancelled:
            self._delete(job_id)
        for job in self.in_state(JobState.DONE):
            # A done job no longer needs its upload; a crash may have come before it was removed.
            self.upload_path(job).unlink(missing_ok=True)
        if self._claim.alone(self._sweep) is None:
            log.info("data directory %s is in use by another server: not swept", self.folder)
        return running

    def in_state(self, state: JobState) -> list[str]:
        """The ids of every job in `state`, whoever owns it."""
        with self._lock:
            rows = self._db.execute("SELECT id FROM jobs WHERE state = ?", (state.value,))
            return [str(row[0]) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
        self._claim.close()

    def _active(self) -> int:
        row = self._db.execute(
            "SELECT COUNT(*) FROM jobs WHERE state IN (?, ?)",
            (JobState.QUEUED.value, JobState.RUNNING.value),
        ).fetchone()
        return int(row[0])

    def _delete(self, job_id: str) -> None:
        self.upload_path(job_id).unlink(missing_ok=True)
        self.result_path(job_id).unlink(missing_ok=True)
        self.scores_path(job_id).unlink(missing_ok=True)
        with self._lock, self._db:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def _sweep(self) -> None:
        """Delete what no row names: temporary spool files, and files renamed in just before a
        crash that came ahead of their row's commit."""
        with self._lock:
            known = {row[0] for row in self._db.execute("SELECT id FROM jobs")}
        for folder in (self.uploads, self.results):
            for path in folder.iterdir():
                if path.name.split(".", 1)[0] not in known or path.suffix not in (
                    ".upload",
                    ".json",
                    ".scores",
                ):
                    path.unlink(missing_ok=True)


class StoreUnusable(RuntimeError):
    """The job store cannot be opened: the message names its file and what to do."""

    def __init__(self, path: Path, error: BaseException) -> None:
        reason = getattr(error, "strerror", None) or str(error)
        super().__init__(
            f"the job store {path} cannot be opened ({reason}): if it is damaged, move it "
            f"aside with its -wal and -shm files (its jobs are lost) or restore it from a "
            f"backup, then start again; or start with another --data-dir"
        )


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed job survives a power cut too, not only a killed process.
        connection.execute("PRAGMA synchronous=FULL")
        # A file that opens but whose pages are damaged fails here, not at its first job.
        problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"damaged: {'; '.join(problems[:3])}")
        connection.execute(_SCHEMA)
        present = {row[1] for row in connection.execute("PRAGMA table_info(jobs)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in present:
                connection.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")
    except BaseException:
        connection.close()
        raise
    return connection


def storage_full(error: BaseException) -> bool:
    """Whether `error` says the data directory's disk (or the user's quota) is full: an OSError
    of the file writes, SQLite's SQLITE_FULL of the database's.

    >>> storage_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    """
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


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


def _record(row: tuple[object, ...]) -> JobRecord:
    (job_id, owner, model, overrides, stream, filename, state, done_s, duration_s) = row[:9]
    (error_code, error_message, created, finished, result, read) = row[9:]
    return JobRecord(
        id=str(job_id),
        owner=None if owner is None else str(owner),
        model=str(model),
        overrides=MappingProxyType(json.loads(str(overrides))),
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

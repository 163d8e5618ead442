"""The webhook outbox: tables in the job store's SQLite database, so that a job's end and its
webhook are committed together and a restart (or `kill -9`) loses no delivery.

A job with a callback has a row in `webhook_subscriptions`, committed before the job's own row (a
crash between leaves a subscription no job names, removed later). A trigger on `jobs` turns the
job's end (queued or running to done, failed or cancelled) into a row of `webhook_outbox` in the
very transaction that ends the job, whichever code ends it.

An attempt is marked in its row (counted, with the time of the next one) and committed before
it is sent: a crash during the attempt leaves it counted as failed, retried at that time, and
never sent again before the receiver answered or the attempt was given up.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from arengine.jobs.store import DATABASE, JobState

_ENDED = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
_ACTIVE = (JobState.QUEUED, JobState.RUNNING)


def _quoted(states: tuple[JobState, ...]) -> str:
    return ", ".join(f"'{state.value}'" for state in states)


_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""Unix time in SQLite, with milliseconds."""
_ISO = "strftime('%Y-%m-%dT%H:%M:%f+00:00', {}, 'unixepoch')"

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    job_id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    created REAL NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS webhook_outbox (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    url TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    sender TEXT,
    sending_since REAL
)""",
    f"""
CREATE TRIGGER IF NOT EXISTS webhook_on_job_end AFTER UPDATE OF state ON jobs
WHEN OLD.state IN ({_quoted(_ACTIVE)}) AND NEW.state IN ({_quoted(_ENDED)})
BEGIN
    INSERT INTO webhook_outbox (id, job_id, url, body, created, next_at)
    SELECT 'msg_' || lower(hex(randomblob(16))), s.job_id, s.url,
        json_object(
            'type', 'job.' || NEW.state,
            'id', NEW.id,
            'state', NEW.state,
            'model', NEW.model,
            'error', CASE WHEN NEW.error_code IS NULL THEN NULL
                ELSE json_object('code', NEW.error_code, 'message', NEW.error_message) END,
            'created', {_ISO.format("NEW.created")},
            'finished', {_ISO.format(f"COALESCE(NEW.finished, {_NOW})")}
        ),
        {_NOW}, {_NOW}
    FROM webhook_subscriptions AS s WHERE s.job_id = NEW.id;
    DELETE FROM webhook_subscriptions WHERE job_id = NEW.id;
END""",
)

ORPHAN_AFTER_S = 3600.0
"""A subscription no job names is removed once this old: the job's creation failed after it was
written, or a crash came between (another replica may be creating its job right now)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One attempt at one webhook: the `webhook-id` (the same for every attempt), the URL, the
    body, and which attempt this is (1 for the first)."""

    id: str
    job_id: str
    url: str
    body: bytes
    attempt: int
    claimed: float
    """When this attempt was marked (Unix time): it tells the attempt from a later one."""


class Outbox:
    """The outbox over the job store's database in `folder`; safe to call from any thread.

    >>> import tempfile
    >>> from arengine.jobs.store import JobStore
    >>> folder = Path(tempfile.mkdtemp())
    >>> JobStore.open(folder).close()
    >>> outbox = Outbox.open(folder)
    >>> outbox.depth(), outbox.oldest()
    (0, None)
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._lock = threading.Lock()

    @classmethod
    def open(cls, folder: Path) -> Outbox:
        """Open the outbox in the job store of `folder` (opened first: it made the database)."""
        connection = sqlite3.connect(
            folder / DATABASE, check_same_thread=False, isolation_level=None, timeout=30
        )
        connection.execute("PRAGMA synchronous=FULL")
        with connection:
            connection.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                connection.execute(statement)
        return cls(connection)

    def subscribe(self, job_id: str, url: str) -> None:
        """Commit `url` as the callback of job `job_id`, before the job itself is committed."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO webhook_subscriptions VALUES (?, ?, ?)",
                (job_id, url, time.time()),
            )

    def unsubscribe(self, job_id: str) -> None:
        """Forget the callback of a job that was not created after all."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM webhook_subscriptions WHERE job_id = ?", (job_id,))

    def recover(self, sender: str) -> int:
        """At start-up: the attempts `sender` had in flight when it stopped count as failed (they
        are retried at the time their attempt set), and old subscriptions no job names are
        removed. Returns how many attempts were in flight."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            cursor = self._db.execute(
                "UPDATE webhook_outbox SET sender = NULL, sending_since = NULL WHERE sender IS ?",
                (sender,),
            )
            self._db.execute(
                "DELETE FROM webhook_subscriptions WHERE created < ? "
                "AND job_id NOT IN (SELECT id FROM jobs)",
                (time.time() - ORPHAN_AFTER_S,),
            )
            return cursor.rowcount

    def claim(
        self, sender: str, now: float, retry_in: Callable[[int], float], stale_s: float
    ) -> Delivery | None:
        """The webhook due first, its attempt counted and marked as `sender`'s before it is sent
        (a failure or a crash then retries it `retry_in(attempt)` seconds from `now`); None when
        none is due. An attempt marked over `stale_s` ago (its replica stopped) counts as failed."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "SELECT id, job_id, url, body, attempts FROM webhook_outbox "
                "WHERE next_at <= ? AND (sending_since IS NULL OR sending_since < ?) "
                "ORDER BY next_at LIMIT 1",
                (now, now - stale_s),
            ).fetchone()
            if row is None:
                return None
            attempt = int(row[4]) + 1
            self._db.execute(
                "UPDATE webhook_outbox SET attempts = ?, next_at = ?, sender = ?, "
                "sending_since = ? WHERE id = ?",
                (attempt, now + retry_in(attempt), sender, now, row[0]),
            )
        return Delivery(str(row[0]), str(row[1]), str(row[2]), str(row[3]).encode(), attempt, now)

    def release(self, delivery: Delivery) -> None:
        """The attempt failed: the webhook waits for the time its attempt set (unless a later
        attempt has begun meanwhile, after this one was counted as cut off)."""
        with self._lock, self._db:
            self._db.execute(
                "UPDATE webhook_outbox SET sender = NULL, sending_since = NULL "
                "WHERE id = ? AND sending_since = ?",
                (delivery.id, delivery.claimed),
            )

    def remove(self, delivery_id: str) -> None:
        """Delivered, or given up."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM webhook_outbox WHERE id = ?", (delivery_id,))

    def depth(self) -> int:
        """Webhooks not yet delivered nor given up."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM webhook_outbox").fetchone()[0])

    def oldest(self) -> float | None:
        """When the oldest webhook waiting was made (its job's end, Unix time)."""
        with self._lock:
            row = self._db.execute("SELECT MIN(created) FROM webhook_outbox").fetchone()
        return None if row[0] is None else float(row[0])

    def next_due(self) -> float | None:
        """When the next webhook not in flight is due (Unix time)."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(next_at) FROM webhook_outbox WHERE sending_since IS NULL"
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

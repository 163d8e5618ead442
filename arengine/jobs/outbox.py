"""The webhook outbox: tables in the job store's database, so that a job's end and its webhook
are committed together and a restart (or `kill -9`) loses no delivery, on whichever replica.

A job with a callback has a row in `webhook_subscriptions`, committed before the job's own row (a
crash between leaves a subscription no job names, removed later). The store turns the job's end
(queued or running to done, failed or cancelled) into a row of `webhook_outbox` in the very
transaction that ends the job (`arengine.jobs.store`), on every backend.

An attempt is marked in its row (counted, with the time of the next one) and committed before
it is sent: a crash during the attempt leaves it counted as failed, retried at that time, and
never sent again before the receiver answered or the attempt was given up. Replicas sending at
once each lock the row they take (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, and_, delete, func, insert, or_, select, update
from sqlalchemy.engine import URL

from arengine.db.engine import open_engine, reading, writing
from arengine.db.migrate import upgrade
from arengine.db.schema import jobs, webhook_outbox, webhook_subscriptions
from arengine.jobs.store import DATABASE

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
    """The outbox in the job store's database `engine`; safe to call from any thread.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> outbox = Outbox.open(folder)
    >>> outbox.depth(), outbox.oldest()
    (0, None)
    >>> outbox.close()
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, folder: Path) -> Outbox:
        """The outbox in the SQLite job store of `folder` (opened first: it made the database)."""
        engine = open_engine(URL.create("sqlite", database=str(folder / DATABASE)))
        upgrade(engine)
        return cls(engine)

    def subscribe(self, job_id: str, url: str) -> None:
        """Commit `url` as the callback of job `job_id`, before the job itself is committed."""
        with self._write() as connection:
            connection.execute(
                delete(webhook_subscriptions).where(webhook_subscriptions.c.job_id == job_id)
            )
            connection.execute(
                insert(webhook_subscriptions).values(job_id=job_id, url=url, created=time.time())
            )

    def unsubscribe(self, job_id: str) -> None:
        """Forget the callback of a job that was not created after all."""
        with self._write() as connection:
            connection.execute(
                delete(webhook_subscriptions).where(webhook_subscriptions.c.job_id == job_id)
            )

    def recover(self, sender: str) -> int:
        """At start-up: the attempts `sender` had in flight when it stopped count as failed (they
        are retried at the time their attempt set), and old subscriptions no job names are
        removed. Returns how many attempts were in flight."""
        with self._write() as connection:
            released = connection.execute(
                update(webhook_outbox)
                .where(webhook_outbox.c.sender.is_not_distinct_from(sender))
                .values(sender=None, sending_since=None)
            )
            connection.execute(
                delete(webhook_subscriptions).where(
                    webhook_subscriptions.c.created < time.time() - ORPHAN_AFTER_S,
                    webhook_subscriptions.c.job_id.not_in(select(jobs.c.id)),
                )
            )
            return released.rowcount

    def claim(
        self, sender: str, now: float, retry_in: Callable[[int], float], stale_s: float
    ) -> Delivery | None:
        """The webhook due first, its attempt counted and marked as `sender`'s before it is sent
        (a failure or a crash then retries it `retry_in(attempt)` seconds from `now`); None when
        none is due. An attempt marked over `stale_s` ago (its replica stopped) counts as failed."""
        box = webhook_outbox.c
        query = (
            select(box.id, box.job_id, box.url, box.body, box.attempts)
            .where(
                box.next_at <= now,
                or_(box.sending_since.is_(None), box.sending_since < now - stale_s),
            )
            .order_by(box.next_at)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        with self._write() as connection:
            row = connection.execute(query).first()
            if row is None:
                return None
            attempt = int(row.attempts) + 1
            connection.execute(
                update(webhook_outbox)
                .where(box.id == row.id)
                .values(
                    attempts=attempt,
                    next_at=now + retry_in(attempt),
                    sender=sender,
                    sending_since=now,
                )
            )
        body = str(row.body).encode()
        return Delivery(str(row.id), str(row.job_id), str(row.url), body, attempt, now)

    def release(self, delivery: Delivery) -> None:
        """The attempt failed: the webhook waits for the time its attempt set (unless a later
        attempt has begun meanwhile, after this one was counted as cut off)."""
        box = webhook_outbox.c
        with self._write() as connection:
            connection.execute(
                update(webhook_outbox)
                .where(and_(box.id == delivery.id, box.sending_since == delivery.claimed))
                .values(sender=None, sending_since=None)
            )

    def remove(self, delivery_id: str) -> None:
        """Delivered, or given up."""
        with self._write() as connection:
            connection.execute(delete(webhook_outbox).where(webhook_outbox.c.id == delivery_id))

    def depth(self) -> int:
        """Webhooks not yet delivered nor given up."""
        with self._read() as connection:
            count = connection.execute(select(func.count()).select_from(webhook_outbox))
            return int(count.scalar_one())

    def oldest(self) -> float | None:
        """When the oldest webhook waiting was made (its job's end, Unix time)."""
        with self._read() as connection:
            oldest = connection.execute(select(func.min(webhook_outbox.c.created))).scalar()
        return None if oldest is None else float(oldest)

    def next_due(self) -> float | None:
        """When the next webhook not in flight is due (Unix time)."""
        query = select(func.min(webhook_outbox.c.next_at)).where(
            webhook_outbox.c.sending_since.is_(None)
        )
        with self._read() as connection:
            due = connection.execute(query).scalar()
        return None if due is None else float(due)

    def close(self) -> None:
        self.engine.dispose()

    def _write(self) -> AbstractContextManager[Connection]:
        return writing(self.engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return reading(self.engine)

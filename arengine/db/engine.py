"""The one engine factory: SQLAlchemy Core over SQLite (the embedded default) or PostgreSQL
(psycopg 3), pooled, every connection set up as the job store has always needed.

SQLite: WAL, `synchronous=FULL` (a committed job survives a power cut, not only a killed
process) and a busy timeout on every connection; a write transaction begins `IMMEDIATE`, so two
writers queue on the lock instead of one failing when it upgrades a read (SQLite's single-writer
path). PostgreSQL: connections checked before use (a database restarted or failed over is
reconnected, not an error for the first request after it).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL

from arengine.db.url import is_postgresql

BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another's transaction before it fails."""
READ = {"arengine_read": True}
"""Execution options of a read-only unit of work: on SQLite it begins DEFERRED, beside writers."""


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """One write transaction (SQLite: `IMMEDIATE`), committed when the block ends without error."""
    with engine.begin() as connection:
        yield connection


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A read-only unit of work (`READ`), beside writers."""
    with engine.connect() as connection:
        yield connection.execution_options(**READ)


def open_engine(url: URL, pool_size: int = 5) -> Engine:
    """A pooled engine for `url` (`arengine.db.url.database_url`); nothing connects yet.

    >>> import tempfile
    >>> engine = open_engine(URL.create("sqlite", database=tempfile.mkdtemp() + "/a.sqlite3"))
    >>> with engine.connect() as c:
    ...     c.exec_driver_sql("PRAGMA journal_mode").scalar()
    'wal'
    """
    if is_postgresql(url):
        return create_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=True,
            pool_recycle=1800,
        )
    if url.database:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
    )
    event.listen(engine, "connect", _sqlite_connected)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connected(connection: sqlite3.Connection, record: Any) -> None:
    # The driver's own transaction handling off: `_sqlite_begin` says how each one begins.
    connection.isolation_level = None
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def _sqlite_begin(connection: Connection) -> None:
    read = connection.get_execution_options().get("arengine_read", False)
    connection.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")


def backend(engine: Engine) -> str:
    """`sqlite` or `postgresql`."""
    return engine.dialect.name


class PoolReading:
    """The pool of `engine` as the metrics read it (`arengine.system.metrics.PoolState`)."""

    def __init__(self, engine: Engine) -> None:
        self._pool = engine.pool

    def in_use(self) -> int:
        return int(getattr(self._pool, "checkedout", lambda: 0)())

    def idle(self) -> int:
        return int(getattr(self._pool, "checkedin", lambda: 0)())


def time_queries(engine: Engine, observe: Callable[[str, float], None]) -> None:
    """Call `observe(statement, seconds)` after each statement `engine` runs."""

    def before(connection: Connection, *args: Any) -> None:
        connection.info.setdefault("arengine_started", []).append(time.perf_counter())

    def after(connection: Connection, cursor: Any, statement: str, *args: Any) -> None:
        started = connection.info.get("arengine_started")
        if started:
            observe(statement, time.perf_counter() - started.pop())

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)

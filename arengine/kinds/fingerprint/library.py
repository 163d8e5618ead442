"""A fingerprint model's reference library: one SQLite file (WAL) of references and their hashes.

`references_` (`references` is an SQL keyword) holds each recording's id, title, duration and
the user's metadata (JSON); `hashes` holds its landmark hashes with the reference's id and the
anchor's frame, indexed by hash with the other two columns in the index (a lookup reads only the
index, never the table: 2.4x faster against 1,000 references; a library made before keeps its
narrower index and works, slower). Offsets are whole frame numbers (SQLite integers, 64-bit), so
they never wrap on a long reference.

An add or a remove is one transaction: a crash or `kill -9` mid-add leaves the library as it was
before, and an acknowledged add is committed (`synchronous=FULL`). Readers go on while a reference
is added (WAL). SQLite connections are not shared across threads: each thread opens its own
(`Library.connection`) and reads the file as it is now: every lookup queries it, so servers
(other processes too) see an added or removed reference at their next segment, without a restart.

Example::

    library = Library.create(Path("models/jingles/library.sqlite"))
    ref = library.add("Station ident", 12.5, {"client": "acme"}, hashes)  # hashes: (n, 2) int64
    library.lookup(np.array([hash_a, hash_b]))  # rows of (hash, reference, offset)
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from arengine.settings import MAX_METADATA_DEPTH

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS references_ (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    duration_s REAL NOT NULL,
    first_s REAL NOT NULL,
    last_s REAL NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS hashes (
    hash INTEGER NOT NULL,
    reference INTEGER NOT NULL REFERENCES references_(id) ON DELETE CASCADE,
    offset INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS hashes_by_hash ON hashes (hash, reference, offset);
CREATE INDEX IF NOT EXISTS hashes_by_reference ON hashes (reference);
"""
LOOKUP_CHUNK = 900
"""Hashes per `IN (...)` query: under SQLite's default limit of bound parameters."""


@dataclass(frozen=True, slots=True)
class Reference:
    """One recording of the library."""

    id: int
    title: str
    duration_s: float
    metadata: dict[str, Any]
    first_s: float
    """Where its first landmark is: an occurrence matched from there on started at 0."""
    last_s: float
    """Where its last landmark is: an occurrence matched up to there plays to the end."""


class Library:
    """The library file at `path`; thread-safe: each thread uses its own connection."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"no reference library at {path}")
        self.path = path
        self._local = threading.local()

    @classmethod
    def create(cls, path: Path) -> Library:
        """The library at `path`, made empty when missing (an existing one is kept)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with closing(_connect(path)) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(SCHEMA)
        return cls(path)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = _connect(self.path)
            self._local.connection = connection
        return connection

    def add(
        self,
        title: str,
        duration_s: float,
        metadata: dict[str, Any],
        hashes: np.ndarray,
        span_s: tuple[float, float] | None = None,
    ) -> int:
        """Store a reference and its `(n, 2)` rows of (hash, offset) in one transaction; its id.
        `span_s`: where its first and last landmarks are (default: its start and end)."""
        connection = self.connection()
        with connection:  # one transaction: committed whole or rolled back
            cursor = connection.execute(
                "INSERT INTO references_ (title, duration_s, metadata, first_s, last_s) "
                "VALUES (?, ?, ?, ?, ?)",
                (title, float(duration_s), json.dumps(metadata), *(span_s or (0.0, duration_s))),
            )
            reference = int(cursor.lastrowid or 0)
            # In hash order: the index's pages are visited once each, in order, not at random
            # (about 10% less time into a 1,000-reference library; the commit's fsync of the
            # pages touched is most of an add there, BENCHMARKS.md).
            rows = hashes[np.lexsort((hashes[:, 1], hashes[:, 0]))].tolist()
            connection.executemany(
                "INSERT INTO hashes (hash, reference, offset) VALUES (?, ?, ?)",
                ((h, reference, t) for h, t in rows),
            )
        return reference

    def remove(self, reference: int) -> bool:
        """Delete a reference and its hashes; False when there was none with that id."""
        connection = self.connection()
        with connection:
            connection.execute("DELETE FROM hashes WHERE reference = ?", (reference,))
            deleted = connection.execute("DELETE FROM references_ WHERE id = ?", (reference,))
        return deleted.rowcount > 0

    def references(self) -> list[Reference]:
        """Every reference, by id."""
        rows = self.connection().execute(f"SELECT {COLUMNS} FROM references_ ORDER BY id")
        return [_reference(row) for row in rows]

    def reference(self, reference: int) -> Reference | None:
        """One reference as the library holds it now; None when there is none with that id."""
        query = f"SELECT {COLUMNS} FROM references_ WHERE id = ?"
        row = self.connection().execute(query, (reference,)).fetchone()
        return None if row is None else _reference(row)

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The stored `(m, 3)` int64 rows of (hash, reference, offset) for any of `hashes`."""
        unique = np.unique(hashes).tolist()
        rows: list[tuple[int, int, int]] = []
        connection = self.connection()
        for i in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[i : i + LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows += connection.execute(
                f"SELECT hash, reference, offset FROM hashes WHERE hash IN ({marks})", chunk
            ).fetchall()
        return np.array(rows, dtype=np.int64).reshape(-1, 3)


COLUMNS = "id, title, duration_s, metadata, first_s, last_s"


def metadata_depth(value: Any) -> int:
    """How deep `value` (parsed JSON) nests: 0 for a number or text, 1 for `{}` or `{"a": 1}`.

    Counted without recursion, so that no nesting can overflow the stack here.
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _stored_metadata(text: str, reference: int) -> dict[str, Any]:
    """The metadata as stored, or `{}` where it cannot be answered (stored before its depth
    was bounded): one reference's metadata must not make the library's listing fail."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict) and metadata_depth(value) <= MAX_METADATA_DEPTH:
        return value
    log.warning("reference %d: its metadata cannot be read back (%d characters); shown as {}",
                reference, len(text))  # fmt: skip
    return {}


def _reference(row: tuple[Any, ...]) -> Reference:
    id_, title, duration_s, metadata, first_s, last_s = row
    stored = _stored_metadata(metadata, int(id_))
    return Reference(int(id_), str(title), float(duration_s), stored, first_s, last_s)


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=30.0, isolation_level="DEFERRED")
    connection.execute("PRAGMA synchronous=FULL")  # an acknowledged add survives a power cut
    connection.execute("PRAGMA foreign_keys=ON")
    return connection

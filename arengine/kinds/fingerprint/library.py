"""A fingerprint model's reference library, over SQLAlchemy Core: its own SQLite file, or shared
tables in the server database (PostgreSQL) keyed by the model's name.

Where it lives follows `database_url`. With the embedded default (SQLite) each model keeps its
library in its folder, one SQLite file (WAL): `references_` (`references` is an SQL keyword)
holds each recording's id, title, duration and the user's metadata (JSON); `hashes` holds its
landmark hashes with the reference's id and the anchor's frame, indexed by hash with the other two
columns in the index (a lookup reads only the index, never the table: 2.4x faster against 1,000
references; a library made before keeps its narrower index and works, slower). With a
`postgresql://` URL every fingerprint model's references and hashes are in three shared tables
(`fingerprint_libraries` names each model's library, `fingerprint_references`,
`fingerprint_hashes`; the Alembic branch `references` makes them), indexed by (library, hash)
with the reference and the offset included, so a lookup is an index-only scan there too. Offsets
are whole frame numbers (64-bit integers), so they never wrap on a long reference.

An add or a remove is one transaction: a crash or `kill -9` mid-add leaves the library as it was
before, and an acknowledged add is committed (SQLite: `synchronous=FULL`). Readers go on while a
reference is added. Nothing is cached here: every lookup queries the library as it is now, and
`version` says when it changed, so a server holding the library in memory (`index.py`) or
querying it sees an added or removed reference (through other processes and other replicas too)
at its next segment, without a restart. Connections come from the SQLAlchemy engine's pool, one
per call, so threads share a `Library`.

Example::

    library = Library.create(Path("models/jingles/library.sqlite"))  # or .shared(db, "jingles")
    ref = library.add("Station ident", 12.5, {"client": "acme"}, hashes)  # hashes: (n, 2) int64
    library.lookup(np.array([hash_a, hash_b]))  # rows of (hash, reference, offset)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL

from arengine.db.engine import READ, open_engine
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
"""A model folder's SQLite file, as every version has made it (existing files open unchanged)."""
PACKED = "group_concat(hash) || ',' || group_concat(reference) || ',' || group_concat(offset)"
"""A lookup's rows as one text of decimal numbers, the hashes, then the references, then the
offsets (one pass of the three aggregates: the same order), which numpy reads whole: a Python
tuple a row cost about as much again as the probes (70,000 rows a segment at 10,000
references), and SQLite writes a number as decimal text 2.5 times as fast as through `printf`
(its hexadecimal triples took 45 ms a segment there, these 27)."""
FILE_LOOKUP = f"SELECT {PACKED} FROM hashes WHERE hash IN (SELECT value FROM json_each(?))"
"""SQLite's lookup of single hashes: every hash in one bound JSON array. Chunks of bound
parameters (`IN (?, ?, ...)`, 900 a query) cost SQLAlchemy more than SQLite's probes: 100,000
hashes took 120 ms in 112 queries, 45 ms in this one."""
RUN_BITS = 6
_RUN_MASK = (1 << RUN_BITS) - 1
FILE_RUNS = (
    f"SELECT {PACKED} FROM json_each(?) AS run CROSS JOIN hashes "
    f"WHERE hash BETWEEN run.value >> {RUN_BITS} "
    f"AND (run.value >> {RUN_BITS}) + (run.value & {_RUN_MASK})"
)
"""SQLite's lookup of runs of consecutive hashes, each packed as its first hash above its length
less one (`RUN_BITS`): one index probe a run. A triplet's neighbouring ratio levels are
consecutive hashes (`landmarks.hashed`), so a segment's 63,000 hashes are 26,000 runs and the
probes, most of a lookup's time, 2.4 times fewer."""

SHARED_RUNS = (
    "SELECT string_agg(int8send(hash) || int8send(reference) || int8send(\"offset\"), ''::bytea) "
    "FROM unnest(CAST(:runs AS bigint[])) AS run(packed) JOIN fingerprint_hashes "
    f"ON library = :library AND hash BETWEEN packed >> {RUN_BITS} "
    f"AND (packed >> {RUN_BITS}) + (packed & {_RUN_MASK})"
)
"""PostgreSQL's lookup: the runs packed as SQLite's are, one index-only range scan each, the rows
packed by the server into one `bytea` of big-endian int64 triples that numpy reads whole (no
Python object a row: a row each cost as much as the scan, and COPY sends a message a row). The
runs go as one text array: `hash = ANY(array)` of a segment's 63,000 hashes spent 70-90 ms in
the planner alone (a selectivity estimate per element) and probed each; psycopg's adaptation of
a list of 63,000 ints cost more CPU than the text."""

FILE_OF_REFERENCES = (
    f"SELECT {PACKED} FROM hashes WHERE reference IN (SELECT value FROM json_each(?))"
)
"""SQLite's rows of some references (through the index by reference)."""
SHARED_OF_REFERENCES = (
    "SELECT string_agg(int8send(hash) || int8send(reference) || int8send(\"offset\"), ''::bytea) "
    "FROM fingerprint_hashes WHERE library = :library "
    "AND reference = ANY(CAST(:references AS bigint[]))"
)
"""PostgreSQL's rows of some references, packed as `SHARED_RUNS` packs them."""

NO_JIT = "SET LOCAL jit = off"
"""Run before PostgreSQL's lookup, in its transaction. The planner cannot tell how many rows a
range of a run holds, estimates millions for each (35 billion for a segment), and so compiles
the query with LLVM each time (JIT is on by default from PostgreSQL 12 where the server has
it): 100-190 ms of compiling a lookup whose execution takes about 215 ms, at 10,000 references."""

SHARED_INSERT = (
    'INSERT INTO fingerprint_hashes (library, hash, reference, "offset") '
    "SELECT :library, row.hash, row.reference, row.at FROM unnest(CAST(:hashes AS bigint[]), "
    "CAST(:references AS bigint[]), CAST(:offsets AS bigint[])) AS row(hash, reference, at)"
)
"""PostgreSQL's insert of a batch of hash rows: three text arrays unnested by the server, one
statement a batch. A row each through the driver's executemany stored 18,000 rows a second
(`arengine db copy` of a 10,000-reference library: 11 minutes); `INSERT_BATCH` rows a
statement keep the statement's text to a few megabytes."""
INSERT_BATCH = 100_000
"""Rows of `SHARED_INSERT` a statement."""

FILE = sa.MetaData()
FILE_REFERENCES = sa.Table(
    "references_",
    FILE,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("first_s", sa.Float, nullable=False),
    sa.Column("last_s", sa.Float, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
)
FILE_HASHES = sa.Table(
    "hashes",
    FILE,
    sa.Column("hash", sa.BigInteger, nullable=False),
    sa.Column("reference", sa.BigInteger, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
)

SHARED = sa.MetaData()
"""The server database's tables, as the Alembic branch `references` makes them
(`arengine/db/migrations/versions/references_0001.py`)."""
LIBRARIES = sa.Table(
    "fingerprint_libraries",
    SHARED,
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("model", sa.Text, nullable=False, unique=True),
    sa.Column("last_reference", sa.BigInteger, nullable=False, server_default="0"),
)
SHARED_REFERENCES = sa.Table(
    "fingerprint_references",
    SHARED,
    sa.Column("library", sa.Integer, sa.ForeignKey(LIBRARIES.c.id), primary_key=True),
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("first_s", sa.Float, nullable=False),
    sa.Column("last_s", sa.Float, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
)
SHARED_HASHES = sa.Table(
    "fingerprint_hashes",
    SHARED,
    sa.Column("library", sa.Integer, nullable=False),
    sa.Column("hash", sa.BigInteger, nullable=False),
    sa.Column("reference", sa.BigInteger, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.ForeignKeyConstraint(
        ["library", "reference"],
        [SHARED_REFERENCES.c.library, SHARED_REFERENCES.c.id],
        ondelete="CASCADE",
    ),
    sa.Index(
        "fingerprint_hashes_by_hash", "library", "hash", postgresql_include=["reference", "offset"]
    ),
    sa.Index("fingerprint_hashes_by_reference", "library", "reference"),
)
MMAP_BYTES = 1 << 40
"""How much of a library file SQLite reads through a memory map (its build caps it: 2 GiB for
Python's): a lookup's 26,000 index probes at 10,000 references each land on another page, and
SQLite's own page cache (2 MB) holds few of them, so each was a `read` of the page from the
operating system's cache; mapped, the same probes take 28% less CPU. The map is the operating
system's page cache, shared by every connection, not memory of each. A disk's read error on a
mapped page stops the process (SIGBUS) instead of failing the lookup: a library belongs on a
local disk (SQLite's locking over a network file system is unreliable anyway)."""
FILE_ENGINE_POOL = 32
"""Connections a library file's engine keeps (SQLite's are cheap): more than the engine threads
that look up at once on most hosts, so that none waits for another's."""


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
    """One model's references: the SQLite file at `path` (`Library(path)`), or the model's share
    of the server database (`Library.shared`). Thread-safe: each call takes a pooled connection."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"no reference library at {path}")
        self._path: Path | None = path
        self.model: str | None = None
        """The model whose rows are its own in the server database; None: its own file."""
        self.database = file_engine(path)
        self._references, self._hashes = FILE_REFERENCES, FILE_HASHES

    @classmethod
    def create(cls, path: Path) -> Library:
        """The library at `path`, made empty when missing (an existing one is kept)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = file_engine(path)
        try:
            with engine.begin() as connection:
                for statement in SCHEMA.split(";")[:-1]:
                    connection.exec_driver_sql(statement)
        finally:
            engine.dispose()
        return cls(path)

    @classmethod
    def shared(cls, database: sa.Engine, model: str) -> Library:
        """Model `model`'s library in the server database `database` (its tables made by the
        migrations); empty until a reference is added, by this process or any other."""
        library = cls.__new__(cls)
        library._path, library.model, library.database = None, model, database
        library._references, library._hashes = SHARED_REFERENCES, SHARED_HASHES
        return library

    @property
    def path(self) -> Path:
        """The library's SQLite file (a library in the server database has none: ValueError)."""
        if self._path is None:
            raise ValueError(f"the library of {self.model!r} is in the server database")
        return self._path

    @property
    def where(self) -> str:
        """The library's file, or the model whose library is in the server database."""
        if self._path is not None:
            return str(self._path)
        return f"of {self.model!r} (in the server database)"

    def connection(self) -> sa.Connection:
        """A pooled connection to the library's database (close it, or use it in `with`)."""
        return self.database.connect()

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
        first_s, last_s = span_s or (0.0, duration_s)
        row = {"title": title, "duration_s": float(duration_s), "metadata": json.dumps(metadata)}
        row |= {"first_s": float(first_s), "last_s": float(last_s)}
        # In hash order: the index's pages are visited once each, in order, not at random
        # (about 10% less time into a 1,000-reference library; the commit's fsync of the
        # pages touched is most of an add there, BENCHMARKS.md).
        order = np.lexsort((hashes[:, 1], hashes[:, 0]))
        with self.database.begin() as connection:  # one transaction: committed whole or not
            keys = self._keys(connection, create=True) or {}
            table = self._references
            if keys:  # ids of its own, never reused; the library's row locked until the commit
                counted = (
                    sa.update(LIBRARIES)
                    .where(LIBRARIES.c.id == keys["library"])
                    .values(last_reference=LIBRARIES.c.last_reference + 1)
                    .returning(LIBRARIES.c.last_reference)
                )
                row["id"] = int(connection.execute(counted).scalar_one())
            stored = sa.insert(table).values(**row, **keys).returning(table.c.id)
            reference = int(connection.execute(stored).scalar_one())
            if keys:
                stored_rows = np.insert(hashes[order], 1, reference, axis=1)
                insert_shared_hashes(connection, keys["library"], stored_rows)
            elif len(order):
                rows = hashes[order].tolist()
                connection.execute(
                    sa.insert(self._hashes),
                    [{"hash": h, "reference": reference, "offset": t} for h, t in rows],
                )
        return reference

    def remove(self, reference: int) -> bool:
        """Delete a reference and its hashes; False when there was none with that id."""
        with self.database.begin() as connection:
            keys = self._keys(connection, create=False)
            if keys is None:
                return False
            hashes, references = self._hashes, self._references
            connection.execute(
                sa.delete(hashes).where(hashes.c.reference == reference, *_of(hashes, keys))
            )
            deleted = connection.execute(
                sa.delete(references).where(references.c.id == reference, *_of(references, keys))
            )
        return deleted.rowcount > 0

    def references(self) -> list[Reference]:
        """Every reference, by id."""
        return self._select(None)

    def reference(self, reference: int) -> Reference | None:
        """One reference as the library holds it now; None when there is none with that id."""
        found = self._select(reference)
        return found[0] if found else None

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The stored `(m, 3)` int64 rows of (hash, reference, offset) for any of `hashes`, in
        the database's order: SQLite's index gives (hash, reference, offset), PostgreSQL's scan
        orders by hash at most (sorting here would cost as much as the lookup)."""
        unique = distinct(hashes)
        with self._reading() as connection:
            keys = self._keys(connection, create=False)
            if keys is None or not len(unique):
                return np.empty((0, 3), dtype=np.int64)
            if self.model is None:
                return self._file_rows(connection, unique)
            return self._shared_rows(connection, keys, unique)

    def version(self) -> tuple[int, int]:
        """The largest reference id and the number of references, (0, 0) when empty: any add
        raises the first (ids grow and are never reused), a remove lowers the second, so two
        equal versions hold the same references (`index.HashIndex` asks it each lookup)."""
        table = self._references
        query = sa.select(sa.func.coalesce(sa.func.max(table.c.id), 0), sa.func.count())
        with self._reading() as connection:
            keys = self._keys(connection, create=False)
            if keys is None:
                return 0, 0
            largest, count = connection.execute(query.where(*_of(table, keys))).one()
        return int(largest), int(count)

    def ids(self) -> np.ndarray:
        """Every reference's id, in order."""
        table = self._references
        with self._reading() as connection:
            keys = self._keys(connection, create=False)
            if keys is None:
                return np.empty(0, dtype=np.int64)
            query = sa.select(table.c.id).where(*_of(table, keys)).order_by(table.c.id)
            return np.array(connection.execute(query).scalars().all(), dtype=np.int64)

    def rows_of(self, references: np.ndarray) -> np.ndarray:
        """The `(m, 3)` int64 rows of (hash, reference, offset) of the `references` (ids), in
        no particular order; none for an id the library does not hold."""
        with self._reading() as connection:
            keys = self._keys(connection, create=False)
            if keys is None or not len(references):
                return np.empty((0, 3), dtype=np.int64)
            if self.model is None:
                return _packed_rows(connection, FILE_OF_REFERENCES, references)
            query = sa.text(SHARED_OF_REFERENCES).bindparams(
                library=keys["library"], references=_text_array(references)
            )
            return _unpacked(connection.execute(query).scalar_one())

    def _file_rows(self, connection: sa.Connection, unique: np.ndarray) -> np.ndarray:
        """SQLite: one query of runs (`FILE_RUNS`), and one of single hashes for those too large
        or negative to pack (the scheme's marker)."""
        packable = (unique >= 0) & (unique < 1 << (63 - RUN_BITS))
        first, length = runs(unique[packable], 1 << RUN_BITS)
        parts = [_packed_rows(connection, FILE_RUNS, (first << RUN_BITS) | (length - 1))]
        if not packable.all():
            parts.append(_packed_rows(connection, FILE_LOOKUP, unique[~packable]))
        return np.concatenate(parts)

    def _shared_rows(
        self, connection: sa.Connection, keys: dict[str, int], unique: np.ndarray
    ) -> np.ndarray:
        """PostgreSQL: the runs of consecutive hashes (`SHARED_RUNS`), and the hashes too large
        or negative to pack (the scheme's marker) by one array."""
        packable = (unique >= 0) & (unique < 1 << (63 - RUN_BITS))
        first, length = runs(unique[packable], 1 << RUN_BITS)
        packed = _text_array((first << RUN_BITS) | (length - 1))
        connection.exec_driver_sql(NO_JIT)
        query = sa.text(SHARED_RUNS).bindparams(runs=packed, library=keys["library"])
        parts = [_unpacked(connection.execute(query).scalar_one())]
        if not packable.all():
            parts.append(self._shared_hashes(connection, keys, unique[~packable].tolist()))
        return np.concatenate(parts)

    def _shared_hashes(
        self, connection: sa.Connection, keys: dict[str, int], unique: list[int]
    ) -> np.ndarray:
        """PostgreSQL's lookup of single hashes: one array, one index-only scan."""
        table = self._hashes
        wanted = sa.bindparam("hashes", type_=postgresql.ARRAY(sa.BigInteger))
        row = sa.func.int8send(table.c.hash).op("||")(sa.func.int8send(table.c.reference))
        row = row.op("||")(sa.func.int8send(table.c.offset))
        packed = sa.func.string_agg(row, sa.literal_column("''::bytea"), type_=sa.LargeBinary)
        query = sa.select(packed).where(*_of(table, keys), table.c.hash == sa.any_(wanted))
        return _unpacked(connection.execute(query, {"hashes": unique}).scalar_one())

    def _select(self, reference: int | None) -> list[Reference]:
        table = self._references
        query = sa.select(
            table.c.id, table.c.title, table.c.duration_s, table.c.metadata, table.c.first_s,
            table.c.last_s,
        ).order_by(table.c.id)  # fmt: skip
        if reference is not None:
            query = query.where(table.c.id == reference)
        with self._reading() as connection:
            keys = self._keys(connection, create=False)
            if keys is None:
                return []
            return [
                _reference(tuple(row)) for row in connection.execute(query.where(*_of(table, keys)))
            ]

    def _reading(self) -> sa.Connection:
        """A connection for reads: on SQLite they begin beside a writer, never waiting for it."""
        return self.database.connect().execution_options(**READ)

    def _keys(self, connection: sa.Connection, create: bool) -> dict[str, int] | None:
        """The columns that pick this library's rows: none in its own file; in the server
        database its library's id (made when `create`; None when it has none yet)."""
        if self.model is None:
            return {}
        query = sa.select(LIBRARIES.c.id).where(LIBRARIES.c.model == self.model)
        found = connection.execute(query).scalar()
        if found is None and create:
            made = postgresql.insert(LIBRARIES).values(model=self.model).on_conflict_do_nothing()
            connection.execute(made)
            found = connection.execute(query).scalar()
        return None if found is None else {"library": int(found)}


def _of(table: sa.Table, keys: dict[str, int]) -> list[sa.ColumnElement[bool]]:
    """The conditions that keep a query to one library's rows."""
    return [table.c[name] == value for name, value in keys.items()]


def file_engine(path: Path) -> sa.Engine:
    """The engine on a model folder's SQLite library file (`arengine.db.engine.open_engine`: WAL,
    `synchronous=FULL`, so an acknowledged add survives a power cut), read through a memory
    map (`MMAP_BYTES`)."""
    engine = open_engine(URL.create("sqlite", database=str(path)), FILE_ENGINE_POOL)
    sa.event.listen(engine, "connect", _mapped)
    return engine


def _mapped(connection: Any, record: Any) -> None:
    connection.execute(f"PRAGMA mmap_size={MMAP_BYTES}")


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


def insert_shared_hashes(connection: sa.Connection, library: int, rows: np.ndarray) -> None:
    """Store `(n, 3)` rows of (hash, reference, offset) in PostgreSQL's shared table under
    `library`, `INSERT_BATCH` at a time (`SHARED_INSERT`)."""
    query = sa.text(SHARED_INSERT)
    for start in range(0, len(rows), INSERT_BATCH):
        batch = np.asarray(rows[start : start + INSERT_BATCH], dtype=np.int64)
        arrays = {
            name: _text_array(batch[:, column])
            for column, name in enumerate(("hashes", "references", "offsets"))
        }
        connection.execute(query, {"library": library, **arrays})


def _text_array(values: np.ndarray) -> str:
    """PostgreSQL's text form of an integer array, for a `CAST(:x AS bigint[])` parameter.

    >>> _text_array(np.array([3, -1]))
    '{3,-1}'
    """
    return "{" + ",".join(map(str, values.tolist())) + "}"


def _unpacked(data: bytes | None) -> np.ndarray:
    """The `(m, 3)` rows of PostgreSQL's `bytea` of big-endian int64 triples."""
    return np.frombuffer(data or b"", ">i8").astype(np.int64).reshape(-1, 3)


def _packed_rows(connection: sa.Connection, query: str, values: np.ndarray) -> np.ndarray:
    """The `(m, 3)` rows of a lookup of `PACKED` rows, its values one bound JSON array."""
    text = connection.exec_driver_sql(query, (json.dumps(values.tolist()),)).scalar() or ""
    columns = np.fromstring(text, dtype=np.int64, sep=",").reshape(3, -1)
    return np.ascontiguousarray(columns.T)


def runs(values: np.ndarray, longest: int) -> tuple[np.ndarray, np.ndarray]:
    """The first values and the lengths of the runs of consecutive values in `values` (sorted,
    distinct), none longer than `longest`.

    >>> runs(np.array([3, 4, 5, 9, 10, 20]), 2)
    (array([ 3,  5,  9, 20]), array([2, 1, 2, 1]))
    """
    new = np.r_[True, np.diff(values) != 1] if len(values) else np.zeros(0, dtype=bool)
    run = np.cumsum(new) - 1
    new |= (np.arange(len(values)) - np.flatnonzero(new)[run]) % longest == 0
    starts = np.flatnonzero(new)
    return values[starts], np.diff(np.r_[starts, len(values)])


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, in order: `np.unique`'s answer, which numpy 2.4
    finds through a hash table, 20-40x slower than a sort for a segment's 65,000 hashes (20-40
    ms of CPU against 1 ms).

    >>> distinct(np.array([5, 3, 5, 1]))
    array([1, 3, 5])
    """
    ordered = np.sort(values, axis=None)
    kept = np.ones(len(ordered), dtype=bool)
    kept[1:] = ordered[1:] != ordered[:-1]
    found: np.ndarray = ordered[kept]
    return found


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

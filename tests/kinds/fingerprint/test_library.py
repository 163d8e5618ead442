"""The reference library on both backends: a model folder's SQLite file, and the tables every
replica shares on a real PostgreSQL (`tests/postgres.py`). Each `Library` a test opens has its own
engine and connections, as another process or replica would."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa

from arengine.cli.database import database
from arengine.db.migrate import heads, upgrade
from arengine.kinds.fingerprint import library as library_module
from arengine.kinds.fingerprint.library import SHARED, SHARED_RUNS, Library
from arengine.kinds.fingerprint.references import library_of
from arengine.settings import Settings
from tests.kinds.fingerprint.conftest import OpenLibrary, migrated, postgres_engine
from tests.postgres import PostgreSQL


def rows(*pairs: tuple[int, int]) -> np.ndarray:
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def test_a_reference_is_added_listed_looked_up_and_removed(open_library: OpenLibrary) -> None:
    library = open_library()
    assert library.references() == []
    assert library.lookup(np.array([5])).shape == (0, 3)
    ref = library.add("long", 1e6, {"a": [1, 2]}, rows((5, 5_000_000_000), (7, 3)), (0.5, 9.0))
    other = library.add("short", 2.0, {}, rows((7, 1)))
    np.testing.assert_array_equal(
        library.lookup(np.array([5, 6, 7, 7])),
        sorted([[5, ref, 5_000_000_000], [7, ref, 3], [7, other, 1]]),
    )  # offsets whole: 64-bit, never wrapped
    found = library.reference(ref)
    assert found is not None
    assert (found.title, found.duration_s, found.metadata) == ("long", 1e6, {"a": [1, 2]})
    assert (found.first_s, found.last_s) == (0.5, 9.0)
    assert [r.id for r in library.references()] == [ref, other]
    assert library.remove(ref)
    assert not library.remove(ref)
    assert library.reference(ref) is None
    np.testing.assert_array_equal(library.lookup(np.array([5, 7])), [[7, other, 1]])


def test_a_change_through_one_replica_is_seen_by_the_others_next_lookup(
    open_library: OpenLibrary,
) -> None:
    """Nothing cached: an add or a remove through any replica reaches every other one at once."""
    a, b = open_library(), open_library()
    assert b.lookup(np.array([11])).shape == (0, 3)  # b has looked before a's add
    ref = a.add("ident", 3.0, {"n": 1}, rows((11, 4), (12, 5)))
    np.testing.assert_array_equal(b.lookup(np.array([11])), [[11, ref, 4]])
    assert [r.title for r in b.references()] == ["ident"]
    assert b.remove(ref)
    assert a.lookup(np.array([11, 12])).shape == (0, 3)
    assert a.reference(ref) is None and a.references() == []


def test_each_model_sees_only_its_own_references(open_library: OpenLibrary) -> None:
    jingles, adverts = open_library("jingles"), open_library("adverts")
    ref = jingles.add("ident", 3.0, {}, rows((11, 4)))
    assert adverts.lookup(np.array([11])).shape == (0, 3)
    assert adverts.references() == [] and adverts.reference(ref) is None
    assert not adverts.remove(ref)
    mine = adverts.add("spot", 3.0, {}, rows((11, 8)))
    np.testing.assert_array_equal(jingles.lookup(np.array([11])), [[11, ref, 4]])
    np.testing.assert_array_equal(adverts.lookup(np.array([11])), [[11, mine, 8]])


def test_an_add_that_fails_midway_leaves_the_library_as_it_was(open_library: OpenLibrary) -> None:
    """The reference's row and its hashes are one transaction: none of it stays."""
    library = open_library()
    kept = library.add("kept", 1.0, {}, rows((1, 1)))

    def fail_on_hashes(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "hashes" in statement and statement.lstrip().upper().startswith("INSERT"):
            raise OSError("disk full")  # as the database could fail, after the reference's row

    sa.event.listen(library.database, "before_cursor_execute", fail_on_hashes)
    with pytest.raises(OSError, match="disk full"):
        library.add("lost", 1.0, {}, rows((2, 2), (3, 3)))
    sa.event.remove(library.database, "before_cursor_execute", fail_on_hashes)
    assert [r.id for r in library.references()] == [kept]
    assert library.lookup(np.array([1, 2, 3])).tolist() == [[1, kept, 1]]


def test_threads_share_one_library(open_library: OpenLibrary) -> None:
    library = open_library()
    for i in range(5):
        library.add(f"r{i}", 1.0, {}, rows(*((h, i * 100 + h) for h in range(i, 400, 5))))
    queries = [np.arange(i, i + 50) for i in range(0, 350, 10)]
    serial = [library.lookup(q) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(library.lookup, queries * 3))
    for i, found in enumerate(parallel):
        np.testing.assert_array_equal(found, serial[i % len(queries)])


def test_a_lookup_of_thousands_of_hashes_finds_each(open_library: OpenLibrary) -> None:
    """More hashes than SQLite binds in one query (they go in chunks there)."""
    library = open_library()
    hashes = np.arange(0, 6000, 2)
    ref = library.add("many", 100.0, {}, np.stack([hashes, hashes * 3], axis=1))
    found = library.lookup(np.arange(6000))
    np.testing.assert_array_equal(found, np.stack([hashes, np.full(3000, ref), hashes * 3], 1))


def test_an_add_of_more_rows_than_a_statement_takes_stores_each(
    open_library: OpenLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's rows go `INSERT_BATCH` at a time (three arrays a statement): every batch,
    the last one short, lands with the 64-bit values whole."""
    monkeypatch.setattr(library_module, "INSERT_BATCH", 4)
    library = open_library()
    hashes = np.array([-(1 << 62), *range(1, 10)])
    offsets = np.array([*range(9), (1 << 62) + 7])
    ref = library.add("batched", 10.0, {}, np.stack([hashes, offsets], axis=1))
    found = library.lookup(hashes)
    found = found[np.argsort(found[:, 0])]
    np.testing.assert_array_equal(found, np.stack([hashes, np.full(10, ref), offsets], axis=1))


def test_a_lookup_gives_back_every_64_bit_value_whole(open_library: OpenLibrary) -> None:
    """The scheme's marker (a negative hash) and offsets past 32 bits, as each backend's rows
    come back in bulk (packed by the database: big-endian bytes, decimal text), the marker
    apart from the runs of consecutive hashes."""
    library = open_library()
    marker, big = -(1 << 62), (1 << 62) + 12345
    ref = library.add("wide", 10.0, {}, rows((marker, 2), (3, big), (4, -5)))
    found = library.lookup(np.array([4, marker, 3, 9]))
    np.testing.assert_array_equal(
        found[np.argsort(found[:, 0])], [[marker, ref, 2], [3, ref, big], [4, ref, -5]]
    )
    assert found.dtype == np.int64


def test_a_lookup_of_runs_of_consecutive_hashes_finds_each_and_no_neighbour(
    open_library: OpenLibrary,
) -> None:
    """SQLite looks consecutive hashes up as one range each (at most 64 long): every hash asked
    is found, at each end of a run and across the 64th, and a stored hash next to a run, which
    was not asked, is not."""
    library = open_library()
    stored = np.arange(0, 400)
    ref = library.add("runs", 10.0, {}, np.stack([stored, stored + 1000], axis=1))
    asked = np.r_[5:6, 10:20, 30:200, 250:251, 252:253]  # 170 in a row: three ranges
    found = library.lookup(np.r_[asked, asked[::-1]])
    expected = np.stack([asked, np.full(len(asked), ref), asked + 1000], axis=1)
    np.testing.assert_array_equal(found[np.argsort(found[:, 0])], expected)


def test_a_library_file_is_read_through_a_memory_map(tmp_path: Path) -> None:
    """Each of its connections maps the file (the index probes of a lookup are most of its
    time at 10,000 references: 28% less CPU than SQLite's reads of the pages)."""
    library = Library.create(tmp_path / "library.sqlite")
    with library.connection() as connection:
        assert connection.exec_driver_sql("PRAGMA mmap_size").scalar_one() > 0
    library.database.dispose()


OLD_SCHEMA = """
CREATE TABLE references_ (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, duration_s REAL NOT NULL,
    first_s REAL NOT NULL, last_s REAL NOT NULL, metadata TEXT NOT NULL DEFAULT '{}');
CREATE TABLE hashes (
    hash INTEGER NOT NULL,
    reference INTEGER NOT NULL REFERENCES references_(id) ON DELETE CASCADE,
    offset INTEGER NOT NULL);
CREATE INDEX hashes_by_hash ON hashes (hash, reference, offset);
CREATE INDEX hashes_by_reference ON hashes (reference);
INSERT INTO references_ VALUES (7, 'ident', 12.5, 0.25, 12.0, '{"client": "acme"}');
INSERT INTO hashes VALUES (42, 7, 5000000000), (43, 7, 9);
"""


def test_a_library_file_of_an_earlier_version_opens_with_its_references(tmp_path: Path) -> None:
    """A model folder's file as arengine 0.2 wrote it (plain sqlite3): found, kept, added to."""
    path = tmp_path / "library.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript(OLD_SCHEMA)
    connection.close()
    library = Library(path)
    [ref] = library.references()
    assert (ref.id, ref.title, ref.metadata, ref.first_s) == (7, "ident", {"client": "acme"}, 0.25)
    np.testing.assert_array_equal(library.lookup(np.array([42, 43])), [[42, 7, 5e9], [43, 7, 9]])
    assert library.add("next", 1.0, {}, rows((1, 1))) == 8
    with library.connection() as c:
        plan = c.exec_driver_sql("EXPLAIN QUERY PLAN SELECT hash, reference, offset FROM hashes "
                                 "WHERE hash IN (1, 2)").all()  # fmt: skip
    assert "COVERING INDEX hashes_by_hash" in str(plan)
    library.database.dispose()


def test_a_lookup_on_postgresql_reads_only_the_index(postgresql: PostgreSQL) -> None:
    """(library, hash) with the reference and the offset included: an index-only scan, of
    single hashes and of the runs of consecutive ones."""
    url = postgresql.database()
    migrated(url)
    library = Library.shared(postgres_engine(url), "jingles")
    library.add("ident", 3.0, {}, np.stack([np.arange(5000), np.arange(5000)], axis=1))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE fingerprint_hashes")  # the visibility map, as autovacuum
        connection.execute("SET enable_seqscan = off")
        connection.execute("SET enable_bitmapscan = off")
        plan = connection.execute(
            'EXPLAIN SELECT hash, reference, "offset" FROM fingerprint_hashes '
            "WHERE library = 1 AND hash = ANY('{1,2,3}'::bigint[])"
        ).fetchall()
        ranges = connection.execute(
            "EXPLAIN " + SHARED_RUNS.replace(":runs", "'{64,200}'").replace(":library", "1")
        ).fetchall()
    assert "Index Only Scan using fingerprint_hashes_by_hash" in str(plan)
    assert "Index Only Scan using fingerprint_hashes_by_hash" in str(ranges)
    library.database.dispose()


def test_a_lookup_on_postgresql_runs_without_jit(postgresql: PostgreSQL) -> None:
    """The planner estimates millions of rows a run's range, so a lookup would be compiled with
    LLVM every time (100-190 ms at 10,000 references): the lookup's transaction turns JIT off,
    and the server's own setting is left as it was for everything else."""
    url = postgresql.database()
    migrated(url)
    engine = postgres_engine(url)
    library = Library.shared(engine, "jingles")
    library.add("ident", 3.0, {}, np.stack([np.arange(500), np.arange(500)], axis=1))
    jit_at_lookup: list[str] = []

    def before(_: object, cursor: psycopg.Cursor[object], statement: str, *args: object) -> None:
        if "unnest" in statement and "string_agg" in statement:  # SHARED_RUNS
            jit_at_lookup.append(str(cursor.connection.execute("SHOW jit").fetchone()))

    sa.event.listen(engine, "before_cursor_execute", before)
    found = library.lookup(np.array([3, 4, 400]))
    np.testing.assert_array_equal(found[:, 0], [3, 4, 400])
    assert jit_at_lookup == ["('off',)"]
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SHOW jit").scalar() == "on"  # only that transaction
    engine.dispose()


ADDER = """
import sys
from pathlib import Path
import numpy as np
from arengine.db.engine import open_engine
from arengine.db.url import parse
from arengine.kinds.fingerprint.library import Library

where, n = sys.argv[1], int(sys.argv[2])
if where.startswith("postgresql"):
    library = Library.shared(open_engine(parse(where)), "big")
else:
    library = Library(Path(where))
hashes = np.stack([np.arange(n) * 7919 % (1 << 21), np.arange(n)], axis=1)
while True:
    print(library.add("big", 3600.0, {}, hashes), flush=True)
"""


@pytest.mark.slow
def test_a_killed_add_loses_nothing_acknowledged_and_leaves_no_half(
    open_library: OpenLibrary, backend: tuple[str, str]
) -> None:
    library = open_library("big")
    name, where = backend
    target = str(library.path) if library.model is None else where
    n = 200_000 if name == "sqlite" else 20_000
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    adder = subprocess.Popen(
        [sys.executable, "-c", ADDER, target, str(n)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert adder.stdout is not None
    acknowledged = [int(adder.stdout.readline()) for _ in range(3)]
    adder.send_signal(signal.SIGKILL)  # most likely in the middle of the fourth add
    adder.wait()
    adder.stdout.close()
    ids = [ref.id for ref in library.references()]
    assert ids[:3] == acknowledged
    found = library.lookup(np.arange(1 << 21))
    counts = dict(zip(*np.unique(found[:, 1], return_counts=True), strict=True))
    assert all(counts[ref] == n for ref in ids)  # every reference whole, none half
    assert set(counts) == set(ids)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_migrations_make_the_tables_the_library_queries(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The `references` branch's tables, on both backends (SQLite's stay empty: `db copy`
    fills PostgreSQL's from them and the model folders' files)."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    else:
        url = request.getfixturevalue("postgresql").database()
    engine = postgres_engine(url)
    upgrade(engine)
    assert any(head.startswith("references_") for head in heads())
    inspector = sa.inspect(engine)
    for table in SHARED.sorted_tables:
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        assert columns == set(table.columns.keys()), table.name
    indexes = {index["name"] for index in inspector.get_indexes("fingerprint_hashes")}
    assert indexes == {"fingerprint_hashes_by_hash", "fingerprint_hashes_by_reference"}
    engine.dispose()


def test_db_copy_moves_every_model_folders_library_into_postgresql(
    tmp_path: Path,
    postgresql: PostgreSQL,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`arengine db copy` from the embedded SQLite: the fingerprint libraries are files in the
    model folders, not in jobs.sqlite3; they arrive with their ids (a removed one's not reused),
    their hashes in batches (two here: `INSERT_BATCH` made small)."""
    monkeypatch.setattr(library_module, "INSERT_BATCH", 2)
    models = tmp_path / "models"
    jingles = library_of(models / "jingles", create=True)
    kept = jingles.add("ident", 3.0, {"client": "acme"}, rows((11, 4), (12, 5)), (0.5, 2.5))
    gone = jingles.add("gone", 1.0, {}, rows((13, 1)))
    last = jingles.add("promo", 2.0, {}, rows((11, 9)))
    assert jingles.remove(gone) and jingles.remove(last)
    adverts = library_of(models / "adverts", create=True)
    spot = adverts.add("spot", 4.0, {}, rows((11, 7)))
    target = postgresql.database()
    settings = Settings(models_dir=models)
    source = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    assert database(settings, "copy", source, target) == 0
    assert "2 fingerprint libraries, 2 references, 3 hashes" in capsys.readouterr().out
    names = ("jingles", "adverts")
    shared = {name: Library.shared(postgres_engine(target), name) for name in names}
    [ref] = shared["jingles"].references()
    assert (ref.id, ref.title, ref.metadata) == (kept, "ident", {"client": "acme"})
    assert (ref.first_s, ref.last_s) == (0.5, 2.5)
    found = shared["jingles"].lookup(np.array([11, 12]))
    np.testing.assert_array_equal(found, [[11, kept, 4], [12, kept, 5]])
    np.testing.assert_array_equal(shared["adverts"].lookup(np.array([11])), [[11, spot, 7]])
    assert shared["jingles"].add("next", 1.0, {}, rows((1, 1))) == last + 1
    assert database(settings, "copy", source, target) == 1  # not into a database holding rows
    assert "not empty" in capsys.readouterr().err
    for library in (jingles, adverts, *shared.values()):
        library.database.dispose()

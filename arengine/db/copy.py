"""`arengine db copy`: every row of one database into another, empty one (from a host's SQLite
file to the cluster's PostgreSQL). Files (uploads, kept scores, results) stay where they are:
the shared directory the replicas mount is the data directory's copy.

Both databases are first brought to this release's schema; then every table the migrations made
(each branch's: jobs, references) is copied in the order their foreign keys need, in one
transaction on the target, so a failure leaves it empty and the copy can be run again. What the
source keeps outside its database (on SQLite each fingerprint model's library is a file in its
folder) is written in that transaction too, by the caller's `extra`.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Engine, Integer, MetaData, Table, func, insert, select, text
from sqlalchemy.engine import URL

from arengine.db.engine import open_engine
from arengine.db.migrate import upgrade
from arengine.db.url import redacted

BATCH = 1000
"""Rows read and written at a time: a library's hashes may be millions."""
_ALEMBIC = "alembic_version"


class NotEmpty(RuntimeError):
    """The target already holds rows: a copy would mix two databases."""


Extra = Callable[[Connection], dict[str, int]]
"""More rows to write into the target in the copy's transaction (the fingerprint libraries'
files); the rows written, by what they are."""


def copy(source: URL, target: URL, extra: Extra | None = None) -> dict[str, int]:
    """Copy every row of `source` into the empty `target` (then `extra`'s, in the same
    transaction); the rows copied, by table."""
    origin, destination = open_engine(source), open_engine(target)
    try:
        upgrade(origin)
        upgrade(destination)
        tables = _tables(destination)
        full = [table.name for table in tables if _count(destination, table)]
        if full:
            raise NotEmpty(
                f"{redacted(target)} is not empty ({', '.join(full)} hold rows): copy into a new "
                f"database"
            )
        return _copy_rows(origin, destination, tables, extra)
    finally:
        origin.dispose()
        destination.dispose()


def _tables(engine: Engine) -> list[Table]:
    metadata = MetaData()
    metadata.reflect(engine)
    return [table for table in metadata.sorted_tables if table.name != _ALEMBIC]


def _count(engine: Engine, table: Table) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def _copy_rows(
    origin: Engine, destination: Engine, tables: list[Table], extra: Extra | None
) -> dict[str, int]:
    counts: dict[str, int] = {}
    with origin.connect() as reading, destination.begin() as writing:
        for table in tables:
            counts[table.name] = 0
            rows = reading.execution_options(stream_results=True).execute(select(table))
            for batch in rows.mappings().partitions(BATCH):
                writing.execute(insert(table), [dict(row) for row in batch])
                counts[table.name] += len(batch)
            if writing.dialect.name == "postgresql":
                _advance_sequences(writing, table)
        if extra is not None:
            counts.update(extra(writing))
    return counts


def _advance_sequences(connection: Connection, table: Table) -> None:
    """Ids given by a sequence (identity columns) go on after the highest copied one."""
    for column in table.primary_key.columns:
        if not isinstance(column.type, Integer):
            continue
        sequence = connection.execute(
            text("SELECT pg_get_serial_sequence(:table, :column)"),
            {"table": table.name, "column": column.name},
        ).scalar()
        if sequence is not None:
            highest = f"COALESCE((SELECT MAX({column.name}) FROM {table.name}), 0) + 1"
            connection.execute(
                text(f"SELECT setval(:sequence, {highest}, false)"), {"sequence": sequence}
            )

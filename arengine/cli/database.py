"""`arengine db upgrade|current|copy`: the shared database's schema and moving to another one.

`upgrade` brings the schema to this release (what `arengine serve` does at start unless
`--no-database-migrate`); `current` says which revisions the database is at; `copy` moves an
embedded SQLite database into an empty PostgreSQL one (`arengine/db/copy.py`), with the
fingerprint models' library files of `--models-dir` into the shared reference tables. Every message
names a database by its URL with the password hidden.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy import Connection, insert, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from arengine.db.engine import open_engine
from arengine.db.migrate import current, heads, upgrade
from arengine.db.url import DatabaseUrlError, database_url, parse, redacted
from arengine.models import DEFAULT_MODELS_DIR
from arengine.settings import Settings


def database(
    settings: Settings, action: str, source: str | None = None, target: str | None = None
) -> int:
    """Run one action: 0 when done, 1 when the database refused, 2 on a usage error."""
    try:
        if action == "copy":
            return _copy(settings, source, target)
        url = database_url(settings)
    except DatabaseUrlError as error:
        print(f"arengine: {error}", file=sys.stderr)
        return 2
    if url is None:
        print("arengine: name the database: --database-url, or --data-dir for its SQLite file",
              file=sys.stderr)  # fmt: skip
        return 2
    engine = open_engine(url, settings.database.database_pool_size)
    try:
        if action == "upgrade":
            upgrade(engine)
        at = current(engine)
    except SQLAlchemyError as error:
        print(f"arengine: {failure(url, error)}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    behind = "" if at == heads() else f" (this release's: {', '.join(sorted(heads()))})"
    print(f"{redacted(url)}: {', '.join(sorted(at)) or 'no revision'}{behind}")
    return 0


def _copy(settings: Settings, source: str | None, target: str | None) -> int:
    from arengine.db.copy import NotEmpty, copy

    if source is None or target is None:
        print("arengine: db copy needs --from URL and --to URL", file=sys.stderr)
        return 2
    origin, destination = parse(source), parse(target)
    libraries: dict[str, Path] = {}
    if origin.get_backend_name() == "sqlite" and destination.get_backend_name() == "postgresql":
        # On SQLite each fingerprint model's library is a file in its folder; on PostgreSQL
        # they are shared tables.
        libraries = fingerprint_libraries(settings.engine.models_dir or DEFAULT_MODELS_DIR)
    try:
        counts = copy(origin, destination, lambda writing: copy_libraries(libraries, writing))
    except NotEmpty as error:
        print(f"arengine: {error}", file=sys.stderr)
        return 1
    except SQLAlchemyError as error:
        print(f"arengine: {failure(destination, error)}", file=sys.stderr)
        return 1
    copied = ", ".join(f"{count} {table}" for table, count in counts.items())
    print(f"copied {redacted(origin)} to {redacted(destination)}: {copied}")
    return 0


def failure(url: URL, error: SQLAlchemyError) -> str:
    """What went wrong, naming the database without its password (the driver's message is cut
    before SQLAlchemy's statement and link; the password is struck wherever it appears)."""
    reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    if url.password:
        reason = reason.replace(str(url.password), "***")
    return f"the database {redacted(url)} failed: {reason}"


def fingerprint_libraries(models_dir: Path) -> dict[str, Path]:
    """Each fingerprint model of `models_dir` (by name) and its library file, where it has one."""
    from arengine.kinds.catalog import KINDS
    from arengine.kinds.manifest import ManifestError, read_manifest

    found: dict[str, Path] = {}
    for path in sorted(models_dir.glob("*/manifest.toml")):
        try:
            manifest = read_manifest(path, KINDS)
        except ManifestError:
            continue  # not a model `serve` would load either
        if manifest.kind == "fingerprint" and manifest.weights.is_file():
            found[manifest.name] = manifest.weights
    return found


def copy_libraries(libraries: dict[str, Path], writing: Connection) -> dict[str, int]:
    """Write each library file's references and hashes into the shared tables of the
    connection's database, under its model's name, with the ids the file gave them."""
    from arengine.kinds.fingerprint.library import file_engine

    counts = {"fingerprint libraries": 0, "references": 0, "hashes": 0}
    for model, path in libraries.items():
        source = file_engine(path)
        try:
            with source.connect() as reading:
                references, hashes = _copy_library(model, reading, writing)
        finally:
            source.dispose()
        counts["fingerprint libraries"] += 1
        counts["references"] += references
        counts["hashes"] += hashes
    return counts


def _copy_library(model: str, reading: Connection, writing: Connection) -> tuple[int, int]:
    """One library file's rows into the shared tables; how many references and hashes."""
    import numpy as np

    from arengine.kinds.fingerprint.library import (
        FILE_REFERENCES,
        INSERT_BATCH,
        LIBRARIES,
        SHARED_REFERENCES,
        insert_shared_hashes,
    )

    references = [dict(row) for row in reading.execute(select(FILE_REFERENCES)).mappings()]
    given = reading.exec_driver_sql(
        "SELECT seq FROM sqlite_sequence WHERE name = 'references_'"
    ).scalar()
    # The last id the file gave, so that a removed reference's id is never given again.
    last = max([int(given or 0), *(int(row["id"]) for row in references)])
    made = insert(LIBRARIES).values(model=model, last_reference=last).returning(LIBRARIES.c.id)
    library = writing.execute(made).scalar_one()
    if references:
        rows = [{**row, "library": library} for row in references]
        writing.execute(insert(SHARED_REFERENCES), rows)
    hashes = 0
    # The driver's cursor: its rows are plain tuples, which numpy reads at once (SQLAlchemy's
    # rows are looked up as mappings first, a hundred times slower for millions of them).
    found = reading.connection.driver_connection.execute(  # type: ignore[union-attr]
        'SELECT hash, reference, "offset" FROM hashes'
    )
    while batch := found.fetchmany(INSERT_BATCH):
        insert_shared_hashes(writing, library, np.array(batch, dtype=np.int64))
        hashes += len(batch)
    return len(references), hashes

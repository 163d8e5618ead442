"""`arengine references add|remove|list NAME ...`: a fingerprint model's reference library.

Files are decoded as uploads are (`arengine/kinds/fingerprint/references.py`: the same
sniffing, limits and decoders), fingerprinted and added in one transaction each. `add` makes the
model folder `NAME` with its `manifest.toml` and an empty library when missing. With a PostgreSQL
`--database-url` the library is the model's share of that database, the one every replica serves
(its schema brought up to date first, unless `--no-database-migrate`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from arengine.audio.validation import AudioLimits
from arengine.cli.database import failure
from arengine.db.engine import open_engine
from arengine.db.migrate import upgrade
from arengine.db.url import DatabaseUrlError, database_url, is_postgresql
from arengine.errors import ArengineError
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.references import add_file, library_of
from arengine.models import DEFAULT_MODELS_DIR, PACKAGED_MODELS_DIR
from arengine.settings import Settings


def references(
    settings: Settings, action: str, name: str, items: list[str], title: str | None = None
) -> int:
    """Run one action; 0 when every item was done, 1 when any was refused (said on stderr)."""
    if title is not None and (action != "add" or len(items) != 1):
        print("arengine: --title names one file being added", file=sys.stderr)
        return 2
    if (
        action == "add"
        and settings.engine.models_dir is None
        and DEFAULT_MODELS_DIR == PACKAGED_MODELS_DIR
    ):
        print(
            "arengine: the built-in models are inside the installed package, which is no place "
            "for a library: name a folder with --models-dir (and serve that folder with "
            f"--models-dir; copy models from {DEFAULT_MODELS_DIR} into it to serve them too)",
            file=sys.stderr,
        )
        return 2
    try:
        database = _shared_database(settings)
    except DatabaseUrlError as error:
        print(f"arengine: {error}", file=sys.stderr)
        return 2
    try:
        return _run(settings, action, name, items, title, database)
    except SQLAlchemyError as error:
        url = database_url(settings)
        where = failure(url, error) if url is not None else str(error)
        print(f"arengine: {where}", file=sys.stderr)
        return 1
    finally:
        if database is not None:
            database.dispose()


def _run(
    settings: Settings,
    action: str,
    name: str,
    items: list[str],
    title: str | None,
    database: sa.Engine | None,
) -> int:
    folder = (settings.engine.models_dir or DEFAULT_MODELS_DIR) / name
    made = action == "add" and not folder.exists()
    try:
        library = library_of(folder, action == "add", database)
    except FileNotFoundError as error:
        print(f"arengine: {error}: add a reference first", file=sys.stderr)
        return 1
    if action == "add":
        code = _add(library, [Path(item) for item in items], title, settings)
        if made and not library.references():
            # Nothing was added: the folder made here would be served as a model that finds
            # nothing (a mistyped name or file would leave one behind).
            if library.model is None:
                library.database.dispose()
            shutil.rmtree(folder)
        return code
    if action == "remove":
        return _remove(library, items)
    for ref in library.references():
        print(f"{ref.id}\t{ref.duration_s:.3f}\t{ref.title}")
    return 0


def _shared_database(settings: Settings) -> sa.Engine | None:
    """The PostgreSQL database `--database-url` names, its schema up to date (unless
    `--no-database-migrate`); None for the model folder's own file (SQLite, or no URL)."""
    if settings.database.database_url is None and settings.database.database_url_file is None:
        return None
    url = database_url(settings)
    if url is None or not is_postgresql(url):
        return None
    engine = open_engine(url, 1)
    if settings.database.database_migrate:
        try:
            upgrade(engine)
        except BaseException:
            engine.dispose()
            raise
    return engine


def _add(library: Library, files: list[Path], title: str | None, settings: Settings) -> int:
    limits = AudioLimits(
        max_duration_s=settings.limits.max_duration_s,
        max_channels=settings.limits.max_channels,
        min_sample_rate=settings.limits.min_sample_rate,
        max_sample_rate=settings.limits.max_sample_rate,
    )
    failed = 0
    for path in files:
        try:
            ref = add_file(library, path, limits, title or path.stem, {"file": path.name})
        except (ArengineError, OSError) as error:
            print(f"arengine: {path}: {error}", file=sys.stderr)
            failed += 1
            continue
        print(f"{ref.id}\t{ref.duration_s:.3f}\t{ref.title}")
    return 1 if failed else 0


def _remove(library: Library, items: list[str]) -> int:
    failed = 0
    for item in items:
        if not item.isdigit() or not library.remove(int(item)):
            print(f"arengine: no reference {item!r} (see `references list`)", file=sys.stderr)
            failed += 1
    return 1 if failed else 0

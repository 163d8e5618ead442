"""`arengine db upgrade|current|copy`: the shared database's schema and moving to another one.

`upgrade` brings the schema to this release (what `arengine serve` does at start unless
`--no-database-migrate`); `current` says which revisions the database is at; `copy` moves an
embedded SQLite database into an empty PostgreSQL one (`arengine/db/copy.py`). Every message
names a database by its URL with the password hidden.
"""

from __future__ import annotations

import sys

from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from arengine.db.engine import open_engine
from arengine.db.migrate import current, heads, upgrade
from arengine.db.url import DatabaseUrlError, database_url, parse, redacted
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
    engine = open_engine(url, settings.database_pool_size)
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
    try:
        counts = copy(origin, destination)
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

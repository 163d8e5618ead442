"""Alembic, run from the package: no alembic.ini, the revisions in `migrations/versions/`.

Each part of the schema is a branch of one history, named by its label (`jobs` here; the
fingerprint references are another branch), so that each grows its own revisions; a database is
brought to every branch's head (`heads`). Several replicas starting at once on one PostgreSQL
take an advisory lock first, and one of them migrates while the others wait, then find nothing
to do.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
_LOCK = 0x6172_656E_6769_6E65 & 0x7FFF_FFFF_FFFF_FFFF
"""The advisory lock that serialises migrations on PostgreSQL ("arengine" in ASCII)."""


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def heads() -> set[str]:
    """The newest revision of every branch this release ships."""
    return set(ScriptDirectory.from_config(_config()).get_heads())


def current(engine: Engine) -> set[str]:
    """The revisions the database is at (empty: never migrated)."""
    with engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


def up_to_date(engine: Engine) -> bool:
    """Whether every branch of the database is at this release's head."""
    return current(engine) == heads()


def upgrade(engine: Engine, target: str = "heads") -> None:
    """Bring the database to `target` (every branch's head): what `arengine serve` does at start
    and `arengine db upgrade` on demand. A job store made before the migrations (its tables
    there, no revision) is taken as it is by the first revision, its jobs kept."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK})")
        before = set(MigrationContext.configure(connection).get_current_heads())
        command.upgrade(_config(connection), target)
        after = set(MigrationContext.configure(connection).get_current_heads())
    if after != before:
        log.info("database schema migrated to %s", ", ".join(sorted(after)))

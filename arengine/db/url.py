"""Which database: `database_url`, or the SQLite file of the data directory, with its password
taken from the URL, a file or the environment; and the URL's form that may be shown (no password).

The URL is a secret (it may hold a password): nothing here logs it, and `redacted` is the only
form an error message or a log line may carry.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from arengine.settings import Settings

SQLITE_FILE = "jobs.sqlite3"
"""The embedded default: the file of the data directory that the job store has always used."""

DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
"""A plain `postgresql://` URL means psycopg 3, the one PostgreSQL driver arengine ships."""
SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")


class DatabaseUrlError(ValueError):
    """A database URL that cannot be used; its message never holds the password."""


def database_url(settings: Settings) -> URL | None:
    """The database `settings` name: `database_url` (or the file `database_url_file` holds),
    else `<data_dir>/jobs.sqlite3`; None when neither is set (jobs are off)."""
    raw = (
        settings.database.database_url.get_secret_value()
        if settings.database.database_url
        else None
    )
    if raw is None and settings.database.database_url_file is not None:
        raw = Path(settings.database.database_url_file).read_text(encoding="utf-8").strip()
    if raw is None:
        if settings.jobs.data_dir is None:
            return None
        return URL.create("sqlite", database=str(Path(settings.jobs.data_dir) / SQLITE_FILE))
    return with_password(parse(raw), _password(settings))


def parse(raw: str) -> URL:
    """`raw` as a URL of a database arengine supports, `postgresql://` given psycopg 3.

    >>> parse("postgresql://ar:pw@db/arengine").render_as_string(hide_password=True)
    'postgresql+psycopg://ar:***@db/arengine'
    """
    try:
        url = make_url(raw)
    except ArgumentError:
        raise DatabaseUrlError(
            "database_url is not a URL: give sqlite:///PATH or postgresql://USER@HOST/NAME"
        ) from None
    url = url.set(drivername=DRIVERS.get(url.drivername, url.drivername))
    if url.drivername not in SCHEMES:
        raise DatabaseUrlError(
            f"database_url's scheme {url.drivername!r} is not supported: give sqlite:///PATH "
            f"or postgresql://USER@HOST/NAME"
        )
    return url


def redacted(url: URL | str) -> str:
    """`url` as it may be logged or shown: the password replaced by `***`.

    >>> redacted("postgresql://ar:hunter2@db:5432/arengine")
    'postgresql://ar:***@db:5432/arengine'
    """
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except ArgumentError:
        return "(a database URL that cannot be read)"
    return parsed.render_as_string(hide_password=True)


def is_postgresql(url: URL) -> bool:
    return url.get_backend_name() == "postgresql"


def with_password(url: URL, password: str | None) -> URL:
    """`url` with `password`, unless it has one already (two passwords: refused)."""
    if password is None:
        return url
    if url.password is not None:
        raise DatabaseUrlError(
            "give the database password in database_url or in ARENGINE_DATABASE_PASSWORD "
            "(or its file), not both"
        )
    return url.set(password=password)


def _password(settings: Settings) -> str | None:
    """The password from the settings or their file; libpq's own PGPASSWORD (and PGPASSFILE)
    psycopg reads by itself when the URL has none."""
    if settings.database.database_password is not None:
        return settings.database.database_password.get_secret_value()
    if settings.database.database_password_file is not None:
        return Path(settings.database.database_password_file).read_text(encoding="utf-8").strip()
    return None

"""Which database the settings name, and that its password shows nowhere: not in the URL as
shown, not in `arengine db`'s output nor its error when the database refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arengine.db.url import DatabaseUrlError, database_url, parse, redacted
from arengine.settings import Settings
from tests.conftest import free_port
from tests.postgres import PostgreSQL


def test_the_data_directory_gives_the_sqlite_file_it_always_had(tmp_path: Path) -> None:
    url = database_url(Settings(data_dir=tmp_path))
    assert url is not None and url.drivername == "sqlite"
    assert url.database == str(tmp_path / "jobs.sqlite3")
    assert database_url(Settings()) is None


def test_postgresql_means_psycopg_3_and_other_schemes_are_refused() -> None:
    assert parse("postgresql://a@db/x").drivername == "postgresql+psycopg"
    assert parse("postgres://a@db/x").drivername == "postgresql+psycopg"
    with pytest.raises(DatabaseUrlError, match="mysql") as refused:
        parse("mysql://a:hunter2@db/x")
    assert "hunter2" not in str(refused.value)


def test_the_password_comes_from_the_url_a_file_or_the_environment(tmp_path: Path) -> None:
    url_file = tmp_path / "url"
    url_file.write_text("postgresql://ar@db/arengine\n")
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    from_file = database_url(Settings(database_url_file=url_file, database_password_file=secret))
    assert from_file is not None and from_file.password == "s3cret"
    from_env = database_url(
        Settings(database_url="postgresql://ar@db/arengine", database_password="pw")
    )
    assert from_env is not None and from_env.password == "pw"
    with pytest.raises(DatabaseUrlError, match="not both") as twice:
        database_url(Settings(database_url="postgresql://ar:a@db/x", database_password="b"))
    assert ":a@" not in str(twice.value)


def test_the_url_is_a_secret_in_the_settings_and_shown_without_its_password() -> None:
    settings = Settings(database_url="postgresql://ar:hunter2@db/arengine")
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    url = database_url(settings)
    assert url is not None and "hunter2" not in redacted(url) and "hunter2" not in repr(url)
    assert redacted(url) == "postgresql+psycopg://ar:***@db/arengine"


def _db(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arengine", "db", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_a_refused_connection_names_the_database_without_its_password() -> None:
    refused = _db("current", "--database-url", f"postgresql://ar:hunter2@127.0.0.1:{free_port()}/x")
    assert refused.returncode == 1
    assert "hunter2" not in refused.stdout + refused.stderr
    assert "postgresql+psycopg://ar:***@127.0.0.1" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_db_upgrade_migrates_and_current_says_where_it_is(
    tmp_path: Path, postgresql: PostgreSQL
) -> None:
    done = _db("upgrade", "--data-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "jobs_0001" in done.stdout and (tmp_path / "jobs.sqlite3").exists()
    url = postgresql.database()
    fresh = _db("current", "--database-url", url)
    assert fresh.returncode == 0 and "no revision" in fresh.stdout
    assert _db("upgrade", "--database-url", url).returncode == 0
    assert "jobs_0001" in _db("current", "--database-url", url).stdout

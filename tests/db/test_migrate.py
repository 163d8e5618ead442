"""The migrations on both backends: a new database gets every declared table and column, a job
store of an earlier release keeps its jobs, and upgrading twice changes nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, select

from arengine.db import schema
from arengine.db.engine import open_engine
from arengine.db.migrate import current, heads, up_to_date, upgrade
from arengine.db.url import parse
from arengine.jobs.store import JobStore, StoreUnusable


def test_a_new_database_gets_every_declared_table_and_column(engine: Engine) -> None:
    assert current(engine) == set() and not up_to_date(engine)
    upgrade(engine)
    assert up_to_date(engine) and current(engine) == heads()
    inspector = inspect(engine)
    for table in schema.JOBS_TABLES:
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        assert columns == set(table.columns.keys()), table.name
    upgrade(engine)  # nothing left to do
    assert current(engine) == heads()


def test_each_part_of_the_schema_is_a_branch_of_its_own() -> None:
    assert any(head.startswith("jobs_") for head in heads())


# The schema arengine 0.2 created in jobs.sqlite3 (arengine/jobs/store.py and outbox.py then),
# its trigger included, with no Alembic revision.
_OLD_SCHEMA = """
CREATE TABLE jobs (id TEXT PRIMARY KEY, owner TEXT, model TEXT NOT NULL, overrides TEXT NOT NULL,
    stream INTEGER, filename TEXT, state TEXT NOT NULL, done_s REAL NOT NULL DEFAULT 0,
    duration_s REAL, error_code TEXT, error_message TEXT, created REAL NOT NULL, finished REAL,
    result TEXT);
CREATE TABLE webhook_subscriptions (job_id TEXT PRIMARY KEY, url TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE webhook_outbox (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, url TEXT NOT NULL,
    body TEXT NOT NULL, created REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL, sender TEXT, sending_since REAL);
CREATE TRIGGER webhook_on_job_end AFTER UPDATE OF state ON jobs BEGIN SELECT 1; END;
INSERT INTO jobs (id, model, overrides, state, created)
    VALUES ('kept', 'speech', '{}', 'queued', 1);
"""


def test_a_job_store_of_an_earlier_release_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    with sqlite3.connect(path) as old:
        old.executescript(_OLD_SCHEMA)
    engine = open_engine(parse(f"sqlite:///{path}"))
    upgrade(engine)
    assert up_to_date(engine)
    with engine.connect() as connection:
        rows = connection.execute(select(schema.jobs.c.id, schema.jobs.c.runner)).all()
        triggers = connection.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        )
        assert rows == [("kept", None)] and triggers.all() == []
    columns = {column["name"] for column in inspect(engine).get_columns("jobs")}
    assert columns == set(schema.jobs.columns.keys())
    engine.dispose()


def test_a_server_that_may_not_migrate_refuses_an_older_schema(tmp_path: Path) -> None:
    engine = open_engine(parse(f"sqlite:///{tmp_path / 'jobs.sqlite3'}"))
    with pytest.raises(StoreUnusable, match="arengine db upgrade"):
        JobStore.open(tmp_path, engine, migrate=False)
    engine = open_engine(parse(f"sqlite:///{tmp_path / 'jobs.sqlite3'}"))
    upgrade(engine)
    JobStore.open(tmp_path, engine, migrate=False).close()


def test_an_upgrade_logs_one_line_and_nothing_of_alembics(tmp_path: Path) -> None:
    # Alembic sets up its plugins once a process, logging a line each at INFO: seven lines at
    # every start of every replica before. A fresh process, as a server's start is.
    code = (
        "import sys; from arengine.system.logs import configure; configure('info'); "
        "from arengine.db.engine import open_engine; from arengine.db.migrate import upgrade; "
        "from arengine.db.url import parse; upgrade(open_engine(parse(sys.argv[1])))"
    )
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (done.stdout + done.stderr).splitlines()]
    assert [line["logger"] for line in lines] == ["arengine.db.migrate"]

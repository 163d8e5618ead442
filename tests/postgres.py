"""A real PostgreSQL for the tests (Debian's `postgresql` 15, `deploy/setup.sh --test`): a
cluster made by `initdb` in a temporary folder, listening on a free loopback port, and a fresh
database per test that asks for one.

PostgreSQL refuses to run as root (the tests do, here and in CI): then the cluster belongs to
`nobody` and its programs are run with `runuser`; the tests connect over TCP with trust
authentication on 127.0.0.1, so the user who runs them does not matter.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.conftest import free_port

BIN = Path(os.environ.get("ARENGINE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
MISSING = f"needs Debian's postgresql ({BIN}/initdb; deploy/setup.sh --test)"


def available() -> bool:
    return (BIN / "initdb").exists() and (BIN / "pg_ctl").exists()


def needs_postgresql() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not available(), reason=MISSING)


class PostgreSQL:
    """One cluster; `database()` makes an empty database on it and gives its URL."""

    def __init__(self) -> None:
        # Under /tmp, not pytest's tmp_path: its parents are root's own (0700), and `nobody`
        # must reach the cluster's folder.
        self.folder = Path(tempfile.mkdtemp(prefix="arengine-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.log = self.folder / "postgres.log"
        self._user: list[str] = []
        if os.geteuid() == 0:
            os.chown(self.folder, pwd.getpwnam("nobody").pw_uid, -1)
            self._user = ["runuser", "-u", "nobody", "--"]

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")  # fmt: skip
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
            # Tests want speed, not durability: a crashed test cluster is thrown away.
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new empty database's URL."""
        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self._user, str(BIN / program), *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise AssertionError(f"{program} failed: {done.stdout}{done.stderr}{log}")


@contextmanager
def running_postgresql() -> Iterator[PostgreSQL]:
    server = PostgreSQL()
    try:
        server.start()
        yield server
    finally:
        server.stop()


BACKENDS = ("sqlite", "postgresql")
"""The databases every store test runs on."""


def backend_url(backend: str, folder: Path, request: pytest.FixtureRequest) -> str:
    """A new, empty database of `backend`: the SQLite file of data directory `folder`, or a
    database on the session's PostgreSQL."""
    if backend == "sqlite":
        return f"sqlite:///{folder / 'jobs.sqlite3'}"
    server: PostgreSQL = request.getfixturevalue("postgresql")
    return server.database()

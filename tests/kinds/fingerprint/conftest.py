"""Both backends of a reference library for the tests of this folder: a model folder's SQLite
file, and the tables every replica shares on a real PostgreSQL (`tests/postgres.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from arengine.db.engine import open_engine
from arengine.db.migrate import upgrade
from arengine.db.url import parse
from arengine.kinds.fingerprint.library import Library
from tests.postgres import PostgreSQL

OpenLibrary = Callable[..., Library]


def postgres_engine(url: str) -> sa.Engine:
    return open_engine(parse(url))


def migrated(url: str) -> None:
    """The shared tables made in the database at `url`, as a server's start makes them."""
    engine = postgres_engine(url)
    upgrade(engine)
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The backend's name and where its libraries are: a models folder, or a database URL."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path)
        return
    server: PostgreSQL = request.getfixturevalue("postgresql")
    url = server.database()
    migrated(url)
    yield "postgresql", url


@pytest.fixture
def open_library(backend: tuple[str, str]) -> Iterator[OpenLibrary]:
    """`open_library(model)`: that model's library, opened anew (made when missing)."""
    name, where = backend
    opened: list[Library] = []

    def open_library(model: str = "jingles") -> Library:
        if name == "sqlite":
            library = Library.create(Path(where) / model / "library.sqlite")
        else:
            library = Library.shared(postgres_engine(where), model)
        opened.append(library)
        return library

    yield open_library
    for library in opened:
        library.database.dispose()

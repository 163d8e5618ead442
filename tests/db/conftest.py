"""The two backends every database test runs on: the embedded SQLite file and a real
PostgreSQL (a fresh database per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from arengine.db.engine import open_engine
from arengine.db.url import parse
from tests.postgres import BACKENDS, backend_url


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path, request)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = open_engine(parse(database_url))
    yield engine
    engine.dispose()

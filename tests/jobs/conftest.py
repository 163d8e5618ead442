"""The job store on both backends: each test that takes `open_store` runs on the data
directory's SQLite file and on a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from arengine.db.engine import open_engine
from arengine.db.url import parse
from arengine.jobs.store import JobStore
from tests.postgres import BACKENDS, backend_url

StoreFactory = Callable[[], JobStore]
"""Opens the test's store (again): its files in `tmp_path`, its rows in the test's database."""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return backend_url(backend, tmp_path, request)


@pytest.fixture
def open_store(store_url: str, tmp_path: Path) -> Iterator[StoreFactory]:
    opened: list[JobStore] = []

    def open_store() -> JobStore:
        opened.append(JobStore.open(tmp_path, open_engine(parse(store_url))))
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()

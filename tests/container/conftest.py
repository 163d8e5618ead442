"""The container suite: marked `container`, run when a Docker engine is reachable or can be
started, skipped with the reason otherwise. The image is built once per session, and not at all
when `arengine:latest` was built from the same inputs (deploy/image.sh --reuse)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.docker import (
    IMAGE,
    build_image,
    engine_unavailable,
    remove_test_containers,
)

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.container)


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    reason = engine_unavailable()
    if reason is not None:
        pytest.skip(reason)
    build_image()
    try:
        yield IMAGE
    finally:
        remove_test_containers()

"""The container suite: marked `container`, run when a Docker engine is reachable or can be
started, skipped with the reason otherwise. The image is built once per session, and not at all
when `arengine:latest` was built from the same inputs (deploy/image.sh --reuse). The build starts
in the background as soon as the session has collected a container test, and the container tests
run last, so the build overlaps the rest of the suite instead of adding to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.docker import IMAGE, ImageBuild, remove_test_containers

HERE = Path(__file__).parent

_BUILDS: list[ImageBuild] = []
"""The session's image build, once begun."""


def _ours(item: pytest.Item) -> bool:
    return HERE in Path(str(item.fspath)).parents


@pytest.hookimpl(tryfirst=True)  # marked before tests/conftest.py orders the workers' tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ours = [item for item in items if _ours(item)]
    for item in ours:
        item.add_marker(pytest.mark.container)
    # Last, in their own order (the sort is stable): by then the image is built.
    items.sort(key=_ours)


def pytest_collection_finish(session: pytest.Session) -> None:
    # After `-m` and `-k` have deselected: no build when no container test will run. Under
    # pytest-xdist every worker collects the whole suite: the first starts the build, and another
    # that runs the container tests waits for it (deploy/image.sh runs under a lock) in `image`.
    worker = getattr(session.config, "workerinput", {}).get("workerid", "gw0")
    if session.config.option.collectonly or _BUILDS or worker != "gw0":
        return
    if any(_ours(item) for item in session.items):
        _BUILDS.append(ImageBuild())


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    if not _BUILDS:  # a container fixture requested from elsewhere
        _BUILDS.append(ImageBuild())
    reason = _BUILDS[0].wait()
    if reason is not None:
        pytest.skip(reason)
    try:
        yield IMAGE
    finally:
        remove_test_containers()

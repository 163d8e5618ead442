"""What every collected test shares, the doctests of `arengine` and the client included."""

from __future__ import annotations

import tempfile

import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def doctest_scratch(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A doctest's `tempfile.mkdtemp()` makes its folder under pytest's own temporary folder,
    which pytest prunes, not in /tmp, where every run of the suite left its stores behind."""
    if isinstance(request.node, DoctestItem):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("doctest")))

"""The doctests of the package, run as the suite runs them, leave nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

STORES = ["arengine/jobs/store.py", "arengine/jobs/scores.py", "arengine/db/engine.py"]
"""Doctests that make a folder with `tempfile.mkdtemp()` and write a store into it."""


def test_doctests_write_their_folders_under_pytest_s_own(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(
        [*pytest, "-o", "addopts=--doctest-modules", *STORES],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "6 passed" in done.stdout  # every doctest of the three modules ran
    left = [path.name for path in scratch.iterdir() if not path.name.startswith("pytest-of-")]
    assert left == []

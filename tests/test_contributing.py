"""CONTRIBUTING.md's code map ("How it works") names only paths that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
FOLDERS = "arengine|client|tests|loadtests|deploy|models"
NAMED = re.compile(rf"\b((?:{FOLDERS})/[\w./-]*\w)(?![\w<])")
"""A path under one of the top folders; `tests/test_<module>.py` is a pattern, not a path (a
name cut short at `<` is no path)."""


def test_every_path_in_the_code_map_exists() -> None:
    paths = set(NAMED.findall(CONTRIBUTING))
    assert len(paths) >= 10
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"CONTRIBUTING.md names paths that do not exist: {missing}"

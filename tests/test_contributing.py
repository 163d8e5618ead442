"""CONTRIBUTING.md's code map ("How it works") names only paths that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


def test_every_path_in_the_code_map_exists() -> None:
    paths = set(
        re.findall(
            r"\b((?:arengine|tests|loadtests|deploy|models)/[\w./-]*\w)(?![\w<])", CONTRIBUTING
        )
    )
    assert len(paths) >= 10
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"CONTRIBUTING.md names paths that do not exist: {missing}"

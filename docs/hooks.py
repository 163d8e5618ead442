"""MkDocs hook (`hooks:` in mkdocs.yml): adds the reference pages generated from the code.

The pages exist only in the built site, never as files to edit; `docs/references.py` writes them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # MkDocs loads this file by path: make `docs.references` importable
    sys.path.insert(0, str(ROOT))

from mkdocs.structure.files import File, Files  # noqa: E402

from docs.references import PAGES  # noqa: E402

COPIED = {"changelog.md": "CHANGELOG.md", "contributing.md": "CONTRIBUTING.md"}
"""Pages that are files of the repository's root, shown in the site as they are."""


def on_files(files: Files, config: Any) -> Files:
    for path, page in PAGES.items():
        files.append(File.generated(config, path, content=page()))
    for path, source in COPIED.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, path, content=text))
    return files


INCLUDE = re.compile(r"<!-- include: ([\w./-]+)#([^>]+?) -->")
"""`<!-- include: models/README.md#Manifest -->`: that file's section, kept in one place."""


def _section(match: re.Match[str]) -> str:
    text = (ROOT / match.group(1)).read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(match.group(2))}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if found is None:
        raise ValueError(f"{match.group(1)} has no section {match.group(2)!r}")
    return f"## {match.group(2)}\n{found.group(1)}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return INCLUDE.sub(_section, markdown)

"""The README is short and points into the site; its quick starts are those of the guides.

Its reference tables moved to the site's generated references (`tests/test_docs.py` checks them)
and its code map to CONTRIBUTING.md (`tests/test_contributing.py`); the quick starts are run by
`tests/e2e/test_quick_starts.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arengine.models import DEFAULT_MODELS_DIR

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def quick_starts(path: Path) -> dict[str, str]:
    """The commands of each block marked `<!-- quick-start: NAME -->` in `path`, by name."""
    text = path.read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- quick-start: ([\w-]+) -->\n```sh\n(.*?)\n```", text, re.S))


QUICK_STARTS = quick_starts(ROOT / "README.md")
"""Each quick start's commands, by name."""

GUIDES = {
    "speech": "guides/speech-music.md",
    "birds": "guides/birds.md",
    "alarm": "guides/events.md",
    "broadcast": "guides/broadcast.md",
    "jobs": "guides/jobs.md",
}
SCREENFUL = 40
"""Lines of a guide a reader sees first: its quick start must be within them."""


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 200


def test_the_readme_has_a_quick_start_for_each_use() -> None:
    assert set(QUICK_STARTS) == set(GUIDES)


@pytest.mark.parametrize("name", sorted(GUIDES))
def test_each_quick_start_opens_its_guide(name: str) -> None:
    guide = (ROOT / "docs" / GUIDES[name]).read_text(encoding="utf-8")
    first = "\n".join(guide.splitlines()[:SCREENFUL])
    assert f"```sh\n{QUICK_STARTS[name]}\n```" in first, f"{GUIDES[name]} lost {name}'s quick start"


def test_the_readme_links_only_to_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_the_models_table_lists_every_shipped_model() -> None:
    listed = set(re.findall(r"^\| `(\w+)`", README, flags=re.MULTILINE))
    shipped = {path.parent.name for path in DEFAULT_MODELS_DIR.glob("*/manifest.toml")}
    assert listed == shipped

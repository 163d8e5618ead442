"""Model cards: declared in every shipped manifest, shown as `models/README.md`'s table."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from arengine.cli.cards import markdown_table
from arengine.kinds.manifest import CARD_FIELDS, ManifestError, read_manifest
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models

SHIPPED = sorted(DEFAULT_MODELS_DIR.glob("*/manifest.toml"))


@pytest.mark.slow  # every shipped model loaded and timed
def test_models_readme_table_is_the_one_the_manifests_give() -> None:
    loaded, failures = load_models(DEFAULT_MODELS_DIR)
    assert failures == []
    readme = (DEFAULT_MODELS_DIR / "README.md").read_text()
    found = re.search(r"<!-- cards:start -->\n(.*?)\n<!-- cards:end -->", readme, re.S)
    assert found is not None, "models/README.md lost its cards markers"
    table = markdown_table(loaded)
    assert found.group(1) == table, f"models/README.md's card table is stale; paste:\n{table}"
    for name, model in loaded.items():
        assert f"| `{name}` | {model.recognizer.kind} |" in table
        assert 0 < model.real_time_factor < math.inf


@pytest.mark.parametrize("path", SHIPPED, ids=[p.parent.name for p in SHIPPED])
def test_every_shipped_model_declares_its_whole_card(path: Path) -> None:
    card = read_manifest(path).card
    missing = [name for name in CARD_FIELDS if not getattr(card, name)]
    assert missing == [], f"{path} [card] lacks {missing}"


def _manifest(tmp_path: Path, card: str) -> Path:
    """The pitch model's manifest and weights, its card replaced by `card`."""
    text = (DEFAULT_MODELS_DIR / "pitch" / "manifest.toml").read_text()
    shutil.copytree(DEFAULT_MODELS_DIR / "pitch", tmp_path / "pitch")
    path = tmp_path / "pitch" / "manifest.toml"
    path.write_text(text[: text.index("[card]")] + card)
    return path


def test_a_card_is_optional_and_its_fields_are_checked(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "")
    assert read_manifest(path).card.licence is None  # a user's manifest without a card loads
    path.write_text(path.read_text() + '[card]\nlicense = "MIT"\n')
    with pytest.raises(ManifestError, match=r"unknown keys \['license'\]; accepted: task, licence"):
        read_manifest(path)
    path.write_text(path.read_text().replace('license = "MIT"', "version = 3"))
    with pytest.raises(ManifestError, match="values must be strings: version"):
        read_manifest(path)

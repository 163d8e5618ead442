"""A kind's own tag fields: each declared once, with its JSON schema and its output columns.

`Tag` holds the fields every kind shares (start, end, label, score, model); a field that only one
kind gives (a note's `midi`, a bird's `scientific_name`) is a `TagField` declared in that kind's
folder (`<kind>/fields.py`) and listed in its `Kind(tag_fields=...)`. Everything else is derived
from the declarations, in `KINDS` order (`catalog.TAG_FIELDS`): `TagOut`'s validation and OpenAPI
text (`arengine/http/schemas.py`), the CSV's and Raven's columns, and what BirdNET, Kaleidoscope,
JAMS and MIDI read through a `Role` (`arengine/outputs/`). So shared code names no kind field,
and a kind adds one without touching the outputs or the HTTP schemas.

The kind's own code reads and writes a field through its declaration, so that a misspelt name is
a NameError, not an unset field:

    >>> from arengine.types import Extra, Tag
    >>> MIDI = TagField("midi", int, "The MIDI note number.", bounds={"ge": 0, "le": 127})
    >>> tag = Tag(0.5, 0.75, "A4", 0.9, extra=extra_of((MIDI, 69)))
    >>> MIDI.of(tag)
    69
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from arengine.types import Extra, Tag

T = TypeVar("T")

MAX_TIME_S = 10_000_000.0
"""The latest time a result may hold (116 days): past it a time is a forgery, not a recording.
Here, not in the HTTP schemas, because a kind's fields that are times bound them by it too."""


class Role(StrEnum):
    """What an output format with fixed columns reads a field as: formats name roles, never
    fields, so a kind fills a format's column by giving its field the role."""

    PITCH_HZ = "pitch_hz"
    """The tag's pitch in Hz: Raven's frequency band (a quarter-tone around it), MIDI's and
    JAMS's note where no MIDI number is given."""
    MIDI_NOTE = "midi_note"
    """A MIDI note number: MIDI's and JAMS's note."""
    PITCH_BEND = "pitch_bend"
    """Per-frame offsets from the MIDI note in thirds of a semitone: MIDI's pitch wheel."""
    SPECIES = "species"
    """A species' scientific name: BirdNET's and Kaleidoscope's `Scientific name` column (their
    common name is the label), and Raven's column beside the annotation, as BirdNET puts it."""


@dataclass(frozen=True, slots=True)
class TagField(Generic[T]):
    """One field of a kind's tags: its JSON name, type, bounds, description and columns."""

    name: str
    """Its JSON key, CSV column and `Tag.extra` key."""
    type: type
    """`float`, `int` or `str`; the type of each item where `sequence`."""
    description: str
    """The OpenAPI text of `TagOut`'s field."""
    bounds: Mapping[str, float] = field(default_factory=dict)
    """pydantic `Field` constraints (`ge`, `le`, `gt`, `max_length`) of the value, or of each
    item where `sequence`: what `POST /v1/render` refuses."""
    sequence: bool = False
    """A list of `type` (a tuple in `Tag.extra`)."""
    csv: bool = False
    """The CSV has a column for it, named after it, where a tag of the result has it set."""
    raven: str | None = None
    """Its column in a Raven selection table, where a tag of the result has it set."""
    role: Role | None = None
    """What the fixed-column formats read it as."""
    check: Callable[[Any, float, float], str | None] | None = None
    """`check(value, start, end)`: why a value that keeps to `bounds` still does not fit its tag
    (None when it fits), e.g. more pitch bends than its length holds."""

    def of(self, tag: Tag) -> T | None:
        """The tag's value of this field, None where unset."""
        value: T | None = tag.extra.get(self.name)
        return value

    def at(self, tag: Tag) -> T:
        """The tag's value of this field, which it must have (`KeyError` naming it otherwise)."""
        value: T = tag.extra[self.name]
        return value

    def cell(self, text: str) -> Any:
        """The value of a text cell (CSV, Raven): None where empty."""
        if not text:
            return None
        if self.sequence:
            return tuple(self.type(item) for item in text.split())
        return self.type(text)

    @property
    def text(self) -> bool:
        """It holds text: written inert in the CSV formats, as labels are."""
        return self.type is str and not self.sequence


def extra_of(*pairs: tuple[TagField[Any], Any]) -> Extra:
    """A tag's `extra` from `(field, value)` pairs, in their order; None values left out."""
    return Extra({declared.name: value for declared, value in pairs})

"""The `notes` kind's own tag fields: a note's MIDI number and its pitch-bend contour."""

from __future__ import annotations

from arengine.kinds.fields import Role, TagField

MAX_BENDS_PER_S = 87
"""Pitch-bend values a note may carry per second (notes models give one a frame, 86.1 a second)."""


def _bends_fit(bends: tuple[float, ...], start: float, end: float) -> str | None:
    """More bends than the note's frames is a forgery: `POST /v1/render` would write them all."""
    most = MAX_BENDS_PER_S * (end - start) + 2
    if len(bends) > most:
        return f"{len(bends)} pitch bends over {end - start:g} s (at most {most:g})"
    return None


MIDI: TagField[int] = TagField(
    "midi",
    int,
    "Note models: MIDI note number (69 is A4).",
    bounds={"ge": 0, "le": 127},
    role=Role.MIDI_NOTE,
)
"""MIDI note number (69 is A4); the CSV leaves it out (the label names the note)."""
PITCH_BEND: TagField[tuple[float, ...]] = TagField(
    "pitch_bend",
    float,
    "Notes models with pitch_bends=1: per frame (86 a second), the pitch relative to `midi` in "
    "thirds of a semitone.",
    bounds={"ge": -264, "le": 264},
    sequence=True,
    role=Role.PITCH_BEND,
    check=_bends_fit,
)
"""Per-frame pitch offsets from `midi` in thirds of a semitone, when asked (`pitch_bends=1`)."""

FIELDS = (MIDI, PITCH_BEND)

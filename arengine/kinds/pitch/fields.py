"""The `pitch` kind's own tag field: a note's measured frequency (declared as `fields.py` says)."""

from __future__ import annotations

from arengine.kinds.fields import Role, TagField

FREQUENCY_HZ: TagField[float] = TagField(
    "frequency_hz",
    float,
    "Pitch models: mean frequency of the note.",
    csv=True,
    role=Role.PITCH_HZ,
)
"""Mean fundamental frequency of a pitch tag (its label is the nearest note's name)."""

FIELDS = (FREQUENCY_HZ,)

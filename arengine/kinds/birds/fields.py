"""The `birds` kind's own tag field: the species' scientific name."""

from __future__ import annotations

from arengine.kinds.fields import Role, TagField

SCIENTIFIC_NAME: TagField[str] = TagField(
    "scientific_name",
    str,
    "Bird models: the species' scientific name (`label` is the common one).",
    csv=True,
    raven="Scientific Name",
    role=Role.SPECIES,
)
"""The species' scientific name (the label is the common name, as BirdNET's tables have it)."""

FIELDS = (SCIENTIFIC_NAME,)

"""The `events` kind's own tag field: the label's identifier in its ontology."""

from __future__ import annotations

from arengine.kinds.fields import TagField

LABEL_ID: TagField[str] = TagField(
    "label_id",
    str,
    "Events models: the label's AudioSet id (`/m/09x0r` is Speech).",
    csv=True,
)
"""AudioSet's `/m/09x0r` (Speech); the shared label tagger (`arengine/postprocess/labels.py`)
writes it under this name from a vocabulary with ids, which only events models have."""

FIELDS = (LABEL_ID,)

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
writes a vocabulary's ids under the name the recognizer gives it (`id_field`): only events
models have ids."""

FIELDS = (LABEL_ID,)

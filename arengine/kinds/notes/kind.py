"""The `notes` kind's declaration: basic-pitch's note transcription."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.manifest import Manifest
from arengine.kinds.notes.fields import FIELDS
from arengine.kinds.notes.tagger import NotesParams, NotesTagger

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _notes(manifest: Manifest, segment_s: float) -> Recognizer:
    from arengine.kinds.notes.recognizer import NotesRecognizer  # torch: only when a model loads

    params = NotesParams().with_overrides(manifest.postprocess)
    return NotesRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


KIND = Kind(
    name="notes",
    features="basic_pitch_windows",
    model_keys=(),
    fixed_labels=True,
    recognizer_path="arengine.kinds.notes.recognizer.NotesRecognizer",
    build=_notes,
    parameters=NotesParams,
    tagger=NotesTagger,
    tag_fields=FIELDS,
)

"""The `pitch` kind's declaration: CREPE tiny pitch to note tags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.manifest import Manifest
from arengine.kinds.pitch.fields import FIELDS
from arengine.kinds.pitch.tagger import PitchParams, PitchTagger

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _pitch(manifest: Manifest, segment_s: float) -> Recognizer:
    from arengine.kinds.pitch.recognizer import PitchRecognizer  # torch: only when a model loads

    params = PitchParams().with_overrides(manifest.postprocess)
    return PitchRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


KIND = Kind(
    name="pitch",
    features="crepe_frames",
    model_keys=(),
    fixed_labels=True,
    recognizer_path="arengine.kinds.pitch.recognizer.PitchRecognizer",
    build=_pitch,
    parameters=PitchParams,
    tagger=PitchTagger,
    tag_fields=FIELDS,
)

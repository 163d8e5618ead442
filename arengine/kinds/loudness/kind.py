"""The `loudness` kind's declaration: window levels to tags where the level rises."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.loudness.fields import FIELDS
from arengine.kinds.loudness.tagger import LoudnessParams, LoudnessTagger
from arengine.kinds.manifest import Manifest, ManifestError

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer
    from arengine.kinds.loudness.gate import LoudnessGate


def _loudness(manifest: Manifest, segment_s: float) -> Recognizer:
    """No weights to load: `[weights]` names the manifest itself (see models/loudness/)."""
    from arengine.kinds.loudness.recognizer import WINDOW_S, LoudnessRecognizer  # torch

    window_s = manifest.model.get("window_s", WINDOW_S)
    if isinstance(window_s, bool) or not isinstance(window_s, int | float):
        raise ManifestError(manifest.path, f"[model] window_s must be a number, got {window_s!r}")
    params = LoudnessParams().with_overrides(manifest.postprocess)
    return LoudnessRecognizer(
        manifest.sample_rate, segment_s, float(window_s), name=manifest.name, params=params
    )


def _gate(gate: Recognizer, recognizers: Sequence[Recognizer]) -> LoudnessGate:
    from arengine.kinds.loudness.gate import LoudnessGate
    from arengine.kinds.loudness.recognizer import LoudnessRecognizer

    assert isinstance(gate, LoudnessRecognizer)
    return LoudnessGate(gate, recognizers)


KIND = Kind(
    name="loudness",
    features="level",
    model_keys=("window_s",),
    fixed_labels=True,
    recognizer_path="arengine.kinds.loudness.recognizer.LoudnessRecognizer",
    build=_loudness,
    parameters=LoudnessParams,
    tagger=LoudnessTagger,
    tag_fields=FIELDS,
    gate=_gate,
)

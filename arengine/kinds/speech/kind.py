"""The `speech` kind's declaration: silero-vad speech probabilities to speech tags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.manifest import Manifest
from arengine.kinds.speech.tagger import SpeechParams, SpeechTagger

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _speech(manifest: Manifest, segment_s: float) -> Recognizer:
    from arengine.kinds.speech.network import SpeechModel  # torch: only when a model loads
    from arengine.kinds.speech.recognizer import SpeechRecognizer

    params = SpeechParams().with_overrides(manifest.postprocess)
    return SpeechRecognizer(
        SpeechModel.from_silero_archive(manifest.weights),
        segment_s,
        manifest.preroll_s,
        name=manifest.name,
        params=params,
        max_batch=int(manifest.model.get("batch", 1)),
    )


KIND = Kind(
    name="speech",
    features="waveform",
    model_keys=("batch",),
    fixed_labels=False,
    recognizer_path="arengine.kinds.speech.recognizer.SpeechRecognizer",
    build=_speech,
    parameters=SpeechParams,
    tagger=SpeechTagger,
)

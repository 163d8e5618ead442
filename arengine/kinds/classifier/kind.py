"""The `classifier` kind's declaration: a user's own network over log-mel windows, one score
per label."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.label_manifest import label_params
from arengine.kinds.manifest import Manifest
from arengine.postprocess.labels import LabelParams, LabelTagger

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _classifier(manifest: Manifest, segment_s: float) -> Recognizer:
    from arengine.kinds.classifier.recognizer import ClassifierRecognizer  # torch: when loading
    from arengine.kinds.classifier.runtimes import load_network
    from arengine.kinds.mel import MelParams

    model = manifest.model
    params, vocabulary = label_params(manifest, LabelParams)
    mel = MelParams(**{key: value for key, value in manifest.features.items() if key != "type"})
    return ClassifierRecognizer(
        manifest.name,
        load_network(manifest.weights),
        manifest.sample_rate,
        manifest.labels,
        mel,
        window_s=float(model.get("window_s", 1.0)),
        hop_s=float(model.get("hop_s", 0.5)),
        activation=str(model.get("activation", "sigmoid")),
        segment_s=segment_s,
        params=params,
        vocabulary=vocabulary,
    )


KIND = Kind(
    name="classifier",
    features="log_mel",
    model_keys=("activation", "window_s", "hop_s"),
    fixed_labels=False,
    recognizer_path="arengine.kinds.classifier.recognizer.ClassifierRecognizer",
    build=_classifier,
    parameters=LabelParams,
    tagger=LabelTagger,
)

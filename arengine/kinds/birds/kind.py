"""The `birds` kind's declaration: BirdNET's species, filtered by place and week."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.audio.recorded import birdnet_week
from arengine.kinds.birds.fields import FIELDS
from arengine.kinds.birds.tagger import BirdsParams, BirdsTagger
from arengine.kinds.declaration import Kind
from arengine.kinds.manifest import Manifest, ManifestError

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _birds(manifest: Manifest, segment_s: float) -> Recognizer:
    from arengine.kinds.birds.recognizer import BirdsRecognizer  # torch: when loading

    model = manifest.model
    package = manifest.weights.parent.parent.parent  # the resource is models/analyzer/<file>
    post = manifest.postprocess
    if not isinstance(post.get("thresholds", {}), dict) or not isinstance(
        post.get("species", []), list
    ):
        raise ManifestError(manifest.path, "thresholds must be a table and species a list")
    params = BirdsParams().with_overrides(post)
    return BirdsRecognizer(
        manifest.weights,
        package / str(model["location"]),
        package / str(model["labels"]),
        segment_s,
        name=manifest.name,
        params=params,
        overlap_s=float(model.get("overlap_s", 0.0)),
    )


KIND = Kind(
    name="birds",
    features="birdnet_windows",
    model_keys=("location", "labels", "overlap_s"),
    fixed_labels=True,
    recognizer_path="arengine.kinds.birds.recognizer.BirdsRecognizer",
    build=_birds,
    parameters=BirdsParams,
    tagger=BirdsTagger,
    tag_fields=FIELDS,
    from_recording_time=lambda when: {"week": birdnet_week(when)},
)

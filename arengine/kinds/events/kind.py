"""The `events` kind's declaration: YAMNet's 521 AudioSet classes, read from its class map."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.events.fields import FIELDS
from arengine.kinds.events.params import EventParams
from arengine.kinds.label_manifest import label_params
from arengine.kinds.manifest import Manifest, ManifestError
from arengine.postprocess.labels import LabelTagger
from arengine.postprocess.vocabulary import Ontology, Vocabulary

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _inside(manifest: Manifest, name: str) -> Path:
    """A data file of the model's own folder (never `..` or an absolute path)."""
    folder = manifest.path.parent.resolve()
    path = (folder / name).resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        raise ManifestError(manifest.path, f"{name!r} is not a file in {folder}")
    return path


def _events(manifest: Manifest, segment_s: float) -> Recognizer:
    """YAMNet: labels and AudioSet ids from the class map, groups also from the ontology."""
    from arengine.kinds.events.network import HOP_S as EVENTS_HOP_S  # torch: when loading
    from arengine.kinds.events.recognizer import EventsRecognizer, read_class_map

    if manifest.sample_rate != EventsRecognizer.sample_rate:
        raise ManifestError(manifest.path, "an events model runs at 16000 Hz")
    model = manifest.model
    labels, ids = read_class_map(_inside(manifest, str(model.get("class_map", "class_map.csv"))))
    ontology_file = model.get("ontology")
    ontology = Ontology.read(_inside(manifest, str(ontology_file))) if ontology_file else Ontology()
    params, vocabulary = label_params(
        manifest, EventParams, Vocabulary(labels, ids, ontology=ontology)
    )
    return EventsRecognizer(
        manifest.weights,
        labels,
        ids,
        segment_s,
        hop_s=float(model.get("hop_s", EVENTS_HOP_S)),
        name=manifest.name,
        params=params,
        vocabulary=vocabulary,
    )


KIND = Kind(
    name="events",
    features="yamnet_log_mel",
    model_keys=("hop_s", "class_map", "ontology"),
    fixed_labels=True,  # AudioSet's 521, from the class map in the model's folder
    recognizer_path="arengine.kinds.events.recognizer.EventsRecognizer",
    build=_events,
    parameters=EventParams,
    tagger=LabelTagger,
    tag_fields=FIELDS,
)

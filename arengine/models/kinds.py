"""The model kinds, each declared once: one `Kind` entry in `KINDS` holds all a kind is.

An entry names the kind's manifest section (whether the manifest lists labels, the `[features]
type` and the `[model]` keys it reads), its recognizer class and the builder that makes one from a
manifest, its post-processing parameters and its tagger. Everything else is derived from the
table: the manifest checks (`kind_of`), loading (`registry.py`), how a request's overrides are
shared between models (`registry.overrides_by_model`), the query's override fields and their
OpenAPI text (`http/schemas.py`), `GET /v1/models`, the README's parameter table
(`tests/test_readme.py`) and the `kind` line of the manifest example in `models/README.md`.
`tests/models/test_kinds.py` fails when a kind is half declared.

Post-processing: a kind whose tags are its own (speech, pitch, notes) has a module named after
it in `arengine/postprocess/`; kinds that tag labels from per-window scores (classifier, music)
share `postprocess/labels.py`, each with its own `LabelParams` subclass. The `tagger` column says
which module serves which kind.

Adding a kind `birds`:

1. `arengine/models/birds.py`: a class with the `Recognizer` contract (`recognizer.py`),
   `kind = "birds"`, whose `tagger()` returns the kind's tagger class.
2. Its post-processing in `arengine/postprocess/`: a `Params` dataclass with `kind = "birds"`
   and a tagger with the `Tagger` contract, in `postprocess/birds.py`; or, for label scores, a
   `LabelParams` subclass with `kind = "birds"` in `postprocess/labels.py`, tagged by
   `LabelTagger`.
3. One `Kind(...)` entry in `KINDS` below, its builder beside the others.
4. A folder under `models/` with its `manifest.toml` (and its card); then paste the tables that
   `python -m tests.test_readme` and `arengine models --markdown` print.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from arengine.models.birds import BirdsRecognizer
from arengine.models.classifier import ClassifierRecognizer
from arengine.models.manifest import Manifest, ManifestError
from arengine.models.mel import MelParams
from arengine.models.music import LABELS as MUSIC_LABELS
from arengine.models.music import MusicRecognizer
from arengine.models.notes import NotesRecognizer
from arengine.models.pitch import PitchRecognizer
from arengine.models.recognizer import Recognizer
from arengine.models.runtimes import load_network
from arengine.models.speech import SpeechModel, SpeechRecognizer
from arengine.postprocess.birds import BirdParams, BirdTagger
from arengine.postprocess.labels import LabelParams, LabelTagger, MusicParams
from arengine.postprocess.notes import PolyphonicParams, PolyphonicTagger
from arengine.postprocess.params import Params
from arengine.postprocess.pitch import NotesParams, NoteTagger
from arengine.postprocess.speech import SpeechParams, SpeechTagger

_Labels = TypeVar("_Labels", bound=LabelParams)


@dataclass(frozen=True, slots=True)
class Kind:
    """One model kind: its manifest section, recognizer, builder, parameters and tagger."""

    name: str
    """What a manifest's `kind` says; the recognizer's and the parameters' `kind` are the same."""
    features: str
    """The `[features] type` the kind computes (a manifest may leave it out; another is refused)."""
    model_keys: tuple[str, ...]
    """The keys the kind reads from `[model]`; any other is refused (a typo would be ignored)."""
    fixed_labels: bool
    """The kind fixes its labels (note names): the manifest lists none. Otherwise it must."""
    recognizer: type[Recognizer]
    build: Callable[[Manifest, float], Recognizer]
    """Manifest and segment length in seconds -> a loaded recognizer (`ManifestError` or
    `ValueError` when the manifest and the weights do not fit)."""
    parameters: type[Params]
    """The post-processing parameters: manifest defaults, query overrides, docs."""
    tagger: type
    """The post-processor class the recognizer's `tagger()` returns (its module is the kind's
    post-processing module)."""


def kind_of(manifest: Manifest) -> Kind:
    """The manifest's kind, with the manifest checked against its section."""
    path = manifest.path
    kind = KINDS.get(manifest.kind)
    if kind is None:
        raise ManifestError(path, f"kind {manifest.kind!r} is not one of {', '.join(KINDS)}")
    if kind.fixed_labels and manifest.labels:
        raise ManifestError(path, f"a {kind.name} model's labels are fixed by its kind: list none")
    if not kind.fixed_labels and not manifest.labels:
        raise ManifestError(path, f"a {kind.name} model needs its labels")
    features = manifest.features.get("type", kind.features)
    if features != kind.features:
        raise ManifestError(
            path, f"[features] type {features!r}: a {kind.name} model computes {kind.features!r}"
        )
    unknown = sorted(set(manifest.model) - set(kind.model_keys))
    if unknown:
        accepted = ", ".join(kind.model_keys) or "none"
        raise ManifestError(
            path, f"[model] has unknown keys {unknown}; a {kind.name} model reads: {accepted}"
        )
    return kind


def _speech(manifest: Manifest, segment_s: float) -> Recognizer:
    params = SpeechParams().with_overrides(manifest.postprocess)
    return SpeechRecognizer(
        SpeechModel.from_silero_archive(manifest.weights),
        segment_s,
        manifest.preroll_s,
        name=manifest.name,
        params=params,
        max_batch=int(manifest.model.get("batch", 1)),
    )


def _pitch(manifest: Manifest, segment_s: float) -> Recognizer:
    params = NotesParams().with_overrides(manifest.postprocess)
    return PitchRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


def _notes(manifest: Manifest, segment_s: float) -> Recognizer:
    params = PolyphonicParams().with_overrides(manifest.postprocess)
    return NotesRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


def _label_params(manifest: Manifest, kind: type[_Labels]) -> _Labels:
    post = dict(manifest.postprocess)
    thresholds = post.pop("thresholds", {})
    unknown = sorted(set(thresholds) - set(manifest.labels))
    if unknown:
        raise ManifestError(manifest.path, f"thresholds for unknown labels: {', '.join(unknown)}")
    return dataclasses.replace(kind().with_overrides(post), thresholds=thresholds)


def _classifier(manifest: Manifest, segment_s: float) -> Recognizer:
    model = manifest.model
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
        params=_label_params(manifest, LabelParams),
    )


def _music(manifest: Manifest, segment_s: float) -> Recognizer:
    if manifest.labels != MUSIC_LABELS or manifest.sample_rate != MusicRecognizer.sample_rate:
        raise ManifestError(
            manifest.path,
            f"a music model's labels are musicnn's 50 MagnaTagATune tags in their order, "
            f"at {MusicRecognizer.sample_rate} Hz: {list(MUSIC_LABELS)}",
        )
    params = _label_params(manifest, MusicParams)
    return MusicRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


def _birds(manifest: Manifest, segment_s: float) -> Recognizer:
    model = manifest.model
    package = manifest.weights.parent.parent.parent  # the resource is models/analyzer/<file>
    post = dict(manifest.postprocess)
    thresholds = post.pop("thresholds", {})
    species = post.pop("species", [])
    if not isinstance(thresholds, dict) or not isinstance(species, list):
        raise ManifestError(manifest.path, "thresholds must be a table and species a list")
    params = dataclasses.replace(
        BirdParams().with_overrides(post), thresholds=thresholds, species=tuple(species)
    )
    return BirdsRecognizer(
        manifest.weights,
        package / str(model["location"]),
        package / str(model["labels"]),
        segment_s,
        name=manifest.name,
        params=params,
        overlap_s=float(model.get("overlap_s", 0.0)),
    )


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            name="speech",
            features="waveform",
            model_keys=("batch",),
            fixed_labels=False,
            recognizer=SpeechRecognizer,
            build=_speech,
            parameters=SpeechParams,
            tagger=SpeechTagger,
        ),
        Kind(
            name="pitch",
            features="crepe_frames",
            model_keys=(),
            fixed_labels=True,
            recognizer=PitchRecognizer,
            build=_pitch,
            parameters=NotesParams,
            tagger=NoteTagger,
        ),
        Kind(
            name="notes",
            features="basic_pitch_windows",
            model_keys=(),
            fixed_labels=True,
            recognizer=NotesRecognizer,
            build=_notes,
            parameters=PolyphonicParams,
            tagger=PolyphonicTagger,
        ),
        Kind(
            name="classifier",
            features="log_mel",
            model_keys=("activation", "window_s", "hop_s"),
            fixed_labels=False,
            recognizer=ClassifierRecognizer,
            build=_classifier,
            parameters=LabelParams,
            tagger=LabelTagger,
        ),
        Kind(
            name="music",
            features="musicnn_log_mel",
            model_keys=(),
            fixed_labels=False,
            recognizer=MusicRecognizer,
            build=_music,
            parameters=MusicParams,
            tagger=LabelTagger,
        ),
        Kind(
            name="birds",
            features="birdnet_windows",
            model_keys=("location", "labels", "overlap_s"),
            fixed_labels=True,
            recognizer=BirdsRecognizer,
            build=_birds,
            parameters=BirdParams,
            tagger=BirdTagger,
        ),
    )
}
"""Every model kind, by name, in the order the docs list them."""

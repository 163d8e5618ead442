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
share `postprocess/labels.py`, each with its own `LabelParams` subclass (events too: its labels
are AudioSet's, read from the class map its `[model]` names, so its manifest lists none). The
`tagger` column says which module serves which kind.

Adding a kind `birds`:

1. `arengine/models/birds.py`: a class with the `Recognizer` contract (`recognizer.py`),
   `kind = "birds"` (and `input_shape = None` unless it runs a user's network), whose
   `__init__` takes `params: BirdsParams | None` and whose `tagger()` is annotated with the
   tagger class it returns.
2. Its post-processing in `arengine/postprocess/`: either `postprocess/birds.py` with a `Params`
   dataclass `BirdsParams` (`kind = "birds"`) and a `BirdsTagger` with the `Tagger` contract; or,
   for label scores, a `LabelParams` subclass `BirdsParams` (`kind = "birds"`) in
   `postprocess/labels.py`, tagged by `LabelTagger`.
3. One `Kind(...)` entry in `KINDS` below, its builder beside the others, and the kind's name in
   the `kind = ...` comment of `models/README.md`'s manifest example.
4. A folder under `models/` with its `manifest.toml` (and its card); then paste the tables that
   `python -m tests.test_readme` and `arengine models --markdown` print.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from arengine.audio.recorded import birdnet_week
from arengine.errors import InvalidInput
from arengine.models.birds import BirdsRecognizer
from arengine.models.classifier import ClassifierRecognizer
from arengine.models.events import HOP_S as EVENTS_HOP_S
from arengine.models.events import EventsRecognizer, read_class_map
from arengine.models.fingerprint import SAMPLE_RATE as FINGERPRINT_RATE
from arengine.models.fingerprint import FingerprintRecognizer
from arengine.models.manifest import Manifest, ManifestError
from arengine.models.mel import MelParams
from arengine.models.music import LABELS as MUSIC_LABELS
from arengine.models.music import MusicRecognizer
from arengine.models.notes import NotesRecognizer
from arengine.models.pitch import PitchRecognizer
from arengine.models.recognizer import Recognizer
from arengine.models.runtimes import load_network
from arengine.models.speech import SpeechModel, SpeechRecognizer
from arengine.postprocess import Tagger
from arengine.postprocess.birds import BirdsParams, BirdsTagger
from arengine.postprocess.fingerprint import FingerprintParams, FingerprintTagger
from arengine.postprocess.labels import (
    EventParams,
    LabelParams,
    LabelTagger,
    LabelView,
    MusicParams,
)
from arengine.postprocess.notes import NotesParams, NotesTagger
from arengine.postprocess.params import Params
from arengine.postprocess.pitch import PitchParams, PitchTagger
from arengine.postprocess.speech import SpeechParams, SpeechTagger
from arengine.postprocess.vocabulary import Ontology, Vocabulary

_Labels = TypeVar("_Labels", bound=LabelParams)


def _nothing(when: datetime) -> dict[str, float | str]:
    return {}


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
    tagger: type[Tagger]
    """The post-processor class the recognizer's `tagger()` returns (its module is the kind's
    post-processing module)."""
    from_recording_time: Callable[[datetime], dict[str, float | str]] = _nothing
    """Parameter defaults that follow from when the recording was made (`audio.recorded_at`;
    birds: BirdNET's `week`); a request's own value wins."""


def implied_by_recording_time(
    kind: str, own: Mapping[str, float | str], when: datetime
) -> dict[str, float | str]:
    """The parameter defaults that follow from the recording's time (birds: its week) and that
    a request's own values (`own`) do not set.

    >>> implied_by_recording_time("speech", {}, datetime(2026, 5, 1))
    {}
    """
    implied = KINDS[kind].from_recording_time(when)
    return {name: value for name, value in implied.items() if name not in own}


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
    params = PitchParams().with_overrides(manifest.postprocess)
    return PitchRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


def _notes(manifest: Manifest, segment_s: float) -> Recognizer:
    params = NotesParams().with_overrides(manifest.postprocess)
    return NotesRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


def _label_params(
    manifest: Manifest, kind: type[_Labels], vocabulary: Vocabulary | None = None
) -> tuple[_Labels, Vocabulary]:
    """A label model's post-processing and what its label lists mean: the manifest's groups
    (`[postprocess.groups]`) and profiles (`[postprocess.profiles.<name>]`), every name in them
    checked against the labels."""
    post = dict(manifest.postprocess)
    vocabulary = dataclasses.replace(
        vocabulary or Vocabulary(manifest.labels),
        groups={k: tuple(v) for k, v in post.pop("groups", {}).items()},
        profiles=post.pop("profiles", {}),
    )
    try:
        params = kind().with_overrides(post)
        LabelView.of(vocabulary, params)  # every name resolves
        for profile in vocabulary.profiles:
            LabelView.of(vocabulary, params.for_request({"profile": profile}, vocabulary))
    except InvalidInput as error:
        raise ManifestError(manifest.path, f"[postprocess]: {error}") from None
    return params, vocabulary


def _classifier(manifest: Manifest, segment_s: float) -> Recognizer:
    model = manifest.model
    params, vocabulary = _label_params(manifest, LabelParams)
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


def _music(manifest: Manifest, segment_s: float) -> Recognizer:
    if manifest.labels != MUSIC_LABELS or manifest.sample_rate != MusicRecognizer.sample_rate:
        raise ManifestError(
            manifest.path,
            f"a music model's labels are musicnn's 50 MagnaTagATune tags in their order, "
            f"at {MusicRecognizer.sample_rate} Hz: {list(MUSIC_LABELS)}",
        )
    params, vocabulary = _label_params(manifest, MusicParams)
    return MusicRecognizer(
        manifest.weights, segment_s, name=manifest.name, params=params, vocabulary=vocabulary
    )


def _inside(manifest: Manifest, name: str) -> Path:
    """A data file of the model's own folder (never `..` or an absolute path)."""
    folder = manifest.path.parent.resolve()
    path = (folder / name).resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        raise ManifestError(manifest.path, f"{name!r} is not a file in {folder}")
    return path


def _events(manifest: Manifest, segment_s: float) -> Recognizer:
    """YAMNet: labels and AudioSet ids from the class map, groups also from the ontology."""
    if manifest.sample_rate != EventsRecognizer.sample_rate:
        raise ManifestError(manifest.path, "an events model runs at 16000 Hz")
    model = manifest.model
    labels, ids = read_class_map(_inside(manifest, str(model.get("class_map", "class_map.csv"))))
    ontology_file = model.get("ontology")
    ontology = Ontology.read(_inside(manifest, str(ontology_file))) if ontology_file else Ontology()
    params, vocabulary = _label_params(
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


def _birds(manifest: Manifest, segment_s: float) -> Recognizer:
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


def _fingerprint(manifest: Manifest, segment_s: float) -> Recognizer:
    """A reference library: the SQLite file `[weights] file` names (`arengine references`)."""
    if manifest.sample_rate != FINGERPRINT_RATE:
        raise ManifestError(manifest.path, f"a fingerprint model runs at {FINGERPRINT_RATE} Hz")
    params = FingerprintParams().with_overrides(manifest.postprocess)
    return FingerprintRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


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
            parameters=PitchParams,
            tagger=PitchTagger,
        ),
        Kind(
            name="notes",
            features="basic_pitch_windows",
            model_keys=(),
            fixed_labels=True,
            recognizer=NotesRecognizer,
            build=_notes,
            parameters=NotesParams,
            tagger=NotesTagger,
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
            name="events",
            features="yamnet_log_mel",
            model_keys=("hop_s", "class_map", "ontology"),
            fixed_labels=True,  # AudioSet's 521, from the class map in the model's folder
            recognizer=EventsRecognizer,
            build=_events,
            parameters=EventParams,
            tagger=LabelTagger,
        ),
        Kind(
            name="birds",
            features="birdnet_windows",
            model_keys=("location", "labels", "overlap_s"),
            fixed_labels=True,
            recognizer=BirdsRecognizer,
            build=_birds,
            parameters=BirdsParams,
            tagger=BirdsTagger,
            from_recording_time=lambda when: {"week": birdnet_week(when)},
        ),
        Kind(
            name="fingerprint",
            features="landmarks",
            model_keys=(),
            fixed_labels=True,  # the references' titles, read from the library as it is now
            recognizer=FingerprintRecognizer,
            build=_fingerprint,
            parameters=FingerprintParams,
            tagger=FingerprintTagger,
        ),
    )
}
"""Every model kind, by name, in the order the docs list them."""

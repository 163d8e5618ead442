"""The model registry: every manifest under the models folder, loaded, checked and warmed up.

One bad model (malformed manifest, missing weights, output that does not match its labels) is
reported with its file and reason, and the others still load.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from arengine.mel import MelParams
from arengine.models.classifier import ClassifierRecognizer, load_torchscript
from arengine.models.manifest import Manifest, ManifestError, read_manifest
from arengine.models.pitch import PitchRecognizer
from arengine.models.recognizer import Recognizer
from arengine.models.speech import SpeechModel, SpeechRecognizer
from arengine.params import Params
from arengine.postprocess.labels import LabelParams
from arengine.postprocess.notes import NotesParams
from arengine.postprocess.speech import SpeechParams

log = logging.getLogger(__name__)

DEFAULT_MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
"""The repository's `models/` folder (the package is installed from the repository)."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to serve, where it came from, and what loading it cost."""

    recognizer: Recognizer
    manifest: Manifest
    load_s: float
    warm_up_s: float


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A model that could not be loaded: its manifest and the reason."""

    path: Path
    reason: str


def load_models(
    folder: Path, names: Sequence[str] | None = None, segment_s: float | None = None
) -> tuple[dict[str, LoadedModel], list[LoadFailure]]:
    """Load every `*/manifest.toml` under `folder` (only `names`, if given)."""
    loaded: dict[str, LoadedModel] = {}
    failures: list[LoadFailure] = []
    for path in sorted(folder.glob("*/manifest.toml")):
        try:
            manifest = read_manifest(path)
            if names and manifest.name not in names:
                continue
            if manifest.name in loaded:
                raise ManifestError(path, f"model name {manifest.name!r} is already taken")
            loaded[manifest.name] = _load(manifest, segment_s)
        except Exception as error:  # a boundary: one bad model never stops the others
            reason = (
                error.reason
                if isinstance(error, ManifestError)
                else f"{type(error).__name__}: {error}"
            )
            log.error("model %s not loaded: %s", path, reason)
            failures.append(LoadFailure(path, reason))
    missing = sorted(set(names or ()) - set(loaded))
    failures += [LoadFailure(folder / name, "no manifest with this name") for name in missing]
    return loaded, failures


def _load(manifest: Manifest, segment_s: float | None) -> LoadedModel:
    started = time.perf_counter()
    recognizer = BUILDERS[manifest.kind](manifest, segment_s or manifest.segment_s)
    loaded = time.perf_counter()
    recognizer.warm_up()
    warmed = time.perf_counter()
    log.info(
        "model %s (%s) loaded in %.2f s, warmed up in %.2f s, weights sha256 %s",
        manifest.name,
        manifest.kind,
        loaded - started,
        warmed - loaded,
        manifest.weights_sha256[:16],
    )
    return LoadedModel(recognizer, manifest, loaded - started, warmed - loaded)


def _speech(manifest: Manifest, segment_s: float) -> Recognizer:
    params = SpeechParams().with_overrides(manifest.postprocess)
    return SpeechRecognizer(
        SpeechModel.from_silero_archive(manifest.weights),
        segment_s,
        manifest.preroll_s,
        name=manifest.name,
        params=params,
    )


def _classifier(manifest: Manifest, segment_s: float) -> Recognizer:
    model = manifest.model
    post = dict(manifest.postprocess)
    thresholds = post.pop("thresholds", {})
    unknown = sorted(set(thresholds) - set(manifest.labels))
    if unknown:
        raise ManifestError(manifest.path, f"thresholds for unknown labels: {', '.join(unknown)}")
    params = dataclasses.replace(LabelParams().with_overrides(post), thresholds=thresholds)
    mel = MelParams(**{key: value for key, value in manifest.features.items() if key != "type"})
    return ClassifierRecognizer(
        manifest.name,
        load_torchscript(manifest.weights),
        manifest.sample_rate,
        manifest.labels,
        mel,
        window_s=float(model.get("window_s", 1.0)),
        hop_s=float(model.get("hop_s", 0.5)),
        activation=str(model.get("activation", "sigmoid")),
        segment_s=segment_s,
        params=params,
    )


def _pitch(manifest: Manifest, segment_s: float) -> Recognizer:
    params = NotesParams().with_overrides(manifest.postprocess)
    return PitchRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


PARAMETERS: dict[str, type[Params]] = {
    "speech": SpeechParams,
    "pitch": NotesParams,
    "classifier": LabelParams,
}
"""Each kind's post-processing parameters: the query's overrides and the docs derive from these."""

BUILDERS: dict[str, Callable[[Manifest, float], Recognizer]] = {
    "speech": _speech,
    "pitch": _pitch,
    "classifier": _classifier,
}

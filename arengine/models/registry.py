"""The model registry: every manifest under the models folder, loaded, checked and warmed up.

One bad model (malformed manifest, missing weights, output that does not match its labels) is
reported with its file and reason, and the others still load. What each kind is (its manifest
section, recognizer, parameters, tagger) is declared in its folder of `arengine/kinds/` and
registered in `arengine/kinds/catalog.py` (whose docstring says how to add one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from arengine.audio.segments import Segment
from arengine.errors import ErrorCode, InvalidInput
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.catalog import KINDS, kind_of
from arengine.kinds.classifier.runtimes import RUNTIMES
from arengine.kinds.declaration import Kind
from arengine.kinds.manifest import Manifest, ManifestError, read_manifest
from arengine.postprocess.labels import understands
from arengine.postprocess.vocabulary import Vocabulary

log = logging.getLogger(__name__)

SPEED_CLIP_S = 4.0
"""Audio timed at warm-up for the real-time factor: long enough for one 3-s music patch, short
enough that loading CREPE (about 4x real time per core) stays about a second."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to serve, where it came from, and what loading it cost."""

    recognizer: Recognizer
    manifest: Manifest
    load_s: float
    warm_up_s: float
    real_time_factor: float
    """Compute seconds per second of audio, features and inference on one thread, measured at
    warm-up on `SPEED_CLIP_S` of silence (below 1 is faster than real time)."""


NO_SUCH_MODEL = "no manifest with this name"
"""The reason of a model named to load (`--models`) that the folder does not have."""


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A model that could not be loaded: its manifest and the reason."""

    path: Path
    reason: str


def load_models(
    folder: Path,
    names: Sequence[str] | None = None,
    segment_s: float | None = None,
    database: sa.Engine | None = None,
) -> tuple[dict[str, LoadedModel], list[LoadFailure]]:
    """Load every `*/manifest.toml` under `folder` (only `names`, if given); the models that
    keep state (fingerprint references) keep it in `database` when given (PostgreSQL)."""
    loaded: dict[str, LoadedModel] = {}
    failures: list[LoadFailure] = []
    for path in sorted(folder.glob("*/manifest.toml")):
        try:
            manifest = read_manifest(path, KINDS)
            if names and manifest.name not in names:
                continue
            if manifest.name in loaded:
                raise ManifestError(path, f"model name {manifest.name!r} is already taken")
            loaded[manifest.name] = _load(manifest, kind_of(manifest), segment_s, database)
        except Exception as error:  # a boundary: one bad model never stops the others
            reason = (
                error.reason
                if isinstance(error, ManifestError)
                else f"{type(error).__name__}: {error}"
            )
            log.error("model %s not loaded: %s", path, reason)
            failures.append(LoadFailure(path, reason))
    missing = sorted(set(names or ()) - set(loaded))
    failures += [LoadFailure(folder / name, NO_SUCH_MODEL) for name in missing]
    return loaded, failures


def _load(
    manifest: Manifest, kind: Kind, segment_s: float | None, database: sa.Engine | None
) -> LoadedModel:
    started = time.perf_counter()
    length_s = segment_s or manifest.segment_s
    if database is not None and kind.build_shared is not None:
        recognizer = kind.build_shared(manifest, length_s, database)
    else:
        recognizer = kind.build(manifest, length_s)
    loaded = time.perf_counter()
    recognizer.warm_up()
    warmed = time.perf_counter()
    rtf = real_time_factor(recognizer)
    log.info(
        "model %s (%s) loaded in %.2f s, warmed up in %.2f s, real-time factor %.4f, "
        "weights sha256 %s",
        manifest.name,
        manifest.kind,
        loaded - started,
        warmed - loaded,
        rtf,
        manifest.weights_sha256[:16],
    )
    return LoadedModel(recognizer, manifest, loaded - started, warmed - loaded, rtf)


def weights_format_of(weights: Path) -> str:
    """The runtime a weights file is read with: a classifier's suffix decides; built-in kinds
    read their own state dicts or archives."""
    built_in = f"{weights.suffix.lstrip('.') or 'file'} (built-in)"
    return RUNTIMES.get(weights.suffix.lower(), built_in)


def real_time_factor(recognizer: Recognizer, seconds: float = SPEED_CLIP_S) -> float:
    """Seconds of features and inference per second of audio, on one segment of silence."""
    plan = recognizer.plan
    frames = min(plan.segment_frames, max(1, round(seconds * recognizer.sample_rate / plan.hop)))
    # Silence: these networks do the same arithmetic on any input, and a model that fails only
    # on some content still loads, to fail (a 500 naming the stage) on that content.
    samples = np.zeros(plan.context + frames * plan.hop + plan.lookahead, dtype=np.float32)
    segment = Segment(0, 0, 0, frames, samples)
    started = time.perf_counter()
    recognizer.infer(recognizer.features(segment), segment)
    elapsed = time.perf_counter() - started
    return elapsed * recognizer.sample_rate / (frames * plan.hop)


def overrides_by_model(recognizers: Sequence[Recognizer], overrides: Overrides) -> list[Overrides]:
    """Each model's share of a request's overrides: all of them for one model (its kind refuses
    those that do not apply); for several, each takes those its kind has, and one that no model
    takes is refused.

    >>> from types import SimpleNamespace as Model
    >>> overrides_by_model([Model(kind="speech"), Model(kind="music")], {"threshold": 0.6})
    [{'threshold': 0.6}, {'threshold': 0.6}]
    """
    if len(recognizers) == 1:
        return [overrides]
    accepted = [
        set(KINDS[r.kind].parameters.bounds()) | set(KINDS[r.kind].parameters.texts())
        for r in recognizers
    ]
    unknown = sorted(set(overrides) - set().union(*accepted))
    if unknown:
        kinds = ", ".join(sorted({recognizer.kind for recognizer in recognizers}))
        raise InvalidInput(
            f"{', '.join(unknown)} does not apply to any of the requested models ({kinds} "
            f"models); accepted: {', '.join(sorted(set().union(*accepted)))}",
            code=ErrorCode.INVALID_PARAMETER,
        )
    shares = [{k: v for k, v in overrides.items() if k in names} for names in accepted]
    return _label_lists_where_known(recognizers, shares)


def _label_lists_where_known(
    recognizers: Sequence[Recognizer], shares: list[dict[str, float | str]]
) -> list[Overrides]:
    """A label list (`labels`, `profile`, `thresholds`...) goes to the label models that know all
    its names: `model=music,events&exclude=Speech` excludes Speech from events, and music, which
    has no Speech, is left alone. A list that no model knows is refused with the first's reason."""
    vocabularies = [getattr(r, "vocabulary", None) for r in recognizers]
    texts = {k for share in shares for k, v in share.items() if isinstance(v, str)}
    for name in sorted(texts):
        knowing = [
            i
            for i, (vocabulary, share) in enumerate(zip(vocabularies, shares, strict=True))
            if name in share
            and isinstance(vocabulary, Vocabulary)
            and understands(vocabulary, name, share[name])
        ]
        if not knowing:
            first = next(i for i, share in enumerate(shares) if name in share)
            vocabulary = vocabularies[first]
            if isinstance(vocabulary, Vocabulary):
                understands(vocabulary, name, shares[first][name], refuse=True)
            continue  # not a label model: its own kind refuses the value
        for i, share in enumerate(shares):
            if i not in knowing:
                share.pop(name, None)
    return list(shares)

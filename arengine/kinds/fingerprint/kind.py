"""The `fingerprint` kind's declaration: landmarks matched against a library of references."""

from __future__ import annotations

from arengine.kinds.base import Kind, Recognizer
from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE as FINGERPRINT_RATE
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
from arengine.kinds.fingerprint.tagger import FingerprintParams, FingerprintTagger
from arengine.kinds.manifest import Manifest, ManifestError


def _fingerprint(manifest: Manifest, segment_s: float) -> Recognizer:
    """A reference library: the SQLite file `[weights] file` names (`arengine references`)."""
    if manifest.sample_rate != FINGERPRINT_RATE:
        raise ManifestError(manifest.path, f"a fingerprint model runs at {FINGERPRINT_RATE} Hz")
    params = FingerprintParams().with_overrides(manifest.postprocess)
    return FingerprintRecognizer(manifest.weights, segment_s, name=manifest.name, params=params)


KIND = Kind(
    name="fingerprint",
    features="landmarks",
    model_keys=(),
    fixed_labels=True,  # the references' titles, read from the library as it is now
    recognizer=FingerprintRecognizer,
    build=_fingerprint,
    parameters=FingerprintParams,
    tagger=FingerprintTagger,
)

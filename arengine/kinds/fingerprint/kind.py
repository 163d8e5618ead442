"""The `fingerprint` kind's declaration: landmarks matched against a library of references."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.fingerprint.fields import FIELDS
from arengine.kinds.fingerprint.tagger import FingerprintParams, FingerprintTagger
from arengine.kinds.manifest import Manifest, ManifestError

if TYPE_CHECKING:
    import sqlalchemy as sa

    from arengine.kinds.base import Recognizer
    from arengine.kinds.fingerprint.library import Library


def _fingerprint(manifest: Manifest, segment_s: float) -> Recognizer:
    """A reference library: the SQLite file `[weights] file` names (`arengine references`)."""
    from arengine.kinds.fingerprint.library import Library

    return _recognizer(manifest, segment_s, Library(manifest.weights))


def _shared(manifest: Manifest, segment_s: float, database: sa.Engine) -> Recognizer:
    """A reference library in the server database, the model's name its key; the folder's own
    file (`[weights]`) is not read: `arengine db copy` moves its references there."""
    from arengine.kinds.fingerprint.library import Library

    return _recognizer(manifest, segment_s, Library.shared(database, manifest.name))


def _recognizer(manifest: Manifest, segment_s: float, library: Library) -> Recognizer:
    from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE as FINGERPRINT_RATE  # torch
    from arengine.kinds.fingerprint.recognizer import MEMORY_INDEX_MB, FingerprintRecognizer

    if manifest.sample_rate != FINGERPRINT_RATE:
        raise ManifestError(manifest.path, f"a fingerprint model runs at {FINGERPRINT_RATE} Hz")
    params = FingerprintParams().with_overrides(manifest.postprocess)
    memory_mb = manifest.model.get("memory_index_mb", MEMORY_INDEX_MB)
    if type(memory_mb) is not int or memory_mb < 0:
        raise ManifestError(
            manifest.path, f"[model] memory_index_mb must be a whole number >= 0, not {memory_mb!r}"
        )
    return FingerprintRecognizer(
        library, segment_s, name=manifest.name, params=params, memory_index_mb=memory_mb
    )


KIND = Kind(
    name="fingerprint",
    features="landmarks",
    model_keys=("memory_index_mb",),
    fixed_labels=True,  # the references' titles, read from the library as it is now
    recognizer_path="arengine.kinds.fingerprint.recognizer.FingerprintRecognizer",
    build=_fingerprint,
    build_shared=_shared,
    parameters=FingerprintParams,
    tagger=FingerprintTagger,
    tag_fields=FIELDS,
)

"""The `music` kind's declaration: musicnn's 50 MagnaTagATune tags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arengine.kinds.declaration import Kind
from arengine.kinds.label_manifest import label_params
from arengine.kinds.manifest import Manifest, ManifestError
from arengine.kinds.music.params import MusicParams
from arengine.postprocess.labels import LabelTagger

if TYPE_CHECKING:
    from arengine.kinds.base import Recognizer


def _music(manifest: Manifest, segment_s: float) -> Recognizer:
    from arengine.kinds.music.network import LABELS as MUSIC_LABELS  # torch: when loading
    from arengine.kinds.music.recognizer import MusicRecognizer

    if manifest.labels != MUSIC_LABELS or manifest.sample_rate != MusicRecognizer.sample_rate:
        raise ManifestError(
            manifest.path,
            f"a music model's labels are musicnn's 50 MagnaTagATune tags in their order, "
            f"at {MusicRecognizer.sample_rate} Hz: {list(MUSIC_LABELS)}",
        )
    params, vocabulary = label_params(manifest, MusicParams)
    return MusicRecognizer(
        manifest.weights, segment_s, name=manifest.name, params=params, vocabulary=vocabulary
    )


KIND = Kind(
    name="music",
    features="musicnn_log_mel",
    model_keys=(),
    fixed_labels=False,
    recognizer_path="arengine.kinds.music.recognizer.MusicRecognizer",
    build=_music,
    parameters=MusicParams,
    tagger=LabelTagger,
)

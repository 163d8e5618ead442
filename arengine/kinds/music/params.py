"""The `music` kind's post-processing parameters: the shared label tagger's, retuned."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from arengine.postprocess.labels import LabelParams
from arengine.postprocess.params import retuned


@dataclass(frozen=True, slots=True)
class MusicParams(LabelParams):
    """Post-processing of the music tagger: a classifier's, over 3-s patches.

    A tag is a run of patches whose probability reaches the tag's threshold. Chosen on FluidR3
    renders of ten instruments, a drum beat, noise and espeak speech (models/music/README.md), not
    on MagnaTagATune's test set: the frequent tags (guitar, classical, slow, fast) fire at 0.3-0.5
    on audio that has none of them, so they need more.
    """

    kind: ClassVar[str] = "music"

    threshold: float = retuned(LabelParams, "threshold", 0.3)
    merge_gap_ms: int = retuned(LabelParams, "merge_gap_ms", 3000)
    """One patch below the threshold does not split a run."""
    thresholds: Mapping[str, float] = retuned(
        LabelParams,
        "thresholds",
        {"guitar": 0.45, "classical": 0.45, "slow": 0.45, "fast": 0.5},
    )

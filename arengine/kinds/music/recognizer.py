"""The `music` kind's recognizer: 3-s patches through musicnn (`network.py`), 50 MagnaTagATune tag
probabilities each, tagged by the shared label tagger."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.music.network import (
    CONTEXT,
    LABELS,
    PATCH_HOP,
    SAMPLE_RATE,
    MusicLogMel,
    Musicnn,
)
from arengine.kinds.music.params import MusicParams
from arengine.postprocess.labels import LabelTagger
from arengine.postprocess.vocabulary import Vocabulary

CHUNK_PATCHES = 1
"""Patches per forward call. A 30-s segment's patches in one call (or 4, or 8) made front-end
temporaries past jemalloc's 8 MiB `oversize_threshold`, which go back to the kernel when freed:
~500k page faults and half the CPU in the kernel per minute of audio under the server's
allocator. One patch a call: 43x real time on one core against 28-29x (BENCHMARKS.md); a patch's
front end still passes 8 MiB, so some faults remain."""


class MusicRecognizer(Recognizer):
    """3-s patches -> musicnn -> 50 tag probabilities -> runs over each tag's threshold."""

    kind = "music"
    _params: MusicParams
    sample_rate = SAMPLE_RATE
    labels = LABELS

    def __init__(
        self,
        weights: Path,
        segment_s: float,
        name: str = "music",
        params: MusicParams | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        self.name = name
        self.vocabulary = vocabulary or Vocabulary(LABELS)
        self.plan = SegmentPlan(
            hop=PATCH_HOP,
            context=CONTEXT,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / PATCH_HOP)),
            preroll_frames=0,
        )
        self._model = Musicnn.load(weights)
        self._mel = MusicLogMel()
        self._params = params or MusicParams()

    def features(self, segment: Segment) -> torch.Tensor:
        return self._mel(torch.from_numpy(segment.samples))

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        with torch.inference_mode():
            scores = torch.cat(
                [
                    self._model(features[i : i + CHUNK_PATCHES])
                    for i in range(0, len(features), CHUNK_PATCHES)
                ]
            )
        out: np.ndarray = scores[segment.skip_frames :].numpy()
        return out

    def tagger(self, overrides: Overrides) -> LabelTagger:
        return LabelTagger(
            LABELS,
            self._params.for_request(overrides, self.vocabulary),
            SAMPLE_RATE,
            PATCH_HOP,
            PATCH_HOP,
            vocabulary=self.vocabulary,
        )

    def warm_up(self) -> None:
        self.infer(self._mel(torch.zeros(CONTEXT + PATCH_HOP)), Segment(0, 0, 0, 1, np.zeros(0)))

"""The `loudness` kind's recognizer: no network, the level of every window (`level.py`), to
loudness tags (`tagger.py`)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.loudness.level import levels_dbfs
from arengine.kinds.loudness.tagger import LABEL, LoudnessParams, LoudnessTagger

WINDOW_S = 0.05
"""A level every 50 ms unless the manifest's `[model] window_s` says otherwise: short enough
for a door slam's start and end, long enough to average a low hum's periods."""


class LoudnessRecognizer(Recognizer):
    """The `loudness` model kind: a level in dBFS per window of `window_s`, to `loud` tags.

    Window `i` of a recording is its samples `[i * hop, (i + 1) * hop)`; windows do not overlap,
    so a segment needs no context, pre-roll or look-ahead.

    >>> recognizer = LoudnessRecognizer(16000, segment_s=30)
    >>> recognizer.plan.hop, recognizer.plan.segment_frames
    (800, 600)
    """

    kind = "loudness"
    _params: LoudnessParams
    labels: tuple[str, ...] = (LABEL,)

    def __init__(
        self,
        sample_rate: int,
        segment_s: float,
        window_s: float = WINDOW_S,
        name: str = "loudness",
        params: LoudnessParams | None = None,
    ) -> None:
        hop = round(window_s * sample_rate)
        if not 0.005 <= window_s <= 10 or hop < 1:
            raise ValueError(f"window_s must be 0.005 to 10 seconds, got {window_s}")
        self.name = name
        self.sample_rate = sample_rate
        self._params = params or LoudnessParams()
        self.plan = SegmentPlan(
            hop=hop,
            context=0,
            segment_frames=max(1, round(segment_s * sample_rate / hop)),
            preroll_frames=0,
        )

    @property
    def params(self) -> LoudnessParams:
        """Its post-processing parameters with the manifest's defaults (what a gate reads)."""
        return self._params

    def features(self, segment: Segment) -> Tensor:
        """The segment's window levels: computing them is the whole model."""
        return torch.from_numpy(levels_dbfs(segment.samples, self.plan.hop))

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        levels: np.ndarray = features.numpy()[segment.skip_frames :]
        return levels

    def tagger(self, overrides: Overrides) -> LoudnessTagger:
        params = self._params.with_overrides(overrides)
        return LoudnessTagger(params, sample_rate=self.sample_rate, hop=self.plan.hop)

    def warm_up(self) -> None:
        """Nothing is lazy; one call on silence, as every kind has."""
        samples = np.zeros(self.plan.hop * 4, dtype=np.float32)
        segment = Segment(0, 0, 0, 4, samples)
        self.infer(self.features(segment), segment)

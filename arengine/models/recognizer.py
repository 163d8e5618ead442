"""What the engine needs from a model kind: a cutting plan, features, a forward call, a tagger."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from arengine.features import Segment, SegmentPlan
from arengine.postprocess import SpeechParams, SpeechTagger


class Recognizer(Protocol):
    """One loaded model, shared by all engine threads: every method must be thread-safe."""

    name: str
    kind: str
    sample_rate: int
    labels: tuple[str, ...]
    plan: SegmentPlan

    def features(self, segment: Segment) -> torch.Tensor:
        """Stage 2's last step: the model input for one segment."""
        ...

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        """Stage 3: one score per output frame of the segment (pre-roll frames dropped)."""
        ...

    def tagger(self, params: SpeechParams) -> SpeechTagger:
        """Stage 4: a fresh post-processor for one request."""
        ...

"""What the engine needs from a model kind: a cutting plan, features, a forward call, a tagger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.postprocess import Tagger

Overrides = Mapping[str, float | str]
"""Post-processing parameters a client set explicitly; the others keep the model's defaults.
Numbers, or text for the label lists of label models (`labels=Glass;Shatter`)."""


class Recognizer(Protocol):
    """One loaded model, shared by all engine threads: every method must be thread-safe."""

    name: str
    kind: str
    sample_rate: int
    labels: tuple[str, ...]
    plan: SegmentPlan
    max_batch: int
    """Most segments one `infer_batch` call takes; 1 means the engine never batches this model."""

    @property
    def input_shape(self) -> tuple[int | None, ...] | None:
        """The shape of the input a user's network is called with (`None`: an axis that varies
        from call to call), as `GET /v1/models` states it; `None` for a built-in network."""
        ...

    def features(self, segment: Segment) -> torch.Tensor:
        """Stage 2's last step: the model input for one segment."""
        ...

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        """Stage 3: scores for each output frame of the segment (pre-roll frames dropped)."""
        ...

    def infer_batch(
        self, features: Sequence[torch.Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        """`infer` for up to `max_batch` segments in one call: one score array per segment."""
        ...

    def tagger(self, overrides: Overrides) -> Tagger:
        """Stage 4: a fresh post-processor for one request; `InvalidInput` for a bad override."""
        ...

    def warm_up(self) -> None:
        """One call at load time, so the first request does not pay for lazy initialisation."""
        ...

    def defaults(self) -> dict[str, float]:
        """The post-processing parameters and their defaults, as `GET /v1/models` shows them."""
        ...

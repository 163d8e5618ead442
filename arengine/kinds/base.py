"""What every model kind shares: the `Recognizer` base the engine drives (`Kind`, the
declaration that ties a kind's manifest section, recognizer, parameters and tagger together, is
`declaration.py`: it loads no torch).

A kind subclasses `Recognizer` and writes only what is its own (its segment plan, features,
forward call, tagger and warm-up); one `infer` per segment for `infer_batch` and the parameter
listing of `defaults` live here, once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.postprocess import Tagger
from arengine.postprocess.params import Params

Overrides = Mapping[str, float | str]
"""Post-processing parameters a client set explicitly; the others keep the model's defaults.
Numbers, or text for the label lists of label models (`labels=Glass;Shatter`)."""


class Recognizer(ABC):
    """One loaded model, shared by all engine threads: every method must be thread-safe."""

    kind: ClassVar[str]
    """The kind's name, as a manifest's `kind` says it."""
    name: str
    sample_rate: int
    labels: tuple[str, ...]
    plan: SegmentPlan
    max_batch: int = 1
    """Most segments one `infer_batch` call takes; 1 means the engine never batches this model."""
    input_shape: tuple[int | None, ...] | None = None
    """The shape of the input a user's network is called with (`None`: an axis that varies
    from call to call), as `GET /v1/models` states it; `None` for a built-in network."""
    positional: ClassVar[bool] = False
    """Its scores depend on where a segment is in the recording (`first_frame`), not on its
    samples alone: a gate's stand-in for a skipped segment is then made for that segment, not
    once for every segment of its length (`arengine/kinds/loudness/gate.py`)."""
    kept_apart: ClassVar[int | None] = None
    """Score columns its tagger may read without the rest (the notes' note and onset
    activations, without the contour only pitch bends read): a job's kept scores store them in a
    part of their own, so new parameters decompress only what they read
    (`arengine/jobs/scores.py`). None: the rows are kept whole."""
    _params: Params
    """The post-processing parameters with the manifest's defaults; a request's overrides
    are applied to a copy (`tagger`)."""

    @abstractmethod
    def features(self, segment: Segment) -> torch.Tensor:
        """Stage 2's last step: the model input for one segment."""

    @abstractmethod
    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        """Stage 3: scores for each output frame of the segment (pre-roll frames dropped)."""

    def infer_batch(
        self, features: Sequence[torch.Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        """`infer` for up to `max_batch` segments in one call: one score array per segment.

        Here one `infer` per segment, for the kinds whose `max_batch` is 1 (batching did not pay,
        or a segment is already a batch of windows); a kind that batches overrides it.
        """
        return [self.infer(f, s) for f, s in zip(features, segments, strict=True)]

    @abstractmethod
    def tagger(self, overrides: Overrides) -> Tagger:
        """Stage 4: a fresh post-processor for one request; `InvalidInput` for a bad override."""

    @abstractmethod
    def warm_up(self) -> None:
        """One call at load time, so the first request does not pay for lazy initialisation."""

    def defaults(self) -> dict[str, float]:
        """The post-processing parameters and their defaults, as `GET /v1/models` shows them."""
        return self._params.defaults()

    def held_bytes(self) -> int:
        """Memory it holds besides its weights, growing with what it serves (a fingerprint
        model's library in memory); 0 for most kinds."""
        return 0

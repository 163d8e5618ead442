"""What every model kind shares: the `Recognizer` base the engine drives, and `Kind`, the
declaration that ties a kind's manifest section, recognizer, parameters and tagger together.

A kind subclasses `Recognizer` and writes only what is its own (its segment plan, features,
forward call, tagger and warm-up); one `infer` per segment for `infer_batch` and the parameter
listing of `defaults` live here, once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import numpy as np
import sqlalchemy as sa
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.fields import TagField
from arengine.kinds.manifest import Manifest
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


def _nothing(when: datetime) -> dict[str, float | str]:
    return {}


@dataclass(frozen=True, slots=True)
class Kind:
    """One model kind: its manifest section, recognizer, builder, parameters, tagger and tag
    fields."""

    name: str
    """What a manifest's `kind` says; the recognizer's and the parameters' `kind` are the same."""
    features: str
    """The `[features] type` the kind computes (a manifest may leave it out; another is refused)."""
    model_keys: tuple[str, ...]
    """The keys the kind reads from `[model]`; any other is refused (a typo would be ignored)."""
    fixed_labels: bool
    """The kind fixes its labels (note names): the manifest lists none. Otherwise it must."""
    recognizer: type[Recognizer]
    build: Callable[[Manifest, float], Recognizer]
    """Manifest and segment length in seconds -> a loaded recognizer (`ManifestError` or
    `ValueError` when the manifest and the weights do not fit)."""
    parameters: type[Params]
    """The post-processing parameters: manifest defaults, query overrides, docs."""
    tagger: type[Tagger]
    """The post-processor class the recognizer's `tagger()` returns (its module is the kind's
    post-processing module)."""
    from_recording_time: Callable[[datetime], dict[str, float | str]] = _nothing
    """Parameter defaults that follow from when the recording was made (`audio.recorded_at`;
    birds: BirdNET's `week`); a request's own value wins."""
    build_shared: Callable[[Manifest, float, sa.Engine], Recognizer] | None = None
    """For a kind whose models keep what they learn while serving (fingerprint: references),
    its builder when `database_url` names a server database every replica shares (PostgreSQL):
    there the model's state lives, keyed by the model's name. `build` otherwise."""
    tag_fields: tuple[TagField[Any], ...] = ()
    """The fields its tags carry besides the shared ones (`Tag.extra`), each declared once in
    the kind's `fields.py` with its bounds and output columns (`fields.py` here)."""
    gate: Callable[[Recognizer, Sequence[Recognizer]], Any] | None = None
    """For a kind whose models can gate a request's other models (loudness), the `Gate`
    (`arengine/engine/hooks.py`) one of its models makes for a request's recognizers."""

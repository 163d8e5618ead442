"""Stage 4, post-processing: per-frame scores to tags, streamed in segment order.

Each model kind has its tagger (`speech`, `notes`, `labels`), all with the `Tagger` contract: the
engine feeds them alike, and tags never split or repeat at segment boundaries.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from arengine.types import Tag


class Tagger(Protocol):
    """A per-request post-processor: scores in, in order; tags out as soon as they are final."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        """The next frames' scores (`(frames,)` or `(frames, k)`); returns tags now final."""
        ...

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at the model's rate): the remaining tags."""
        ...

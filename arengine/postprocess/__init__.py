"""Stage 4, post-processing: per-frame scores to tags, streamed in segment order.

Each model kind has its tagger (`speech`, `notes`, `labels`), all with the `Tagger` contract: the
engine feeds them alike, and tags never split or repeat at segment boundaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from arengine.errors import ErrorCode, InvalidInput
from arengine.types import Tag


class Tagger(Protocol):
    """A per-request post-processor: scores in, in order; tags out as soon as they are final."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        """The next frames' scores (`(frames,)` or `(frames, k)`); returns tags now final."""
        ...

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at the model's rate): the remaining tags."""
        ...


def check_overrides(kind: str, overrides: Mapping[str, float], accepted: Iterable[str]) -> None:
    """Raise `InvalidInput` naming the overrides that do not apply to `kind`, and the accepted."""
    names = set(accepted)
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise InvalidInput(
            f"{', '.join(unknown)} does not apply to {kind} models; "
            f"accepted: {', '.join(sorted(names))}",
            code=ErrorCode.INVALID_PARAMETER,
        )

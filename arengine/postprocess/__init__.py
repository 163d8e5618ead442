"""Stage 4, post-processing: per-frame scores to tags, streamed in segment order.

What every kind's tagger shares: the `Tagger` contract (the engine feeds all taggers alike, and
tags never split or repeat at segment boundaries), parameters declared once with their bounds
(`params`), the label tagger that the kinds tagging labels from per-window scores share
(`labels`: `classifier`, `music`, `events`, each with its own `LabelParams` subclass), what a
label list means (`vocabulary`) and palette-coded scores (`palette`). A kind whose tags are its own
has its tagger in its folder (`arengine/kinds/<kind>/tagger.py`: `<Kind>Params` and
`<Kind>Tagger`). A tagger may also be a `WholeTagger`: new parameters on a finished job's kept
scores (`arengine/jobs/retag.py`) then hand it the whole recording's scores at once; or
`ReadsColumns`: they then read only the columns it uses.

May import: errors, types.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from arengine.postprocess.palette import Palette
from arengine.types import Tag


class Tagger(Protocol):
    """A per-request post-processor: scores in, in order; tags out as soon as they are final."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        """The next frames' scores (`(frames,)` or `(frames, k)`); returns tags now final."""
        ...

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at the model's rate): the remaining tags."""
        ...


@runtime_checkable
class WholeTagger(Protocol):
    """A tagger that also takes a whole recording's scores at once."""

    def whole(self, scores: np.ndarray | Palette, audio_samples: int) -> list[Tag]:
        """On a fresh tagger: the tags of `push` over any cut of `scores` (rows in order;
        palette-coded or not), then `finish(audio_samples)`."""
        ...


@runtime_checkable
class ReadsColumns(Protocol):
    """A tagger that reads only the first `columns_read` columns of its scores, and may be fed
    no more than those."""

    columns_read: int

"""What the engine reports while it works, without knowing who listens (metrics, tests).

The engine never imports prometheus_client: the HTTP layer passes an observer down instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from arengine.types import Stage


class StageObserver(Protocol):
    """Receives one call per timed piece of work; called from engine threads, must be quick.

    `Metrics` is the server's observer; tests pass recorders of their own.
    """

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        """`stage` took `seconds` for `model`."""

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        """A decoded segment waited `seconds` before an engine thread started its inference."""

    def observe_skipped(self, model: str, seconds: float) -> None:
        """A request's gate spared `model` the inference of `seconds` of audio."""


class NullObserver:
    """The default: observes nothing."""

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        pass

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        pass

    def observe_skipped(self, model: str, seconds: float) -> None:
        pass


class ScoreKeeper(Protocol):
    """Keeps a job's per-segment scores (its checkpoint), and gives back those an earlier run of
    the same job kept, so that their segments are not inferred again.

    `keep` is called from engine threads as each inference ends (segments in any order, several
    threads at once); `end` by post-processing. `arengine/jobs/scores.py` keeps them on disk.
    """

    def kept(self, model: int) -> Mapping[int, np.ndarray]:
        """The scores model `model` (its index in the request) gave for the segments kept, by
        index."""
        ...

    def keep(self, model: int, segment: int, scores: np.ndarray) -> None:
        """Model `model` gave `scores` for segment `segment`."""
        ...

    def end(self, model: int, total_samples: int) -> None:
        """Model `model`'s segments are all kept: the recording has `total_samples` at its rate."""
        ...

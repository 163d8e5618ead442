"""What plugs into a request from outside the engine: the models it runs, how their tags are made
and in what order they go out.

The engine schedules and nothing else, so it names no kind, no live stream and no durable job:
the caller that builds a request (`arengine/service/`, `arengine/jobs/`, the CLI) gives it these
strategies. The contracts are declared here, by the side that drives them, as Triton's core
declares its backend API: a kind's recognizer (`arengine/kinds/base.py`) meets `Recognizer`
without importing the engine, and the engine never imports a kind, so neither room depends on the
other and the engine's tests run on fakes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from arengine.audio.segments import Segment, SegmentPlan
from arengine.postprocess import Tagger
from arengine.types import Tag


class Recognizer(Protocol):
    """One loaded model as the engine drives it: shared by every engine thread, so each method
    must be thread-safe (`arengine.kinds.base.Recognizer` is every kind's)."""

    @property
    def name(self) -> str: ...

    @property
    def sample_rate(self) -> int: ...

    @property
    def plan(self) -> SegmentPlan:
        """How the model's audio is cut into segments (a request may give its own)."""
        ...

    @property
    def max_batch(self) -> int:
        """Most segments one `infer_batch` call takes; 1: never batched."""
        ...

    def features(self, segment: Segment) -> Any:
        """Stage 2's last step: the model input for one segment."""
        ...

    def infer(self, features: Any, segment: Segment) -> np.ndarray:
        """Stage 3: scores for each output frame of the segment."""
        ...

    def infer_batch(self, features: Sequence[Any], segments: Sequence[Segment]) -> list[np.ndarray]:
        """`infer` for several segments in one call: one score array per segment."""
        ...


class Tagging(Protocol):
    """A request's tagger for each of its models (by index), chosen by the caller: the request's
    parameters, the defaults a recording's time implies, a live stream's release order."""

    def tagger(self, model: int) -> Tagger:
        """Model `model`'s tagger, made when the request is."""
        ...

    def dated(self, model: int, when: datetime) -> Tagger | None:
        """A fresh tagger for model `model` once the recording is known to be made at `when`
        (before any segment reaches it), or None to keep the one it has."""
        ...


class Gate(Protocol):
    """Which segments a request's models skip, chosen by the caller (a loudness model as a gate,
    `arengine/kinds/loudness/gate.py`): a skipped segment is not inferred, and its stand-in
    scores go to post-processing in its place.

    Decided from the segment alone, so that the answer never depends on the order the engine
    threads take segments in, nor on whether a resumed job inferred its neighbours before.
    Called from engine threads, several at once."""

    def stand_in(self, model: int, segment: Segment) -> np.ndarray | None:
        """None: model `model` infers `segment`; else the scores that replace its inference."""
        ...


class TagOrder(Protocol):
    """How several models' tags become one stream (`TagMerge`: in start order, the default)."""

    def add(self, index: int, tags: list[Tag], done: bool = False) -> list[Tag]:
        """Model `index`'s next tags (`done`: its last); returns the tags to send now."""
        ...

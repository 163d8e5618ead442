"""One model's share of a request: its segments, their inference results and its tagger.

A request runs one `ModelRun` per model it was asked for; the request's lock guards every field.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from arengine.audio.segments import Segment, Segmenter, SegmentPlan
from arengine.engine.hooks import Recognizer
from arengine.postprocess import Tagger
from arengine.types import Stage


class ModelRun:
    """One model's segments, inference results and tagger within a request."""

    def __init__(
        self, index: int, recognizer: Recognizer, tagger: Tagger, plan: SegmentPlan | None = None
    ) -> None:
        self.index = index
        self.recognizer = recognizer
        self.plan = plan or recognizer.plan
        """How its audio is cut: the model's own plan, or a live stream's."""
        self.tagger = tagger
        self.segments: Segmenter | None = None
        self.segment_count: int | None = None
        self.decoded: deque[tuple[Segment, float]] = deque()
        """Decoded segments waiting for inference, with the perf_counter time each was queued."""
        self.results: dict[int, np.ndarray] = {}
        self.kept: Mapping[int, np.ndarray] = {}
        """Scores of segments kept by an earlier run of the job, by index: not inferred again."""
        self.replaying: set[int] = set()
        """Kept segments passed by the decoding, waiting for post-processing: their scores are
        read when their turn comes, so they hold no memory and the decoding goes on past them
        to the first segment to infer, which a resumed job's other threads infer meanwhile."""
        self.next_post = 0
        self.undelivered = 0
        """Segments decoded and not yet post-processed: what bounds this model's memory."""
        self.done = False
        """Its tagger has finished: every tag of this model is out."""
        self.seconds = dict.fromkeys(Stage, 0.0)
        self.skipped_s = 0.0
        """Audio its request's gate spared it: segments post-processed from stand-in scores."""
        self.wall_s = 0.0
        self.segment_s = self.plan.segment_samples / recognizer.sample_rate

    @property
    def decoded_s(self) -> float:
        """Audio cut into segments so far, in seconds (where its decoding has got to)."""
        produced = self.segments.index if self.segments is not None else self.next_post
        return produced * self.segment_s

    def audio_s(self, segment: Segment) -> float:
        """The seconds of audio `segment`'s own output frames cover."""
        return segment.frames * self.plan.hop / self.recognizer.sample_rate

    def ahead(self, segments_ahead: int, batching: bool) -> int:
        """Segments it may hold decoded: a batching model reads ahead far enough for one batch
        in flight and the next decoding."""
        return max(segments_ahead, 2 * self.batch(batching))

    def batch(self, batching: bool) -> int:
        return self.recognizer.max_batch if batching else 1

    def finishable(self) -> bool:
        """Every segment post-processed and the end known: its tagger can finish."""
        return not self.done and self.next_post == self.segment_count

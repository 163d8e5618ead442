"""One request inside the engine: its four stages as tasks that any engine thread may run.

A job hands out one task at a time to the pool: validation first, then alternately decoding
(one segment ahead, sequentially, never more than `segments_ahead` undelivered segments) and
inference of decoded segments (any order, any thread; up to the model's `max_batch` segments in
one forward call, when that pays). Post-processing consumes inference results
strictly in segment order, so tags come out in timestamp order and segment cuts are invisible.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arengine.decode import decode
from arengine.engine.observer import NullObserver, StageObserver
from arengine.errors import ArengineError, Cancelled, StageFailed
from arengine.models.recognizer import Overrides, Recognizer
from arengine.postprocess import Tagger
from arengine.segments import Segment, Segmenter
from arengine.types import AudioInfo, Result, Stage, Tag, Timings
from arengine.validation import AudioLimits, probe

log = logging.getLogger(__name__)

Task = Callable[[], None]
TagListener = Callable[[list[Tag]], None]
"""Called with each batch of tags as soon as they are final, in timestamp order."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a request asks of the engine."""

    request_id: str
    path: Path
    recognizer: Recognizer
    overrides: Overrides
    limits: AudioLimits
    segments_ahead: int
    on_tags: TagListener | None = None
    """Optional: hears the tags as they become final (from an engine thread, one call at a time)."""


class Job:
    """The per-request state machine; the pool calls `take`, everything else is internal."""

    def __init__(
        self, spec: JobSpec, wake: Callable[[], None], observer: StageObserver | None = None
    ) -> None:
        self.spec = spec
        self._observer: StageObserver = observer or NullObserver()
        self.future: Future[Result] = Future()
        self._wake = wake
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._seconds = dict.fromkeys(Stage, 0.0)
        self.finished = False
        self.served_s = 0.0
        """Engine seconds this job's tasks have taken; the pool serves the least-served first."""
        self._running = 0
        self._validating = False
        self._decoding = False
        self._postprocessing = False
        self._info: AudioInfo | None = None
        self._segments: Segmenter | None = None
        self._segment_count: int | None = None
        self._decoded: deque[tuple[Segment, float]] = deque()
        """Decoded segments waiting for inference, with the perf_counter time each was queued."""
        self._results: dict[int, np.ndarray] = {}
        self._next_post = 0
        self._undelivered = 0
        """Segments decoded and not yet post-processed: what bounds this job's memory."""
        self._tagger: Tagger = spec.recognizer.tagger(spec.overrides)
        self._tags: list[Tag] = []

    @property
    def held_segments(self) -> int:
        """Decoded segments not yet post-processed: the audio this job holds in memory."""
        return self._undelivered

    @property
    def queued_segments(self) -> int:
        """Decoded segments waiting for an engine thread to start their inference."""
        return len(self._decoded)

    @property
    def progress(self) -> tuple[float, float | None]:
        """(audio seconds post-processed, the recording's duration once validated): what a
        progress bar shows; read from any thread without the lock (two plain reads)."""
        info, done = self._info, self._next_post
        recognizer = self.spec.recognizer
        seconds = done * recognizer.plan.segment_samples / recognizer.sample_rate
        if info is None:
            return 0.0, None
        return min(seconds, info.duration_s), info.duration_s

    def take(self, batching: bool = True) -> Task | None:
        """The next runnable task, or None; `batching=False`: one segment per inference task."""
        with self._lock:
            task = self._next_task(batching)
            if task is not None:
                self._running += 1
            return task

    def cancel(self) -> None:
        """Drop the remaining work; a task already running finishes and is discarded."""
        self._fail(Cancelled("the request was cancelled"))

    def _next_task(self, batching: bool) -> Task | None:
        if self.finished:
            return None
        if self._info is None:
            if self._validating:
                return None
            self._validating = True
            return functools.partial(self._run, Stage.VALIDATION, self._validate)
        batch = self.spec.recognizer.max_batch if batching else 1
        # A batching model reads ahead far enough for one batch in flight and the next decoding.
        ahead = max(self.spec.segments_ahead, 2 * batch)
        can_decode = (
            not self._decoding and self._segment_count is None and self._undelivered < ahead
        )
        # Inference first, so decoded audio does not pile up; a batching model's segments wait
        # for a full batch only while this thread could decode instead of idling.
        if self._decoded and (len(self._decoded) >= batch or not can_decode):
            taken = [self._decoded.popleft() for _ in range(min(batch, len(self._decoded)))]
            return functools.partial(self._run, Stage.INFERENCE, self._infer, taken)
        if can_decode:
            self._decoding = True
            return functools.partial(self._run, Stage.FEATURES, self._decode)
        return None

    def _run(self, stage: Stage, work: Callable[..., None], *args: object) -> None:
        started = time.perf_counter()
        try:
            work(*args)
        except ArengineError as error:
            self._fail(error)
        except Exception as error:
            if not self.finished:  # after a cancel, a task may trip over its deleted upload
                log.exception("stage %s failed for request %s", stage, self.spec.request_id)
                self._fail(StageFailed(stage, self.spec.request_id, error))
        finally:
            with self._lock:
                self.served_s += time.perf_counter() - started
                self._running -= 1
                idle = self.finished and self._running == 0
            if idle:
                self._release()
            self._wake()

    def _validate(self) -> None:
        started = time.perf_counter()
        spec = self.spec
        info = probe(spec.path, spec.limits)
        max_frames = int(spec.limits.max_duration_s * info.sample_rate)
        blocks = decode(spec.path, info.sample_rate, spec.recognizer.sample_rate, max_frames)
        seconds = time.perf_counter() - started
        with self._lock:
            self._info = info
            self._segments = Segmenter(blocks, spec.recognizer.plan)
            self._seconds[Stage.VALIDATION] += seconds
        self._observe(Stage.VALIDATION, seconds)

    def _decode(self) -> None:
        started = time.perf_counter()
        assert self._segments is not None  # set by validation, which always runs first
        segment = next(self._segments, None)
        decoded = time.perf_counter()
        self._observe(Stage.FEATURES, decoded - started)
        with self._lock:
            self._seconds[Stage.FEATURES] += decoded - started
            self._decoding = False
            if segment is not None:
                self._decoded.append((segment, decoded))
                self._undelivered += 1
                return
            self._segment_count = self._segments.index
            complete = not self._postprocessing and self._next_post == self._segment_count
        if complete:
            self._complete()

    def _infer(self, taken: list[tuple[Segment, float]]) -> None:
        """Stage 3 for one segment, or one forward call over a batch of this job's segments
        (their failure fails this request only, like one segment's)."""
        recognizer = self.spec.recognizer
        started = time.perf_counter()
        for _, queued in taken:
            self._observer.observe_queue_wait(recognizer.name, started - queued)
        segments = [segment for segment, _ in taken]
        features = [recognizer.features(segment) for segment in segments]
        extracted = time.perf_counter()
        if len(segments) == 1:
            scores = [recognizer.infer(features[0], segments[0])]
        else:
            scores = recognizer.infer_batch(features, segments)
        inferred = time.perf_counter()
        self._observe(Stage.FEATURES, extracted - started)
        self._observe(Stage.INFERENCE, inferred - extracted)
        with self._lock:
            self._seconds[Stage.FEATURES] += extracted - started
            self._seconds[Stage.INFERENCE] += inferred - extracted
            for segment, result in zip(segments, scores, strict=True):
                self._results[segment.index] = result
            if self._postprocessing:
                return
            self._postprocessing = True
        self._postprocess_in_order()

    def _postprocess_in_order(self) -> None:
        """Post-process results in segment order; one thread at a time, the others hand over."""
        while True:
            with self._lock:
                scores = self._results.pop(self._next_post, None)
                if scores is None or self.finished:
                    self._postprocessing = False
                    complete = self._next_post == self._segment_count and not self.finished
                    break
                self._next_post += 1
                self._undelivered -= 1
            started = time.perf_counter()
            tags = self._tagger.push(scores)
            seconds = time.perf_counter() - started
            self._observe(Stage.POSTPROCESS, seconds)
            with self._lock:
                self._tags.extend(tags)
                self._seconds[Stage.POSTPROCESS] += seconds
            self._announce(tags)
        if complete:
            self._complete()

    def _complete(self) -> None:
        """Called once, by the task that saw the last segment post-processed. Everything that can
        fail runs before `finished` is set, so a failure here still reaches `_fail`."""
        started = time.perf_counter()
        assert self._segments is not None and self._info is not None
        total = self._segments.total_samples or 0
        last = self._tagger.finish(total)
        tags = tuple(self._tags + last)
        finishing = time.perf_counter() - started
        self._observe(Stage.POSTPROCESS, finishing)
        info = self._info
        with self._lock:
            if self.finished:
                return
            self.finished = True
            seconds = self._seconds
            seconds[Stage.POSTPROCESS] += finishing
        self._announce(last)
        timings = Timings.of(seconds, total_s=time.perf_counter() - self._started)
        self.future.set_result(Result(self.spec.recognizer.name, info, tags, timings))

    def _announce(self, tags: list[Tag]) -> None:
        """Tell the listener; `_postprocess_in_order` and `_complete` never overlap: in order."""
        if tags and self.spec.on_tags is not None and not self.future.done():
            self.spec.on_tags(tags)

    def _observe(self, stage: Stage, seconds: float) -> None:
        self._observer.observe_stage(self.spec.recognizer.name, stage, seconds)

    def _fail(self, error: ArengineError) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
            self._decoded.clear()
            self._results.clear()
            idle = self._running == 0
        self.future.set_exception(error)
        if idle:
            self._release()
        self._wake()

    def _release(self) -> None:
        """Close the decoder (and its file) once no task is using it."""
        with self._lock:
            segments, self._segments = self._segments, None
        if segments is not None:
            segments.close()

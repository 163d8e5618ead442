"""One request inside the engine: its four stages as tasks that any engine thread may run.

A request hands out one task at a time to the pool: validation first, then alternately decoding
(one segment ahead, sequentially, never more than `segments_ahead` undelivered segments) and
inference of decoded segments (any order, any thread; up to the model's `max_batch` segments in
one forward call, when that pays). Post-processing consumes inference results
strictly in segment order, so tags come out in timestamp order and segment cuts are invisible.

A request for several models decodes its upload once (`arengine/audio/tee.py`: one resampling per
distinct rate) and runs one `ModelRun` per model: its own segments, inference and tagger. No
model decodes more than one segment length ahead of the slowest, which bounds the audio held
between them; their tags are merged into one timestamp order (`arengine/engine/merge.py`) unless
the caller gives another order.

What a request is beyond that comes from its caller (`arengine/engine/hooks.py`): each model's
tagger and the one a recording's time implies (`Tagging`), the order its tags go out in
(`TagOrder`: a live stream's as each is final), the segment plans (a live stream's shorter ones)
and the scores a job keeps (`ScoreKeeper`). This module names none of those features.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from arengine.audio.arrival import Arrival, abandoned
from arengine.audio.recorded import recorded_at, recording_time
from arengine.audio.segments import Segment, SegmentPlan
from arengine.audio.source import ModelInput, Reading, SegmentSources, segment_sources
from arengine.audio.validation import AudioLimits, probe
from arengine.engine.hooks import Gate, Recognizer, Tagging, TagOrder
from arengine.engine.merge import TagMerge
from arengine.engine.model_run import ModelRun
from arengine.engine.observer import NullObserver, ScoreKeeper, StageObserver
from arengine.errors import ArengineError, Cancelled, StageFailed
from arengine.types import AudioInfo, Result, Stage, Tag, Timings

log = logging.getLogger(__name__)

Task = Callable[[], None]
TagListener = Callable[[list[Tag]], None]
"""Called with each batch of tags as soon as they are final, in the request's tag order."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What a request asks of the engine."""

    request_id: str
    path: Path
    recognizers: tuple[Recognizer, ...]
    """The models to run, in the order the request named them (one, usually)."""
    tagging: Tagging
    """Each model's tagger (with the request's parameters), chosen by the caller."""
    limits: AudioLimits
    segments_ahead: int
    on_tags: TagListener | None = None
    """Optional: hears the tags as they become final (from an engine thread, one call at a time)."""
    audio_stream: int | None = None
    """Which audio stream of the upload to decode (0-based among its audio streams)."""
    parallel_decoding: bool = False
    """With `decode_in_child`, decode a long seekable file in `segments_ahead // 2` parts, by a
    child each, at once (`arengine/audio/parts.py`), when no other request is in the engine."""
    decode_in_child: bool = False
    """Decode FFmpeg's formats in a child process forked per request (`arengine/audio/child.py`)."""
    arrival: Arrival | None = None
    """Set when `path` is a WAV still being uploaded: read as it arrives (`audio/arrival.py`)."""
    name: str | None = None
    """The file's name as the user gave it (an upload's), read for a recording time."""
    plans: tuple[SegmentPlan, ...] | None = None
    """How each model's audio is cut, replacing the models' own plans: a live stream's shorter
    segments (`arengine/live/plans.py`)."""
    order: TagOrder | None = None
    """How the models' tags become one stream; None: merged in start order (`TagMerge`). A live
    stream sends each tag once final instead (`arengine/live/plans.py`)."""
    keeper: ScoreKeeper | None = None
    """Keeps each segment's scores as it is post-processed (a job's checkpoint); the segments an
    earlier run kept are post-processed from its scores, not inferred again."""
    gate: Gate | None = None
    """Which segments the models skip (a loudness model as a gate); None: every one is inferred.
    A skipped segment's stand-in scores are post-processed, and kept, as inferred ones are."""

    @property
    def background(self) -> bool:
        """A job's run (`POST /v1/jobs`, the one kind of request that keeps its scores): it
        holds at most the pool's `background_threads` at once, the rest staying free for
        requests."""
        return self.keeper is not None

    @property
    def model(self) -> str:
        """The models' names as the request gave them: `speech`, or `speech,notes`."""
        return ",".join(recognizer.name for recognizer in self.recognizers)


class EngineRequest:
    """The per-request state machine; the pool calls `take`, everything else is internal."""

    def __init__(
        self,
        spec: RequestSpec,
        wake: Callable[[], None],
        observer: StageObserver | None = None,
        others: Callable[[], int] = lambda: 0,
    ) -> None:
        self.spec = spec
        self._others = others
        """The requests in the engine besides this one, now (the pool's count)."""
        self._observer: StageObserver = observer or NullObserver()
        self.future: Future[Result] = Future()
        self._wake = wake
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._validation_s = 0.0
        self.finished = False
        self.served_s = 0.0
        """Engine seconds this request's tasks have taken; the pool serves the least-served
        first."""
        self._running = 0
        self._validating = False
        self._decoding = False
        self._postprocessing = False
        self._info: AudioInfo | None = None
        self._sources: SegmentSources | None = None
        plans = spec.plans or tuple(recognizer.plan for recognizer in spec.recognizers)
        self._runs = [
            ModelRun(index, recognizer, spec.tagging.tagger(index), plan)
            for index, (recognizer, plan) in enumerate(zip(spec.recognizers, plans, strict=True))
        ]
        if spec.keeper is not None:
            for run in self._runs:
                run.kept = spec.keeper.kept(run.index)
        self._several = len(self._runs) > 1
        self._window_s = max(run.segment_s for run in self._runs)
        """How far (in audio) one model's decoding may run ahead of the slowest model's."""
        self._order: TagOrder = spec.order or TagMerge(len(self._runs))
        """Several models' tags in one stream: in start order unless the caller says otherwise."""
        self._tags: list[Tag] = []

    @property
    def held_segments(self) -> int:
        """Decoded segments not yet post-processed: the audio this request holds in memory."""
        return sum(run.undelivered for run in self._runs)

    @property
    def queued_segments(self) -> int:
        """Decoded segments waiting for an engine thread to start their inference."""
        return sum(len(run.decoded) for run in self._runs)

    @property
    def validated(self) -> bool:
        """The upload has passed validation: its decoding has begun."""
        return self._info is not None

    @property
    def processed_s(self) -> float:
        """Audio seconds post-processed by every model (read from any thread, no lock)."""
        return min(run.next_post * run.segment_s for run in self._runs)

    @property
    def clip(self) -> bool:
        """A recording no longer than one segment of the longest model's plan: a short clip,
        whose latency a batch ahead of it would multiply (read from any thread, no lock)."""
        info = self._info
        if info is None or (not info.length_trusted and info.frames == 0):
            return False
        return info.duration_s <= self._window_s

    @property
    def progress(self) -> tuple[float, float | None]:
        """(audio seconds post-processed by every model, the recording's duration once
        validated and known): what a progress bar shows; read from any thread without the lock."""
        info = self._info
        if info is None:
            return 0.0, None
        if not info.length_trusted and info.frames == 0:  # a live stream, or no length stated
            return self.processed_s, None
        return min(self.processed_s, info.duration_s), info.duration_s

    def take(self, batching: bool = True) -> Task | None:
        """The next runnable task, or None; `batching=False`: one segment per inference task."""
        with self._lock:
            task = self._next_task(batching)
            if task is not None:
                self._running += 1
            return task

    def cancel(self) -> None:
        """Drop the remaining work; a task already running finishes and is discarded."""
        self.abort(Cancelled("the request was cancelled"))

    def abort(self, error: ArengineError) -> None:
        """End the request with `error` (its listener and its waiter get it), as `cancel` does."""
        self._fail(error)

    def _next_task(self, batching: bool) -> Task | None:
        if self.finished:
            return None
        if self._info is None:
            if self._validating:
                return None
            self._validating = True
            return functools.partial(self._run, Stage.VALIDATION, self._validate)
        decodable = self._decodable(batching)
        # Inference first, so decoded audio does not pile up; a batching model's segments wait
        # for a full batch only while this thread could decode instead of idling. The model
        # furthest behind goes first, so the others' tags are not held back in the merge.
        waiting = [run for run in self._runs if run.decoded]
        for run in sorted(waiting, key=lambda run: run.next_post * run.segment_s):
            batch = run.batch(batching)
            if len(run.decoded) >= batch or decodable is None:
                taken = [run.decoded.popleft() for _ in range(min(batch, len(run.decoded)))]
                return functools.partial(self._run, Stage.INFERENCE, self._infer, run, taken)
        if decodable is None:
            return None
        self._decoding = True
        return functools.partial(self._run, Stage.FEATURES, self._decode, decodable)

    def _ahead(self, run: ModelRun, batching: bool) -> int:
        return run.ahead(self.spec.segments_ahead, batching)

    def _decodable(self, batching: bool) -> ModelRun | None:
        """The model whose next segment to decode now, or None: the one furthest behind among
        those with room, and only within one segment length of the slowest model."""
        if self._decoding:
            return None
        decoding = [run for run in self._runs if run.segment_count is None]
        if not decoding or not self._arrived():
            return None
        slowest = min(run.decoded_s for run in decoding)
        ready = [
            run
            for run in decoding
            if run.undelivered < self._ahead(run, batching)
            and run.decoded_s <= slowest + self._window_s
        ]
        return min(ready, key=lambda run: run.decoded_s, default=None)

    def _arrived(self) -> bool:
        """Whether the next segment's bytes are uploaded (always, once the body is complete); if
        not, the pool is woken when they are, so no engine thread waits on a client."""
        sources = self._sources
        return sources is None or sources.arrived(self._window_s, self._wake)

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
        info = probe(spec.path, spec.limits, spec.audio_stream, spec.arrival)
        self._recording_time_defaults(recorded_at(spec.path, spec.name))
        models = [ModelInput(run.plan, run.recognizer.sample_rate) for run in self._runs]
        reading = Reading(
            spec.limits,
            spec.segments_ahead,
            self._parts(),
            spec.arrival,
            in_child=spec.decode_in_child,
        )
        sources = segment_sources(spec.path, info, models, reading)
        with self._lock:
            for run, source in zip(self._runs, sources.per_model, strict=True):
                run.segments = source
            self._sources = sources
            self._info = info
        seconds = time.perf_counter() - started
        with self._lock:
            self._validation_s += seconds
        # Validation is shared by the models: counted once, under the first model's name.
        self._observer.observe_stage(self._runs[0].recognizer.name, Stage.VALIDATION, seconds)

    def _parts(self) -> int:
        """How many parts the upload may be decoded in: several only while this request is the
        engine's only one, so that its children take cores the engine would otherwise leave
        idle; beside another request, the engine's threads have work for every core, and
        children beside them only slow both (docs: What does each input format cost?)."""
        if not self.spec.parallel_decoding or self._others() > 0:
            return 1
        return max(1, self.spec.segments_ahead // 2)

    def _decode(self, run: ModelRun) -> None:
        started = time.perf_counter()
        assert run.segments is not None  # set by validation, which always runs first
        segment = next(run.segments, None)
        self._decoded(run, segment, started, run.segments.index)

    def _decoded(
        self, run: ModelRun, segment: Segment | None, started: float, count: int | None
    ) -> None:
        """Queue a decoded segment for inference (or, when an earlier run kept its scores, for
        post-processing); at the end (`count` segments in all), let post-processing finish the
        model."""
        # Inferred by an earlier run of this request's job: its scores go to post-processing.
        kept = segment is not None and segment.index in run.kept
        stand_in = None if kept or segment is None else self._gated(run, segment)
        decoded = time.perf_counter()
        self._observe(run, Stage.FEATURES, decoded - started)
        with self._lock:
            run.seconds[Stage.FEATURES] += decoded - started
            self._decoding = False
            if segment is None:
                run.segment_count = count
            elif kept:
                run.replaying.add(segment.index)
            elif stand_in is not None:
                run.results[segment.index] = stand_in
                run.undelivered += 1
                run.skipped_s += run.audio_s(segment)
            else:
                run.decoded.append((segment, decoded))
                run.undelivered += 1
                return
            start = not self._postprocessing
            self._postprocessing = True
        if kept or stand_in is not None:
            self._wake()  # the next decoding is free: another thread takes it while this replays
        if start:
            self._postprocess_in_order()

    def _gated(self, run: ModelRun, segment: Segment) -> np.ndarray | None:
        """The stand-in scores of a segment the request's gate skips (kept, for a job, as
        inferred ones are), or None: it is inferred."""
        gate = self.spec.gate
        stand_in = None if gate is None else gate.stand_in(run.index, segment)
        if stand_in is None:
            return None
        if self.spec.keeper is not None and not self.finished:
            self.spec.keeper.keep(run.index, segment.index, stand_in)
        self._observer.observe_skipped(run.recognizer.name, run.audio_s(segment))
        return stand_in

    def _infer(self, run: ModelRun, taken: list[tuple[Segment, float]]) -> None:
        """Stage 3 for one segment, or one forward call over a batch of this model's segments
        (their failure fails this request only, like one segment's)."""
        recognizer = run.recognizer
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
        if self.spec.keeper is not None and not self.finished:
            # Checkpointed as soon as inferred, in any order: a crash loses only what is in
            # flight.
            for segment, result in zip(segments, scores, strict=True):
                self.spec.keeper.keep(run.index, segment.index, result)
        self._observe(run, Stage.FEATURES, extracted - started)
        self._observe(run, Stage.INFERENCE, inferred - extracted)
        with self._lock:
            run.seconds[Stage.FEATURES] += extracted - started
            run.seconds[Stage.INFERENCE] += inferred - extracted
            for segment, result in zip(segments, scores, strict=True):
                run.results[segment.index] = result
            if self._postprocessing:
                return
            self._postprocessing = True
        self._postprocess_in_order()

    def _postprocess_in_order(self) -> None:
        """Post-process each model's results in segment order, and finish each model's tagger
        once its last segment is through; one thread at a time, the others hand over."""
        while True:
            with self._lock:
                step = None if self.finished else self._next_step()
                if step is None:
                    self._postprocessing = False
                    complete = not self.finished and all(run.done for run in self._runs)
                    break
                run, scores = step
            started = time.perf_counter()
            if isinstance(scores, int):  # kept by an earlier run: read now, outside the lock
                scores = run.kept[scores]
            if scores is not None:
                tags = run.tagger.push(scores)
            else:
                assert run.segments is not None  # set by validation, which always runs first
                total_samples = run.segments.total_samples or 0
                if self.spec.keeper is not None:
                    self.spec.keeper.end(run.index, total_samples)
                tags = run.tagger.finish(total_samples)
            seconds = time.perf_counter() - started
            self._observe(run, Stage.POSTPROCESS, seconds)
            if self._several:
                tags = [dataclasses.replace(tag, model=run.recognizer.name) for tag in tags]
            with self._lock:
                run.seconds[Stage.POSTPROCESS] += seconds
                if scores is None:
                    run.wall_s = time.perf_counter() - self._started
                released = self._order.add(run.index, tags, done=scores is None)
                self._tags.extend(released)
            self._announce(released)
        if complete:
            self._complete()

    def _next_step(self) -> tuple[ModelRun, np.ndarray | int | None] | None:
        """A model's next result in order (claimed): its scores, or the index of a kept
        segment's; or a model to finish (`None` scores); under the lock."""
        for run in self._runs:
            if run.next_post in run.replaying:
                run.replaying.remove(run.next_post)
                run.next_post += 1
                return run, run.next_post - 1
            scores = run.results.pop(run.next_post, None)
            if scores is not None:
                run.next_post += 1
                run.undelivered -= 1
                return run, scores
            if run.finishable():
                run.done = True
                return run, None
        return None

    def _recording_time_defaults(self, when: datetime | None) -> None:
        """Taggers again with what the recording's time implies (birds: its week), before any
        segment reaches them; the caller's `Tagging` says which change."""
        if when is None:
            return
        for run in self._runs:
            fresh = self.spec.tagging.dated(run.index, when)
            if fresh is not None:
                run.tagger = fresh

    def _complete(self) -> None:
        """Called once, by the post-processing that finished the last model. Everything that can
        fail runs before `finished` is set, so a failure here still reaches `_fail`."""
        assert self._sources is not None  # set by validation, which always runs first
        info = self._sources.info()  # the decoded length, not the header's claim
        # Read at the end: recorders write GUANO after the audio, which a WAV read while it
        # uploads has only now (unless its last bytes are still on their way).
        found = recording_time(self.spec.path, self.spec.name)
        if found.when is not None:
            info = dataclasses.replace(info, recorded_at=found.when.isoformat())
        if found.warnings:
            info = dataclasses.replace(info, warnings=(*info.warnings, *found.warnings))
        with self._lock:
            if self.finished:
                return
            self.finished = True
            tags = tuple(self._tags)
        total = time.perf_counter() - self._started
        skipped: tuple[tuple[str, float], ...] = ()
        if self.spec.gate is not None:
            skipped = tuple((run.recognizer.name, run.skipped_s) for run in self._runs)
        result = Result(
            self.spec.model, info, tags, self._timings(total), self._model_timings(), skipped
        )
        self.future.set_result(result)

    def _timings(self, total_s: float) -> Timings:
        seconds = {stage: sum(run.seconds[stage] for run in self._runs) for stage in Stage}
        seconds[Stage.VALIDATION] = self._validation_s
        return Timings.of(seconds, total_s=total_s)

    def _model_timings(self) -> tuple[tuple[str, Timings], ...]:
        """Each model's own stage times and wall time to its last tag, for several models."""
        if not self._several:
            return ()
        return tuple(
            (run.recognizer.name, Timings.of(run.seconds, total_s=run.wall_s)) for run in self._runs
        )

    def _announce(self, tags: list[Tag]) -> None:
        """Tell the listener; post-processing runs on one thread at a time: in order."""
        if tags and self.spec.on_tags is not None and not self.future.done():
            self.spec.on_tags(tags)

    def _observe(self, run: ModelRun, stage: Stage, seconds: float) -> None:
        self._observer.observe_stage(run.recognizer.name, stage, seconds)

    def _fail(self, error: ArengineError) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
            for run in self._runs:
                run.decoded.clear()
                run.results.clear()
                run.replaying.clear()
            idle = self._running == 0
        if self.spec.arrival is not None:
            self.spec.arrival.fail(abandoned())  # a read waiting for the upload gives up
        self.future.set_exception(error)
        if idle:
            self._release()
        self._wake()

    def _release(self) -> None:
        """Close the decoders (and the file) once no task is using them."""
        with self._lock:
            sources, self._sources = self._sources, None
            for run in self._runs:
                run.segments = None
        if sources is not None:
            sources.close()

"""The engine: accuracy against silero-vad's sequential path, fairness, bounded memory, faults."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from silero_vad import get_speech_timestamps, load_silero_vad

from arengine.audio.segments import Segment
from arengine.audio.validation import AudioLimits
from arengine.engine.pool import EnginePool
from arengine.engine.request import RequestSpec
from arengine.errors import Cancelled, StageFailed
from arengine.jobs.scores import ModelPlan, ScoreLog
from arengine.kinds.speech.network import MAX_BATCH, SpeechModel
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.models.tagging import ModelTagging
from arengine.types import Result, Tag
from tests.conftest import RecordingFactory, wait_until
from tests.recordings import Recording

LIMITS = AudioLimits(
    max_duration_s=4 * 3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


class SlowRecognizer(SpeechRecognizer):
    """The real recognizer, slowed or broken on demand, counting what it holds."""

    def __init__(
        self, model: SpeechModel, delay_s: float = 0.0, fail: bool = False, segment_s: float = 5.0
    ) -> None:
        super().__init__(model, segment_s=segment_s, preroll_s=1.0)
        self.delay_s = delay_s
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0
        """Inference calls started, over every request."""
        self._lock = threading.Lock()

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        with self._lock:
            self.calls += 1
        self.gate.wait()
        if self.fail:
            raise RuntimeError("the model broke")
        time.sleep(self.delay_s)
        return super().infer(features, segment)


def _spec(
    path: Path, recognizer: SpeechRecognizer, request_id: str = "r", ahead: int = 4
) -> RequestSpec:
    return RequestSpec(
        request_id=request_id,
        path=path,
        recognizers=(recognizer,),
        tagging=ModelTagging((recognizer,), {}),
        limits=LIMITS,
        segments_ahead=ahead,
    )


def _frame_f1(ours: list[Tag], theirs: list[dict[str, int]], samples: int) -> float:
    def mask(intervals: list[tuple[float, float]]) -> np.ndarray:
        out = np.zeros(samples, bool)
        for start, end in intervals:
            out[int(start) : int(end)] = True
        return out

    a = mask([(t.start * 16000, t.end * 16000) for t in ours])
    b = mask([(d["start"], d["end"]) for d in theirs])
    return float(2 * (a & b).sum() / (a.sum() + b.sum()))


@pytest.fixture
def long_recording(recording: RecordingFactory) -> Recording:
    pieces = [
        p
        for i in range(24)
        for p in [("silence", 0.4 + (i % 5) * 0.7), ("speech", 0), ("noise", 0.3 * (i % 2))]
    ]
    return recording("long.wav", rate=16000, pieces=pieces)


@pytest.mark.slow  # the long recording through the engine and through silero-vad
def test_segmented_concurrent_path_agrees_with_silero_sequential(
    speech_model: SpeechModel, long_recording: Recording
) -> None:
    pool = EnginePool(threads=3)
    try:
        recognizer = SpeechRecognizer(speech_model, segment_s=4.0, preroll_s=2.0)
        result = pool.submit(_spec(long_recording.path, recognizer)).future.result(timeout=120)
    finally:
        pool.close()
    audio, _ = sf.read(long_recording.path, dtype="float32")
    reference = get_speech_timestamps(torch.from_numpy(audio), load_silero_vad())
    f1 = _frame_f1(list(result.tags), reference, len(audio))
    # Measured 0.997 with 4 s segments and 2 s pre-roll (BENCHMARKS.md has the long-file figure).
    assert f1 >= 0.98, f1
    assert abs(len(result.tags) - len(reference)) <= 2
    assert [t.start for t in result.tags] == sorted(t.start for t in result.tags)
    assert result.audio.duration_s == pytest.approx(long_recording.duration_s)


def test_same_answer_with_one_thread_and_many(
    speech_model: SpeechModel, long_recording: Recording
) -> None:
    answers = []
    for threads in (1, 4):
        pool = EnginePool(threads=threads)
        try:
            recognizer = SpeechRecognizer(speech_model, segment_s=3.0, preroll_s=1.0)
            answers.append(pool.submit(_spec(long_recording.path, recognizer)).future.result(60))
        finally:
            pool.close()
    assert answers[0].tags == answers[1].tags


def test_a_short_clip_does_not_wait_behind_a_long_recording(
    speech_model: SpeechModel, recording: RecordingFactory, tmp_path: Path
) -> None:
    long = recording("long.wav", pieces=[("noise", 120.0)])
    short = recording("short.wav", pieces=[("silence", 0.5), ("speech", 0), ("silence", 0.5)])
    recognizer = SlowRecognizer(speech_model, delay_s=0.02, segment_s=2.0)
    pool = EnginePool(threads=2)
    long_calls_when_short_done: list[int] = []
    try:
        long_job = pool.submit(_spec(long.path, recognizer, "long"))
        assert wait_until(lambda: recognizer.calls >= 2)  # the long job is under way
        short_job = pool.submit(_spec(short.path, recognizer, "short"))
        short_job.future.add_done_callback(
            lambda _: long_calls_when_short_done.append(recognizer.calls)
        )
        assert short_job.future.result(60).tags
        assert not long_job.future.done()
        long_job.future.result(120)
    finally:
        pool.close()
    # The long recording has 60 segments; the clip's 2 took turns with it, not waited for them.
    assert long_calls_when_short_done[0] < 20


def test_decoding_stays_a_bounded_number_of_segments_ahead(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    long = recording("long.wav", pieces=[("noise", 60.0)])
    recognizer = SlowRecognizer(speech_model, segment_s=1.0)
    recognizer.gate.clear()  # inference stalls: decoding must stop after `ahead` segments
    pool = EnginePool(threads=3)
    try:
        request = pool.submit(_spec(long.path, recognizer, ahead=3))
        assert wait_until(lambda: request.held_segments == 3)
        time.sleep(0.3)  # room to overshoot, if decoding did not stop
        held = request.held_segments
        recognizer.gate.set()
        result = request.future.result(60)
    finally:
        pool.close()
    assert held == 3
    assert request.held_segments == 0
    assert result.tags == ()


def test_a_failing_model_fails_its_request_only(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    clip = recording("clip.wav")
    pool = EnginePool(threads=2)
    try:
        broken = pool.submit(_spec(clip.path, SlowRecognizer(speech_model, fail=True), "bad-1"))
        with pytest.raises(StageFailed, match="inference failed for request bad-1"):
            broken.future.result(30)
        for _ in range(50):
            pool.submit(_spec(clip.path, SlowRecognizer(speech_model, fail=True)))
        good: Future[Result] = pool.submit(_spec(clip.path, SlowRecognizer(speech_model))).future
        assert len(good.result(30).tags) == 2
    finally:
        pool.close()
    assert pool.busy == 0


def test_cancel_drops_the_remaining_work(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    long = recording("long.wav", pieces=[("noise", 60.0)])
    recognizer = SlowRecognizer(speech_model, delay_s=0.05, segment_s=1.0)
    pool = EnginePool(threads=2)
    try:
        request = pool.submit(_spec(long.path, recognizer))
        assert wait_until(lambda: recognizer.calls >= 2)
        request.cancel()
        with pytest.raises(Cancelled):
            request.future.result(5)
        assert wait_until(lambda: pool.busy == 0 and pool.active_requests == 0)
        calls = recognizer.calls
        time.sleep(0.3)
        assert recognizer.calls == calls, "no inference after the cancel"
    finally:
        pool.close()


class _Observations:
    """A StageObserver that keeps every call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stages: list[tuple[str, str, float]] = []
        self.waits: list[tuple[str, float]] = []

    def observe_stage(self, model: str, stage: str, seconds: float) -> None:
        with self.lock:
            self.stages.append((model, stage, seconds))

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        with self.lock:
            self.waits.append((model, seconds))

    def observe_skipped(self, model: str, seconds: float) -> None:
        pass

    def seconds(self, stage: str) -> list[float]:
        return [s for _, name, s in self.stages if name == stage]


def test_the_observer_sees_every_task_and_sums_to_the_timings(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    clip = recording("observed.wav", pieces=[("speech", 0), ("silence", 12.0)])
    observed = _Observations()
    pool = EnginePool(threads=3, observer=observed)
    try:
        result = pool.submit(_spec(clip.path, SlowRecognizer(speech_model))).future.result()
    finally:
        pool.close()
    segments = int(np.ceil(clip.duration_s / 5.0))
    assert {model for model, _, _ in observed.stages} == {"speech"}
    assert len(observed.seconds("validation")) == 1
    assert len(observed.seconds("inference")) == segments
    assert len(observed.waits) == segments
    # Decode tasks (one per segment, plus the one that finds the end) and one extraction each.
    assert len(observed.seconds("features")) == 2 * segments + 1
    timings = result.timings
    for stage, total in [
        ("validation", timings.validation_s),
        ("features", timings.features_s),
        ("inference", timings.inference_s),
        ("postprocess", timings.postprocess_s),
    ]:
        assert sum(observed.seconds(stage)) == pytest.approx(total, abs=1e-9), stage


def test_tag_listener_hears_every_tag_in_order_while_the_job_runs(
    speech_model: SpeechModel, long_recording: Recording
) -> None:
    recognizer = SlowRecognizer(speech_model, delay_s=0.02, segment_s=2.0)
    heard: list[tuple[int, list[Tag]]] = []
    lock = threading.Lock()

    def listen(tags: list[Tag]) -> None:
        with lock:
            heard.append((recognizer.calls, tags))

    pool = EnginePool(threads=4)
    try:
        spec = RequestSpec(
            request_id="listen",
            path=long_recording.path,
            recognizers=(recognizer,),
            tagging=ModelTagging((recognizer,), {}),
            limits=LIMITS,
            segments_ahead=4,
            on_tags=listen,
        )
        request = pool.submit(spec)
        result = request.future.result(timeout=120)
    finally:
        pool.close()
    assert all(batch for _, batch in heard), "the listener is never called with no tags"
    assert [tag for _, batch in heard for tag in batch] == list(result.tags)
    assert len(heard) > 5, "tags arrive in many batches, not all at the end"
    segments = math.ceil(result.audio.duration_s / 2.0)
    assert heard[0][0] < segments / 2, "the first tags came before most segments were inferred"


def test_a_cancelled_job_tells_the_listener_nothing_more(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    clip = recording("talk.wav")
    recognizer = SlowRecognizer(speech_model)
    recognizer.gate.clear()
    heard: list[list[Tag]] = []
    pool = EnginePool(threads=2)
    try:
        spec = RequestSpec(
            "c",
            clip.path,
            (recognizer,),
            ModelTagging((recognizer,), {}),
            LIMITS,
            4,
            on_tags=heard.append,
        )
        request = pool.submit(spec)
        request.cancel()
        recognizer.gate.set()
        with pytest.raises(Cancelled):
            request.future.result(timeout=30)
        time.sleep(0.2)
    finally:
        pool.close()
    assert heard == []


class BatchCounter(SpeechRecognizer):
    """The real recognizer with batching, recording every forward call's segments."""

    def __init__(self, model: SpeechModel, max_batch: int, fail: bool = False) -> None:
        super().__init__(model, segment_s=2.0, preroll_s=1.0, max_batch=max_batch)
        self.fail = fail
        self.calls: list[list[int]] = []
        self.threads: list[str] = []
        """The engine thread of each call in `calls`."""
        self._lock = threading.Lock()

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        with self._lock:
            self.calls.append([segment.index])
            self.threads.append(threading.current_thread().name)
        return super().infer(features, segment)

    def infer_batch(
        self, features: Sequence[torch.Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        with self._lock:
            self.calls.append([segment.index for segment in segments])
            self.threads.append(threading.current_thread().name)
        if self.fail:
            raise RuntimeError("the batch broke")
        return super().infer_batch(features, segments)


def test_batched_segments_give_the_same_tags_and_each_segment_once(
    speech_model: SpeechModel, long_recording: Recording
) -> None:
    answers, recognizers = [], [BatchCounter(speech_model, 1), BatchCounter(speech_model, 4)]
    pool = EnginePool(threads=2)
    try:
        for recognizer in recognizers:
            answers.append(pool.submit(_spec(long_recording.path, recognizer)).future.result(60))
    finally:
        pool.close()
    alone, batched = recognizers
    assert {len(call) for call in alone.calls} == {1}
    assert max(len(call) for call in batched.calls) == 4  # decoding is faster than inference
    every = sorted(index for call in batched.calls for index in call)
    assert every == list(range(len(alone.calls)))
    assert len(answers[0].tags) == len(answers[1].tags) >= 20
    for ours, theirs in zip(answers[1].tags, answers[0].tags, strict=True):
        assert abs(ours.start - theirs.start) <= 0.032 and abs(ours.end - theirs.end) <= 0.032


def test_a_failing_batch_fails_its_request_only(
    speech_model: SpeechModel, long_recording: Recording, recording: RecordingFactory
) -> None:
    clip = recording("clip.wav")
    broken = BatchCounter(speech_model, 4, fail=True)
    pool = EnginePool(threads=2)
    try:
        bad = pool.submit(_spec(long_recording.path, broken, "bad-batch"))
        good = pool.submit(_spec(clip.path, BatchCounter(speech_model, 4), "good"))
        with pytest.raises(StageFailed, match="inference failed for request bad-batch"):
            bad.future.result(60)
        assert len(good.future.result(60).tags) == 2
    finally:
        pool.close()
    assert any(len(call) > 1 for call in broken.calls)


def test_a_batch_size_out_of_bounds_is_refused(speech_model: SpeechModel) -> None:
    for size in (0, MAX_BATCH + 1):
        with pytest.raises(ValueError, match=f"max_batch must be 1 to {MAX_BATCH}, got {size}"):
            SpeechRecognizer(speech_model, segment_s=2.0, preroll_s=1.0, max_batch=size)


def test_after_a_clip_the_first_thread_never_batches_beside_another_request(
    speech_model: SpeechModel, long_recording: Recording, recording: RecordingFactory
) -> None:
    """Once a clip has been served, the first engine thread stays within one segment's time of
    the next clip that arrives; the others batch the long recording's segments."""
    other = SlowRecognizer(speech_model, segment_s=30.0)
    batching = BatchCounter(speech_model, 4)
    pool = EnginePool(threads=3)
    try:
        clip = pool.submit(_spec(recording("clip.wav").path, other, "clip"))
        clip.future.result(30)
        assert clip.clip  # shorter than one 30-s segment
        other.gate.clear()  # the other request (one segment) stays in the pool, holding one thread
        waiting = pool.submit(_spec(recording("clip.wav").path, other, "other"))
        result = pool.submit(_spec(long_recording.path, batching, "long")).future.result(60)
        other.gate.set()
        waiting.future.result(30)
    finally:
        other.gate.set()
        pool.close()
    assert len(result.tags) >= 20
    on_first = [len(call) for call, thread in zip(batching.calls, batching.threads, strict=True)
                if thread == "arengine-engine-0"]  # fmt: skip
    assert set(on_first) <= {1}, "the first thread took a batch while a clip could arrive"
    assert max(len(call) for call in batching.calls) > 1, "the other threads batch"


def test_a_long_recording_is_no_clip_and_leaves_every_thread_batching(
    speech_model: SpeechModel, long_recording: Recording
) -> None:
    """No clip served: two long recordings at once are batched on every thread, the first too
    (one call of 4 speech segments costs 0.83x of 4 calls)."""
    recognizers = [BatchCounter(speech_model, 4), BatchCounter(speech_model, 4)]
    pool = EnginePool(threads=2)
    try:
        requests = [pool.submit(_spec(long_recording.path, r, f"long{i}"))
                    for i, r in enumerate(recognizers)]  # fmt: skip
        for request in requests:
            request.future.result(60)
    finally:
        pool.close()
    assert not any(request.clip for request in requests)  # 2-s segments of a longer recording
    on_first = [len(call) for recognizer in recognizers
                for call, thread in zip(recognizer.calls, recognizer.threads, strict=True)
                if thread == "arengine-engine-0"]  # fmt: skip
    assert max(on_first) > 1, "the first thread batches when no clip has been served"


class InFlight(SlowRecognizer):
    """Counts its inference calls running at once, and the most there ever were."""

    def __init__(self, model: SpeechModel) -> None:
        super().__init__(model, segment_s=2.0)
        self.now = 0
        self.most = 0

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            return super().infer(features, segment)
        finally:
            with self._lock:
                self.now -= 1


def test_a_job_run_leaves_a_thread_free_for_a_clip(
    speech_model: SpeechModel, recording: RecordingFactory, tmp_path: Path
) -> None:
    """A job's run (it keeps scores) holds at most `background_threads`: with its segments stuck
    in inference on every thread it may hold, a clip still gets a thread and is answered."""
    long = recording("long.wav", pieces=[("noise", 60.0)])
    clip = recording("clip.wav", pieces=[("silence", 0.5), ("speech", 0), ("silence", 0.5)])
    job_recognizer = InFlight(speech_model)
    job_recognizer.gate.clear()  # the job's inference calls stay stuck until the clip is done
    keeper = ScoreLog.open(tmp_path / "job.scores", (ModelPlan.of(job_recognizer),))
    pool = EnginePool(threads=3)  # background_threads: 2 by default
    try:
        request = pool.submit(replace(_spec(long.path, job_recognizer, "job"), keeper=keeper))
        assert wait_until(lambda: job_recognizer.now >= 2)  # the job holds all it may
        answered = pool.submit(_spec(clip.path, SlowRecognizer(speech_model), "clip"))
        assert answered.future.result(20).tags  # on the third thread, the job still stuck
        assert job_recognizer.now == 2
        job_recognizer.gate.set()
        request.future.result(120)
    finally:
        job_recognizer.gate.set()
        pool.close()
        keeper.close()
    assert job_recognizer.most == 2
    assert job_recognizer.calls >= 30


class GatedKeeper:
    """A job's checkpoint in memory: `scores` kept by an earlier run, read only once `gate` is
    open; records the segments inferred (kept) by this run."""

    def __init__(self, scores: dict[int, np.ndarray]) -> None:
        self.scores = scores
        self.gate = threading.Event()
        self.inferred: list[int] = []

    def kept(self, model: int) -> Mapping[int, np.ndarray]:
        return _GatedScores(self)

    def keep(self, model: int, segment: int, scores: np.ndarray) -> None:
        self.inferred.append(segment)
        self.scores[segment] = scores

    def end(self, model: int, total_samples: int) -> None:
        pass


class _GatedScores(Mapping[int, np.ndarray]):
    def __init__(self, keeper: GatedKeeper) -> None:
        self._keeper = keeper
        self._indices = set(keeper.scores)

    def __contains__(self, index: object) -> bool:
        return index in self._indices

    def __getitem__(self, index: int) -> np.ndarray:
        self._keeper.gate.wait()
        return self._keeper.scores[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices)

    def __len__(self) -> int:
        return len(self._indices)


def test_a_resumed_job_infers_while_it_replays_its_kept_segments(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    """The kept segments wait for post-processing as indices, not as decoded audio or read
    scores: the decoding passes them at once, and the first segment not kept is inferred while
    the kept ones are still being post-processed (here: stuck reading the first). The tags equal
    an uninterrupted run's."""
    long = recording("long.wav", pieces=[("silence", 3.0), ("speech", 0), ("noise", 30.0)])
    recognizer = SlowRecognizer(speech_model, segment_s=1.0)
    first, again = GatedKeeper({}), GatedKeeper({})
    pool = EnginePool(threads=3)
    try:
        whole = pool.submit(replace(_spec(long.path, recognizer, "first"), keeper=first))
        alone = whole.future.result(60)
        # The first 20 segments kept; their scores not readable until the gate opens.
        again.scores.update((index, first.scores[index]) for index in range(20))
        resumed = pool.submit(replace(_spec(long.path, recognizer, "again"), keeper=again))
        inferred_meanwhile = wait_until(lambda: 20 in again.inferred, 20)
        again.gate.set()
        result = resumed.future.result(60)
    finally:
        again.gate.set()
        pool.close()
    assert inferred_meanwhile
    assert min(again.inferred) == 20
    assert result.tags == alone.tags
    assert alone.tags

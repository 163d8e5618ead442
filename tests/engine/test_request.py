"""A request's state machine (`arengine/engine/job.py`) on its own: fake recognizers, taggers and
strategies, its tasks run one by one on the test's thread, so each test sees every state in turn
and nothing depends on a model's speed or on a pool's threads.

The audio is real (a WAV the test writes): validation and decoding are the audio room's, and the
request only hands them out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio import parts
from arengine.audio.segments import Segment, SegmentPlan
from arengine.audio.source import SegmentSources, segment_sources
from arengine.audio.validation import AudioLimits
from arengine.engine import request as request_module
from arengine.engine.pool import EnginePool
from arengine.engine.request import EngineRequest, RequestSpec
from arengine.errors import (
    Cancelled,
    ErrorCode,
    InvalidInput,
    NotReady,
    StageFailed,
    UnsupportedFormat,
)
from arengine.types import Stage, Tag
from tests.recordings import sine

RATE = 16000
HOP = 1600
"""A frame is 0.1 s; a segment 10 frames (1 s)."""
PLAN = SegmentPlan(hop=HOP, context=0, segment_frames=10, preroll_frames=0)
LIMITS = AudioLimits(
    max_duration_s=600, max_channels=2, min_sample_rate=8000, max_sample_rate=48000
)


@dataclass
class FakeRecognizer:
    """Scores each frame of segment `i` with `i`; raises on segment `fail_at`."""

    name: str = "fake"
    sample_rate: int = RATE
    plan: SegmentPlan = PLAN
    max_batch: int = 1
    fail_at: int | None = None
    error: Exception = field(default_factory=lambda: RuntimeError("the network broke"))
    inferred: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)

    def features(self, segment: Segment) -> np.ndarray:
        return segment.samples

    def infer(self, features: np.ndarray, segment: Segment) -> np.ndarray:
        if segment.index == self.fail_at:
            raise self.error
        self.inferred.append(segment.index)
        return np.full(segment.frames, float(segment.index))

    def infer_batch(
        self, features: Sequence[np.ndarray], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        self.batches.append(len(segments))
        return [self.infer(f, s) for f, s in zip(features, segments, strict=True)]


class FakeTagger:
    """One tag per segment pushed (its frames' span, its score), `label` for its name; one
    `end` tag at the finish, at the recording's end (in start order, as the contract says)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.frames = 0

    def push(self, scores: np.ndarray) -> list[Tag]:
        start = self.frames * HOP / RATE
        self.frames += len(scores)
        return [Tag(start, self.frames * HOP / RATE, self.label, float(scores[0]))]

    def finish(self, audio_samples: int) -> list[Tag]:
        return [Tag(audio_samples / RATE, audio_samples / RATE, f"{self.label}-end", 1.0)]


@dataclass
class FakeTagging:
    """Taggers labelled `m<index>`; a recording's time gives `dated` ones, when `date` is set."""

    date: bool = False
    asked: list[tuple[int, datetime]] = field(default_factory=list)

    def tagger(self, model: int) -> FakeTagger:
        return FakeTagger(f"m{model}")

    def dated(self, model: int, when: datetime) -> FakeTagger | None:
        self.asked.append((model, when))
        return FakeTagger(f"dated{model}") if self.date else None


@dataclass
class KeepModelZero:
    """A tag order that sends model 0's tags at once and drops every other model's."""

    calls: list[tuple[int, int, bool]] = field(default_factory=list)

    def add(self, index: int, tags: list[Tag], done: bool = False) -> list[Tag]:
        self.calls.append((index, len(tags), done))
        return tags if index == 0 else []


@dataclass
class FakeKeeper:
    """Scores an earlier run kept (`given`), and what this run keeps."""

    given: dict[int, np.ndarray] = field(default_factory=dict)
    kept_now: list[tuple[int, int]] = field(default_factory=list)
    ended: list[tuple[int, int]] = field(default_factory=list)

    def kept(self, model: int) -> Mapping[int, np.ndarray]:
        return self.given

    def keep(self, model: int, segment: int, scores: np.ndarray) -> None:
        self.kept_now.append((model, segment))

    def end(self, model: int, total_samples: int) -> None:
        self.ended.append((model, total_samples))


@dataclass
class Recorder:
    """A stage observer that keeps each call."""

    stages: list[tuple[str, Stage]] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    skipped: list[tuple[str, float]] = field(default_factory=list)

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        self.stages.append((model, stage))

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        self.waits.append(model)

    def observe_skipped(self, model: str, seconds: float) -> None:
        self.skipped.append((model, seconds))


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    """3.5 s of noise at the fake models' rate: segments of 10, 10, 10 and 5 frames."""
    path = tmp_path / "clip.wav"
    noise = np.random.default_rng(0).uniform(-0.1, 0.1, int(3.5 * RATE)).astype(np.float32)
    sf.write(path, noise, RATE, subtype="PCM_16")
    return path


def _spec(path: Path, *recognizers: FakeRecognizer, **given: object) -> RequestSpec:
    fields: dict[str, object] = {"tagging": FakeTagging(), "segments_ahead": 2, **given}
    return RequestSpec(
        request_id="r1",
        path=path,
        recognizers=recognizers or (FakeRecognizer(),),
        limits=LIMITS,
        **fields,  # type: ignore[arg-type]
    )


class Wakes:
    """Counts the request's calls to wake the pool."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _drive(request: EngineRequest, batching: bool = True, steps: int = 1000) -> None:
    """Run the request's tasks one at a time until it ends, as a one-thread pool would."""
    for _ in range(steps):
        if request.future.done():
            return
        task = request.take(batching)
        assert task is not None, "an unfinished request with nothing running has a task to give"
        task()
    raise AssertionError(f"the request did not end in {steps} tasks")


def test_states_from_admitted_to_finished(wav: Path) -> None:
    request = EngineRequest(_spec(wav), Wakes())
    assert not request.validated and not request.finished
    assert request.progress == (0.0, None)
    validation = request.take()
    assert validation is not None
    assert request.take() is None, "nothing else runs before validation"
    validation()
    assert request.validated and request.progress == (0.0, 3.5)
    most_held = 0
    while not request.future.done():
        task = request.take()
        assert task is not None
        task()
        most_held = max(most_held, request.held_segments)
    assert request.finished and request.take() is None
    assert most_held <= 2, "never more decoded segments held than segments_ahead"
    assert request.held_segments == 0 and request.queued_segments == 0
    result = request.future.result()
    assert result.model == "fake" and result.audio.duration_s == 3.5
    assert [(t.start, t.end, t.label, t.score) for t in result.tags] == [
        (0.0, 1.0, "m0", 0.0),
        (1.0, 2.0, "m0", 1.0),
        (2.0, 3.0, "m0", 2.0),
        (3.0, 3.5, "m0", 3.0),
        (3.5, 3.5, "m0-end", 1.0),
    ]
    assert request.progress == (3.5, 3.5)


def test_every_stage_is_timed_and_observed(wav: Path) -> None:
    recorder = Recorder()
    request = EngineRequest(_spec(wav), Wakes(), recorder)
    _drive(request)
    stages = {stage for _, stage in recorder.stages}
    assert stages == set(Stage)
    assert recorder.stages.count(("fake", Stage.VALIDATION)) == 1
    assert recorder.waits == ["fake"] * 4, "one queue wait per inferred segment"
    timings = request.future.result().timings
    assert timings.total_s >= 0


def test_a_batching_model_gets_batches_only_when_batching(wav: Path) -> None:
    batched = FakeRecognizer(max_batch=2)
    _drive(EngineRequest(_spec(wav, batched), Wakes()))
    assert 2 in batched.batches, "two segments in one forward call"
    single = FakeRecognizer(max_batch=2)
    _drive(EngineRequest(_spec(wav, single), Wakes()), batching=False)
    assert single.batches == [], "batching off: one segment per call"
    assert single.inferred == [0, 1, 2, 3]


def test_the_listener_hears_every_tag_in_order_and_never_nothing(wav: Path) -> None:
    heard: list[list[Tag]] = []
    request = EngineRequest(_spec(wav, on_tags=heard.append), Wakes())
    _drive(request)
    assert all(heard), "never called with no tags"
    assert len(heard) > 1, "tags go out as they are final, not all at the end"
    assert [tag for batch in heard for tag in batch] == list(request.future.result().tags)


def test_cancel_ends_it_and_the_running_task_is_discarded(wav: Path) -> None:
    heard: list[list[Tag]] = []
    wakes = Wakes()
    recognizer = FakeRecognizer()
    request = EngineRequest(_spec(wav, recognizer, on_tags=heard.append), wakes)
    _drive_until(request, lambda: bool(heard))
    before = len(heard)
    running = request.take()
    assert running is not None
    request.cancel()
    assert request.finished and request.take() is None
    with pytest.raises(Cancelled):
        request.future.result()
    running()  # a task already running finishes; what it gives is dropped
    assert len(heard) == before, "nothing more reaches the listener once cancelled"
    request.cancel()  # a second cancel changes nothing
    assert isinstance(request.future.exception(), Cancelled)


def test_abort_gives_its_error_to_the_waiter(wav: Path) -> None:
    request = EngineRequest(_spec(wav), Wakes())
    error = NotReady("cut off", code=ErrorCode.SHUTTING_DOWN)
    request.abort(error)
    assert request.future.exception() is error
    assert request.take() is None


def test_a_failing_inference_fails_the_request_with_its_stage(
    wav: Path, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[list[Tag]] = []
    recognizer = FakeRecognizer(fail_at=2)
    request = EngineRequest(_spec(wav, recognizer, on_tags=heard.append), Wakes())
    _drive(request)
    error = request.future.exception()
    assert isinstance(error, StageFailed)
    assert error.stage == Stage.INFERENCE and "r1" in str(error)
    assert "the network broke" not in str(error), "the cause goes to the log, not the client"
    assert "the network broke" in caplog.text
    assert 2 not in recognizer.inferred and request.finished and request.take() is None
    assert all(tag.end <= 2.0 for batch in heard for tag in batch), "only tags before it"


def test_an_arengine_error_from_a_stage_reaches_the_waiter_as_it_is(wav: Path) -> None:
    refusal = InvalidInput("this segment is refused")
    request = EngineRequest(_spec(wav, FakeRecognizer(fail_at=0, error=refusal)), Wakes())
    _drive(request)
    assert request.future.exception() is refusal


def test_a_file_that_is_not_audio_fails_validation(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_bytes(b"not audio at all, only text " * 20)
    recognizer = FakeRecognizer()
    request = EngineRequest(_spec(path, recognizer), Wakes())
    _drive(request)
    assert isinstance(request.future.exception(), UnsupportedFormat | InvalidInput)
    assert not request.validated and recognizer.inferred == []


def test_several_models_are_merged_in_start_order_by_default(wav: Path) -> None:
    first, second = FakeRecognizer("one"), FakeRecognizer("two")
    request = EngineRequest(_spec(wav, first, second), Wakes())
    _drive(request)
    result = request.future.result()
    starts = [tag.start for tag in result.tags]
    assert starts == sorted(starts)
    assert {tag.model for tag in result.tags} == {"one", "two"}, "each tag names its model"
    assert [name for name, _ in result.model_timings] == ["one", "two"]


def test_the_tag_order_strategy_decides_what_goes_out(wav: Path) -> None:
    order = KeepModelZero()
    heard: list[list[Tag]] = []
    request = EngineRequest(
        _spec(wav, FakeRecognizer("one"), FakeRecognizer("two"), order=order, on_tags=heard.append),
        Wakes(),
    )
    _drive(request)
    tags = request.future.result().tags
    assert tags and {tag.model for tag in tags} == {"one"}
    assert [tag for batch in heard for tag in batch] == list(tags)
    # Each model's tags were offered as they came, and each model's end once.
    assert sorted(index for index, _, done in order.calls if done) == [0, 1]
    assert sum(count for index, count, _ in order.calls if index == 1) == 5


def test_a_recording_time_gives_the_strategy_its_dated_taggers(tmp_path: Path, wav: Path) -> None:
    tagging = FakeTagging(date=True)
    request = EngineRequest(_spec(wav, tagging=tagging, name="SITE_20250501_053000.wav"), Wakes())
    _drive(request)
    assert tagging.asked == [(0, datetime(2025, 5, 1, 5, 30))]
    assert {tag.label for tag in request.future.result().tags} == {"dated0", "dated0-end"}
    undated = FakeTagging(date=True)
    _drive(EngineRequest(_spec(wav, tagging=undated), Wakes()))
    assert undated.asked == [], "no recording time: the taggers stay"


def test_the_strategy_may_keep_the_tagger_it_has(wav: Path) -> None:
    tagging = FakeTagging(date=False)
    request = EngineRequest(_spec(wav, tagging=tagging, name="SITE_20250501_053000.wav"), Wakes())
    _drive(request)
    assert len(tagging.asked) == 1
    assert {tag.label for tag in request.future.result().tags} == {"m0", "m0-end"}


def test_kept_scores_are_not_inferred_again(wav: Path) -> None:
    fresh = FakeRecognizer()
    _drive(EngineRequest(_spec(wav, fresh), Wakes()))
    keeper = FakeKeeper(given={0: np.full(10, 0.0), 1: np.full(10, 1.0)})
    resumed = FakeRecognizer()
    request = EngineRequest(_spec(wav, resumed, keeper=keeper), Wakes())
    assert request.spec.background, "a request with a keeper is a job's run"
    _drive(request)
    assert resumed.inferred == [2, 3]
    assert keeper.kept_now == [(0, 2), (0, 3)]
    assert keeper.ended == [(0, int(3.5 * RATE))]
    expected = EngineRequest(_spec(wav, FakeRecognizer()), Wakes())
    _drive(expected)
    assert request.future.result().tags == expected.future.result().tags


def _drive_until(request: EngineRequest, condition: object) -> None:
    assert callable(condition)
    for _ in range(1000):
        if condition():
            return
        task = request.take()
        assert task is not None
        task()
    raise AssertionError("the condition never held")


@dataclass
class OddSegmentsGate:
    """A gate that skips model 0's odd segments, standing in scores of -1 for them."""

    asked: list[tuple[int, int]] = field(default_factory=list)

    def stand_in(self, model: int, segment: Segment) -> np.ndarray | None:
        self.asked.append((model, segment.index))
        return np.full(segment.frames, -1.0) if model == 0 and segment.index % 2 else None


def test_a_gated_segment_is_not_inferred_and_its_stand_in_is_tagged(wav: Path) -> None:
    gated, other = FakeRecognizer("gated"), FakeRecognizer("other")
    recorder = Recorder()
    keeper = FakeKeeper()
    spec = _spec(wav, gated, other, gate=OddSegmentsGate(), keeper=keeper)
    request = EngineRequest(spec, Wakes(), recorder)
    _drive(request)
    assert gated.inferred == [0, 2] and other.inferred == [0, 1, 2, 3]
    result = request.future.result()
    scores = [(t.start, t.score) for t in result.tags if t.model == "gated" and t.end > t.start]
    assert scores == [(0.0, 0.0), (1.0, -1.0), (2.0, 2.0), (3.0, -1.0)]
    assert result.skipped == (("gated", 1.5), ("other", 0.0)), "1 s and the last 0.5 s"
    assert recorder.skipped == [("gated", 1.0), ("gated", 0.5)]
    assert recorder.waits.count("gated") == 2, "a skipped segment never waits for inference"
    assert sorted(keeper.kept_now) == [(0, s) for s in range(4)] + [(1, s) for s in range(4)]


def test_a_resumed_job_replays_a_kept_stand_in_without_asking_the_gate(wav: Path) -> None:
    keeper = FakeKeeper(given={1: np.full(10, -1.0)})
    gate = OddSegmentsGate()
    recognizer = FakeRecognizer()
    _drive(EngineRequest(_spec(wav, recognizer, gate=gate, keeper=keeper), Wakes()))
    assert recognizer.inferred == [0, 2]
    assert gate.asked == [(0, 0), (0, 2), (0, 3)], "segment 1 was kept: its scores are read"


def test_without_a_gate_nothing_is_skipped_nor_reported(wav: Path) -> None:
    request = EngineRequest(_spec(wav), Wakes())
    _drive(request)
    assert request.future.result().skipped == ()


@pytest.fixture
def long_mp3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An MP3 of 12 s that parts of 5 s split in two."""
    monkeypatch.setattr(parts, "MIN_PART_S", 5)
    return sine(tmp_path / "a.mp3", 12.0, 44100, 440, "-c:a", "libmp3lame")


def _decoded_in(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kind of decoding each request's upload gets, as requests validate."""
    kinds: list[str] = []

    def spy(*args: object) -> SegmentSources:
        sources = segment_sources(*args)  # type: ignore[arg-type]
        kinds.append(type(sources._decoding._child).__name__)
        return sources

    monkeypatch.setattr(request_module, "segment_sources", spy)
    return kinds


@pytest.mark.parametrize(
    ("parallel", "others", "expected"),
    [(True, 0, "PartDecoding"), (True, 1, "ChildDecoding"), (False, 0, "ChildDecoding")],
    ids=["alone", "beside-another", "setting-off"],
)
def test_an_upload_is_decoded_in_parts_only_alone_and_when_asked(
    long_mp3: Path, monkeypatch: pytest.MonkeyPatch, parallel: bool, others: int, expected: str
) -> None:
    kinds = _decoded_in(monkeypatch)
    spec = _spec(long_mp3, segments_ahead=4, parallel_decoding=parallel, decode_in_child=True)
    request = EngineRequest(spec, Wakes(), others=lambda: others)
    _drive(request)
    assert kinds == [expected]
    assert request.future.result().audio.duration_s == pytest.approx(12.0, abs=0.1)


def test_two_requests_at_once_decode_in_one_child_each(
    long_mp3: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside another request the engine's threads have work for every core: no parts. Alone
    again, the next request has its parts."""
    kinds = _decoded_in(monkeypatch)
    spec = _spec(long_mp3, segments_ahead=4, parallel_decoding=True, decode_in_child=True)
    pool = EnginePool(threads=2)
    try:
        with pool._condition:  # no worker takes a task before both are in the engine
            both = [pool.submit(spec), pool.submit(spec)]
        for request in both:
            request.future.result(timeout=120)
        assert kinds == ["ChildDecoding", "ChildDecoding"]
        pool.submit(spec).future.result(timeout=120)
        assert kinds[2:] == ["PartDecoding"]
    finally:
        pool.close()

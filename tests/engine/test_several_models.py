"""Several models over one upload: decoded once, each model's tags as if it ran alone, merged in
timestamp order, with the audio held between the models bounded."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import soxr
import torch

from arengine.audio.segments import Segment
from arengine.audio.validation import AudioLimits
from arengine.engine.pool import EnginePool
from arengine.engine.request import EngineRequest, RequestSpec
from arengine.errors import InvalidInput, UnknownModel
from arengine.kinds.base import Overrides, Recognizer
from arengine.models.tagging import ModelTagging
from arengine.postprocess import Tagger
from arengine.service.engine import Engine
from arengine.settings import Settings
from arengine.types import Result, Stage, Tag
from tests.music import speech_and_melodies

pytestmark = pytest.mark.slow  # the notes and music models beside speech

SEGMENT_S = 4.0
MODELS = ("speech", "notes", "music")
LIMITS = AudioLimits(
    max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(Settings(engine_threads=2, models=",".join(MODELS), segment_s=SEGMENT_S))
    engine.load_models()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def speech_and_music(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return speech_and_melodies(tmp_path_factory.mktemp("several"))


class _Backlog:
    """An observer that measures, at every stage event, the audio a job holds for each model
    and has not cut into segments yet (the tee's queues)."""

    def __init__(self) -> None:
        self.request: EngineRequest | None = None
        self.most_s = 0.0
        self._lock = threading.Lock()

    def observe_stage(self, model: str, stage: Stage, seconds: float) -> None:
        request = self.request
        # A test-only peek at the tee's queues:
        decoder = None if request is None else request._sources
        if request is None or decoder is None:
            return
        with self._lock:
            for index, recognizer in enumerate(request.spec.recognizers):
                held = decoder.held_samples(index) / recognizer.sample_rate
                self.most_s = max(self.most_s, held)

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        pass

    def observe_skipped(self, model: str, seconds: float) -> None:
        pass


def _run(
    path: Path,
    recognizers: tuple[Recognizer, ...],
    backlog: _Backlog | None = None,
    threads: int = 2,
) -> Result:
    pool = EnginePool(threads, observer=backlog)
    try:
        request = pool.submit(
            RequestSpec(
                "several",
                path,
                recognizers,
                ModelTagging(recognizers, {}),
                LIMITS,
                segments_ahead=4,
            )
        )
        if backlog is not None:
            backlog.request = request
        return request.future.result(timeout=600)
    finally:
        pool.close()


def _without_model(tags: tuple[Tag, ...], model: str) -> list[Tag]:
    return [Tag(t.start, t.end, t.label, t.score, extra=t.extra) for t in tags if t.model == model]


def test_each_model_tags_the_upload_as_it_would_alone_in_one_timestamp_order(
    engine: Engine, speech_and_music: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recognizers = engine.check(",".join(MODELS), {})
    alone = {r.name: _run(speech_and_music, (r,)) for r in recognizers}
    resamplers: list[tuple[int, int]] = []
    real = soxr.ResampleStream

    def counted(rate_in: float, rate_out: float, *args: object, **kwargs: object) -> object:
        resamplers.append((int(rate_in), int(rate_out)))
        return real(rate_in, rate_out, *args, **kwargs)

    monkeypatch.setattr(soxr, "ResampleStream", counted)
    together = _run(speech_and_music, recognizers)

    assert sorted(resamplers) == [(44100, 16000), (44100, 22050)], "one resampler per rate"
    assert together.model == "speech,notes,music"
    for name, result in alone.items():
        assert result.tags, f"{name} tags the recording"
        assert _without_model(together.tags, name) == list(result.tags), name
    assert {tag.model for tag in together.tags} == set(MODELS)
    starts = [tag.start for tag in together.tags]
    assert starts == sorted(starts)
    assert together.audio == alone["speech"].audio
    assert [name for name, _ in together.model_timings] == list(MODELS)
    for name, timings in together.model_timings:
        assert 0 < timings.inference_s <= together.timings.inference_s, name
        assert timings.total_s <= together.timings.total_s, name


class _Held(Recognizer):
    """A loaded model whose inference waits for `gate`: the slowest model, on demand."""

    kind = "notes"  # the model it holds (`inner`)

    def __init__(self, inner: Recognizer) -> None:
        assert inner.kind == self.kind
        self.inner = inner
        self.name, self.sample_rate = inner.name, inner.sample_rate
        self.labels, self.plan, self.max_batch = inner.labels, inner.plan, inner.max_batch
        self.input_shape = inner.input_shape
        self.gate = threading.Event()

    def features(self, segment: Segment) -> torch.Tensor:
        return self.inner.features(segment)

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        self.gate.wait()
        return self.inner.infer(features, segment)

    def infer_batch(
        self, features: Sequence[torch.Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        self.gate.wait()
        return self.inner.infer_batch(features, segments)

    def tagger(self, overrides: Overrides) -> Tagger:
        return self.inner.tagger(overrides)

    def warm_up(self) -> None:
        self.inner.warm_up()

    def defaults(self) -> dict[str, float]:
        return self.inner.defaults()


def test_no_model_decodes_far_ahead_of_the_slowest(engine: Engine, speech_and_music: Path) -> None:
    """Notes held up for a while: speech, fast, could decode the whole minute meanwhile and the
    tee would hold all of it for notes. It stops one segment length ahead instead."""
    notes, speech = engine.check("notes,speech", {})
    held = _Held(notes)
    timer = threading.Timer(1.5, held.gate.set)
    timer.start()
    backlog = _Backlog()
    try:
        # Six threads: four wait in the held model (its four decoded segments), two are free.
        together = _run(speech_and_music, (held, speech), backlog, threads=6)
    finally:
        timer.cancel()
        held.gate.set()
    assert _without_model(together.tags, "speech") == list(_run(speech_and_music, (speech,)).tags)
    # What waits for the slowest is under two segments and a decoded block, not the minute.
    assert 0 < backlog.most_s <= 2 * SEGMENT_S + 2.0, backlog.most_s


def test_the_listener_hears_the_merged_order_as_it_becomes_final(
    engine: Engine, speech_and_music: Path
) -> None:
    heard: list[list[Tag]] = []
    pool = EnginePool(threads=2)
    try:
        spec = RequestSpec(
            "listen",
            speech_and_music,
            recognizers := engine.check("notes,speech", {}),
            ModelTagging(recognizers, {}),
            LIMITS,
            segments_ahead=4,
            on_tags=heard.append,
        )
        result = pool.submit(spec).future.result(timeout=600)
    finally:
        pool.close()
    assert [tag for batch in heard for tag in batch] == list(result.tags)
    # A tag is final once both models have passed its start. Speech infers up to 4 segments
    # (16 s) a call, notes one (4 s): however the threads interleave, the slower of the two
    # passes 16 s, 32 s and the end, and each span holds tags, so at least three
    # announcements, the first of them with the recording's first part only. How many more
    # depends on the machine's pace (a fast one decodes ahead and speech takes full batches).
    assert len(heard) >= 3, "tags arrive in batches as the models go, not all at the end"
    duration_s = result.audio.frames / result.audio.sample_rate
    assert max(tag.start for tag in heard[0]) < duration_s / 2, (heard[0], duration_s)
    assert {tag.model for tag in result.tags} == {"notes", "speech"}


def test_overrides_go_to_the_models_whose_kind_has_them(engine: Engine) -> None:
    speech, music = engine.check("speech,music", {"threshold": 0.7})
    assert (speech.name, music.name) == ("speech", "music")
    engine.check("speech,notes", {"onset_threshold": 0.6, "min_speech_duration_ms": 300})
    with pytest.raises(InvalidInput, match=r"pitch_bends does not apply to any"):
        engine.check("speech,music", {"pitch_bends": 1})
    with pytest.raises(InvalidInput, match="onset_threshold must be"):
        engine.check("speech,notes", {"onset_threshold": 7})


def test_a_model_named_twice_or_unknown_is_refused(engine: Engine) -> None:
    with pytest.raises(InvalidInput, match="model names speech more than once"):
        engine.check("speech,notes,speech", {})
    with pytest.raises(UnknownModel, match="unknown model 'drums'; loaded models: music"):
        engine.check("speech,drums", {})

"""Post-processing: the incremental tagger equals silero-vad's whole-recording function."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from silero_vad import get_speech_timestamps_from_probs

from arengine.kinds.speech.tagger import SpeechParams, SpeechTagger
from arengine.postprocess.palette import Palette
from arengine.types import Tag


def _probabilities(rng: random.Random, n: int) -> list[float]:
    out: list[float] = []
    while len(out) < n:
        level = rng.choice([0.02, 0.3, 0.4, 0.45, 0.55, 0.9, rng.random()])
        out += [
            min(1.0, max(0.0, level + rng.uniform(-0.05, 0.05))) for _ in range(rng.randint(1, 30))
        ]
    return out[:n]


def _run(
    probabilities: list[float], params: SpeechParams, audio_samples: int, chunks: list[int]
) -> list[Tag]:
    tagger = SpeechTagger(params, sample_rate=16000, hop=512)
    tags: list[Tag] = []
    at = 0
    for size in chunks:
        tags += tagger.push(probabilities[at : at + size])
        at += size
    return tags + tagger.finish(audio_samples)


@pytest.mark.parametrize("seed", range(6))
def test_matches_silero_for_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(100):
        n = rng.randint(0, 400)
        probabilities = _probabilities(rng, n)
        samples = max(0, n * 512 - rng.randint(0, 511))
        options = dict(
            threshold=rng.choice([0.5, 0.3, 0.7]),
            min_speech_duration_ms=rng.choice([250, 0, 500]),
            min_silence_duration_ms=rng.choice([100, 0, 300]),
            speech_pad_ms=rng.choice([30, 0, 200]),
            max_speech_duration_s=rng.choice([math.inf, 1.0, 2.5]),
            use_max_poss_sil_at_max_speech=rng.choice([True, False]),
        )
        expected = get_speech_timestamps_from_probs(
            probabilities, audio_length_samples=samples, **options
        )
        chunks = [rng.randint(1, 50) for _ in range(n)]
        ours = {**options, "max_speech_duration_s": None}  # None is arengine's "no limit"
        if not math.isinf(options["max_speech_duration_s"]):
            ours["max_speech_duration_s"] = options["max_speech_duration_s"]
        got = _run(probabilities, SpeechParams(**ours), samples, chunks)  # type: ignore[arg-type]
        assert len(got) == len(expected), options
        for tag, reference in zip(got, expected, strict=True):
            assert tag.start == pytest.approx(reference["start"] / 16000, abs=0.0006)
            assert tag.end == pytest.approx(reference["end"] / 16000, abs=0.0006)


def test_score_is_the_mean_probability_of_the_speech() -> None:
    probabilities = [0.0] * 10 + [0.8] * 20 + [0.6] * 20 + [0.0] * 20
    tags = _run(probabilities, SpeechParams(speech_pad_ms=0), 70 * 512, [7] * 10)
    assert len(tags) == 1
    assert tags[0].start == pytest.approx(10 * 512 / 16000)
    assert tags[0].end == pytest.approx(50 * 512 / 16000)
    assert tags[0].score == pytest.approx(0.7, abs=1e-4)
    assert tags[0].label == "speech"


def test_no_tags_for_silence_and_for_nothing() -> None:
    assert _run([0.01] * 100, SpeechParams(), 100 * 512, [100]) == []
    assert _run([], SpeechParams(), 0, []) == []


def test_speech_running_to_the_end_is_closed_there() -> None:
    tags = _run([0.0] * 5 + [0.9] * 30, SpeechParams(), 35 * 512 - 100, [35])
    assert [(t.start, t.end) for t in tags] == [
        (round((5 * 512 - 480) / 16000, 3), round((35 * 512 - 100) / 16000, 3))
    ]


def test_the_listed_defaults_are_within_their_ranges() -> None:
    """`GET /v1/models` showed `neg_threshold: -1.0` and `max_speech_duration_s: 0.0`: sentinels
    outside the documented ranges. Now the effective value, and no limit left out."""
    listed = SpeechParams().as_dict()
    assert listed["neg_threshold"] == 0.35 and "max_speech_duration_s" not in listed
    bounds = SpeechParams.bounds()
    assert all(bounds[name].accepts(value) for name, value in listed.items())
    assert SpeechParams(threshold=0.1).as_dict()["neg_threshold"] == 0.01
    assert SpeechParams(max_speech_duration_s=30).as_dict()["max_speech_duration_s"] == 30


def test_a_tag_is_final_once_the_pause_after_it_fixes_its_padding() -> None:
    """A live stream's tag must not wait for the next speech: 2 pads of pause after the speech's
    end (with the 100 ms a pause needs to end it) fix its padding, so `push` gives it then."""
    tagger = SpeechTagger(SpeechParams(), sample_rate=16000, hop=512)
    assert tagger.push([0.02] * 10 + [0.9] * 30) == []
    assert tagger.push([0.02] * 3) == []  # 96 ms: the speech has not ended yet
    ended = tagger.push([0.02] * 5)
    assert [(tag.start, tag.end) for tag in ended] == [(0.29, 1.31)]
    assert tagger.push([0.02] * 100) + tagger.finish(148 * 512) == []


@pytest.mark.parametrize("seed", range(3))
def test_whole_gives_the_tags_of_pushed_segments(seed: int) -> None:
    """New parameters on a job's kept scores hand the tagger every segment at once
    (`SpeechTagger.whole`): the same tags, scores included, as the segments pushed in turn;
    palette-coded scores (a job of silence keeps one value) too."""
    rng = random.Random(seed)
    for _ in range(40):
        n = rng.randint(0, 600)
        probabilities = np.array(_probabilities(rng, n), np.float32)
        samples = max(0, n * 512 - rng.randint(0, 511))
        params = SpeechParams(
            threshold=rng.choice([0.5, 0.3]),
            neg_threshold=rng.choice([None, 0.2]),
            min_speech_duration_ms=rng.choice([250, 0]),
            max_speech_duration_s=rng.choice([None, 1.0]),
            speech_pad_ms=rng.choice([30, 200]),
        )
        segments = [rng.randint(1, 120) for _ in range(n)]
        pushed = _run(probabilities.tolist(), params, samples, segments)
        whole = SpeechTagger(params, sample_rate=16000, hop=512).whole(probabilities, samples)
        assert whole == pushed, params
    coded = Palette.of(np.full(300, 0.75, np.float32))
    assert coded is not None
    tags = SpeechTagger(SpeechParams(), sample_rate=16000, hop=512).whole(coded, 300 * 512)
    assert [(t.start, t.end, t.score) for t in tags] == [(0.0, 9.6, 0.75)]

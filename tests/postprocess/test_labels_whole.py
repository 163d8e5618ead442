"""`LabelTagger.whole` (new parameters on a job's kept scores) gives exactly the tags of `push`
over the segments and `finish`: thresholds, hysteresis, merge gaps, minimum durations, groups,
per-label values, palette codes, scores pushed in segments of any size."""

from __future__ import annotations

import numpy as np
import pytest

from arengine.postprocess.labels import LabelParams, LabelTagger
from arengine.postprocess.palette import Palette
from arengine.postprocess.vocabulary import Vocabulary
from arengine.types import Tag

LABELS = ("a", "b", "c", "d")
VOCABULARY = Vocabulary(LABELS, None, groups={"ab": ("a", "b")})


def _scores(seed: int, frames: int, levels: int | None = None) -> np.ndarray:
    """Scores that stay a while around the thresholds: runs, dips and flickers."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(0, 0.12, (frames, len(LABELS))).cumsum(axis=0)
    scores: np.ndarray = (0.5 + 0.5 * np.sin(steps)).astype(np.float32)
    if levels is None:
        return scores
    # As the events model's int8 arithmetic gives: few distinct values.
    few: np.ndarray = (np.round(scores * (levels - 1)) / (levels - 1)).astype(np.float32)
    return few


def _tagger(params: LabelParams, peak: bool, centred: bool) -> LabelTagger:
    return LabelTagger(
        LABELS,
        params,
        sample_rate=100,
        hop=10,
        window=30,
        peak=peak,
        vocabulary=VOCABULARY,
        centred=centred,
    )


def _pushed(tagger: LabelTagger, scores: np.ndarray, sizes: list[int], end: int) -> list[Tag]:
    tags, at = [], 0
    for size in sizes:
        tags += tagger.push(scores[at : at + size])
        at += size
    return tags + tagger.push(scores[at:]) + tagger.finish(end)


PARAMS = [
    LabelParams(),
    LabelParams(threshold=0.7, hysteresis=0.3),
    LabelParams(threshold=0.6, merge_gap_ms=40, hysteresis=0.5),
    LabelParams(threshold=0.8, merge_gap_ms=100, min_duration_ms=150),
    LabelParams(threshold=0.55, merge_gap_ms=15, min_duration_ms=50, hysteresis=0.1),
    LabelParams(thresholds={"a": 0.3, "c": 0.9}, merge_gaps_ms={"c": 200}, hysteresis=0.4),
    LabelParams(group=("ab",), threshold=0.65, min_durations_ms={"ab": 100}),
    LabelParams(labels=("c", "d"), exclude=("d",), threshold=0.4, merge_gap_ms=30),
    LabelParams(threshold=0.0001, merge_gap_ms=0),
    LabelParams(threshold=0.999, hysteresis=0.999),
    LabelParams(threshold=0.3, hysteresis=0.3, merge_gap_ms=50),  # the events defaults
]


@pytest.mark.parametrize("params", PARAMS, ids=range(len(PARAMS)))
@pytest.mark.parametrize("peak", [False, True])
def test_whole_arrays_give_the_tags_of_pushed_segments(params: LabelParams, peak: bool) -> None:
    for seed in range(3):
        scores = _scores(seed, 900)
        rng = np.random.default_rng(seed)
        sizes = rng.integers(1, 120, 20).tolist()
        end = 900 * 10 + 7
        pushed = _pushed(_tagger(params, peak, centred=seed == 1), scores, sizes, end)
        whole = _tagger(params, peak, centred=seed == 1).whole(scores, end)
        assert whole == pushed, (params, seed)
        assert len(pushed) > 0 or params.threshold > 0.9


@pytest.mark.parametrize("params", PARAMS, ids=range(len(PARAMS)))
def test_palette_codes_give_the_tags_of_the_scores(params: LabelParams) -> None:
    scores = _scores(7, 1200, levels=32)
    coded = Palette.of(scores)
    assert coded is not None and len(coded.values) <= 32
    end = 1200 * 10 - 13  # the last windows run past the recording's end
    pushed = _pushed(_tagger(params, True, True), scores, [400, 400], end)
    assert _tagger(params, True, True).whole(coded, end) == pushed
    assert _tagger(params, False, False).whole(coded, end) == _tagger(params, False, False).whole(
        scores, end
    )


def test_no_scores_and_no_runs_give_no_tags() -> None:
    empty = np.zeros((0, len(LABELS)), np.float32)
    assert _tagger(LabelParams(), True, True).whole(empty, 0) == []
    quiet = np.zeros((50, len(LABELS)), np.float32)
    assert _tagger(LabelParams(), True, True).whole(quiet, 500) == []
    loud = np.ones((50, len(LABELS)), np.float32)
    tags = _tagger(LabelParams(), False, False).whole(loud, 500)
    assert [(t.label, t.start, t.end, t.score) for t in tags] == [
        (label, 0.0, 5.0, 1.0) for label in LABELS
    ]


def test_a_full_palette_and_a_threshold_above_its_last_value() -> None:
    """256 values, codes 0-255: a threshold above the highest value (code 256) starts no run,
    one just below it starts some, as the scores themselves give."""
    rng = np.random.default_rng(3)
    levels = np.linspace(0, 0.99, 256, dtype=np.float32)
    scores = rng.choice(levels, (600, len(LABELS)))
    coded = Palette.of(scores)
    assert coded is not None and len(coded.values) == 256
    for threshold, expect_tags in ((0.995, False), (0.985, True)):
        params = LabelParams(threshold=threshold, hysteresis=0.5, merge_gap_ms=20)
        pushed = _pushed(_tagger(params, False, False), scores, [250], 6000)
        assert _tagger(params, False, False).whole(coded, 6000) == pushed
        assert bool(pushed) == expect_tags


def _events_like(seed: int, frames: int) -> np.ndarray:
    """Mostly quiet scores with short loud stretches, as the events model gives: under one
    score in 16 at the thresholds, so `whole` takes its sparse path."""
    rng = np.random.default_rng(seed)
    scores = _scores(seed, frames, levels=64) * 0.15
    for label in range(len(LABELS)):
        for start in rng.integers(0, frames, 6):
            length = int(rng.integers(1, 20))
            loud = 0.4 + 0.6 * _scores(seed + label, length, levels=64)[:, 0]
            scores[start : start + length, label] = loud
    return scores


@pytest.mark.parametrize("params", PARAMS[:8], ids=range(8))
def test_sparse_scores_give_the_tags_of_pushed_segments(params: LabelParams) -> None:
    found = 0
    for seed in range(3):
        scores = _events_like(seed, 1500)
        releases = _tagger(params, True, True).releases
        assert np.count_nonzero(scores >= releases.min()) * 16 < scores.size, "sparse"
        end = 1500 * 10 - 5
        sizes = np.random.default_rng(seed).integers(1, 200, 12).tolist()
        for peak in (False, True):
            pushed = _pushed(_tagger(params, peak, centred=True), scores, sizes, end)
            assert _tagger(params, peak, True).whole(scores, end) == pushed, (params, seed)
            coded = Palette.of(scores)
            assert coded is not None
            assert _tagger(params, peak, True).whole(coded, end) == pushed, (params, seed)
            found += len(pushed)
    assert found > 0 or params.threshold >= 0.8, "the test shows nothing"

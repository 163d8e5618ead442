"""The birds tagger: confidence, thresholds, merged runs, the short last window, any chunking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arengine.errors import InvalidInput
from arengine.kinds.birds.fields import SCIENTIFIC_NAME
from arengine.kinds.birds.tagger import BirdsParams, BirdsTagger, confidence
from arengine.types import Tag

RATE = 48000
WINDOW = 144000
LABELS = (("Turdus migratorius", "American Robin"), ("Cardinalis cardinalis", "Northern Cardinal"))
SURE = 3.0
"""A logit whose confidence (0.95) passes any threshold used here."""


def _tagger(params: BirdsParams, hop: int = WINDOW) -> BirdsTagger:
    allowed = np.ones(len(LABELS), dtype=bool)
    thresholds = np.full(len(LABELS), params.min_conf)
    return BirdsTagger(LABELS, params, allowed, thresholds, RATE, hop, WINDOW)


def _run(tagger: BirdsTagger, logits: np.ndarray, chunks: list[int], samples: int) -> list[Tag]:
    tags: list[Tag] = []
    start = 0
    for size in chunks:
        tags += tagger.push(logits[start : start + size])
        start += size
    return tags + tagger.finish(samples)


def test_each_window_is_a_tag_with_its_common_and_scientific_name() -> None:
    logits = np.full((3, 2), -5.0, dtype=np.float32)
    logits[0, 0] = logits[2, 0] = logits[2, 1] = SURE
    tags = _run(_tagger(BirdsParams()), logits, [3], 9 * RATE)
    assert [(t.start, t.end, t.label, SCIENTIFIC_NAME.of(t)) for t in tags] == [
        (0.0, 3.0, "American Robin", "Turdus migratorius"),
        (6.0, 9.0, "American Robin", "Turdus migratorius"),
        (6.0, 9.0, "Northern Cardinal", "Cardinalis cardinalis"),
    ]
    assert tags[0].score == pytest.approx(1 / (1 + np.exp(-SURE)), abs=1e-4)


def test_merge_consecutive_joins_one_species_runs_with_the_best_confidence() -> None:
    logits = np.full((5, 2), -5.0, dtype=np.float32)
    logits[1:4, 0] = [1.0, 2.0, 1.5]
    tags = _run(_tagger(BirdsParams(merge_consecutive=1)), logits, [5], 15 * RATE)
    assert [(t.start, t.end, t.label) for t in tags] == [(3.0, 12.0, "American Robin")]
    assert tags[0].score == pytest.approx(1 / (1 + np.exp(-2.0)), abs=1e-4)
    separate = _run(_tagger(BirdsParams()), logits, [5], 15 * RATE)
    assert [t.start for t in separate] == [3.0, 6.0, 9.0]


@pytest.mark.parametrize("merge", [0, 1])
def test_any_chunking_gives_the_same_tags(merge: int) -> None:
    rng = np.random.default_rng(7)
    logits = rng.normal(-1.0, 2.0, (40, 2)).astype(np.float32)
    samples = 39 * 72000 + 100_000
    whole = _run(_tagger(BirdsParams(merge_consecutive=merge), hop=72000), logits, [40], samples)
    assert len(whole) > 10
    for chunks in ([1] * 40, [3, 7, 11, 19], [39, 1], [2] * 20):
        tagger = _tagger(BirdsParams(merge_consecutive=merge), hop=72000)
        assert _run(tagger, logits, chunks, samples) == whole


def test_a_last_window_under_one_and_a_half_seconds_is_not_reported() -> None:
    logits = np.full((4, 2), SURE, dtype=np.float32)
    short = _run(_tagger(BirdsParams()), logits, [4], 9 * RATE + RATE)  # 1.0 s in the last
    assert max(t.start for t in short) == 6.0
    long = _run(_tagger(BirdsParams()), logits, [4], 9 * RATE + 3 * RATE // 2)  # 1.5 s
    assert max(t.start for t in long) == 9.0
    merged = _run(_tagger(BirdsParams(merge_consecutive=1)), logits, [2, 2], 10 * RATE)
    assert [(t.start, t.end) for t in merged] == [(0.0, 9.0), (0.0, 9.0)]


def test_higher_sensitivity_gives_more_detections() -> None:
    # BirdNET-Analyzer's option: the sigmoid's slope is 2 - sensitivity.
    assert confidence_of(-1.0, 1.0) == pytest.approx(1 / (1 + np.exp(1.0)))
    assert confidence_of(-1.0, 1.5) == pytest.approx(1 / (1 + np.exp(0.5)))
    assert confidence_of(-1.0, 0.5) == pytest.approx(1 / (1 + np.exp(1.5)))
    assert confidence_of(40.0, 1.0) == pytest.approx(1 / (1 + np.exp(-15.0)))  # clipped
    logits = np.full((1, 2), -1.0, dtype=np.float32)
    assert _run(_tagger(BirdsParams(min_conf=0.3)), logits, [1], WINDOW) == []
    assert len(_run(_tagger(BirdsParams(min_conf=0.3, sensitivity=1.5)), logits, [1], WINDOW)) == 2


def confidence_of(logit: float, sensitivity: float) -> float:
    return float(confidence(torch.tensor([logit]), sensitivity)[0])


def test_per_species_thresholds_and_the_allowed_list() -> None:
    logits = np.full((1, 2), 0.5, dtype=np.float32)  # confidence 0.62
    thresholds = np.array([0.5, 0.7])
    allowed = np.array([True, True])
    tagger = BirdsTagger(LABELS, BirdsParams(), allowed, thresholds, RATE, WINDOW, WINDOW)
    assert [t.label for t in _run(tagger, logits, [1], WINDOW)] == ["American Robin"]
    allowed = np.array([False, True])
    tagger = BirdsTagger(LABELS, BirdsParams(), allowed, np.full(2, 0.5), RATE, WINDOW, WINDOW)
    assert [t.label for t in _run(tagger, logits, [1], WINDOW)] == ["Northern Cardinal"]


def test_parameters_are_checked_with_their_ranges() -> None:
    with pytest.raises(InvalidInput, match=r"sensitivity must be 0.5 <= x <= 1.5, got 2"):
        BirdsParams().with_overrides({"sensitivity": 2})
    with pytest.raises(InvalidInput, match="lat and lon go together"):
        BirdsParams().with_overrides({"lat": 40.0})
    with pytest.raises(InvalidInput, match=r"week must be a whole number -1 <= x <= 48"):
        BirdsParams().with_overrides({"week": 2.5})
    assert BirdsParams().with_overrides({"lat": 40, "lon": -80, "week": 19}).week == 19


def test_week_0_is_refused() -> None:
    """-1 is all year and 1-48 a week; 0 was taken and meant nothing BirdNET defines."""
    with pytest.raises(InvalidInput, match=r"week must be a whole number -1 <= x <= 48, not 0"):
        BirdsParams().with_overrides({"week": 0})
    assert BirdsParams().with_overrides({"week": -1}).week == -1

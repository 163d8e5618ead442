"""Label post-processing: thresholds per label, merged runs, ordered output, any chunking."""

from __future__ import annotations

import random

import numpy as np
import pytest

from arengine.errors import InvalidInput
from arengine.postprocess.labels import LabelParams, LabelTagger
from arengine.types import Tag

LABELS = ("a", "b")


def _run(scores: np.ndarray, params: LabelParams, chunks: list[int]) -> list[Tag]:
    tagger = LabelTagger(LABELS, params, sample_rate=100, hop=10, window=20)
    tags, at = [], 0
    for size in chunks:
        tags += tagger.push(scores[at : at + size])
        at += size
    return tags + tagger.finish(len(scores) * 10 + 10)


def test_runs_become_tags_in_start_order() -> None:
    scores = np.zeros((20, 2))
    scores[2:6, 1] = 0.9  # b: windows 2..5
    scores[4:12, 0] = 0.8  # a: windows 4..11
    tags = _run(scores, LabelParams(), [20])
    assert [(t.label, t.start, t.end, t.score) for t in tags] == [
        ("b", 0.2, 0.7, 0.9),
        ("a", 0.4, 1.3, 0.8),
    ]


def test_gaps_merge_and_short_runs_drop() -> None:
    scores = np.zeros((30, 2))
    scores[2:5, 0] = 0.9
    scores[6:9, 0] = 0.7  # one window gap: merged with merge_gap_ms=100 (one hop)
    scores[20, 0] = 0.9  # 0.2 s: dropped by min_duration_ms=300
    tags = _run(scores, LabelParams(merge_gap_ms=100, min_duration_ms=300), [30])
    assert [(t.start, t.end) for t in tags] == [(0.2, 1.0)]
    assert tags[0].score == pytest.approx(0.8)


def test_per_label_thresholds_and_client_override() -> None:
    scores = np.full((10, 2), 0.6)
    manifest = LabelParams(threshold=0.5, thresholds={"b": 0.7})
    assert [t.label for t in _run(scores, manifest, [10])] == ["a"]
    client = manifest.with_overrides({"threshold": 0.55})
    assert [t.label for t in _run(scores, client, [10])] == ["a", "b"]


def test_unknown_override_is_named() -> None:
    with pytest.raises(InvalidInput, match="speech_pad_ms does not apply"):
        LabelParams().with_overrides({"speech_pad_ms": 10})


@pytest.mark.parametrize("seed", range(5))
def test_any_chunking_gives_the_same_tags(seed: int) -> None:
    rng = random.Random(seed)
    scores = np.array([[rng.random() for _ in LABELS] for _ in range(300)])
    params = LabelParams(threshold=0.6, merge_gap_ms=rng.choice([0, 100, 300]), min_duration_ms=200)
    whole = _run(scores, params, [300])
    chunks = [rng.randint(1, 40) for _ in range(300)]
    assert _run(scores, params, chunks) == whole
    assert [t.start for t in whole] == sorted(t.start for t in whole)

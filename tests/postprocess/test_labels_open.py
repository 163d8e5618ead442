"""A live stream's label tagger tells of each run that will be a tag while it is still open
(`LabelTagger.on_open`): the MQTT state goes ON at a sound's start, not at its end."""

from __future__ import annotations

import numpy as np

from arengine.postprocess.labels import LabelParams, LabelTagger

LABELS = ("a", "b")


def _tagger(heard: list[tuple[str, float, int]], params: LabelParams) -> LabelTagger:
    tagger = LabelTagger(LABELS, params, sample_rate=100, hop=10, window=20)
    tagger.in_start_order = False
    tagger.on_open = lambda label, start: heard.append((label, start, tagger.frame))
    return tagger


def test_a_run_is_told_while_open_once_it_lasts_its_minimum_duration() -> None:
    scores = np.zeros((40, 2))
    scores[5:25, 0] = 0.9  # a: windows 5..24 (0.1 s steps of 0.2 s windows), 0.5 s to 2.6 s
    scores[30:31, 1] = 0.9  # b: one window, shorter than min_duration_ms
    heard: list[tuple[str, float, int]] = []
    tagger = _tagger(heard, LabelParams(min_duration_ms=500))
    tags = []
    for frame in range(len(scores)):
        tags += tagger.push(scores[frame : frame + 1])
    tags += tagger.finish(len(scores) * 10 + 10)
    # 0.5 s long at window 8 (0.5 s to 8 * 0.1 + 0.2 s); its tag comes only after window 24.
    assert heard == [("a", 0.5, 8)]
    assert [(t.label, t.start, t.end) for t in tags] == [("a", 0.5, 2.6)]


def test_each_run_is_told_once_and_the_tags_are_the_same_as_without() -> None:
    rng = np.random.default_rng(7)
    scores = rng.random((300, 2))
    params = LabelParams(min_duration_ms=50)
    heard: list[tuple[str, float, int]] = []
    told = _tagger(heard, params)
    plain = LabelTagger(LABELS, params, sample_rate=100, hop=10, window=20)
    plain.in_start_order = False
    tags, expected = [], []
    for at in range(0, 300, 7):
        tags += told.push(scores[at : at + 7])
        expected += plain.push(scores[at : at + 7])
    tags += told.finish(3010)
    expected += plain.finish(3010)
    assert tags == expected
    assert sorted((label, start) for label, start, _ in heard) == sorted(
        (t.label, t.start) for t in tags
    )

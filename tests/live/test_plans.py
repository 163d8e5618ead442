"""A live stream's tagger: each label's tag as soon as it is final, the same tags as a file's."""

from __future__ import annotations

import numpy as np

from arengine.live.plans import live_tagger
from arengine.postprocess import Tagger
from arengine.postprocess.labels import LabelParams, LabelTagger
from arengine.types import Tag

LABELS = ("background", "alarm")


def _tagger() -> LabelTagger:
    return LabelTagger(LABELS, LabelParams(), sample_rate=100, hop=10, window=20)


def _pushed(tagger: Tagger, scores: np.ndarray) -> list[tuple[int, Tag]]:
    """Each tag with the window after which it came (one window pushed at a time)."""
    out = []
    for frame in range(len(scores)):
        out += [(frame, tag) for tag in tagger.push(scores[frame : frame + 1])]
    return out + [(len(scores), tag) for tag in tagger.finish(len(scores) * 10 + 10)]


def test_a_long_background_run_does_not_hold_back_a_finished_tag() -> None:
    """The background opens first and lasts to the end; the alarm's windows 5..8. In a file
    the alarm's tag waits for the background's (start order); live, it comes at window 9,
    the first below its threshold, and the stream ends with the same tags."""
    scores = np.zeros((40, 2))
    scores[:, 0] = 0.9
    scores[5:9, 1] = 0.8
    in_order = _pushed(_tagger(), scores)
    live = _pushed(live_tagger(_tagger()), scores)
    assert [(frame, tag.label) for frame, tag in in_order] == [(40, "background"), (40, "alarm")]
    assert [(frame, tag.label) for frame, tag in live] == [(9, "alarm"), (40, "background")]
    assert sorted(repr(tag) for _, tag in live) == sorted(repr(tag) for _, tag in in_order)

"""A model's live segment plan (its own plan with shorter segments) and live tagger.

A tag is final once the segment holding its end is through the model, so the segment length
bounds the delay from a sound's end to its tag. Every model takes segments of any whole number
of steps (a recording's last segment is shorter anyway), keeping its pre-roll, context and
look-ahead, so the live plan changes the length and nothing else. A model whose step is longer
than the setting (a notes window is 1.6 s) gets one step per segment.

A label tagger (events, music, classifiers) on a live stream releases each tag as soon as it is
final rather than in start order (`live_tagger`): in a file, a tag that ends waits while an
earlier-starting run of another label (a background class that lasts minutes) is still open,
which on a stream would delay an alarm's tag by as long as the background lasts. The tags are
the same; only their order across labels differs. For the same reason several models' tags go out
as each is final (`AsFinal`), not merged into one start order, where one model's tag would wait
until every other model has tagged later.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from datetime import datetime

from arengine.audio.segments import SegmentPlan
from arengine.engine.hooks import Tagging
from arengine.kinds.base import Recognizer
from arengine.postprocess import Tagger
from arengine.postprocess.labels import LabelTagger
from arengine.types import Tag

OpenListener = Callable[[str, str, float], None]
"""Hears `(model, label, start_s)` when a live stream's run of a label will be a tag, before it
ends (`LabelTagger.on_open`); from an engine thread, one call at a time."""


def live_plan(recognizer: Recognizer, segment_s: float) -> SegmentPlan:
    """`recognizer`'s plan cut into segments of about `segment_s` seconds (whole steps, at least
    one, never longer than its own).

    >>> from torch import nn
    >>> from arengine.kinds.speech.recognizer import SpeechRecognizer
    >>> speech = SpeechRecognizer(nn.Identity(), segment_s=30, preroll_s=2)
    >>> live_plan(speech, 0.5).segment_frames  # 16 windows of 32 ms
    16
    """
    plan = recognizer.plan
    frames = round(segment_s * recognizer.sample_rate / plan.hop)
    return dataclasses.replace(plan, segment_frames=max(1, min(frames, plan.segment_frames)))


def live_tagger(tagger: Tagger, on_open: Callable[[str, float], None] | None = None) -> Tagger:
    """`tagger` set to release each tag as soon as it is final (a label tagger; other kinds'
    tags are final in start order already); a label tagger also tells `on_open` of each run
    that will be a tag, while it is still open (`LabelTagger.on_open`)."""
    if isinstance(tagger, LabelTagger):
        tagger.in_start_order = False
        tagger.on_open = on_open
    return tagger


class LiveTagging:
    """`tagging`'s taggers, each set to release its tags once final (`live_tagger`) and to tell
    `on_open`, if given, of each label run that will be a tag, under its model's name."""

    def __init__(
        self,
        tagging: Tagging,
        recognizers: Sequence[Recognizer],
        on_open: OpenListener | None = None,
    ) -> None:
        self._tagging = tagging
        self._names = [recognizer.name for recognizer in recognizers]
        self._on_open = on_open

    def tagger(self, model: int) -> Tagger:
        return self._live(model, self._tagging.tagger(model))

    def dated(self, model: int, when: datetime) -> Tagger | None:
        fresh = self._tagging.dated(model, when)
        return None if fresh is None else self._live(model, fresh)

    def _live(self, model: int, tagger: Tagger) -> Tagger:
        if self._on_open is None:
            return live_tagger(tagger)
        return live_tagger(tagger, functools.partial(self._on_open, self._names[model]))


class AsFinal:
    """A live stream's tag order: each model's tags go out as they are final, unmerged.

    >>> AsFinal().add(1, [Tag(2.0, 2.5, "C4", 0.8)])[0].label
    'C4'
    """

    def add(self, index: int, tags: list[Tag], done: bool = False) -> list[Tag]:
        return tags

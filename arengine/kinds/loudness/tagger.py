"""Loudness tags from per-window levels, streamed: a trigger over a running background.

Scores are `(frames,)` levels in dBFS (`level.py`), one per window of `hop` samples, pushed in
order, segment after segment. A window is loud when its level is at least `rise_db` above the
background, or at least `absolute_dbfs` whatever the background.

The background at a window is a low percentile (`background_percentile`) of the levels of the
last `background_s` seconds up to and including it: a door slam or an alarm is a few windows among
many and leaves it where the room is, while a room that slowly gets louder (traffic building up,
a fan) carries it along, so a slow rise is never loud. A sound that lasts longer than
`(100 - background_percentile)`% of `background_s` becomes the background, and its tag ends. The
percentile is re-evaluated every hundredth of `background_s` (at whole multiples of that step, so
any cut of the recording gives the same values) and held in between; a recording's first windows
have less history and use what there is. The background is taken to be at least
`background_floor_dbfs`, so that in a near-silent room a tick is not loud.

Loud windows separated by at most `hold_ms` of quieter ones form one tag, from the first loud
window's start to the last one's end (so a tag's end is where the sound stopped, not `hold_ms`
later); tags shorter than `min_duration_ms` are dropped. Its score is the peak window level as a
fraction of full scale, `10 ** (peak_dbfs / 20)`: `20 * log10(score)` gives the peak back in dBFS;
the tag also carries that peak itself, to 0.01 dB, as `level_dbfs` (`fields.py`), so a table of
tags says it without the arithmetic. Both stop at full scale: a window over it (a float file
that clips) is as loud as a level can say.
Every step is a numpy operation over the pushed windows; the tagger's state (the last
`background_s` of levels, the open tag) belongs to its one request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from arengine.kinds.fields import extra_of
from arengine.kinds.loudness.fields import LEVEL_DBFS
from arengine.kinds.loudness.level import FLOOR_DBFS
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag

LABEL = "loud"
"""The one label of loudness tags."""
_STEPS = 100
"""Background evaluations per `background_s`: every evaluation sorts `background_s` of levels,
so every window's own would cost a hundred times more for a background that moves slowly."""


@dataclass(frozen=True, slots=True)
class LoudnessParams(Params):
    """Post-processing parameters of loudness models."""

    kind: ClassVar[str] = "loudness"

    rise_db: float = param(
        15,
        "A window is loud when its level is this many dB above the running background "
        "(120, the most, leaves only absolute_dbfs).",
        Bounds(0, 120, low_open=True),
    )
    absolute_dbfs: float = param(
        0,
        "A window at least this loud (dBFS) is loud whatever the background; 0, full scale, "
        "in effect leaves only rise_db.",
        Bounds(FLOOR_DBFS, 0),
    )
    background_s: float = param(
        60,
        "Seconds of past levels the running background is taken from.",
        Bounds(1, 600),
    )
    background_percentile: float = param(
        20,
        "The background is this percentile of the last background_s of window levels.",
        Bounds(0, 100),
    )
    background_floor_dbfs: float = param(
        -70,
        "The background is taken to be at least this (dBFS): in a near-silent room a tick is "
        "not loud.",
        Bounds(FLOOR_DBFS, 0),
    )
    min_duration_ms: float = param(
        100, "Shorter tags (first to last loud window) are dropped.", Bounds(0, 3_600_000)
    )
    hold_ms: float = param(
        500,
        "Quieter gaps up to this long inside a tag do not end it.",
        Bounds(0, 3_600_000),
    )


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    peak: float


class LoudnessTagger:
    """Feed `(frames,)` levels in dBFS with `push`, then `finish`.

    Example::

        tagger = LoudnessTagger(LoudnessParams(), sample_rate=16000, hop=800)
        tags = tagger.push(levels) + tagger.finish(audio_samples)  # [Tag(..., label='loud')]
    """

    def __init__(self, params: LoudnessParams, sample_rate: int, hop: int) -> None:
        self.params = params
        self.sample_rate = sample_rate
        self.hop = hop
        frames_per_s = sample_rate / hop
        self.width = max(1, round(params.background_s * frames_per_s))
        """Windows the background is taken from, the current one included."""
        self.step = max(1, math.ceil(self.width / _STEPS))
        """The background is evaluated at windows `k * step` and held until the next."""
        self.rank = params.background_percentile / 100
        self.hold = math.floor(params.hold_ms / 1000 * frames_per_s + 1e-9)
        self.min_frames = max(1, math.ceil(params.min_duration_ms / 1000 * frames_per_s - 1e-9))
        self.history = np.empty(0)
        """The levels of the last `width - 1` windows before `seen` (fewer at the start)."""
        self.seen = 0
        """Windows pushed so far: the index of the next one."""
        self.background = math.nan
        """The background evaluated last (at the last multiple of `step` before `seen`)."""
        self.run: _Run | None = None
        """The tag still open: a later loud window within `hold` may extend it."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        """The next windows' levels in dBFS; returns the tags now final."""
        levels = np.asarray(scores, dtype=np.float64).reshape(-1)
        if not len(levels):
            return []
        background = np.maximum(self._backgrounds(levels), self.params.background_floor_dbfs)
        loud = (levels >= background + self.params.rise_db) | (levels >= self.params.absolute_dbfs)
        frames = self.seen + np.flatnonzero(loud)
        self.seen += len(levels)
        return self._group(frames, levels[loud], closing=False, audio_samples=None)

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at the model's rate): the open tag, if any."""
        return self._group(np.empty(0, np.int64), np.empty(0), True, audio_samples)

    def _backgrounds(self, levels: np.ndarray) -> np.ndarray:
        """The background of each new window: the percentile at the evaluation it falls under."""
        width, step, seen = self.width, self.step, self.seen
        end = seen + len(levels)
        # Left-padded with +inf to `width - 1` windows of history: sorted, the padding goes last,
        # so a window with `count` real levels finds its percentile at a rank among those.
        padded = np.concatenate([np.full(width - 1 - len(self.history), np.inf), self.history])
        padded = np.concatenate([padded, levels])
        kept = min(width - 1, end)  # the padding is never kept
        self.history = padded[len(padded) - kept :] if kept else np.empty(0)
        points = np.arange(-(-seen // step) * step, end, step)
        evaluated = np.empty(0)
        if len(points):
            windows = sliding_window_view(padded, width)[points - seen]
            counts = np.minimum(points + 1, width)
            ranks = np.floor(self.rank * (counts - 1)).astype(np.int64)
            evaluated = np.empty(len(points))
            whole = counts == width
            if whole.any():  # a rank shared by every row: a partition, not a sort
                rank = int(ranks[whole][0])
                evaluated[whole] = np.partition(windows[whole], rank, axis=1)[:, rank]
            if not whole.all():  # the recording's first `width` windows only
                part = np.sort(windows[~whole], axis=1)
                evaluated[~whole] = np.take_along_axis(part, ranks[~whole, None], axis=1)[:, 0]
        frames = np.arange(seen, end)
        under = frames // step * step
        held = under < seen  # before this push's first evaluation: the one evaluated last
        index = np.clip((under - (points[0] if len(points) else 0)) // step, 0, None)
        result = np.where(held, self.background, evaluated[index] if len(points) else 0.0)
        if len(points):
            self.background = float(evaluated[-1])
        return result

    def _group(
        self, frames: np.ndarray, peaks: np.ndarray, closing: bool, audio_samples: int | None
    ) -> list[Tag]:
        """Loud windows (and the open tag) into tags, split where a gap exceeds `hold`."""
        run = self.run
        if run is not None:
            frames = np.concatenate([[run.last], frames])
            peaks = np.concatenate([[run.peak], peaks])
        if not len(frames):
            return []
        starts = np.concatenate([[0], np.flatnonzero(np.diff(frames) - 1 > self.hold) + 1])
        ends = np.concatenate([starts[1:] - 1, [len(frames) - 1]])
        firsts, lasts = frames[starts], frames[ends]
        if run is not None:
            firsts[0] = run.first
        highest = np.maximum.reduceat(peaks, starts)
        done = len(starts)
        if not closing and self.seen - 1 - int(lasts[-1]) <= self.hold:
            done -= 1  # the last may still grow
            self.run = _Run(int(firsts[-1]), int(lasts[-1]), float(highest[-1]))
        else:
            self.run = None
        keep = (lasts[:done] - firsts[:done] + 1) >= self.min_frames
        return [
            self._tag(int(first), int(last), float(peak), audio_samples)
            for first, last, peak in zip(
                firsts[:done][keep], lasts[:done][keep], highest[:done][keep], strict=True
            )
        ]

    def _tag(self, first: int, last: int, peak: float, audio_samples: int | None) -> Tag:
        end = (last + 1) * self.hop
        if audio_samples is not None:
            end = min(end, audio_samples)
        score = min(1.0, 10 ** (peak / 20))
        level = extra_of((LEVEL_DBFS, round(min(peak, 0.0), 2)))
        return Tag(
            first * self.hop / self.sample_rate, end / self.sample_rate, LABEL, score, extra=level
        )

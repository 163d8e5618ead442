"""Occurrences of library references from landmark matches, streamed in segment order.

The recognizer (`recognizer.py`) sends rows of (reference, offset difference,
frame, partner's frame): a match says the recording's frame `frame` holds the reference's frame
`frame - difference`, and its pair reaches to the partner's frame. An occurrence is a run of one
reference's matches with one difference (±2 frames, for peaks that moved a frame under noise) and
no gap over `max_gap_s`; several occurrences of one reference have different differences and stay
apart, back-to-back references are different references. A run becomes a tag when it holds
`min_hits` matches and its score, the share of the recording's hashes in the stretch that matched,
reaches `min_score`; a run that a stronger run of its reference covers is a passage repeated
inside the reference, not an occurrence.
A run that begins within `SNAP_S` of its reference's first landmark (or ends within it of the
last) is extended to the reference's start (or end): before the first peak and after the last
there is nothing to match, such as a note held to the end.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from arengine.kinds.fingerprint.library import Reference
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag

HASH = -1
"""A row's reference for one hash of the recording (its frame), matched or not."""
END = -2
"""A row's reference for the segment's last frame: the recording has been read to there."""
DIFF_TOLERANCE = 2
SNAP_S = 0.5


@dataclass(frozen=True, slots=True)
class FingerprintParams(Params):
    """When matches make an occurrence."""

    kind: ClassVar[str] = "fingerprint"

    min_hits: int = param(
        15, "Matching hashes an occurrence needs (fewer: chance collisions).",
        Bounds(3, 100000, whole=True),
    )  # fmt: skip
    min_score: float = param(
        0.02, "Share of the stretch's hashes that must match (lower: similar passages).",
        Bounds(0.0, 1.0),
    )  # fmt: skip
    max_gap_s: float = param(
        3.0, "Seconds without a match that end an occurrence.", Bounds(0.5, 60.0)
    )


@dataclass(slots=True, eq=False)
class _Run:
    reference: int
    difference: int
    first: int
    last: int
    """The last matched anchor: runs join and end on these."""
    reach: int
    """The last matched pair's partner: where the matched stretch ends."""
    hits: int = 1


class FingerprintTagger:
    """Feed `(n, 4)` rows with `push`, then `finish`; `reference` reads a reference's title and
    duration from the library when its tag is made (None once removed: no tag)."""

    def __init__(
        self,
        params: FingerprintParams,
        reference: Callable[[int], Reference | None],
        sample_rate: int,
        hop: int,
    ) -> None:
        self.params = params
        self.reference = reference
        self.frame_s = hop / sample_rate
        self.gap = round(params.max_gap_s / self.frame_s)
        self.open: list[_Run] = []
        self._open_by_reference: dict[int, list[_Run]] = {}
        """`open` by reference, in the same order."""
        self.closed: list[_Run] = []
        self.hash_frames: list[int] = []
        """The frames of the recording's hashes from the oldest open run on (for scores)."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        rows = np.asarray(scores, dtype=np.int64).reshape(-1, 4)
        now = 0
        for reference, difference, frame, reach in rows[
            np.lexsort((rows[:, 0], rows[:, 2]))
        ].tolist():
            if reference == HASH:
                self.hash_frames.append(frame)
            elif reference != END:
                self._add(reference, difference, frame, reach)
            now = max(now, frame)
        self._close(lambda run: now - run.last > self.gap)
        return self._release()

    def finish(self, audio_samples: int) -> list[Tag]:
        self._close(lambda run: True)
        return self._release()

    def _add(self, reference: int, difference: int, frame: int, reach: int) -> None:
        # Only this reference's runs are looked at: a large library leaves thousands of open
        # runs of chance matches, and scanning them all for every match was the hot spot.
        runs = self._open_by_reference.setdefault(reference, [])
        for run in runs:
            if abs(run.difference - difference) <= DIFF_TOLERANCE and frame - run.last <= self.gap:
                run.last = max(run.last, frame)
                run.reach = max(run.reach, reach)
                run.hits += 1
                return
        run = _Run(reference, difference, frame, frame, reach)
        runs.append(run)
        self.open.append(run)

    def _close(self, done: Callable[[_Run], bool]) -> None:
        ending = [run for run in self.open if done(run)]
        self.open = [run for run in self.open if not done(run)]
        self.closed += [run for run in ending if run.hits >= self.params.min_hits]
        self._open_by_reference = {}
        for run in self.open:
            self._open_by_reference.setdefault(run.reference, []).append(run)

    def _release(self) -> list[Tag]:
        """Closed runs that start before every open one, as tags in order of start; a run that
        an open run of its reference may still overlap waits, one that a stronger run of its
        reference covers is a repeat inside the reference (a chorus), not an occurrence."""
        settled = [
            run
            for run in self.closed
            if not any(o.reference == run.reference and o.first <= run.last for o in self.open)
        ]
        shadowed = [run for run in settled if any(_covers(o, run) for o in self.closed)]
        self.closed = [run for run in self.closed if run not in shadowed]
        limit = min((run.first for run in self.open), default=None)
        ready = sorted(
            (r for r in settled if r not in shadowed and (limit is None or r.first < limit)),
            key=lambda run: (run.first, run.reference),
        )
        self.closed = [run for run in self.closed if run not in ready]
        tags = [tag for run in ready if (tag := self._tag(run)) is not None]
        keep_from = min([run.first for run in self.open + self.closed], default=None)
        if keep_from is None:
            self.hash_frames.clear()
        else:
            del self.hash_frames[: bisect.bisect_left(self.hash_frames, keep_from)]
        return tags

    def _tag(self, run: _Run) -> Tag | None:
        found = self.reference(run.reference)
        if found is None:
            return None
        hashes = bisect.bisect_right(self.hash_frames, run.last) - bisect.bisect_left(
            self.hash_frames, run.first
        )
        score = min(1.0, run.hits / max(1, hashes))
        if score < self.params.min_score:
            return None
        start_s = run.first * self.frame_s
        end_s = (run.reach + 1) * self.frame_s
        offset_s = run.difference * self.frame_s  # where the reference's start lies
        reference_start = start_s - offset_s
        reference_end = end_s - offset_s
        if reference_start - found.first_s <= SNAP_S:
            reference_start, start_s = max(0.0, -offset_s), max(0.0, offset_s)
        if found.last_s - reference_end <= SNAP_S:
            reference_end, end_s = found.duration_s, offset_s + found.duration_s
        return Tag(
            start=round(start_s, 3),
            end=round(end_s, 3),
            label=found.title,
            score=round(score, 4),
            reference=str(found.id),
            reference_start=round(max(0.0, reference_start), 3),
            reference_end=round(min(found.duration_s, reference_end), 3),
        )


def _covers(strong: _Run, weak: _Run) -> bool:
    """`strong` is another run of `weak`'s reference, with more matches, over most of it."""
    if strong is weak or strong.reference != weak.reference:
        return False
    if (strong.hits, -strong.first) <= (weak.hits, -weak.first):
        return False
    overlap = min(strong.last, weak.last) - max(strong.first, weak.first) + 1
    return overlap * 2 > weak.last - weak.first + 1

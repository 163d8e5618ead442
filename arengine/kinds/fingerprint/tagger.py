"""Occurrences of library references from triplet matches, streamed in segment order.

The recognizer (`recognizer.py`) sends rows of (reference, reference frame, frame, partner's
frame, speed, pitch): a match says the recording's frame `frame` holds the reference's frame,
its triplet reaches to the partner's frame, and it was played at about that speed and pitch
(in `FACTOR`ths). An occurrence is a run of one reference's matches on one line
`reference frame = a + speed * frame` (within `DIFF_TOLERANCE` frames, more across a gap) with
no gap over `max_gap_s`; the line is fitted (least squares) as matches join, so a recording
played 10% fast stays one run. Several occurrences of one reference lie on different lines and
stay apart; back-to-back references are different references. A run becomes a tag when it holds
`min_hits` matches and its score, the share of the recording's hashes in the stretch that
matched, reaches `min_score`; a run that a stronger run of its reference covers is a passage
repeated inside the reference, not an occurrence. The tag says the fitted `speed` and the
matches' mean `pitch`.
A tag's bounds are its run's dense part (`DENSE_S`, `DENSE_HITS`): chance matches on the line in
the music around an occurrence join its run across `max_gap_s` but do not stretch its tag, nor do
matches off its fitted line or a triplet with one chance peak outside it (`_dense`).
A run that begins within `SNAP_S` of its reference's first landmark (or ends within it of the
last) is extended to the reference's start (or end), at the fitted speed: before the first peak
and after the last there is nothing to match, such as a note held to the end.
A thinly matched run's edges go out to where its reference's peaks are still heard in the
recording (`_edges`), so its tag waits until the recording has been read as far past its end as
an edge may look (`EDGE_FAR_S`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

from arengine.kinds.fields import extra_of
from arengine.kinds.fingerprint.fields import (
    PITCH,
    REFERENCE,
    REFERENCE_END,
    REFERENCE_START,
    SPEED,
)
from arengine.kinds.fingerprint.library import Reference
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag


class Placed(NamedTuple):
    """A reference's anchors placed in the recording, with the recording's peaks there."""

    frames: np.ndarray
    fines: np.ndarray
    """The anchors' bins in quarters, at the run's pitch."""
    peaks: np.ndarray
    """The recording's `(n, 2)` anchors (frame, bin in quarters), by frame."""
    weak: np.ndarray
    """The recording's `(n, 2)` weak peaks, the same way."""


HASH = -1
"""A row's reference for one hash of the recording (its frame), matched or not."""
END = -2
"""A row's reference for the segment's last frame: the recording has been read to there."""
PEAK = -3
"""A row's reference for one peak of the recording, an anchor of its triplets: (PEAK, its bin in
quarters, frame, frame, 0, 0): where an occurrence's edges are (`_edges`)."""
WEAK = -4
"""A row's reference for one weak peak of the recording (the maximum of a smaller neighbourhood
than a fingerprint's peak, never hashed): (WEAK, its bin in quarters, frame, frame, 0, 0)."""
DIFF_TOLERANCE = 3
"""Frames a match may lie off its run's line (peaks move a frame or two under noise)..."""
GAP_TOLERANCE = 0.004
"""...and more by this share of the frames since the run's last match (the line's slope is
known to about 0.2%)."""
FIT_FRAMES = 40
"""A run's slope is its own fit once it spans this many frames; before, its matches' speeds."""
FACTOR = 10000
MIN_RUN_HITS = 3
"""A run with fewer matches ends without a word; one with more waits to be taken in by a
stronger run of its line (an occurrence's first matches, before its line was known)."""
SNAP_S = 0.5
DENSE_S = 1.0
"""An occurrence starts at its first matched peak with `DENSE_HITS` matches in the next
`DENSE_S` seconds and ends at its last with as many in the `DENSE_S` before: chance matches on
the line in the music around it (within `max_gap_s`, too sparse to be it) do not stretch its
bounds."""
DENSE_HITS = 3
DENSE_MIN_S = 0.5
DENSE_EXPECTED = 6.0
"""A run matched densely has a window of about this many of its matches (at least
`DENSE_MIN_S`, at most `DENSE_S`): see `_dense`."""
EDGE_S = 2.5
"""How far beyond its matched bounds an occurrence's edges are looked for (further on stronger
evidence: `EDGE_FAR_S`) when speech or noise over it thinned its matches (`EDGE_RATE`): its
reference's anchors there, placed by the run's fitted line and pitch, are looked for among the
recording's peaks and weak peaks, and the edge moves out to the onset where the evidence that
the reference plays, summed onset by onset outwards, is greatest (`_reach`). A voice among a
triplet's three peaks unmatches it, but most of the music's own peaks stay, and a note the voice
keeps from being a peak is often still a weak one."""
EDGE_FAR_S = 4.5
EDGE_FAR_GAIN = 3.0
"""An edge goes on past `EDGE_S`, up to `EDGE_FAR_S`, only where the evidence beyond `EDGE_S`
adds at least `EDGE_FAR_GAIN` (natural log units: about two onsets heard more than missed) to
the best sum within it. So a play's last seconds under a long sentence are crossed (over eight
broadcast hours, two talk-over ends that stopped 0.9 and 1.4 s short), while the chance peaks of
the music around a play, which carried one start 3.3 s before its play when all of a 4-s reach
counted alike, do not carry an edge that far."""
EDGE_RATE = 10.0
"""Matches a second under which a run is thin: clean and 64 kbps MP3 plays matched at 10-15.8,
plays under speech 5 dB down at 3.5-10.3 (the broadcast benchmark, seeds 3 and 4). Edges
looked for on every run moved clean and MP3 plays' bounds into the music around them on a
held-out hour (seed 8), so dense runs keep their matched bounds."""
EDGE_CHANCE = 0.1
"""The share of a reference's onsets the recording has peaks for where the reference is not
played: its anchors placed 30-60 s away from the plays of a broadcast hour found 0.05 of them
on average, 0.11-0.17 at the 95th percentile (clean, MP3 and talk-over plays alike)..."""
EDGE_CHANCE_WEAK = 0.35
"""...and a weak peak only (`WEAK`, within `WEAK_FINE`): 0.30-0.33 on average there..."""
EDGE_HEARD = (0.3, 0.95)
EDGE_HEARD_WEAK = 0.02
"""...and the shares where it plays are taken as the run's own within its matched bounds, kept
within these (plays under speech 5 dB down: a peak at 0.62-0.95 of the onsets, a weak peak only
at most of the rest; clean ones a peak at 0.90-1.00): each onset beyond an edge counts the log of
its share where the reference plays over its share by chance, for it when that is over 1."""
HEARD_MIN = 5
"""Onsets of its reference an occurrence needs for `min_heard` to apply."""
EDGE_FRAMES = 1.0
EDGE_FINE = 2
WEAK_FINE = 4
"""An anchor is found when a peak of the recording lies this many frames and quarters of a bin
from where the line and the pitch put it; an onset (anchors a frame or less apart, a chord's
notes) when one of its anchors is; weakly when a weak peak lies within `WEAK_FINE`."""


@dataclass(frozen=True, slots=True)
class FingerprintParams(Params):
    """When matches make an occurrence."""

    kind: ClassVar[str] = "fingerprint"

    min_hits: int = param(
        30, "Matched anchors an occurrence needs (fewer: chance lines of a large library).",
        Bounds(3, 100000, whole=True),
    )  # fmt: skip
    min_score: float = param(
        0.02, "Share of the stretch's hashes that must match (lower: similar passages).",
        Bounds(0.0, 1.0),
    )  # fmt: skip
    max_gap_s: float = param(
        3.0, "Seconds without a match that end an occurrence.", Bounds(0.5, 60.0)
    )
    min_heard: float = param(
        0.5, "Share of the reference's onsets whose peaks an occurrence must have (lower: "
        "chance lines of similar music pass).", Bounds(0.0, 1.0),
    )  # fmt: skip


@dataclass(slots=True, eq=False)
class _Run:
    reference: int
    origin: int
    """The frame the sums count from (the first match's)."""
    first: int
    last: int
    """The last matched anchor: runs join and end on these."""
    reach: int
    """The last matched triplet's partner: where the matched stretch ends."""
    hits: int = 0
    sx: float = 0.0
    """Sums for the least-squares line of reference frame on frame (frames from `origin`)."""
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    speeds: float = 0.0
    """The matches' own speeds, summed: the slope until the run is long enough to fit."""
    pitches: float = 0.0
    """The matches' log pitches, summed."""
    frames: list[int] = field(default_factory=list)
    """Each match's frame and its partner's, in order of arrival: where the run is dense."""
    reaches: list[int] = field(default_factory=list)
    ref_frames: list[int] = field(default_factory=list)
    """Each match's reference frame: which of them lie on the fitted line."""

    def add(self, ref_frame: int, frame: int, reach: int, speed: float, pitch: float) -> None:
        x = frame - self.origin
        self.last, self.reach = max(self.last, frame), max(self.reach, reach)
        self.hits += 1
        self.frames.append(frame)
        self.reaches.append(reach)
        self.ref_frames.append(ref_frame)
        self.sx, self.sy = self.sx + x, self.sy + ref_frame
        self.sxx, self.sxy = self.sxx + x * x, self.sxy + x * ref_frame
        self.speeds += speed
        self.pitches += math.log(pitch)

    def speed(self) -> float:
        """The line's slope: the reference's frames a frame of the recording."""
        n = self.hits
        spread = n * self.sxx - self.sx * self.sx
        if self.last - self.first < FIT_FRAMES or n < 5 or spread <= 0:
            return self.speeds / n
        slope = (n * self.sxy - self.sx * self.sy) / spread
        return min(1.12, max(0.88, slope))

    def at(self, frame: float) -> float:
        """The reference frame the line puts at the recording's `frame`."""
        slope = self.speed()
        return (self.sy - slope * self.sx) / self.hits + slope * (frame - self.origin)

    def pitch(self) -> float:
        return math.exp(self.pitches / self.hits)

    def absorb(self, other: _Run) -> None:
        """Take `other`'s matches (a run of this line that began before this run's line was
        known well enough to hold them)."""
        shift, n = self.origin - other.origin, other.hits  # to this run's origin
        sx = other.sx - n * shift
        self.sxx += other.sxx - 2 * shift * other.sx + n * shift * shift
        self.sxy += other.sxy - shift * other.sy
        self.sx, self.sy = self.sx + sx, self.sy + other.sy
        self.hits += n
        self.speeds, self.pitches = self.speeds + other.speeds, self.pitches + other.pitches
        self.first, self.last = min(self.first, other.first), max(self.last, other.last)
        self.reach = max(self.reach, other.reach)
        self.frames += other.frames
        self.reaches += other.reaches
        self.ref_frames += other.ref_frames

    def holds(self, other: _Run, gap: int) -> bool:
        """`other`, of this reference, lies on this run's line, at most `gap` frames away."""
        if other.reference != self.reference or other is self:
            return False
        away = max(other.first - self.last, self.first - other.last, 0)
        if away > gap:
            return False
        tolerance = 2 * DIFF_TOLERANCE + GAP_TOLERANCE * away
        return all(abs(self.at(f) - other.at(f)) <= tolerance for f in (other.first, other.last))


class FingerprintTagger:
    """Feed `(n, 6)` rows with `push`, then `finish`; `reference` reads a reference's title and
    duration from the library when its tag is made (None once removed: no tag)."""

    def __init__(
        self,
        params: FingerprintParams,
        reference: Callable[[int], Reference | None],
        sample_rate: int,
        hop: int,
        anchors: Callable[[int, float], np.ndarray] | None = None,
    ) -> None:
        self.params = params
        self.reference = reference
        self.anchors = anchors
        """A reference's anchors played at a pitch factor: `(n, 2)` rows of (its frame, the bin
        in quarters it is heard at). With it, tags reach as far as their reference's peaks are
        found in the recording (`_edges`)."""
        self.edge_frames = round(EDGE_FAR_S * sample_rate / hop)
        self.near_frames = round(EDGE_S * sample_rate / hop)
        self.now = 0
        """The last frame pushed."""
        self.finished = False
        self.peak_rows: list[np.ndarray] = []
        """The `(n, 2)` (frame, bin in quarters) of the recording's peaks, by push, from
        `edge_frames` before the oldest open run on."""
        self.weak_rows: list[np.ndarray] = []
        """The recording's weak peaks, the same way."""
        self.frame_s = hop / sample_rate
        self.gap = round(params.max_gap_s / self.frame_s)
        self.open: list[_Run] = []
        self._open_by_reference: dict[int, list[_Run]] = {}
        """`open` by reference, in the same order."""
        self.closed: list[_Run] = []
        self.hash_frames: list[int] = []
        """The frames of the recording's hashes from the oldest open run on (for scores)."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        rows = np.asarray(scores, dtype=np.int64).reshape(-1, 6)
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0], rows[:, 2]))]
        now = self.now = max(self.now, int(rows[:, 2].max(initial=0)))
        # The anchors' own rows (most of a segment's) only say where the recording's hashes
        # are: taken in bulk, in frame order, and only the matches one at a time.
        self.hash_frames += rows[rows[:, 0] == HASH, 2].tolist()
        if self.anchors is not None:
            self.peak_rows.append(rows[rows[:, 0] == PEAK][:, [2, 1]])
            self.weak_rows.append(rows[rows[:, 0] == WEAK][:, [2, 1]])
        matched = rows[rows[:, 0] >= 0]
        for reference, ref_frame, frame, reach, speed, pitch in matched.tolist():
            self._add(reference, ref_frame, frame, reach, speed / FACTOR, pitch / FACTOR)
        self._close(lambda run: now - run.last > self.gap)
        return self._release()

    def finish(self, audio_samples: int) -> list[Tag]:
        self.finished = True
        self._close(lambda run: True)
        return self._release()

    def _add(
        self, reference: int, ref_frame: int, frame: int, reach: int, speed: float, pitch: float
    ) -> None:
        # Only this reference's runs are looked at: a large library leaves thousands of open
        # runs of chance matches, and scanning them all for every match was the hot spot.
        runs = self._open_by_reference.setdefault(reference, [])
        for run in runs:
            since = frame - run.last
            off = abs(run.at(frame) - ref_frame)
            if since <= self.gap and off <= DIFF_TOLERANCE + GAP_TOLERANCE * max(0, since):
                run.add(ref_frame, frame, reach, speed, pitch)
                return
        run = _Run(reference, frame, frame, frame, reach)
        run.add(ref_frame, frame, reach, speed, pitch)
        runs.append(run)
        self.open.append(run)

    def _close(self, done: Callable[[_Run], bool]) -> None:
        ending = [run for run in self.open if done(run)]
        self.open = [run for run in self.open if not done(run)]
        self.closed += [run for run in ending if run.hits >= MIN_RUN_HITS]
        self._open_by_reference = {}
        for run in self.open:
            self._open_by_reference.setdefault(run.reference, []).append(run)

    def _release(self) -> list[Tag]:
        """Closed runs that start before every open one, as tags in order of start; a run that
        an open run of its reference may still overlap waits, one that a stronger run of its
        reference covers is a repeat inside the reference (a chorus), not an occurrence."""
        settled = [run for run in self.closed if not any(self._may_take(o, run) for o in self.open)]
        for weak in sorted(settled, key=lambda run: run.hits):
            strong = [o for o in self.closed if o.hits >= weak.hits and o.holds(weak, self.gap)]
            if strong:
                strong[0].absorb(weak)
                self.closed.remove(weak)
        settled = [run for run in settled if run in self.closed]
        few = [run for run in settled if run.hits < self.params.min_hits]
        self.closed = [run for run in self.closed if run not in few]
        settled = [run for run in settled if run not in few]
        shadowed = [run for run in settled if any(_covers(o, run) for o in self.closed)]
        self.closed = [run for run in self.closed if run not in shadowed]
        # A run waits until the recording has been read `edge_frames` past its end (its edge
        # may reach there), and every run that starts after one waiting waits too: tags come out
        # in order of start, the same for any segment length.
        waiting = [r for r in settled if r not in shadowed and not self._read_past(r)]
        limit = min((run.first for run in self.open + waiting), default=None)
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
        if self.peak_rows:  # the open runs' edges may reach back this far
            since = (self.now if keep_from is None else keep_from) - self.edge_frames
            for held in (self.peak_rows, self.weak_rows):
                rows = np.concatenate(held)
                held[:] = [rows[rows[:, 0] >= since]]
        return tags

    def _placed(self, run: _Run) -> Placed:
        """`run`'s reference's anchors where its line and pitch put them in the recording, with
        the recording's peaks: what `_edges` and `_heard` look at."""
        assert self.anchors is not None
        anchors = self.anchors(run.reference, run.pitch())
        frames = run.origin + (anchors[:, 0] - run.at(run.origin)) / run.speed()
        peaks, weak = np.concatenate(self.peak_rows), np.concatenate(self.weak_rows)
        return Placed(frames, anchors[:, 1], peaks, weak)

    def _edges(self, run: _Run, placed: Placed, first: int, reach: int) -> tuple[int, int]:
        """`first` and `reach` moved out to where `run`'s reference is still heard: speech over
        an occurrence's first or last seconds leaves its triplets unmatched (a peak of the
        voice among a triplet's three is enough), but most of the music's peaks stay."""
        if not self._thin(run):
            return first, reach
        frames = placed.frames
        inside = _heard_onsets(placed, (frames >= first) & (frames <= reach))[1]
        low, high = EDGE_HEARD
        heard = min(high, max(low, float((inside == 2).mean()) if len(inside) else high))
        weakly = min(1 - heard - EDGE_HEARD_WEAK, float((inside == 1).mean()) if len(inside) else 0)
        weakly = max(EDGE_HEARD_WEAK, weakly)
        weights = np.log(
            [(1 - heard - weakly) / (1 - EDGE_CHANCE - EDGE_CHANCE_WEAK),
             weakly / EDGE_CHANCE_WEAK, heard / EDGE_CHANCE]
        )  # fmt: skip
        limit, near = self.edge_frames, self.near_frames
        before = (frames < first) & (frames >= first - limit)
        after = (frames > reach) & (frames <= reach + limit)
        order = np.flatnonzero(before)[np.argsort(-frames[before])]  # outwards: the nearest first
        earliest = _reach(placed, order, weights, int(np.sum(frames[order] >= first - near)))
        later = np.flatnonzero(after)
        latest = _reach(placed, later, weights, int(np.sum(frames[later] <= reach + near)))
        first = min(first, math.floor(earliest)) if earliest is not None else first
        reach = max(reach, math.ceil(latest)) if latest is not None else reach
        return max(0, first), reach

    def _thin(self, run: _Run) -> bool:
        """Matched under `EDGE_RATE`: only such a run's edges move (`_edges`)."""
        return _rate(np.asarray(run.frames), self.frame_s) < EDGE_RATE

    def _read_past(self, run: _Run) -> bool:
        """The recording's peaks are in as far as `run`'s end edge may look (a densely matched
        run's edges stay where its matches are: it never waits)."""
        if self.finished or self.anchors is None or self.now >= run.reach + self.edge_frames:
            return True
        return not self._thin(run)

    def _may_take(self, open_run: _Run, run: _Run) -> bool:
        """An open run may still overlap `run` or take it in (`absorb`): `run` waits."""
        if open_run.reference != run.reference:
            return False
        return open_run.first <= run.last or open_run.holds(run, self.gap)

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
        speed, frame_s = run.speed(), self.frame_s
        first, reach = _dense(run, frame_s)
        if self.anchors is not None and self.peak_rows:
            placed = self._placed(run)
            first, reach = self._edges(run, placed, first, reach)
            if _heard(placed, first, reach) < self.params.min_heard:
                return None
        start_s = first * frame_s
        end_s = (reach + 1) * frame_s
        reference_start = run.at(first) * frame_s
        reference_end = run.at(reach + 1) * frame_s
        # The snaps look at the whole run: a recording's quiet last second (a phase vocoder's
        # smeared notes) matches as sparsely as chance does, yet reaches the last landmark.
        if run.at(min(run.first, first)) * frame_s - found.first_s <= SNAP_S:  # its start
            start_s -= reference_start / speed
            reference_start = 0.0
            if start_s < 0.0:  # it started before the recording did
                start_s, reference_start = 0.0, run.at(0) * frame_s
        if found.last_s - run.at(max(run.reach, reach) + 1) * frame_s <= SNAP_S:
            end_s = end_s + (found.duration_s - reference_end) / speed
            reference_end = found.duration_s
        return Tag(
            start=round(start_s, 3),
            end=round(end_s, 3),
            label=found.title,
            score=round(score, 4),
            extra=extra_of(
                (REFERENCE, str(found.id)),
                (REFERENCE_START, round(max(0.0, reference_start), 3)),
                (REFERENCE_END, round(min(found.duration_s, reference_end), 3)),
                (SPEED, round(speed, 4)),
                (PITCH, round(run.pitch(), 4)),
            ),
        )


def _covers(strong: _Run, weak: _Run) -> bool:
    """`strong` is another run of `weak`'s reference, with more matches, over most of it."""
    if strong is weak or strong.reference != weak.reference:
        return False
    if (strong.hits, -strong.first) <= (weak.hits, -weak.first):
        return False
    overlap = min(strong.last, weak.last) - max(strong.first, weak.first) + 1
    return overlap * 2 > weak.last - weak.first + 1


def _dense(run: _Run, frame_s: float) -> tuple[int, int]:
    """The run's first matched peak and its last, its sparse ends left out: of the anchors and
    partners of its matches on its fitted line, the first with `DENSE_HITS` of them in the
    window from it and the last with as many in the window up to it (the whole run when none
    is that dense).

    Two kinds of chance match lie near an occurrence's line and would stretch its bounds: a
    triplet of one peak of the music around it and two of its own (its anchor up to 1.4 s
    before the occurrence, or its last partner as far after it), and a few matches a handful
    of frames off the line (a run that `absorb` took in within its tolerance). Only matches
    within `DIFF_TOLERANCE` of the fitted line count, and the window is `DENSE_S` for a thinly
    matched run (under talk, a third of the anchors match) but shrinks towards `DENSE_MIN_S`
    for a densely matched one, where such a lone peak would find the occurrence's own in a
    window as wide as a thin run's."""
    frames, reaches = np.asarray(run.frames), np.asarray(run.reaches)
    slope = run.speed()
    line = (run.sy - slope * run.sx) / run.hits + slope * (frames - run.origin)
    on = np.abs(np.asarray(run.ref_frames) - line) <= DIFF_TOLERANCE
    if on.sum() >= DENSE_HITS:
        frames, reaches = frames[on], reaches[on]
    rate = _rate(frames, frame_s)
    window = round(min(DENSE_S, max(DENSE_MIN_S, DENSE_EXPECTED / rate)) / frame_s)
    order = np.argsort(frames, kind="stable")
    frames, reaches = frames[order], reaches[order]
    points = np.unique(np.concatenate([frames, reaches]))
    dense = DENSE_HITS
    first = next((p for p in points if _touching(frames, reaches, p, p + window) >= dense), None)
    last = next(
        (p for p in points[::-1] if _touching(frames, reaches, p - window, p) >= dense), None
    )
    if first is None or last is None or first > last:
        return run.first, run.reach
    return int(first), int(last)


def _rate(frames: np.ndarray, frame_s: float) -> float:
    """Matches a second of a run whose matches are at `frames`."""
    return len(frames) / max(1.0, float(frames.max() - frames.min()) * frame_s)


def _heard(placed: Placed, first: int, reach: int) -> float:
    """The share of the placed onsets from `first` to `reach` whose peaks the recording has
    (1.0 when there are fewer than `HEARD_MIN`)."""
    inside = (placed.frames >= first) & (placed.frames <= reach)
    heard = _heard_onsets(placed, inside)[1] == 2
    return float(heard.mean()) if len(heard) >= HEARD_MIN else 1.0


def _heard_onsets(placed: Placed, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The placed anchors `which` (indices in order, or a mask): each one's onset, each onset's
    best and each anchor's own: 2 with a peak of the recording where the anchor is
    (`EDGE_FRAMES`, `EDGE_FINE`), 1 with a weak peak near it (`WEAK_FINE`; every peak is one
    too), 0 with neither."""
    frames, fines = placed.frames[which], placed.fines[which]
    found = _found(frames, fines, placed.peaks, EDGE_FINE).astype(np.int64) * 2
    found[(found == 0) & _found(frames, fines, placed.weak, WEAK_FINE)] = 1
    onset = _onsets(frames)
    best = np.zeros(onset[-1] + 1 if len(onset) else 0, dtype=np.int64)
    np.maximum.at(best, onset, found)
    return onset, best, found


def _reach(placed: Placed, which: np.ndarray, weights: np.ndarray, near: int) -> float | None:
    """The frame of the last anchor heard of the placed anchors `which` (indices, in order
    outwards from an edge), at the onset where the evidence summed outwards is greatest (a change
    point: each onset counts `weights[its best]` (`_heard_onsets`), the log of how much likelier
    that outcome is where the reference plays, by the run's own stretch, than by chance); None
    when no onset outwards adds to it. A few onsets the speech hid do not stop an edge while the
    music goes on being heard beyond them, and the chance peaks of the music around an
    occurrence, too sparse to outweigh the onsets they miss, do not carry it out. The first
    `near` anchors are within `EDGE_S`; an onset beyond them is taken only with
    `EDGE_FAR_GAIN` more than the best within."""
    if not len(which):
        return None
    onset, best, found = _heard_onsets(placed, which)
    total = np.cumsum(weights[best])
    last = int(np.argmax(total))
    inside = onset[near - 1] if near else -1  # the last onset within `EDGE_S`
    if last > inside:
        best_inside = float(total[: inside + 1].max()) if inside >= 0 else 0.0
        if total[last] - max(0.0, best_inside) < EDGE_FAR_GAIN:
            last = int(np.argmax(total[: inside + 1])) if inside >= 0 else -1
    if last < 0 or total[last] <= 0:
        return None
    kept = np.flatnonzero((onset == last) & (found == best[last]))
    return float(placed.frames[which][kept[-1]])


def _found(frames: np.ndarray, fines: np.ndarray, peaks: np.ndarray, within: float) -> np.ndarray:
    """Whether each anchor placed at (`frames`, `fines`) has a peak of the recording (`(n, 2)`
    (frame, bin in quarters), by frame) within `EDGE_FRAMES` and `within` quarters."""
    low = np.searchsorted(peaks[:, 0], frames - EDGE_FRAMES, side="left")
    high = np.searchsorted(peaks[:, 0], frames + EDGE_FRAMES, side="right")
    counts = high - low  # the peaks within the frames of each anchor, then each of them:
    owner = np.repeat(np.arange(len(frames)), counts)
    taken = np.repeat(low - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
    found = np.zeros(len(frames), dtype=bool)
    found[owner[np.abs(peaks[taken, 1] - fines[owner]) <= within]] = True
    return found


def _onsets(frames: np.ndarray) -> np.ndarray:
    """Each anchor's onset (anchors in order, a frame or less apart: a chord's notes); none
    for none (a reference removed while the request ran has no anchors)."""
    if not len(frames):
        return np.zeros(0, dtype=np.int64)
    onset: np.ndarray = np.cumsum(np.r_[True, np.abs(np.diff(frames)) > 1.5]) - 1
    return onset


def _touching(frames: np.ndarray, reaches: np.ndarray, low: int, high: int) -> int:
    """How many matches (anchors `frames`, in order, and their partners `reaches`) have a
    matched peak in frames `[low, high]`: one match's anchor and partner count once, so a lone
    match is never dense on its own."""
    reach = int((reaches - frames).max())
    since, first, stop = np.searchsorted(frames, [low - reach, low, high + 1], side="left")
    before = reaches[since:first]  # anchored before the window, perhaps reaching into it
    return int(stop - first) + int(np.count_nonzero((before >= low) & (before <= high)))

"""A segment's triplet matches against the library (one per anchor matched), each with the
speed and pitch it says, kept when enough of them in the segment lie on one line of their
reference (a Hough vote over the speeds from `SLOWEST` to `FASTEST`).

A match pairs a recording's triplet (anchor frame `t`, bin `f`, span `n`) with a reference's
(`t'`, `f'`, `n'`): the recording plays the reference `n' / n` times as fast (its speed) and
`2 ** ((f - f') / 36)` times as high (its pitch). Both are rough for one match (a span of 20
frames is known to a frame); an occurrence's matches agree on one line `t' = a + speed * t`,
which the tagger fits from all of them.
"""

from __future__ import annotations

import numpy as np

from arengine.kinds.fingerprint.landmarks import (
    BINS_PER_OCTAVE,
    FASTEST,
    FINE,
    MAX_SHIFT,
    SLOWEST,
    unpack,
)

# SLOWEST, FASTEST (the speeds a match may say) and MAX_SHIFT (the pitch shift) are the
# landmarks' own: a query asks only for the hashes of matches these bounds keep.
SPEED_STEP = 0.002
SPEEDS = np.arange(SLOWEST, FASTEST + SPEED_STEP / 2, SPEED_STEP)
"""The speeds voted for: a segment's line is one of these..."""
START_FRAMES = 3
"""...with the frame where the reference would start to within this many frames."""
MIN_SEGMENT_HITS = 3
"""A match is kept when its line has this many in the segment: lone collisions of a large
library never reach the tagger."""
CUT_BANDS = 8
"""Bands of speed `_enough` looks for neighbours in: narrower bands cut more, each costs a sort."""
FACTOR = 10000
"""Speeds and pitches travel to the tagger as whole numbers of ten-thousandths."""
COLUMNS = 6
"""A row: (reference, reference frame, frame, partner's frame, speed, pitch)."""


def matches(query: np.ndarray, library: np.ndarray) -> np.ndarray:
    """`(m, 6)` rows of (reference, reference frame, frame, partner's frame, speed, pitch) of
    the `(n, 5)` query rows of `landmarks.queried` against the library rows `(hash, reference,
    offset)` with their hashes, kept when their line has `MIN_SEGMENT_HITS` in the segment."""
    if not len(query) or not len(library):
        return np.zeros((0, COLUMNS), dtype=np.int64)
    if np.any(library[1:, 0] < library[:-1, 0]):  # SQLite's come sorted, PostgreSQL's may not
        library = library[np.argsort(library[:, 0], kind="stable")]
    # Each query row's slice of the library: one search among the distinct hashes (fewer than
    # the rows), not a search of either end among all the rows.
    hashes = library[:, 0]
    first = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
    distinct = hashes[first]
    at = np.minimum(np.searchsorted(distinct, query[:, 0]), len(distinct) - 1)
    counts = np.where(distinct[at] == query[:, 0], np.diff(np.r_[first, len(hashes)])[at], 0)
    left = first[at]
    which = np.repeat(np.arange(len(query)), counts)
    starts = np.cumsum(counts) - counts
    rows = np.repeat(left, counts) + np.arange(counts.sum()) - np.repeat(starts, counts)
    ref_frame, ref_fine, ref_span = unpack(library[rows, 2])
    span = query[which, 4]
    speed = np.rint(ref_span * FACTOR / span).astype(np.int64)
    shift = query[which, 3] - ref_fine
    ok = (speed >= SLOWEST * FACTOR) & (speed <= FASTEST * FACTOR) & (np.abs(shift) <= MAX_SHIFT)
    # Two thirds fail the bounds: the other columns are gathered for the rest only.
    rows, which, span = rows[ok], which[ok], span[ok]
    frame = query[which, 2]
    found = np.stack(
        [library[rows, 1], ref_frame[ok], frame, frame + span, speed[ok], shift[ok], span], axis=1
    )
    return _on_lines(found)


def _on_lines(found: np.ndarray) -> np.ndarray:
    """The matches that lie on a line of their reference with `MIN_SEGMENT_HITS` (its votes
    counted over neighbouring start frames too), speed and pitch as `FACTOR`ths."""
    found = found[_enough(found)]
    if not len(found):
        return np.zeros((0, COLUMNS), dtype=np.int64)
    own = found[:, 4] / FACTOR
    # A match votes for the speeds its own estimate allows: a span of n frames is known to
    # about a frame at each end.
    near = np.abs(SPEEDS[None, :] - own[:, None]) <= own[:, None] * 2.5 / found[:, 6, None] + 0.01
    match, step = np.nonzero(near)
    start = found[match, 2] - found[match, 1] / SPEEDS[step]
    cell = np.floor(start / START_FRAMES).astype(np.int64)
    # (reference, speed, start cell) as one number, a cell's neighbours one apart in it: the
    # cells from 1 up, so that no cell's neighbour is another speed's or reference's.
    bits = int(cell.max() - cell.min() + 2).bit_length()
    key = (((found[match, 0] * len(SPEEDS) + step) << bits) | (cell - cell.min() + 1)).astype(
        np.int64
    )
    # Each vote's cell counted with its two neighbours: runs of equal keys, sorted, the
    # neighbouring cells' runs next to them.
    ordered, order = _sorted(key)
    new = np.r_[True, ordered[1:] != ordered[:-1]]
    run = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    keys, counts = ordered[starts], np.diff(np.r_[starts, len(ordered)])
    votes = counts.copy()
    votes[1:] += np.where(keys[:-1] == keys[1:] - 1, counts[:-1], 0)
    votes[:-1] += np.where(keys[1:] == keys[:-1] + 1, counts[1:], 0)
    score = np.empty(len(key), dtype=np.int64)
    score[order] = votes[run]
    # Each match's best-voted speed, the slowest of a tie: `nonzero` gave the (match, step)
    # pairs in order, so a match's are one slice, and its first at the slice's top score wins.
    first = np.flatnonzero(np.r_[True, match[1:] != match[:-1]])
    top = np.repeat(np.maximum.reduceat(score, first), np.diff(np.r_[first, len(match)]))
    tied = np.flatnonzero(score == top)
    best = tied[np.r_[True, match[tied][1:] != match[tied][:-1]]]
    kept = score[best] >= MIN_SEGMENT_HITS
    chosen = found[match[best][kept]]
    speeds = np.rint(SPEEDS[step[best][kept]] * FACTOR)
    pitch = np.rint(2.0 ** (chosen[:, 5] / (FINE * BINS_PER_OCTAVE)) * FACTOR)
    out = np.stack([*chosen[:, :4].T, speeds, pitch], axis=1).astype(np.int64)
    # One row per anchor matched: its other triplets' matches say the same again.
    _, first = np.unique(out[:, :3], axis=0, return_index=True)
    once: np.ndarray = out[np.sort(first)]
    return once


def _enough(found: np.ndarray) -> np.ndarray:
    """Which matches have `MIN_SEGMENT_HITS` of their reference (themselves included) near
    enough to share a line with them at some speed (a cheap first cut: the vote's cost grows
    with the matches, and a large library's are mostly lone collisions, 30-70% of them).

    Matches counted on one line of speed `s` start (`frame - reference frame / s`) within three
    cells of each other. Taken in bands of speed, their starts at the band's middle speed differ
    by at most that plus their reference frames' distance times the band's width in `1 / s`: a
    match kept by no band has no line the vote could keep."""
    enough = np.zeros(len(found), dtype=bool)
    if not len(found):
        return enough
    cells = 3 * START_FRAMES
    inverse = np.linspace(1 / SLOWEST, 1 / FASTEST, CUT_BANDS + 1)  # band edges, in 1 / s
    half = (inverse[0] - inverse[1]) / 2
    span = FASTEST * (np.ptp(found[:, 2]) + cells)  # reference frames apart, at most
    reach = int(cells + half * span) + 2
    # (reference, start) as one sortable number, sorted once a band: the starts from `reach`
    # up, below a reference's room, so that no two references' starts come within `reach`.
    frames, reference_frames = found[:, 2].astype(np.float64), found[:, 1].astype(np.float64)
    lowest = int(np.floor(frames.min() - reference_frames.max() * inverse[0])) - reach
    room = int(frames.max() - lowest + 2 * reach + 2).bit_length()
    reference = found[:, 0] << room
    for middle in inverse[:-1] - half:
        start = np.floor(frames - reference_frames * middle).astype(np.int64) - lowest
        ordered, order = _sorted(reference + start)
        enough[order[_crowded(ordered, reach, MIN_SEGMENT_HITS)]] = True
    return enough


def _crowded(ordered: np.ndarray, reach: int, least: int) -> np.ndarray:
    """Which of the sorted values have `least` values (themselves included) within `reach` of
    them: those within reach are consecutive, so some `least` consecutive ones around each
    value that has them all lie within reach (no search: a few passes over the array).

    >>> _crowded(np.array([0, 1, 5, 9, 10, 11]), 2, 3)
    array([False, False, False,  True,  True,  True])
    """
    crowded = np.zeros(len(ordered), dtype=bool)
    windows = len(ordered) - least + 1  # runs of `least` consecutive values
    if windows <= 0:
        return crowded
    first, last = ordered[:windows], ordered[least - 1 :]
    for place in range(least):  # the value is the run's `place`th
        value = ordered[place : place + windows]
        crowded[place : place + windows] |= (value - first <= reach) & (last - value <= reach)
    return crowded


def _sorted(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`values` sorted and the order that sorts them (`np.argsort`'s, ties by place): one sort
    of each value with its place in its low bits where both fit in 63 bits, a third of an
    argsort's time.

    >>> _sorted(np.array([7, -2, 7, 3]))
    (array([-2,  3,  7,  7]), array([1, 3, 0, 2]))
    """
    if not len(values):
        return values, np.zeros(0, dtype=np.int64)
    low, high = int(values.min()), int(values.max())
    bits = max(1, (len(values) - 1).bit_length())
    if (high - low).bit_length() + bits > 63:
        order = np.argsort(values, kind="stable")
        return values[order], order
    packed = np.sort(((values - low) << bits) | np.arange(len(values)))
    return (packed >> bits) + low, packed & ((1 << bits) - 1)

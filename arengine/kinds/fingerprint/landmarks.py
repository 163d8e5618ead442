"""Landmarks that survive speed changes: triplets of spectral peaks on a log-frequency
spectrogram (as Panako does), and the matches of a recording's triplets against a library's.

A peak is a local maximum of a log-frequency spectrogram (36 bins an octave from 110 Hz), so a
pitch shift moves every peak by the same number of bins. A triplet is an anchor peak and two of
its nearest partners after it; its hash (scheme 3) holds what neither a tempo change nor a
pitch shift moves: where the middle peak lies between the other two in time (a ratio, in 16
levels), the two partners' distances in bins from the anchor; and, coarsely, what they move
only a little: the anchor's register (a band of a sixth of an octave) and the triplet's length
(a class a quarter of an octave wide). A query asks every neighbouring level, band and class
that a match could have (`queried`): its middle peak a frame earlier or later, its pitch up to
12% higher or lower, its speed from 88% to 112% (what `matches.py` keeps anyway), so each
lookup returns about 8 times fewer rows than scheme 2's (4 levels, thirds of an octave, no
length) for nearly the same matches (`docs/performance/fingerprints.md`). The stored offset
holds what they do move: the anchor's frame, its bin (in quarters) and the triplet's length in
frames, so that each match says the speed and the pitch it was played at (`recognizer.py` says
how they are fitted).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from itertools import combinations
from typing import Any

import numpy as np
import torch
from torch import Tensor

from arengine.kinds.fingerprint.library import Library

SAMPLE_RATE = 11025
N_FFT = 1024
HOP = 256
LOWEST_HZ = 110.0
BINS_PER_OCTAVE = 36
LOG_BINS = 198
"""110 Hz to about 5 kHz."""
PEAK_BINS = 9
"""A peak is the maximum of the bins this close above and below (a quarter octave)..."""
PEAK_FRAMES = 7
"""...and of the frames this close before and after."""
WEAK_BINS = 2
WEAK_FRAMES = 1
"""A weak peak is the maximum of the bins this close and of the frames this close only: a note
of the music that a louder voice near it in time or pitch keeps from being a peak often is one.
Never hashed; the tagger weighs them at an occurrence's edges (`tagger.py`)."""
FLOOR_DB = -20.0
"""Peaks quieter than this (a sine of about -68 dBFS) are not used: silence and dither."""
FINE = 4
"""Stored bins are in quarters (interpolated peaks): the pitch is fitted to a fraction of a bin."""
MAX_DT = 60
"""A triplet's partners come within this many frames (1.4 s) after its anchor..."""
MAX_DF = 24
"""...and this many bins (two thirds of an octave) above or below it."""
MIN_SPAN = 4
"""Frames a triplet spans at least: shorter ones say too little about the speed."""
FAN_OUT = 4
"""Partners per anchor (the nearest in time): 6 triplets an anchor."""
SLOWEST = 0.88
FASTEST = 1.12
"""The speeds a match may say (an occurrence is found between 0.9 and 1.1; a match's own
estimate is rougher): a query asks for the spans these allow, and `matches.py` keeps no other."""
MAX_SHIFT = BINS_PER_OCTAVE * np.log2(FASTEST) * FINE
"""The pitch shift a match may say, in quarters of a bin (12%): a query asks for the bands it
reaches, and `matches.py` keeps no other."""
RATIO_BITS = 4
RATIO_LEVELS = 1 << RATIO_BITS
"""Where the middle peak lies between the other two in time, in levels of 1/16 (the hash's
lowest bits)..."""
RATIO_MARGIN = 1.0
"""...and a query asks every level its middle peak reaches when moved this many frames either
way (each peak's frame is rounded, at any speed)."""
BAND_BINS = 6
"""The anchor's register in the hash: bands of a sixth of an octave (a query asks every band a
pitch shift of `MAX_SHIFT` reaches: two or three)."""
SPAN_STEPS = 4
"""A triplet's length in the hash: classes a quarter of an octave wide (a query asks every class
a speed from `SLOWEST` to `FASTEST` reaches: one to three)."""
SCHEME = 3
"""The hash scheme, stored in each reference (`SCHEME_HASH`): version 1 (landmark pairs on a
linear spectrogram) had no marker; version 2 hashed the triplets' time ratio in 4 levels and the
anchor's band in thirds of an octave, without the span."""
SCHEME_HASH = -(1 << 62)
"""A row with this hash marks its reference's scheme (its offset); no triplet hashes below 0."""
PREROLL_FRAMES = 2 * PEAK_FRAMES
LOOKAHEAD = (MAX_DT + 2 * PEAK_FRAMES + 1) * HOP + N_FFT
CHUNK_FRAMES = 4096
"""Frames per STFT when fingerprinting a whole reference (bounded memory for long ones)."""


def _log_filters() -> Tensor:
    """`(LOG_BINS, N_FFT // 2 + 1)` triangular weights from STFT bins to log-frequency bins."""
    linear = np.arange(N_FFT // 2 + 1) * SAMPLE_RATE / N_FFT
    centres = LOWEST_HZ * 2.0 ** (np.arange(LOG_BINS) / BINS_PER_OCTAVE)
    widths = np.maximum(centres * (2 ** (1 / BINS_PER_OCTAVE) - 1), SAMPLE_RATE / N_FFT)
    weights = np.maximum(0.0, 1.0 - np.abs(linear[None, :] - centres[:, None]) / widths[:, None])
    weights /= weights.sum(axis=1, keepdims=True)
    return torch.from_numpy(weights.astype(np.float32))


FILTERS = _log_filters()
with warnings.catch_warnings():  # PyTorch calls its compressed (CSR) tensors a beta: the one
    # product used here is checked against the dense filters' (tests/kinds/fingerprint).
    warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
    SPARSE_FILTERS = FILTERS.to_sparse_csr()
"""`FILTERS`' 991 weights that are not zero (of 101,574): each log bin sums a few STFT bins, and
a sparse product skips the rest (a 30-s segment's spectrogram in about 14 ms of CPU, not 17).
Compressed by rows, the product takes 3 ms where the coordinate list took 5, with the same
fingerprints bit for bit (49 recordings checked)."""


def spectrogram_db(samples: np.ndarray) -> Tensor:
    """`(LOG_BINS, frames)` log-frequency magnitude in dB of a Hann-windowed STFT, unpadded."""
    audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    if len(audio) < N_FFT:
        return torch.full((LOG_BINS, 0), -200.0)
    frames = audio.unfold(0, N_FFT, HOP) * torch.hann_window(N_FFT, periodic=True)
    magnitude = torch.mm(SPARSE_FILTERS, torch.fft.rfft(frames).abs().T)
    return 20.0 * torch.log10(magnitude + 1e-10)


def peaks(db: Tensor, half_bins: int = PEAK_BINS, half_frames: int = PEAK_FRAMES) -> np.ndarray:
    """`(n, 3)` rows of (frame, bin, bin in quarters) of the local maxima above the floor (over
    `half_bins` either side and `half_frames` before and after), by frame then bin; the quarters
    interpolate the peak between its neighbours (a parabola)."""
    level = db.numpy()
    pooled = running_max(running_max(level, half_frames, axis=1), half_bins, axis=0)
    found = (level == pooled) & (level > FLOOR_DB)
    found[0] = found[-1] = False
    frames, bins = np.nonzero(found.T)  # by frame, then bin
    below, at, above = (level[bins + k, frames] for k in (-1, 0, 1))
    curve = below - 2 * at + above
    shift = np.where(curve < 0, 0.5 * (below - above) / np.where(curve < 0, curve, -1), 0.0)
    fine = np.rint((bins + np.clip(shift, -0.5, 0.5)) * FINE)
    return np.stack([frames, bins, fine], axis=1).astype(np.int64)


def running_max(values: np.ndarray, half: int, axis: int) -> np.ndarray:
    """Each cell's maximum over the `half` cells either side of it along `axis` (fewer at the
    edges): the maxima of spans doubling in length, about log2(2 * half + 1) array passes, where
    a max-pooling kernel compares every cell of the window (40x slower here).

    >>> running_max(np.array([[1.0, 5.0, 2.0, 0.0, 3.0]]), 1, axis=1)
    array([[5., 5., 5., 3., 3.]])
    """
    moved = np.moveaxis(values, axis, 0)
    edge = np.full((half, *moved.shape[1:]), -np.inf, dtype=moved.dtype)
    spans = np.concatenate([edge, moved, edge])
    width, span = 2 * half + 1, 1
    while span * 2 <= width:  # spans[i]: the maximum of the `span` cells from i on
        spans = np.maximum(spans[:-span], spans[span:])
        span *= 2
    count = len(moved)
    result = np.maximum(spans[:count], spans[width - span : width - span + count])
    return np.moveaxis(result, 0, axis)


def partners(found: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """`(len(anchors), FAN_OUT)` indices into `found` of each anchor's nearest partners in its
    target zone, -1 where it has fewer."""
    frames, bins = found[:, 0], found[:, 1]
    stop = np.searchsorted(frames, frames[anchors] + MAX_DT, side="right")
    width = max(1, int((stop - anchors - 1).max()))
    partner = np.minimum(anchors[:, None] + np.arange(1, width + 1)[None, :], len(frames) - 1)
    valid = anchors[:, None] + np.arange(1, width + 1)[None, :] < stop[:, None]
    valid &= frames[partner] > frames[anchors][:, None]
    valid &= np.abs(bins[partner] - bins[anchors][:, None]) <= MAX_DF
    rank = np.cumsum(valid, axis=1) - 1
    valid &= rank < FAN_OUT
    chosen = np.full((len(anchors), FAN_OUT), -1, dtype=np.int64)
    row, column = np.nonzero(valid)
    chosen[row, rank[row, column]] = partner[row, column]
    return chosen


def triplets(found: np.ndarray, first: int, last: int) -> np.ndarray:
    """`(n, 5)` rows of (shape, anchor frame, anchor bin in quarters, span in frames, middle
    peak's frame after the anchor's) of the triplets whose anchor lies in frames `[first, last)`
    of `found`, by anchor; the shape is the partners' distances in bins from the anchor."""
    frames, fine = found[:, 0], found[:, 2]
    anchors = np.flatnonzero((frames >= first) & (frames < last))
    if not len(anchors):
        return np.zeros((0, 5), dtype=np.int64)
    chosen = partners(found, anchors)
    parts = []
    for a, b in combinations(range(FAN_OUT), 2):
        second, third = chosen[:, a], chosen[:, b]
        ok = (second >= 0) & (third >= 0)
        ok &= frames[third] > frames[second]
        ok &= frames[third] - frames[anchors] >= MIN_SPAN
        parts.append(np.stack([anchors[ok], second[ok], third[ok]], axis=1))
    one, two, three = np.concatenate(parts)[
        np.argsort(np.concatenate(parts)[:, 0], kind="stable")
    ].T
    d2 = np.rint((fine[two] - fine[one]) / FINE).astype(np.int64) + 32
    d3 = np.rint((fine[three] - fine[one]) / FINE).astype(np.int64) + 32
    span, middle = frames[three] - frames[one], frames[two] - frames[one]
    return np.stack([(d2 << 6) | d3, frames[one], fine[one], span, middle], axis=1).astype(np.int64)


def hashed(
    shape: np.ndarray, ratio: np.ndarray, band: np.ndarray, length: np.ndarray
) -> np.ndarray:
    """A triplet's hash: its anchor's band and its span's class (what a query asks neighbours
    of) above its shape and its time ratio's level (the low bits)."""
    out: np.ndarray = (((((band << 5) | length) << 12) | shape) << RATIO_BITS) | ratio
    return out


def ratio_level(middle: np.ndarray, span: np.ndarray) -> np.ndarray:
    """The level of `middle / span` (both in frames) in `RATIO_LEVELS`."""
    level: np.ndarray = np.clip(np.floor(middle * RATIO_LEVELS / span), 0, RATIO_LEVELS - 1)
    return level.astype(np.int64)


def span_class(span: np.ndarray) -> np.ndarray:
    """The class of a span in frames: `SPAN_STEPS` an octave."""
    steps: np.ndarray = np.floor(np.log2(np.maximum(span, 1)) * SPAN_STEPS)
    return steps.astype(np.int64)


def stored(rows: np.ndarray) -> np.ndarray:
    """The `(n, 2)` library rows (hash, offset) of `triplets` rows: the offset packs the anchor's
    frame, its bin in quarters and the span (`unpack`)."""
    shape, frame, fine, span, middle = rows.T
    offset = (frame << 24) | (fine << 8) | span
    levels = (ratio_level(middle, span), fine // (BAND_BINS * FINE), span_class(span))
    return np.stack([hashed(shape, *levels), offset], axis=1)


def unpack(offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stored offset's anchor frame, anchor bin in quarters and span in frames."""
    return offset >> 24, (offset >> 8) & 0xFFFF, offset & 0xFF


def queried(rows: np.ndarray) -> np.ndarray:
    """`(m, 5)` rows of (hash, triplet index, anchor frame, bin in quarters, span): each
    triplet's hash under every ratio level, band and span class that a reference's triplet
    could have while matching it (its middle peak a frame or so away, its anchor up to
    `MAX_SHIFT` higher or lower, its span from `SLOWEST` to `FASTEST` of this one's)."""
    shape, _, fine, span, middle = rows.T
    ranges = (
        (ratio_level(middle - RATIO_MARGIN, span), ratio_level(middle + RATIO_MARGIN, span)),
        (
            np.maximum(0, np.floor((fine - MAX_SHIFT) / (BAND_BINS * FINE))).astype(np.int64),
            np.floor((fine + MAX_SHIFT) / (BAND_BINS * FINE)).astype(np.int64),
        ),
        (span_class(np.floor(span * SLOWEST)), span_class(np.ceil(span * FASTEST))),
    )
    which = np.arange(len(rows))
    levels: list[np.ndarray] = []
    for low, high in ranges:
        more, level = _each(low[which], high[which])
        which, levels = which[more], [*(done[more] for done in levels), level]
    hashes = hashed(shape[which], *levels)
    return np.stack([hashes, which, *rows[which, 1:4].T], axis=1)


def _each(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every value from `low` to `high` (inclusive) of each row, with the row's index.

    >>> _each(np.array([2, 5]), np.array([4, 5]))
    (array([0, 0, 0, 1]), array([2, 3, 4, 5]))
    """
    counts = high - low + 1
    which = np.repeat(np.arange(len(low)), counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return which, low[which] + step


def fingerprint(samples: np.ndarray) -> np.ndarray:
    """The `(n, 2)` library rows (hash, offset) of a whole recording at `SAMPLE_RATE`, by
    anchor frame after the scheme's marker row (none when the recording has no triplet).

    >>> fingerprint(np.zeros(SAMPLE_RATE, dtype=np.float32)).shape
    (0, 2)
    """
    return fingerprint_blocks([samples])[0]


def fingerprint_blocks(blocks: Iterable[np.ndarray]) -> tuple[np.ndarray, int]:
    """`fingerprint` of the recording the blocks make up, and its length in samples, holding
    only `CHUNK_FRAMES` of it (with pre-roll and lookahead) at a time: a 4-hour reference
    decodes and fingerprints in bounded memory."""
    pending: list[np.ndarray] = []
    held = 0  # samples in `pending`, which starts at frame `start`
    start = first = total = 0
    parts = [np.zeros((0, 2), dtype=np.int64)]
    for block in blocks:
        pending.append(block)
        held += len(block)
        total += len(block)
        while held >= (first - start + CHUNK_FRAMES) * HOP + LOOKAHEAD:
            piece = np.concatenate(pending)
            parts.append(_chunk(piece, start, first))
            first += CHUNK_FRAMES
            drop = first - PREROLL_FRAMES - start
            pending, held, start = [piece[drop * HOP :]], len(piece) - drop * HOP, start + drop
    piece = np.concatenate([np.zeros(0, np.float32), *pending])
    for at in range(first, max(0, (total - N_FFT) // HOP + 1), CHUNK_FRAMES):
        parts.append(_chunk(piece, start, at))
    rows = np.concatenate(parts)
    if len(rows):
        rows = np.concatenate([np.array([[SCHEME_HASH, SCHEME]], dtype=np.int64), rows])
    return rows, total


def _chunk(piece: np.ndarray, start: int, first: int) -> np.ndarray:
    """The rows of anchors in frames `[first, first + CHUNK_FRAMES)` from `piece`, which starts
    at frame `start`: each chunk sees its own pre-roll and lookahead, as a whole recording
    would."""
    base = max(start, first - PREROLL_FRAMES)
    window = piece[(base - start) * HOP : (first - start + CHUNK_FRAMES) * HOP + LOOKAHEAD]
    rows = triplets(peaks(spectrogram_db(window)), first - base, first - base + CHUNK_FRAMES)
    rows[:, 1] += base
    return stored(rows)


def add_recording(
    library: Library, title: str, samples: np.ndarray, metadata: dict[str, Any]
) -> int:
    """Fingerprint a recording at `SAMPLE_RATE` and store it in `library`; its id."""
    hashes = fingerprint(samples)
    return library.add(title, len(samples) / SAMPLE_RATE, metadata, hashes, landmark_span(hashes))


def landmark_span(hashes: np.ndarray) -> tuple[float, float]:
    """Seconds from a recording's start to its first triplet and to its last one's end."""
    rows = hashes[hashes[:, 0] != SCHEME_HASH]
    if not len(rows):
        return 0.0, 0.0
    frame, _, span = unpack(rows[:, 1])
    frame_s = HOP / SAMPLE_RATE
    return float(frame.min()) * frame_s, float((frame + span).max()) * frame_s

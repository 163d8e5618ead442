"""Landmarks: spectral peaks paired into hashes (Wang 2003, as in audfprint), and the matches of a
recording's hashes against a library's (the kind's `recognizer.py` says how)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from arengine.kinds.fingerprint.library import Library

SAMPLE_RATE = 11025
N_FFT = 512
HOP = 256
PEAK_BINS = 12
"""A peak is the maximum of the bins this close above and below..."""
PEAK_FRAMES = 8
"""...and of the frames this close before and after."""
LOWEST_BIN = 4
"""Bins below (about 86 Hz) hold hum and rumble, not the recording's identity."""
FLOOR_DB = -20.0
"""Peaks quieter than this (a sine of about -62 dBFS) are not used: silence and dither."""
MAX_DT = 63
DT_MASK = 63
"""A hash's low 6 bits: its pair's time difference in frames."""
MAX_DF = 31
FAN_OUT = 6
"""Partners per anchor: the nearest in time within the target zone."""
MIN_SEGMENT_HITS = 2
"""A match is kept when its reference and offset difference (±1 frame) have this many in the
segment: lone collisions of a large library never reach the tagger."""
PREROLL_FRAMES = 2 * PEAK_FRAMES
LOOKAHEAD = (MAX_DT + 2 * PEAK_FRAMES + 1) * HOP + N_FFT
CHUNK_FRAMES = 4096
"""Frames per STFT when fingerprinting a whole reference (bounded memory for long ones)."""


def spectrogram_db(samples: np.ndarray) -> Tensor:
    """`(bins, frames)` magnitude in dB of a Hann-windowed STFT without padding."""
    audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    if len(audio) < N_FFT:
        return torch.full((N_FFT // 2 + 1, 0), -200.0)
    frames = audio.unfold(0, N_FFT, HOP) * torch.hann_window(N_FFT, periodic=True)
    magnitude = torch.fft.rfft(frames).abs().T
    return 20.0 * torch.log10(magnitude + 1e-10)


def peaks(db: Tensor) -> np.ndarray:
    """`(n, 2)` rows of (frame, bin) of the local maxima above the floor, by frame then bin."""
    level = db.numpy()
    pooled = running_max(running_max(level, PEAK_FRAMES, axis=1), PEAK_BINS, axis=0)
    found = (level == pooled) & (level > FLOOR_DB)
    found[:LOWEST_BIN] = False
    frames, bins = np.nonzero(found.T)  # by frame, then bin
    return np.stack([frames, bins], axis=1).astype(np.int64)


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


def pair_hashes(found: np.ndarray, first: int, last: int) -> np.ndarray:
    """`(n, 2)` rows of (hash, anchor frame) for anchors in frames `[first, last)` of `found`,
    by anchor, each anchor's partners nearest first (at most `FAN_OUT`).

    Vectorised: every anchor against its k-th following peak at once, for every k up to the
    most peaks any anchor has within `MAX_DT` frames."""
    frames, bins = found[:, 0], found[:, 1]
    anchors = np.flatnonzero((frames >= first) & (frames < last))
    if not len(anchors):
        return np.zeros((0, 2), dtype=np.int64)
    stop = np.searchsorted(frames, frames[anchors] + MAX_DT, side="right")
    width = max(1, int((stop - anchors - 1).max()))
    partner = anchors[:, None] + np.arange(1, width + 1)[None, :]
    valid = partner < stop[:, None]
    partner = np.minimum(partner, len(frames) - 1)
    dt = frames[partner] - frames[anchors][:, None]
    df = bins[partner] - bins[anchors][:, None]
    valid &= (dt > 0) & (np.abs(df) <= MAX_DF)
    valid &= np.cumsum(valid, axis=1) <= FAN_OUT
    row, column = np.nonzero(valid)  # by anchor, then nearest partner first
    f1 = bins[anchors][row]
    hashes = (f1 << 12) | ((df[row, column] + 32) << 6) | dt[row, column]
    return np.stack([hashes, frames[anchors][row]], axis=1).astype(np.int64)


def fingerprint(samples: np.ndarray) -> np.ndarray:
    """The `(n, 2)` rows of (hash, frame) of a whole recording at `SAMPLE_RATE`, by frame.

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
    return np.concatenate(parts), total


def _chunk(piece: np.ndarray, start: int, first: int) -> np.ndarray:
    """The hashes of anchors in frames `[first, first + CHUNK_FRAMES)` from `piece`, which
    starts at frame `start`: each chunk sees its own pre-roll and lookahead, as a whole
    recording would."""
    base = max(start, first - PREROLL_FRAMES)
    window = piece[(base - start) * HOP : (first - start + CHUNK_FRAMES) * HOP + LOOKAHEAD]
    hashes = pair_hashes(peaks(spectrogram_db(window)), first - base, first - base + CHUNK_FRAMES)
    hashes[:, 1] += base
    return hashes


def add_recording(
    library: Library, title: str, samples: np.ndarray, metadata: dict[str, Any]
) -> int:
    """Fingerprint a recording at `SAMPLE_RATE` and store it in `library`; its id."""
    hashes = fingerprint(samples)
    return library.add(title, len(samples) / SAMPLE_RATE, metadata, hashes, landmark_span(hashes))


def landmark_span(hashes: np.ndarray) -> tuple[float, float]:
    """Seconds from a recording's start to its first landmark and to its last one's end."""
    if not len(hashes):
        return 0.0, 0.0
    frame_s = HOP / SAMPLE_RATE
    last = int((hashes[:, 1] + (hashes[:, 0] & DT_MASK)).max())
    return float(hashes[0, 1]) * frame_s, last * frame_s


def matches(hashes: np.ndarray, library: np.ndarray) -> np.ndarray:
    """`(m, 4)` rows of (reference, offset difference, frame, partner's frame): each recording
    hash `(hash, frame)` against each library row `(hash, reference, offset)` with its hash."""
    if not len(hashes) or not len(library):
        return np.zeros((0, 4), dtype=np.int64)
    library = library[np.argsort(library[:, 0], kind="stable")]
    left = np.searchsorted(library[:, 0], hashes[:, 0], side="left")
    right = np.searchsorted(library[:, 0], hashes[:, 0], side="right")
    counts = right - left
    query = np.repeat(np.arange(len(hashes)), counts)
    starts = np.cumsum(counts) - counts  # where each query's rows begin in the expansion
    rows = np.repeat(left, counts) + np.arange(counts.sum()) - np.repeat(starts, counts)
    frames = hashes[query, 1]
    partners = frames + (hashes[query, 0] & DT_MASK)
    found = np.stack([library[rows, 1], frames - library[rows, 2], frames, partners], axis=1)
    return _agreeing(found)


def _agreeing(found: np.ndarray) -> np.ndarray:
    """The matches whose reference and difference (±1 frame) have `MIN_SEGMENT_HITS`."""
    if not len(found):
        return found
    keys, inverse, counts = np.unique(found[:, :2], axis=0, return_inverse=True, return_counts=True)
    support = counts.copy()
    for shift in (-1, 1):
        neighbour = keys + np.array([0, shift])
        at = np.searchsorted(_packed(keys), _packed(neighbour))
        at = np.minimum(at, len(keys) - 1)
        same = _packed(keys)[at] == _packed(neighbour)
        support += np.where(same, counts[at], 0)
    kept: np.ndarray = found[support[inverse.reshape(-1)] >= MIN_SEGMENT_HITS]
    return kept


def _packed(keys: np.ndarray) -> np.ndarray:
    """(reference, difference) pairs as one sortable integer, in `np.unique`'s order."""
    packed: np.ndarray = keys[:, 0] * (1 << 40) + keys[:, 1] + (1 << 39)
    return packed

"""Scheme 3's hashes (`landmarks.py`): a query asks for every hash a reference's triplet could
have while `matches.py` would keep the match, however its ratio, band or span class lies against
an edge, and a library of scheme 2 is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from arengine.kinds.fingerprint.landmarks import (
    FASTEST,
    FILTERS,
    FINE,
    HOP,
    MAX_DT,
    MAX_SHIFT,
    N_FFT,
    SAMPLE_RATE,
    SCHEME,
    SCHEME_HASH,
    SLOWEST,
    queried,
    spectrogram_db,
    stored,
    triplets,
)
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer


def _peaks(frames: tuple[int, ...], fine: tuple[int, ...]) -> np.ndarray:
    """`peaks`' rows (frame, bin, bin in quarters) of peaks at these frames and quarters."""
    quarters = np.array(fine, dtype=np.int64)
    return np.stack([np.array(frames), np.rint(quarters / FINE), quarters], axis=1).astype(np.int64)


def _hash(frames: tuple[int, ...], fine: tuple[int, ...]) -> int:
    """The stored hash of the one triplet of three peaks."""
    [[found, _]] = stored(triplets(_peaks(frames, fine), frames[0], frames[0] + 1))
    return int(found)


def _asked(frames: tuple[int, ...], fine: tuple[int, ...]) -> set[int]:
    """The hashes a query of the one triplet of three peaks looks up."""
    rows = triplets(_peaks(frames, fine), frames[0], frames[0] + 1)
    assert len(rows) == 1
    return {int(h) for h in queried(rows)[:, 0]}


def test_a_middle_peak_a_frame_across_a_ratio_level_still_matches() -> None:
    """The middle peak halfway (8 of 16 frames) in the reference, a frame earlier in the
    recording: its ratio falls in the level below, and the query asks that level's neighbour
    too (scheme 2's four levels asked only their own: the match was lost)."""
    fine = (400, 420, 380)
    reference = _hash((100, 108, 116), fine)
    assert reference in _asked((500, 507, 516), fine)
    assert reference in _asked((500, 509, 516), fine)


def test_an_anchor_shifted_across_its_band_edge_still_matches() -> None:
    """An anchor at the top of its band, the recording played 11.6% higher (23 quarters of a
    bin, within what `matches.py` keeps), and one at the bottom of its band played as much
    lower: the query asks every band that far (scheme 2 asked the next band only when its own
    anchor lay within 5.5 bins of the edge, and lost these)."""
    shift = int(MAX_SHIFT)
    assert shift / FINE > 5.5
    top = (95, 107, 79)  # the last quarter of a band, both of a sixth and of a third of an octave
    higher = tuple(f + shift for f in top)
    assert _hash((100, 108, 130), top) in _asked((500, 508, 530), higher)
    bottom = (144, 156, 128)  # the first quarter of a band
    lower = tuple(f - shift for f in bottom)
    assert _hash((100, 108, 130), bottom) in _asked((500, 508, 530), lower)


def test_a_span_across_its_class_edge_still_matches() -> None:
    """A reference triplet of 23 frames (class 18 of quarter octaves), played 9.5% faster in 21
    (class 17): the query asks every class a speed of 0.88 to 1.12 reaches."""
    fine = (400, 420, 380)
    assert _hash((100, 110, 123), fine) in _asked((500, 510, 521), fine)
    assert _hash((100, 110, 121), fine) in _asked((500, 510, 523), fine)


def test_every_match_the_vote_may_keep_is_asked_for() -> None:
    """Random triplets played at 90-110% speed (each peak's frame rounded) and shifted up to
    what `matches.py` keeps in pitch: whenever the match's speed and shift pass its bounds, the
    reference's hash is among the query's."""
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(2000):
        span = int(rng.integers(4, 61))
        middle = int(rng.integers(1, span))
        anchor = int(rng.integers(40, 700))
        fine = (anchor, anchor + int(rng.integers(-88, 89)), anchor + int(rng.integers(-88, 89)))
        speed = rng.uniform(0.9, 1.1)
        shift = int(rng.integers(-int(MAX_SHIFT), int(MAX_SHIFT) + 1))
        played = (1000, 1000 + round(middle / speed), 1000 + round(span / speed))
        if not played[0] < played[1] < played[2] or not 4 <= played[2] - played[0] <= MAX_DT:
            continue  # no triplet of the recording to match
        if not SLOWEST <= span / (played[2] - played[0]) <= FASTEST:
            continue  # `matches.py` drops it whatever the hash
        reference = _hash((0, middle, span), fine)
        assert reference in _asked(played, tuple(f + shift for f in fine)), (span, middle, speed)
        checked += 1
    assert checked > 1500


def test_a_library_of_scheme_2_is_refused(tmp_path: Path) -> None:
    """Its references carry scheme 2's marker: their hashes would never be asked for, so the
    model refuses to load and says what to do; scheme 3's own are accepted."""
    library = Library.create(tmp_path / "library.sqlite")
    rows = np.array([[SCHEME_HASH, SCHEME], [1 << 20, 40]], dtype=np.int64)
    library.add("Current", 10.0, {}, rows)
    FingerprintRecognizer(library.path, segment_s=10.0)
    old = np.array([[SCHEME_HASH, 2], [1 << 20, 40]], dtype=np.int64)
    library.add("Station ident", 10.0, {}, old)
    with pytest.raises(ValueError, match=r"older scheme \(first: 2 'Station ident'\)"):
        FingerprintRecognizer(library.path, segment_s=10.0)


def test_the_sparse_filters_give_the_dense_filters_spectrogram() -> None:
    """The log-frequency folding by `SPARSE_FILTERS` (a compressed sparse product, which
    PyTorch calls beta) is the dense filters' product."""
    samples = np.random.default_rng(3).standard_normal(SAMPLE_RATE * 3).astype(np.float32)
    frames = torch.from_numpy(samples).unfold(0, N_FFT, HOP) * torch.hann_window(N_FFT)
    dense = 20.0 * torch.log10(FILTERS @ torch.fft.rfft(frames).abs().T + 1e-10)
    torch.testing.assert_close(spectrogram_db(samples), dense, atol=1e-3, rtol=0)

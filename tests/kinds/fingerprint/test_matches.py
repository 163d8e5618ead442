"""The segment's matches and their vote (`matches.py`): the cut before the vote drops only what
the vote would drop."""

from __future__ import annotations

import numpy as np
import pytest

from arengine.kinds.fingerprint import matches as module
from arengine.kinds.fingerprint.matches import (
    FACTOR,
    _crowded,
    _enough,
    _on_lines,
    _sorted,
    matches,
)


def _found(rng: np.random.Generator, references: int, per_reference: int, lines: int) -> np.ndarray:
    """`_on_lines`' input: lone collisions spread over `references`, and `lines` occurrences
    (a reference at a speed from 0.88 to 1.12, a few frames of jitter) among them."""
    rows = []
    for _ in range(references * per_reference):
        span = int(rng.integers(4, 60))
        factor = int(rng.integers(int(0.88 * FACTOR), int(1.12 * FACTOR)))
        rows.append([rng.integers(1, references + 1), rng.integers(0, 3000),
                     rng.integers(0, 1300), 0, factor, 0, span])  # fmt: skip
    for _ in range(lines):
        reference, speed = rng.integers(1, references + 1), rng.uniform(0.88, 1.12)
        start = rng.integers(-1000, 1000)
        for frame in rng.integers(0, 1300, int(rng.integers(3, 12))):
            ref_frame = int(speed * (frame - start)) + int(rng.integers(-2, 3))
            span = int(rng.integers(8, 60))
            rows.append([reference, ref_frame, frame, 0, round(speed * FACTOR), 0, span])
    found = np.array(rows, dtype=np.int64)
    found[:, 3] = found[:, 2] + found[:, 6]
    return found[rng.permutation(len(found))]


def _per_reference(found: np.ndarray) -> np.ndarray:
    """The cut as it was: a reference with `MIN_SEGMENT_HITS` matches anywhere keeps them."""
    _, inverse, counts = np.unique(found[:, 0], return_inverse=True, return_counts=True)
    kept: np.ndarray = counts[inverse.reshape(-1)] >= module.MIN_SEGMENT_HITS
    return kept


@pytest.mark.parametrize("seed", range(6))
def test_the_cut_keeps_every_match_the_vote_keeps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = _found(np.random.default_rng(seed), references=40, per_reference=12, lines=15)
    cut = _on_lines(found)
    monkeypatch.setattr(module, "_enough", _per_reference)
    np.testing.assert_array_equal(cut, _on_lines(found))
    assert len(cut) > 0


def test_lone_collisions_of_a_large_library_are_cut_before_the_vote() -> None:
    """A reference's matches far apart (in start at every speed) make no line: cut."""
    apart = [[7, 100 * i, 400 * i, 400 * i + 20, FACTOR, 0, 20] for i in range(4)]
    on_line = [[8, 50 + 10 * i, 10 * i, 10 * i + 20, FACTOR, 0, 20] for i in range(3)]
    kept = _enough(np.array(apart + on_line, dtype=np.int64))
    assert kept.tolist() == [False] * 4 + [True] * 3


@pytest.mark.parametrize("seed", range(3))
def test_large_reference_ids_give_the_same_matches(seed: int) -> None:
    """Ids too large to pack with a row's place in one number (the slower sort's path) give the
    same lines as small ones."""
    found = _found(np.random.default_rng(seed), references=40, per_reference=12, lines=15)
    far = found.copy()
    far[:, 0] += 1 << 35
    expected = _on_lines(found)
    expected[:, 0] += 1 << 35
    np.testing.assert_array_equal(_on_lines(far), expected)
    assert len(expected) > 0


def test_library_rows_in_any_order_give_the_same_matches() -> None:
    """SQLite returns rows by hash; PostgreSQL's scan need not: both are matched alike."""
    rng = np.random.default_rng(5)
    hashes = rng.integers(0, 400, 3000)
    library = np.stack([hashes, rng.integers(1, 4, 3000), rng.integers(0, 1 << 34, 3000)], 1)
    library[:, 2] = (rng.integers(0, 1300, 3000) << 24) | (800 << 8) | 20  # frame, bin, span
    query = np.stack([rng.integers(0, 400, 2000), np.arange(2000), rng.integers(0, 1300, 2000),
                      np.full(2000, 800), np.full(2000, 20)], 1)  # fmt: skip
    ordered = library[np.lexsort((library[:, 2], library[:, 1], library[:, 0]))]
    shuffled = library[rng.permutation(len(library))]
    assert len(matches(query, ordered)) > 0
    np.testing.assert_array_equal(
        np.unique(matches(query, shuffled), axis=0), np.unique(matches(query, ordered), axis=0)
    )


@pytest.mark.parametrize("high", [1 << 20, 1 << 62])
def test_sorted_is_a_stable_argsort(high: int) -> None:
    values = np.random.default_rng(1).integers(-high, high, 5000)
    values[::7] = values[0]  # ties, kept in place order
    ordered, order = _sorted(values)
    expected = np.argsort(values, kind="stable")
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(ordered, values[expected])


@pytest.mark.parametrize("least", [1, 2, 3, 5])
def test_crowded_counts_the_values_within_reach(least: int) -> None:
    ordered = np.sort(np.random.default_rng(least).integers(0, 3000, 800))
    near = np.searchsorted(ordered, ordered + 4, side="right")
    near -= np.searchsorted(ordered, ordered - 4, side="left")
    np.testing.assert_array_equal(_crowded(ordered, 4, least), near >= least)

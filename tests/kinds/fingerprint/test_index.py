"""A library held in memory (`index.HashIndex`) on both backends: the database's rows, every
change through another process or replica seen at the next lookup, and the memory limit."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from arengine.kinds.fingerprint import index as index_module
from arengine.kinds.fingerprint.index import ROW_BYTES, HashIndex
from arengine.kinds.fingerprint.references import library_of
from arengine.models.registry import load_models
from tests.kinds.fingerprint.conftest import OpenLibrary

MB = 1 << 20


def hashes_of(seed: int, n: int) -> np.ndarray:
    """`(n, 2)` rows of (hash, offset): hashes from a small range (so references share them,
    some twice in one reference), offsets past 32 bits."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, 3000, n), rng.integers(0, 1 << 40, n)], axis=1)


def same_rows(found: np.ndarray, expected: np.ndarray, held: bool = True) -> None:
    """Equal as sets of rows, and `found` sorted by hash when it came from memory."""
    assert found.dtype == np.int64 and found.shape[1:] == (3,)
    assert not held or np.all(found[1:, 0] >= found[:-1, 0])
    np.testing.assert_array_equal(
        found[np.lexsort(found.T[::-1])], expected[np.lexsort(expected.T[::-1])]
    )


def test_the_held_rows_are_the_database_s(open_library: OpenLibrary) -> None:
    library = open_library()
    marker = -(1 << 62)
    for i in range(12):
        rows = np.r_[hashes_of(i, 400), [[marker, 3], [1 << 40, 5]]]
        library.add(f"r{i}", 10.0, {}, rows)
    index = HashIndex(library, 64 * MB)
    rng = np.random.default_rng(99)
    for asked in (rng.integers(0, 3100, 900), np.arange(0, 3000, 7), np.array([5, 5, 5])):
        same_rows(index.lookup(asked), library.lookup(asked))
    wide = np.array([marker, 17, 1 << 40, 2999])  # outside int32: asked of the database
    same_rows(index.lookup(wide), library.lookup(wide))
    assert index.lookup(np.array([3001, 4000])).shape == (0, 3)
    assert index.held_bytes == 12 * 400 * ROW_BYTES  # the marker and the wide hash not held


def test_a_change_through_another_replica_is_seen_at_the_next_lookup(
    open_library: OpenLibrary,
) -> None:
    """Adds, removes, a remove and an add between two lookups, the last reference removed."""
    ours, theirs = open_library(), open_library()  # as two replicas: engines of their own
    index = HashIndex(ours, 64 * MB)
    asked = np.arange(3000)
    assert index.lookup(asked).shape == (0, 3)  # empty, and looked at before the adds
    first = theirs.add("first", 10.0, {}, hashes_of(1, 300))
    second = theirs.add("second", 10.0, {}, hashes_of(2, 300))
    same_rows(index.lookup(asked), theirs.lookup(asked))
    assert set(index.lookup(asked)[:, 1]) == {first, second}
    assert theirs.remove(first)
    third = theirs.add("third", 10.0, {}, hashes_of(3, 300))
    same_rows(index.lookup(asked), theirs.lookup(asked))
    assert set(index.lookup(asked)[:, 1]) == {second, third}
    assert theirs.remove(second) and theirs.remove(third)
    assert index.lookup(asked).shape == (0, 3) and index.held_bytes == 0


def test_threads_share_one_index_while_references_are_added(open_library: OpenLibrary) -> None:
    """Lookups from several threads while another replica adds: each answer is one version of
    the library, whole (a reference's rows all there or none)."""
    ours, theirs = open_library(), open_library()
    index = HashIndex(ours, 64 * MB)
    expected = {theirs.add("r0", 10.0, {}, hashes_of(0, 200)): hashes_of(0, 200)}
    asked = np.arange(3000)

    def look(_: int) -> dict[int, int]:
        found = index.lookup(asked)
        return {int(ref): int((found[:, 1] == ref).sum()) for ref in np.unique(found[:, 1])}

    with ThreadPoolExecutor(4) as pool:
        answers = pool.map(look, range(40))
        for i in range(1, 6):
            expected[theirs.add(f"r{i}", 10.0, {}, hashes_of(i, 200))] = hashes_of(i, 200)
        answers_after = list(answers)
    lengths = {ref: len(rows) for ref, rows in expected.items()}
    for answer in answers_after:
        assert all(count == lengths[ref] for ref, count in answer.items())
    assert look(0) == lengths


def test_a_library_over_the_limit_is_looked_up_in_the_database(
    open_library: OpenLibrary, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading stops at the limit (between batches of references), the rows held are freed, the
    answers stay right, and it says so once; a limit of 0 holds nothing."""
    monkeypatch.setattr(index_module, "LOAD_REFERENCES", 1)
    library = open_library()
    library.add("small", 10.0, {}, hashes_of(1, 100))
    index = HashIndex(library, 250 * ROW_BYTES)
    asked = np.arange(3000)
    same_rows(index.lookup(asked), library.lookup(asked))
    assert index.held_bytes == 100 * ROW_BYTES
    library.add("large", 10.0, {}, hashes_of(2, 200))
    with caplog.at_level(logging.WARNING, logger=index_module.__name__):
        same_rows(index.lookup(asked), library.lookup(asked), held=False)
        library.add("more", 10.0, {}, hashes_of(3, 10))
        same_rows(index.lookup(asked), library.lookup(asked), held=False)
    assert index.held_bytes == 0
    [warning] = [r.getMessage() for r in caplog.records]
    assert "more than 0 MB in memory" in warning and "memory_index_mb" in warning
    off = HashIndex(library, 0)
    same_rows(off.lookup(asked), library.lookup(asked), held=False)
    assert off.held_bytes == 0


def write_model(models: Path, limit: str) -> Path:
    """A fingerprint model folder as `arengine references add` makes it, its limit `limit`."""
    folder = models / "jingles"
    library_of(folder, create=True).database.dispose()
    manifest = folder / "manifest.toml"
    text = manifest.read_text()
    assert "memory_index_mb = 1024 " in text  # the folder says what it holds, and how to change it
    manifest.write_text(text.replace("memory_index_mb = 1024", f"memory_index_mb = {limit}"))
    return folder


@pytest.mark.parametrize("limit", [0, 1024, 3])
def test_a_manifest_sets_the_limit(tmp_path: Path, limit: int) -> None:
    write_model(tmp_path, str(limit))
    loaded, failures = load_models(tmp_path)
    assert failures == []
    assert loaded["jingles"].recognizer.index.max_bytes == limit * MB  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["-1", "1.5", '"big"', "true"])
def test_a_limit_that_is_not_a_whole_number_is_refused(tmp_path: Path, value: str) -> None:
    write_model(tmp_path, value)
    loaded, [failure] = load_models(tmp_path)
    assert not loaded
    assert "memory_index_mb must be a whole number >= 0" in failure.reason

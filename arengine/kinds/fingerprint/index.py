"""A fingerprint library's hashes held in memory, sorted, and kept in step with the database.

A lookup in the database probes its index once for each run of hashes a segment asks (26,000
B-tree descents into an index of 11.6 million rows at 10,000 references: about half of a
segment's time). `HashIndex` loads the library's rows once into three arrays sorted by hash
and answers the same lookup with two binary searches a run (`np.searchsorted`), then follows
every change: each lookup first asks the library's `version` (the largest reference id and the
count, one small query), and when it moved, reads the ids, drops the rows of the references
gone and merges in those of the new ones. So an add or a remove through any process or replica
is seen at the next lookup, as with the database alone.

The arrays take `ROW_BYTES` a row (about 2.2 MB an hour of reference audio at the benchmark's
density); a library larger than the model's `memory_index_mb` is looked up in the database, as
is one made when the limit is 0. Hashes outside `int32` (the scheme's marker rows) are not held:
a lookup of one goes to the database.

Readers never wait: a lookup takes the current `_Held` (immutable arrays) and searches it; the
thread that finds the version moved builds the next one under a lock (copy and merge: about 0.1 s
at 10,000 references), and the others go on with theirs or wait for it when they saw the same
change.

Example::

    index = HashIndex(Library(path), max_bytes=1 << 30)
    index.lookup(np.array([hash_a, hash_b]))  # the rows Library.lookup would give, by hash
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from arengine.kinds.fingerprint.library import Library, distinct, runs

log = logging.getLogger(__name__)

ROW_BYTES = 16
"""A held row: its hash (int32), reference (int32) and offset (int64)."""
LOAD_REFERENCES = 500
"""References read a query while loading: a few hundred thousand rows, and the limit checked
between them (a library over it stops loading early)."""
_HASH_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True, slots=True)
class _Held:
    """One version of the library in memory, never changed once made."""

    version: tuple[int, int]
    ids: np.ndarray
    """The references' ids, in order."""
    hashes: np.ndarray
    """Sorted (int32); the rows' order."""
    references: np.ndarray
    offsets: np.ndarray

    def rows(self, unique: np.ndarray) -> np.ndarray:
        """The `(m, 3)` rows of the sorted distinct `unique` hashes (all within int32), by hash."""
        first, length = runs(unique, len(unique) or 1)
        wanted = first.astype(np.int32)
        lo = np.searchsorted(self.hashes, wanted, side="left")
        hi = np.searchsorted(self.hashes, (first + length - 1).astype(np.int32), side="right")
        counts = hi - lo
        starts = np.cumsum(counts) - counts
        taken = np.repeat(lo - starts, counts) + np.arange(int(counts.sum()))
        found = np.empty((len(taken), 3), dtype=np.int64)
        found[:, 0], found[:, 1], found[:, 2] = (
            self.hashes[taken], self.references[taken], self.offsets[taken],
        )  # fmt: skip
        return found

    @property
    def nbytes(self) -> int:
        return len(self.hashes) * ROW_BYTES


EMPTY = _Held(
    (0, 0),
    np.empty(0, dtype=np.int64),
    np.empty(0, dtype=np.int32),
    np.empty(0, dtype=np.int32),
    np.empty(0, dtype=np.int64),
)


class HashIndex:
    """`library`'s rows in memory while they take at most `max_bytes`; `lookup` as the library's."""

    def __init__(self, library: Library, max_bytes: int) -> None:
        self.library = library
        self.max_bytes = max_bytes
        self._held: _Held | None = None
        """The current version; None before the first lookup."""
        self._too_large = max_bytes <= 0
        """Looked up in the database from then on: the library outgrew `max_bytes` once."""
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """What the held rows take now (0 when the library is looked up in the database)."""
        held = self._held
        return held.nbytes if held is not None else 0

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The stored `(m, 3)` int64 rows of (hash, reference, offset) for any of `hashes`:
        `Library.lookup`'s rows, from memory (sorted by hash) where the library fits."""
        held = None if self._too_large else self._current()
        if held is None:
            return self.library.lookup(hashes)
        unique = distinct(hashes)
        inside = (unique >= 0) & (unique <= _HASH_MAX)
        found = held.rows(unique[inside])
        if inside.all():
            return found
        rest = self.library.lookup(unique[~inside])
        below = rest[:, 0] < 0
        return np.concatenate([rest[below], found, rest[~below]])

    def _current(self) -> _Held | None:
        """The held rows at the library's version now (None: too large to hold)."""
        version = self.library.version()
        held = self._held
        if held is not None and held.version == version:
            return held
        with self._lock:
            held = self._held
            if (held is not None and held.version == version) or self._too_large:
                return held
            self._held = held = self._updated(held or EMPTY)
            return held

    def _updated(self, held: _Held) -> _Held | None:
        """`held` brought to the library as it is now: rows of references gone dropped, those of
        new ones merged in by hash."""
        started = time.perf_counter()
        ids = self.library.ids()
        version = (int(ids[-1]) if len(ids) else 0, len(ids))
        added = np.setdiff1d(ids, held.ids, assume_unique=True)
        gone = np.setdiff1d(held.ids, ids, assume_unique=True)
        kept = np.ones(len(held.hashes), dtype=bool)
        if len(gone):
            kept = ~np.isin(held.references, gone)
        loaded, room = [], self.max_bytes // ROW_BYTES - int(kept.sum())
        for start in range(0, len(added), LOAD_REFERENCES):
            rows = self.library.rows_of(added[start : start + LOAD_REFERENCES])
            rows = rows[(rows[:, 0] >= 0) & (rows[:, 0] <= _HASH_MAX)]
            room -= len(rows)
            if room < 0:
                self._give_up()
                return None
            loaded.append(rows)
        new = np.concatenate(loaded) if loaded else np.empty((0, 3), dtype=np.int64)
        order = _by_hash(new)
        wide = np.int32 if version[0] <= _HASH_MAX else np.int64  # ids beyond int32: rare
        hashes, references, offsets = (
            new[order, 0].astype(np.int32), new[order, 1].astype(wide), new[order, 2],
        )  # fmt: skip
        if len(held.hashes):  # the new rows inserted at their hashes' places, after equal ones
            base = held.hashes[kept]
            at = np.searchsorted(base, hashes, side="right")
            hashes, references, offsets = (
                np.insert(base, at, hashes),
                np.insert(held.references[kept].astype(wide), at, references),
                np.insert(held.offsets[kept], at, offsets),
            )
        merged = _Held(version, ids, hashes, references, offsets)
        log.log(
            logging.INFO if held is EMPTY else logging.DEBUG,
            "fingerprint library %s in memory: %d references, %d rows (%.0f MB); "
            "%d added, %d removed in %.2f s",
            self.library.where, len(ids), len(merged.hashes), merged.nbytes / 1e6, len(added),
            len(gone), time.perf_counter() - started,
        )  # fmt: skip
        return merged

    def _give_up(self) -> None:
        """Hold nothing from now on: the library takes more than `max_bytes`."""
        log.warning(
            "fingerprint library %s takes more than %d MB in memory: looked up in the database "
            "from now on (the model's [model] memory_index_mb sets the limit)",
            self.library.where, self.max_bytes >> 20,
        )  # fmt: skip
        self._too_large = True


def _by_hash(rows: np.ndarray) -> np.ndarray:
    """The order of `rows` by hash, rows of one hash in their order (the database's: by
    reference): a sort of the hash with the row's place in the low 32 bits, a third of an
    argsort's time (4 s of lexsort for 11.6 million rows)."""
    if len(rows) >= 1 << 32:
        return np.argsort(rows[:, 0], kind="stable")
    keyed = np.sort((rows[:, 0] << 32) | np.arange(len(rows)))
    order: np.ndarray = keyed & 0xFFFFFFFF
    return order

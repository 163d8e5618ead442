"""Reference libraries on SQLite and on PostgreSQL side by side: matching speed and size.

    python -m loadtests.references_db                       # 200 references: a quick look
    python -m loadtests.references_db --references 10000    # the issue's measurement
    python -m loadtests.references_db --postgresql postgresql://USER@HOST/DB   # an empty database

The same N references of 30 s go into a model folder's SQLite file and into the shared tables of
a PostgreSQL database (a throwaway cluster started by `tests/postgres.py` unless `--postgresql`
names one; its settings are the tests': no fsync, so adds there are faster than on a real
server). Each backend then answers the same 2-minute recording holding four 20-s excerpts under
noise (5 dB SNR) on one thread (best of three), through the recognizer as the engine runs it
(features, lookup, tagging), twice in turn: with the library queried in the database every
segment (`queried`, `memory_index_mb = 0`) and held in memory as a server holds it (`held`,
`index.py`; `load s` is its first recognition, the library's load included): matching speed in
x real time per core, recall (queried, then held), and the rows a
30-s segment's lookup reads and the distinct hashes it asks for (the means; they do not depend on
the machine's load). Size is the
SQLite file (after a checkpoint) and the PostgreSQL tables with their indexes (after `VACUUM
ANALYZE`, as autovacuum leaves them), per hour of reference audio, and what the held library
takes in memory per hour.

Fingerprinting 10,000 references would take most of an hour on one core, and the storage is
what is measured here: `--distinct` references (random notes, `loadtests/fingerprint.py`) are
fingerprinted, and the others are copies of them with six bits of their triplet hashes XORed
with the copy's number (`moved_bits`: the low three bits of each partner's distance in bins from
the anchor), so that each copy has its own hashes with the same frequencies (the lookups' hit
rates stay those of music-like references). Hash scheme 2's copies had the hash's low six bits
moved (its time ratio and one distance); scheme 3 asks a ratio's neighbouring levels, which
would find a copy moved there by its original's query.
The machine's load average is printed with each line: its other users share the cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from arengine.audio.segments import Segmenter
from arengine.db.engine import open_engine
from arengine.db.migrate import upgrade
from arengine.db.url import parse
from arengine.kinds.fingerprint.landmarks import (
    RATIO_BITS,
    SCHEME_HASH,
    fingerprint,
    landmark_span,
)
from arengine.kinds.fingerprint.library import SHARED, Library, distinct
from arengine.kinds.fingerprint.recognizer import WEAK_QUERY, FingerprintRecognizer
from loadtests.fingerprint import found, library_bytes, recognize, synthetic
from tests.fingerprints import Placed, mix

SECONDS = 30.0
"""Each reference's length."""
QUERY_S = 120.0


def fingerprinted(distinct: int) -> list[np.ndarray]:
    """The hashes of `distinct` synthetic references."""
    return [fingerprint(synthetic(i, SECONDS)) for i in range(distinct)]


def references(base: list[np.ndarray], count: int) -> Iterator[np.ndarray]:
    """`count` references' `(n, 2)` hashes: those of `base`, then copies of them."""
    for i in range(count):
        copy, hashes = divmod(i, len(base))
        if copy == 0:
            yield base[hashes]
            continue
        moved = base[hashes].copy()
        triplets = moved[:, 0] != SCHEME_HASH  # the scheme's marker stays as it is
        moved[triplets, 0] ^= moved_bits(copy)  # other hashes, as another recording's would be
        yield moved


def moved_bits(copy: int) -> int:
    """What a copy's triplet hashes are XORed with: its number's six low bits spread over the
    low three bits of the two partners' distances in bins (`landmarks.hashed`: the shape above
    the ratio's `RATIO_BITS`). A query asks for those exactly, so a copy's hash is another
    recording's; the ratio's level, the band and the span class it also asks neighbours of, so
    a copy moved there would be found by its original's query, as no other recording is."""
    low = copy % 64
    return ((low & 7) | (low >> 3) << 6) << RATIO_BITS


def fill(library: Library, base: list[np.ndarray], count: int) -> float:
    """Store the references; seconds it took (no fingerprinting: that is the same everywhere)."""
    started = time.perf_counter()
    for i, hashes in enumerate(references(base, count)):
        library.add(f"ref {i}", SECONDS, {}, hashes, landmark_span(hashes))
    return time.perf_counter() - started


def sqlite_megabytes(library: Library) -> float:
    return library_bytes(library.path) / 1e6


def postgresql_megabytes(database: sa.Engine) -> float:
    with database.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        total = 0
        for table in SHARED.tables:
            connection.exec_driver_sql(f"VACUUM ANALYZE {table}")
            query = sa.text("SELECT pg_total_relation_size(:t)")
            total += int(connection.execute(query, {"t": table}).scalar_one())
    return total / 1e6


def measure(
    name: str, library: Library, base: list[np.ndarray], count: int, megabytes: Callable[[], float]
) -> None:
    stored_s = fill(library, base, count)
    chosen = np.random.default_rng(count).choice(len(base), 4, replace=False)
    pieces = [synthetic(i, SECONDS) if i in chosen else np.zeros(1) for i in range(max(chosen) + 1)]
    placed = [Placed(int(i), 5.0 + 28.0 * n, 5.0, 25.0) for n, i in enumerate(chosen)]
    recording = mix(QUERY_S, pieces, placed, snr_db=5.0, seed=count)
    started = time.perf_counter()
    held = FingerprintRecognizer(library, segment_s=30.0)
    recognize(held, recording)  # loads the library into memory; warms the caches
    load_s = time.perf_counter() - started
    queried = FingerprintRecognizer(library, segment_s=30.0, memory_index_mb=0)
    recognize(queried, recording)  # warms the connections
    best = {held: float("inf"), queried: float("inf")}
    hits = {}
    for _ in range(3):  # best of three, in turn: the cores are shared
        for recognizer in best:
            started = time.perf_counter()
            tags = recognize(recognizer, recording)
            best[recognizer] = min(best[recognizer], time.perf_counter() - started)
            hits[recognizer] = found(tags, placed, [20.0] * len(placed))
    rows, asked = segment_rows(queried, recording)
    size = megabytes()
    audio_h = count * SECONDS / 3600
    print(
        f"{name:10}  {count:6d}  {audio_h:7.1f}  {count * SECONDS / stored_s:10.0f}  "
        f"{QUERY_S / best[queried]:11.0f}  {QUERY_S / best[held]:9.0f}  {load_s:6.1f}  "
        f"{hits[queried]}/{len(placed)} {hits[held]}/{len(placed):<2}  {rows:9.0f}  {asked:10.0f}  "
        f"{size / audio_h:8.1f}  {held.index.held_bytes / 1e6 / audio_h:7.1f}  "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )


def segment_rows(recognizer: FingerprintRecognizer, recording: np.ndarray) -> tuple[float, float]:
    """The rows a segment's lookup reads and the distinct hashes it asks for, on average over
    the recording's segments."""
    counts = []
    for segment in Segmenter(iter([recording]), recognizer.plan):
        hashes = recognizer.features(segment).numpy()[:, 0]
        hashes = hashes[hashes != WEAK_QUERY]  # the weak peaks' rows ask nothing
        counts.append((len(recognizer.library.lookup(hashes)), len(distinct(hashes))))
    rows, asked = np.mean(counts, axis=0)
    return float(rows), float(asked)


@contextmanager
def postgresql(url: str | None) -> Iterator[str]:
    """The database to fill: `url`, or one made on a throwaway cluster."""
    if url is not None:
        yield url
        return
    from tests.postgres import running_postgresql

    with running_postgresql() as server:
        yield server.database()


def shared_database(url: str) -> sa.Engine:
    """An engine on `url` with the references' tables made."""
    engine = open_engine(parse(url))
    upgrade(engine)
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--references", type=int, default=200, help="references in each library")
    parser.add_argument("--distinct", type=int, default=500, help="fingerprinted; others copies")
    parser.add_argument("--postgresql", help="an empty database's URL (default: a throwaway one)")
    parser.add_argument("--out", type=Path, help="where the SQLite file goes (default: a temp dir)")
    options = parser.parse_args()
    count, distinct = options.references, min(options.distinct, options.references)
    print(f"CPU: {_cpu()}; {count} references of {SECONDS:.0f} s ({distinct} fingerprinted)")
    base = fingerprinted(distinct)
    print(
        "backend       refs  audio h  store x RT  queried xRT  held x RT  load s  recall    "
        "rows/seg  hashes/seg   MB per h  held MB/h  load avg"
    )
    with tempfile.TemporaryDirectory() as scratch:
        folder = options.out or Path(scratch)
        path = folder / "jingles" / "library.sqlite"
        path.unlink(missing_ok=True)
        library = Library.create(path)
        measure("sqlite", library, base, count, lambda: sqlite_megabytes(library))
        library.database.dispose()
        with postgresql(options.postgresql) as url:
            database = shared_database(url)
            shared = Library.shared(database, "jingles")
            measure("postgresql", shared, base, count, lambda: postgresql_megabytes(database))
            database.dispose()


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    return f"{os.cpu_count()} CPUs"


if __name__ == "__main__":
    main()

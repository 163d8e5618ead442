"""The fingerprint kind on real audio: FluidR3 pieces as references, found inside longer noisy
recordings at the right times; the SQLite library durable and seen live."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from arengine.audio.segments import Segment, Segmenter
from arengine.kinds.fingerprint.fields import REFERENCE, REFERENCE_END, REFERENCE_START
from arengine.kinds.fingerprint.landmarks import (
    CHUNK_FRAMES,
    HOP,
    PEAK_BINS,
    PEAK_FRAMES,
    SAMPLE_RATE,
    add_recording,
    fingerprint,
    fingerprint_blocks,
    running_max,
)
from arengine.kinds.fingerprint.library import Library, metadata_depth
from arengine.kinds.fingerprint.recognizer import (
    WEAK_QUERY,
    FingerprintRecognizer,
    reference_anchors,
)
from arengine.kinds.fingerprint.tagger import PEAK, WEAK
from arengine.types import Tag
from tests.fingerprints import Placed, mix, piece
from tests.recordings import speak


@pytest.fixture(scope="module")
def pieces(tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """Four references, then a fifth piece that is in no library."""
    folder = tmp_path_factory.mktemp("pieces")
    return [piece(seed, folder) for seed in range(5)]


def _library(path: Path, pieces: list[np.ndarray]) -> Library:
    library = Library.create(path)
    for i, samples in enumerate(pieces):
        add_recording(library, f"piece {i}", samples, {"seed": i})
    return library


@pytest.fixture(scope="module")
def library(pieces: list[np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> Library:
    return _library(tmp_path_factory.mktemp("library") / "library.sqlite", pieces[:4])


def recognize(recognizer: FingerprintRecognizer, samples: np.ndarray) -> list[Tag]:
    """The engine's path for one recording: segments in order, features, infer, tagger."""
    blocks = iter([samples[i : i + 4096] for i in range(0, len(samples), 4096)])
    tagger = recognizer.tagger({})
    tags: list[Tag] = []
    for segment in Segmenter(blocks, recognizer.plan):
        tags += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    return tags + tagger.finish(len(samples))


def _assert_found(tags: list[Tag], placed: list[Placed]) -> None:
    """One tag per placement, in order, its times and reference offsets within 0.5 s."""
    assert len(tags) == len(placed), tags
    for tag, item in zip(tags, placed, strict=True):
        assert tag.label == f"piece {item.index}"
        assert REFERENCE.of(tag) == str(item.index + 1)
        assert abs(tag.start - item.at) <= 0.5, (tag, item)
        assert abs(tag.end - item.end) <= 0.5, (tag, item)
        assert REFERENCE_START.of(tag) is not None and REFERENCE_END.of(tag) is not None
        assert abs(REFERENCE_START.at(tag) - item.ref_start) <= 0.5, (tag, item)
        assert abs(REFERENCE_END.at(tag) - item.ref_end) <= 0.5, (tag, item)
        assert 0.0 < tag.score <= 1.0


def test_references_are_found_where_they_are_played(
    library: Library, pieces: list[np.ndarray]
) -> None:
    """Repeated, back to back, an excerpt, across 10-s segment boundaries, under noise at 5 dB
    SNR; the piece that is not in the library gives nothing."""
    placed = [
        Placed(0, 2.7, 0.0, 10.0),
        Placed(1, 12.7, 0.0, 10.0),  # back to back with the first
        Placed(2, 22.7, 0.0, 10.0),  # straight after, across the 30-s boundary
        Placed(0, 37.7, 0.0, 10.0),  # the first again
        Placed(3, 55.3, 3.0, 8.0),  # an excerpt across the 60-s boundary
    ]
    recording = mix(90.0, pieces, [*placed, Placed(4, 70.0, 0.0, 10.0)], snr_db=5.0)
    recognizer = FingerprintRecognizer(library.path, segment_s=10.0)
    _assert_found(recognize(recognizer, recording), placed)


def test_segment_length_does_not_change_what_is_found(
    library: Library, pieces: list[np.ndarray]
) -> None:
    placed = [Placed(2, 4.1, 0.0, 10.0), Placed(1, 19.9, 2.0, 10.0)]
    recording = mix(32.0, pieces, placed, snr_db=10.0, seed=3)
    found = [
        recognize(FingerprintRecognizer(library.path, segment_s=seconds), recording)
        for seconds in (3.0, 7.0, 60.0)
    ]
    assert found[0] == found[1] == found[2]
    _assert_found(found[0], placed)


def test_unrelated_audio_gives_no_tag(
    library: Library, pieces: list[np.ndarray], tmp_path: Path
) -> None:
    speech, rate = speak("The next train to Edinburgh leaves from platform four.", tmp_path)
    voice = np.interp(
        np.arange(round(len(speech) * SAMPLE_RATE / rate)) * rate / SAMPLE_RATE,
        np.arange(len(speech)),
        speech,
    ).astype(np.float32)
    recording = mix(40.0, pieces, [Placed(4, 5.0, 0.0, 10.0)], snr_db=20.0)
    recording[20 * SAMPLE_RATE : 20 * SAMPLE_RATE + len(voice)] += voice
    recognizer = FingerprintRecognizer(library.path, segment_s=10.0)
    assert recognize(recognizer, recording) == []


def test_a_reference_added_or_removed_is_seen_by_the_next_recording(
    pieces: list[np.ndarray], tmp_path: Path
) -> None:
    """No reload: the recognizer reads the library as it is at every segment."""
    library = _library(tmp_path / "library.sqlite", pieces[:1])
    recognizer = FingerprintRecognizer(library.path, segment_s=10.0)
    placed = [Placed(3, 6.0, 0.0, 10.0)]
    recording = mix(20.0, pieces, placed, snr_db=10.0)
    assert recognize(recognizer, recording) == []
    other = Library(library.path)  # as another process would: its own connection
    added = add_recording(other, "piece 3", pieces[3], {})
    [tag] = recognize(recognizer, recording)
    assert (tag.label, REFERENCE.of(tag)) == ("piece 3", str(added))
    assert other.remove(added)
    assert recognize(recognizer, recording) == []


def test_offsets_never_wrap_on_long_recordings(library: Library, pieces: list[np.ndarray]) -> None:
    """A segment 30 hours into a recording: the tag is there, not at a wrapped-around time
    (audfprint's offsets alias after about 6 minutes unless widened)."""
    recognizer = FingerprintRecognizer(library.path, segment_s=30.0)
    first = 30 * 3600 * SAMPLE_RATE // HOP
    samples = mix(16.0, pieces, [Placed(1, 1.0, 0.0, 10.0)], snr_db=10.0)
    segment = Segment(0, first, 0, (len(samples) - 5000) // HOP, samples)
    tagger = recognizer.tagger({})
    tags = tagger.push(recognizer.infer(recognizer.features(segment), segment))
    [tag] = tags + tagger.finish(0)
    assert abs(tag.start - (30 * 3600 + 1.0)) <= 0.5
    assert REFERENCE_START.of(tag) == 0.0


def test_threads_share_one_recognizer(library: Library, pieces: list[np.ndarray]) -> None:
    """Each thread opens its own SQLite connection; results equal the serial ones."""
    recognizer = FingerprintRecognizer(library.path, segment_s=5.0)
    recording = mix(40.0, pieces, [Placed(0, 3.0, 0.0, 10.0), Placed(2, 21.0, 0.0, 10.0)], 5.0)
    segments = list(Segmenter(iter([recording]), recognizer.plan))

    def run(segment: Segment) -> np.ndarray:
        return recognizer.infer(recognizer.features(segment), segment)

    serial = [run(segment) for segment in segments]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(run, segments * 3))
    for i, result in enumerate(parallel):
        np.testing.assert_array_equal(result, serial[i % len(segments)])


ADDER = """
import sys
from pathlib import Path
import numpy as np
from arengine.kinds.fingerprint.library import Library

library = Library(Path(sys.argv[1]))
hashes = np.stack([np.arange(200_000) * 7919 % (1 << 21), np.arange(200_000)], axis=1)
while True:
    print(library.add("big", 3600.0, {}, hashes), flush=True)
"""


def test_a_killed_add_loses_nothing_acknowledged_and_corrupts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "library.sqlite"
    Library.create(path)
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    adder = subprocess.Popen(
        [sys.executable, "-c", ADDER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert adder.stdout is not None
    acknowledged = [int(adder.stdout.readline()) for _ in range(3)]
    adder.send_signal(signal.SIGKILL)  # most likely in the middle of the fourth add
    adder.wait()
    adder.stdout.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        counts = dict(
            connection.execute("SELECT reference, COUNT(*) FROM hashes GROUP BY reference")
        )
    library = Library(path)
    ids = [ref.id for ref in library.references()]
    assert ids[:3] == acknowledged
    assert all(counts[ref] == 200_000 for ref in ids)  # every reference whole, none half


def test_the_library_keeps_offsets_whole(tmp_path: Path) -> None:
    library = Library.create(tmp_path / "library.sqlite")
    ref = library.add("long", 1e6, {"a": [1, 2]}, np.array([[5, 5_000_000_000]]))
    np.testing.assert_array_equal(library.lookup(np.array([5, 6])), [[5, ref, 5_000_000_000]])
    [found] = library.references()
    assert (found.title, found.duration_s, found.metadata) == ("long", 1e6, {"a": [1, 2]})


def test_metadata_nested_too_deep_to_answer_does_not_break_the_listing(tmp_path: Path) -> None:
    """Metadata stored nested 300 deep (answering it failed: every listing of the library gave
    500) or 5,000 deep (not even read back): that reference lists with `{}`, the others whole."""
    library = Library.create(tmp_path / "library.sqlite")
    kept = library.add("kept", 1.0, {"a": {"b": [1]}}, np.array([[1, 1]]))
    for depth in (300, 5000):
        ref = library.add(f"deep{depth}", 1.0, {}, np.array([[2, 2]]))
        deep = '{"a": ' + "[" * depth + "]" * depth + "}"
        with library.database.begin() as connection:
            connection.exec_driver_sql(
                "UPDATE references_ SET metadata = ? WHERE id = ?", (deep, ref)
            )
    listed = {found.title: found.metadata for found in library.references()}
    assert listed == {"kept": {"a": {"b": [1]}}, "deep300": {}, "deep5000": {}}
    found = library.reference(kept)
    assert found is not None and found.metadata == {"a": {"b": [1]}}


def test_metadata_depth_counts_levels_without_recursion() -> None:
    assert [metadata_depth(v) for v in (1, "x", {}, {"a": 1}, {"a": [1, {"b": []}]})] == [
        0, 0, 1, 1, 4
    ]  # fmt: skip
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert metadata_depth({"a": deep}) == 100_002


def test_running_max_is_the_maximum_of_the_whole_window() -> None:
    """The doubling spans equal a 25x17 max pool (the definition of a peak's neighbourhood)."""
    level = torch.from_numpy(
        np.random.default_rng(4).standard_normal((257, 300)).astype(np.float32)
    )
    pooled = torch.nn.functional.max_pool2d(
        level[None, None], (2 * PEAK_BINS + 1, 2 * PEAK_FRAMES + 1), stride=1,
        padding=(PEAK_BINS, PEAK_FRAMES),
    )[0, 0]  # fmt: skip
    ours = running_max(running_max(level.numpy(), PEAK_FRAMES, axis=1), PEAK_BINS, axis=0)
    np.testing.assert_array_equal(ours, pooled.numpy())


def test_a_reference_streamed_in_blocks_has_the_hashes_of_the_whole(
    pieces: list[np.ndarray],
) -> None:
    """Fingerprinting as decoded blocks arrive (bounded memory) changes no hash, whatever the
    blocks' sizes, across chunk boundaries too."""
    recording = np.concatenate(pieces * 4)  # 200 s: three chunks of CHUNK_FRAMES
    whole = fingerprint(recording)
    assert whole[-1, 1] > 2 * CHUNK_FRAMES
    for size in (4096, 100_003, len(recording)):
        blocks = [recording[i : i + size] for i in range(0, len(recording), size)]
        hashes, samples = fingerprint_blocks(blocks)
        np.testing.assert_array_equal(hashes, whole)
        assert samples == len(recording)


def test_a_lookup_reads_only_the_hash_index(tmp_path: Path) -> None:
    """The index holds every column a lookup returns: SQLite never visits the table's rows
    (twice as fast against a large library, BENCHMARKS.md)."""
    library = Library.create(tmp_path / "library.sqlite")
    with library.connection() as connection:
        plan = connection.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT hash, reference, offset FROM hashes WHERE hash IN (1, 2)"
        ).all()
    assert "COVERING INDEX hashes_by_hash" in " ".join(str(row) for row in plan)


def test_a_segment_says_where_its_peaks_are_and_a_reference_where_its_anchors_are(
    library: Library, pieces: list[np.ndarray]
) -> None:
    """What the tagger places an occurrence's edges with: each anchor of the recording once, as
    (PEAK, bin in quarters, frame, frame), its weak peaks the same way (WEAK), and a reference's
    anchors (frame, bin in quarters), those of a piece played from its start at the same
    frames."""
    recognizer = FingerprintRecognizer(library, segment_s=30.0)
    samples = np.r_[pieces[1], np.zeros(SAMPLE_RATE, dtype=np.float32)]
    [segment] = list(Segmenter(iter([samples]), recognizer.plan))
    features = recognizer.features(segment)
    rows = recognizer.infer(features, segment)
    peaks = rows[rows[:, 0] == PEAK]
    query = features.numpy()
    query = query[query[:, 0] != WEAK_QUERY]
    assert len(peaks) == len({(f, q) for f, q in query[:, 2:4].tolist()})
    np.testing.assert_array_equal(peaks[:, 2], peaks[:, 3])
    heard = {(f, q) for q, f in peaks[:, 1:3].tolist()}
    weak = rows[rows[:, 0] == WEAK]  # the maxima of a smaller neighbourhood: each anchor too
    assert len(weak) > 2 * len(peaks) and heard < {(f, q) for q, f in weak[:, 1:3].tolist()}
    assert weak[:, 2].min() >= 0 and weak[:, 2].max() < segment.frames
    anchors = reference_anchors(library, 2)  # piece 1
    assert np.all(np.diff(anchors[:, 0]) >= 0) and len(anchors) > 100
    assert len(heard & {(f, q) for f, q in anchors.tolist()}) > 0.9 * len(anchors)
    assert reference_anchors(library, 99).shape == (0, 2)

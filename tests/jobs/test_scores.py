"""A job's kept scores on disk: exact arrays in any order, a record cut short by a crash, a plan
that changed, what new parameters read back, palette codes, and logs of the first format."""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from pathlib import Path

import numpy as np

from arengine.jobs.scores import ModelPlan, ScoreLog
from arengine.postprocess.palette import Palette

PLAN = (
    ModelPlan("speech", "speech", 16000, {"hop": 512, "segment_frames": 937}),
    ModelPlan("notes", "notes", 22050, {"hop": 256, "segment_frames": 2584}),
)


def _scores(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_scores_come_back_exactly_in_any_order_and_a_torn_record_is_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "job.scores"
    log = ScoreLog.open(path, PLAN)
    for segment in (1, 0, 3):
        log.keep(0, segment, _scores(segment, (937,)))
    log.keep(1, 0, _scores(10, (2584, 440)))
    log.close()
    size = path.stat().st_size
    with path.open("ab") as file:  # a crash in the middle of the next record
        file.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    again = ScoreLog.open(path, PLAN)
    assert path.stat().st_size == size, "the torn record is cut off"
    assert list(again.kept(0)) == [0, 1, 3] and 2 not in again.kept(0)
    for segment in (0, 1, 3):
        assert np.array_equal(again.kept(0)[segment], _scores(segment, (937,)))
    assert np.array_equal(again.kept(1)[0], _scores(10, (2584, 440)))
    again.keep(0, 2, _scores(2, (937,)))
    again.end(0, 4 * 937 * 512)
    again.close()
    with ScoreLog.reading(path) as (plan, kept):
        assert plan == PLAN and kept is None, "notes has not ended"
    last = ScoreLog.open(path, PLAN)
    last.end(1, 2584 * 256)
    last.close()
    with ScoreLog.reading(path) as (plan, kept):
        assert kept is not None
        speech, notes = kept
        assert [a.tolist() for a in speech.scores] == [
            _scores(i, (937,)).tolist() for i in range(4)
        ]
        assert speech.total_samples == 4 * 937 * 512 and len(notes.scores) == 1


def test_a_log_of_another_plan_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "job.scores"
    log = ScoreLog.open(path, PLAN)
    log.keep(0, 0, _scores(0, (937,)))
    log.close()
    other = (PLAN[0], ModelPlan("notes", "notes", 22050, {"hop": 256, "segment_frames": 1292}))
    fresh = ScoreLog.open(path, other)
    assert len(fresh.kept(0)) == 0 and fresh.plan == other
    fresh.close()
    reopened = ScoreLog.open(path, other)
    assert len(reopened.kept(0)) == 0
    reopened.close()


def _first_format_file(path: Path, scores: list[np.ndarray], total: int) -> None:
    """A log as the first format wrote it: no codec named, byte planes and zlib."""

    def record(header: dict[str, object], body: bytes = b"") -> bytes:
        payload = json.dumps(header).encode() + b"\n" + body
        return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload

    plan = [dataclasses.asdict(PLAN[0])]
    records = [record({"plan": plan})]
    for segment, array in enumerate(scores):
        planes = array.reshape(-1).view(np.uint8).reshape(-1, 4).T.tobytes()
        header = {"m": 0, "s": segment, "dtype": "<f4", "shape": list(array.shape)}
        records.append(record(header, zlib.compress(planes, 6)))
    path.write_bytes(b"".join(records) + record({"m": 0, "end": total}))


def test_a_log_of_the_first_format_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "old.scores"
    arrays = [_scores(segment, (937,)) for segment in range(3)]
    _first_format_file(path, arrays, 3 * 937 * 512)
    with ScoreLog.reading(path) as (plan, kept):
        assert plan == PLAN[:1] and kept is not None
        assert [a.tobytes() for a in kept[0].scores] == [a.tobytes() for a in arrays]
        joined = kept[0].joined()
        assert isinstance(joined, np.ndarray)
        assert joined.tobytes() == np.concatenate(arrays).tobytes()


def test_few_distinct_values_are_kept_as_palette_codes_exactly(tmp_path: Path) -> None:
    """The events model's scores take few values: a byte each, compared as codes; joined
    segments share one palette; what a palette cannot hold exactly is kept as it is."""
    rng = np.random.default_rng(0)
    levels = np.linspace(0, 1, 32, dtype=np.float32)
    segments = [rng.choice(levels[: 20 + 4 * i], (64, 521)) for i in range(3)]
    signed_zero = np.array([[0.0, -0.0], [0.5, 0.0]], np.float32)
    path = tmp_path / "events.scores"
    plan = (ModelPlan("events", "events", 16000, {"hop": 7680}),)
    log = ScoreLog.open(path, plan)
    for segment, array in enumerate([*segments, np.zeros((0, 521), np.float32)]):
        log.keep(0, segment, array)
    log.end(0, 3 * 64 * 7680)
    log.close()
    assert path.stat().st_size < sum(a.size for a in segments), "at most a byte a score"
    with ScoreLog.reading(path) as (_, kept):
        assert kept is not None
        assert [a.tobytes() for a in kept[0].scores[:3]] == [a.tobytes() for a in segments]
        joined = kept[0].joined()
        assert isinstance(joined, Palette) and len(joined.values) == 28
        assert joined.decode().tobytes() == np.concatenate(segments).tobytes()
    other = tmp_path / "signed.scores"
    log = ScoreLog.open(other, plan)
    log.keep(0, 0, signed_zero)
    log.close()
    again = ScoreLog.open(other, plan)
    assert again.kept(0)[0].tobytes() == signed_zero.tobytes(), "-0.0 stays -0.0"
    again.close()


def test_a_notes_contour_is_kept_apart_and_read_only_when_asked(tmp_path: Path) -> None:
    """Notes rows are kept in two parts: every column comes back exactly, and the first
    columns alone (what new parameters without pitch bends read) without the contour."""
    path = tmp_path / "notes.scores"
    log = ScoreLog.open(path, PLAN)
    arrays = [_scores(segment, (300, 440)) for segment in range(2)]
    for segment, array in enumerate(arrays):
        log.keep(1, segment, array)
    log.end(1, 600 * 256)
    log.keep(0, 0, _scores(9, (937,)))
    log.end(0, 937 * 512)
    log.close()
    with ScoreLog.reading(path) as (_, kept):
        assert kept is not None
        notes = kept[1]
        assert [a.tobytes() for a in notes.scores] == [a.tobytes() for a in arrays]
        first = notes.first_columns(176)
        assert [a.shape for a in first] == [(300, 176)] * 2
        assert [a.tobytes() for a in first] == [a[:, :176].tobytes() for a in arrays]
        assert [a.tobytes() for a in notes.first_columns(200)] == [
            a[:, :200].tobytes() for a in arrays
        ]

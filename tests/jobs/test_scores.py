"""A job's kept scores on disk: exact arrays in any order, a record cut short by a crash, a plan
that changed, and what new parameters read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arengine.jobs.scores import ModelPlan, ScoreLog

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

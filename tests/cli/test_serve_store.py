"""`arengine serve` on a job store it cannot open: one line that names the file and what to do,
and a nonzero exit, not a traceback from the application's start."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arengine.jobs.store import DATABASE, JobRecord, JobState, JobStore, StoreUnusable, new_job_id


def _damaged(folder: Path, damage: str) -> Path:
    database = folder / DATABASE
    if damage == "random":
        database.write_bytes(random.Random(5).randbytes(8192))
        return database
    store = JobStore.open(folder)  # a real store with rows, then cut short after its header
    for _ in range(200):
        record = JobRecord(
            new_job_id(), None, "speech", {}, None, "a.wav", JobState.QUEUED, 0.0, None, None,
            time.time(), None, None,
        )  # fmt: skip
        assert store.add(record, limit=1000)
    store.close()
    database.write_bytes(database.read_bytes()[:6000])
    return database


@pytest.mark.parametrize("damage", ["random", "truncated"])
def test_a_damaged_job_store_cannot_be_opened_and_says_what_to_do(
    tmp_path: Path, damage: str
) -> None:
    database = _damaged(tmp_path, damage)
    with pytest.raises(StoreUnusable) as refused:
        JobStore.open(tmp_path)
    assert str(database) in str(refused.value) and "move it aside" in str(refused.value)


@pytest.mark.slow  # a process of its own
def test_a_damaged_job_store_stops_the_server_with_one_clear_line(tmp_path: Path) -> None:
    database = _damaged(tmp_path, "random")
    done = subprocess.run(
        [sys.executable, "-m", "arengine", "serve", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(database) in lines[0] and "move it aside" in lines[0]

"""Spooling uploads: a full disk, slow bodies (pace, deadline, rate) and truncated multipart."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arengine.engine.admission import Admission
from arengine.errors import ArengineError, ErrorCode, InsufficientStorage
from arengine.http.uploads import UploadLimits, UploadPace, spool
from arengine.settings import MAX_FIELD_BYTES, MAX_MULTIPART_PARTS

LIMITS = UploadLimits(max_bytes=10**6)


def _pace(**given: float) -> UploadPace:
    settings = {"idle_timeout_s": 5.0, "deadline": time.monotonic() + 60, **given}
    return UploadPace(**settings)  # type: ignore[arg-type]


async def _body() -> AsyncIterator[bytes]:
    for _ in range(4):
        yield b"x" * 1000


class _FullDisk:
    def __init__(self, fd: int, mode: str) -> None:
        os.close(fd)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_a_507_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fdopen", _FullDisk)
    with pytest.raises(InsufficientStorage, match="full"):
        asyncio.run(spool(_body(), "audio/wav", LIMITS, tmp_path, _pace()))
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_directory_is_a_507(tmp_path: Path) -> None:
    with pytest.raises(InsufficientStorage, match="unwritable"):
        asyncio.run(spool(_body(), "audio/wav", LIMITS, tmp_path / "gone", _pace()))


def test_the_pace_waits_for_the_nearest_of_gap_deadline_and_rate() -> None:
    pace = UploadPace(idle_timeout_s=30, deadline=100, min_bytes_per_s=1000, grace_s=10)
    wait, error = pace.next_wait(started=0, now=4, received=0)
    assert (wait, error.code) == (6, ErrorCode.UPLOAD_TOO_SLOW)  # the grace period ends at 10
    wait, error = pace.next_wait(started=0, now=20, received=40_000)
    assert (wait, error.code) == (20, ErrorCode.UPLOAD_TOO_SLOW)  # 40,000 bytes last until 40
    wait, error = pace.next_wait(started=0, now=95, received=10**6)
    assert (wait, error.code) == (5, ErrorCode.UPLOAD_TOO_SLOW)
    assert "deadline" in error.message
    wait, error = pace.next_wait(started=0, now=20, received=10**6)
    assert (wait, error.code) == (30, ErrorCode.BODY_TIMEOUT)
    unlimited = UploadPace(idle_timeout_s=30, deadline=100)
    assert unlimited.next_wait(started=0, now=20, received=0)[1].code == ErrorCode.BODY_TIMEOUT


async def _drip(gap_s: float, size: int = 10) -> AsyncIterator[bytes]:
    while True:
        await asyncio.sleep(gap_s)
        yield b"x" * size


def test_a_body_dripping_below_the_minimum_rate_is_cut_off_after_the_grace_period(
    tmp_path: Path,
) -> None:
    admission = Admission(max_uploading=1, max_pending=1)
    pace = _pace(min_bytes_per_s=1000, grace_s=0.3)

    async def upload() -> None:
        with admission.uploading_slot() as progress:
            await spool(_drip(0.02), "audio/wav", LIMITS, tmp_path, pace, progress)

    with pytest.raises(ArengineError) as raised:
        asyncio.run(upload())
    assert raised.value.code == ErrorCode.UPLOAD_TOO_SLOW
    assert raised.value.status == 408
    assert "minimum is 1000 bytes/s" in raised.value.message
    assert 0 < admission.upload_bytes_total < 1000
    assert admission.uploading == 0
    assert list(tmp_path.iterdir()) == []


def test_a_body_still_arriving_at_the_deadline_is_cut_off(tmp_path: Path) -> None:
    pace = _pace(deadline=time.monotonic() + 0.3, idle_timeout_s=5.0)
    with pytest.raises(ArengineError) as raised:
        asyncio.run(spool(_drip(0.01, 10_000), "audio/wav", LIMITS, tmp_path, pace))
    assert raised.value.code == ErrorCode.UPLOAD_TOO_SLOW
    assert "deadline" in raised.value.message
    assert list(tmp_path.iterdir()) == []


def test_uploads_in_progress_and_their_bytes_are_counted(tmp_path: Path) -> None:
    admission = Admission(max_uploading=2, max_pending=1)
    seen: list[tuple[int, int]] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"x" * 1000
            await asyncio.sleep(0)
            seen.append((admission.uploading, admission.uploading_bytes))

    async def upload() -> None:
        with admission.uploading_slot() as progress:
            await spool(body(), "audio/wav", LIMITS, tmp_path, _pace(), progress)

    asyncio.run(upload())
    assert seen == [(1, 1000), (1, 2000), (1, 3000)]
    assert (admission.uploading, admission.uploading_bytes) == (0, 0)
    assert admission.upload_bytes_total == 3000


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 7):
        yield data[start : start + 7]


def _multipart(closed: bool) -> bytes:
    body = b'--xx\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    body += b"RIFF" + bytes(100) + b"\r\n"
    return body + (b"--xx--\r\n" if closed else b"")


def test_a_multipart_body_without_its_closing_boundary_is_refused(tmp_path: Path) -> None:
    closed = asyncio.run(
        spool(
            _chunks(_multipart(True)), "multipart/form-data; boundary=xx", LIMITS, tmp_path, _pace()
        )
    )
    assert closed.size == 104
    closed.path.unlink()
    with pytest.raises(ArengineError) as raised:
        asyncio.run(
            spool(
                _chunks(_multipart(False)),
                "multipart/form-data; boundary=xx",
                LIMITS,
                tmp_path,
                _pace(),
            )
        )
    assert raised.value.code == ErrorCode.BAD_MULTIPART
    assert "closing boundary" in raised.value.message
    assert list(tmp_path.iterdir()) == []


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _fields(count: int, value: bytes) -> bytes:
    parts = b"".join(
        b'--xx\r\nContent-Disposition: form-data; name="note%d"\r\n\r\n%s\r\n' % (index, value)
        for index in range(count)
    )
    return parts + b"--xx--\r\n"


@pytest.mark.parametrize(
    ("body", "code", "quoted"),
    [
        (_fields(MAX_MULTIPART_PARTS + 1, b"x"), ErrorCode.TOO_MANY_PARTS, "16"),
        (_fields(1, b"x" * (MAX_FIELD_BYTES + 1)), ErrorCode.FIELD_TOO_LARGE, "64 KiB"),
    ],
)
def test_the_multipart_limits_are_the_declared_ones_as_the_error_table_says(
    tmp_path: Path, body: bytes, code: ErrorCode, quoted: str
) -> None:
    """The refusal, its code's description (the site's error reference) and the declaration agree;
    `quoted` is what the guides' prose says."""
    roomy = UploadLimits(max_bytes=10**8)
    within = _fields(MAX_MULTIPART_PARTS, b"x" * MAX_FIELD_BYTES)
    with pytest.raises(ArengineError) as raised:
        asyncio.run(
            spool(_once(within), "multipart/form-data; boundary=xx", roomy, tmp_path, _pace())
        )
    assert raised.value.code == ErrorCode.MISSING_FILE  # every field taken, then no `file`
    with pytest.raises(ArengineError) as raised:
        asyncio.run(
            spool(_once(body), "multipart/form-data; boundary=xx", roomy, tmp_path, _pace())
        )
    assert raised.value.code == code
    assert quoted in raised.value.message and quoted in code.description
    assert list(tmp_path.iterdir()) == []

"""Spooling uploads: what happens when the disk is full."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arengine.errors import InsufficientStorage
from arengine.http.uploads import UploadLimits, spool


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
        asyncio.run(spool(_body(), "audio/wav", UploadLimits(max_bytes=10**6), tmp_path, 5.0))
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_directory_is_a_507(tmp_path: Path) -> None:
    with pytest.raises(InsufficientStorage, match="unwritable"):
        asyncio.run(
            spool(_body(), "audio/wav", UploadLimits(max_bytes=10**6), tmp_path / "gone", 5.0)
        )

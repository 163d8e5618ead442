"""An upload still arriving, read while it arrives: the engine starts on a WAV's header.

The HTTP layer spools the body to a file and counts the bytes in an `Arrival`. For a PCM WAV
whose length is declared, the job starts as soon as the header is on disk (`wav_layout`). The
job offers a decoding task only once its segment's bytes are there (`Arrival.ready`), so an
engine thread does not sit waiting on a slow client, and libsndfile reads the file as it stands
(`wav.blocks` reopens it when it has read all that was there), under the same header policy as a
complete file (`wav.py`). Upload and recognition overlap instead of adding up. Every other upload
is recognised once its body is complete.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from arengine.audio import wav
from arengine.audio.wav import WavLayout
from arengine.errors import ArengineError, Cancelled

HEADER_BYTES = 64 * 1024
"""Bytes awaited before the header is read: a WAV's `data` chunk starts well within them."""


def wav_layout(path: Path, declared_bytes: int) -> WavLayout | None:
    """The layout of the WAV being written to `path`, whose body is `declared_bytes` long at
    most; None when it is not a PCM or float WAV whose `data` chunk has begun. A header may
    claim more than is sent (or 0xFFFFFFFF from a pipe): the body bounds it."""
    return wav.layout(path, declared_bytes)


class Arrival:
    """The bytes of one upload written so far to its file, and how the upload ended.

    Written by the event loop (`opened`, `add`, `finish`, `fail`), read by engine threads.
    """

    def __init__(self, open_ended: bool = False) -> None:
        self.open_ended = open_ended
        """A live stream (`arengine/live/`): its length is known only once it ends, and each
        segment is read as soon as its bytes are there."""
        self.path: Path | None = None
        self.layout: WavLayout | None = None
        self.name: str | None = None
        """The upload's file name, once its multipart headers are read (for a recording time)."""
        self._written = 0
        self._ended = False
        self._error: ArengineError | None = None
        self._condition = threading.Condition()
        self._notify_at = 0
        self._notify: Callable[[], None] | None = None

    @property
    def written(self) -> int:
        return self._written

    @property
    def ended(self) -> bool:
        """The body is complete, or the upload failed."""
        return self._ended

    def opened(self, path: Path) -> None:
        self.path = path

    def add(self, size: int) -> None:
        """`size` more bytes are on disk (flushed)."""
        with self._condition:
            if self._ended:
                return
            self._written += size
            self._condition.notify_all()
            call = self._due()
        if call is not None:
            call()

    def finish(self) -> None:
        """The body is complete: reads past what was written now end there."""
        self._end(None)

    def fail(self, error: ArengineError) -> None:
        """The upload failed (or its job did): waiting reads raise `error`."""
        self._end(error)

    def notify_at(self, size: int, callback: Callable[[], None]) -> None:
        """Call `callback` (once, from the writer's thread) when `size` bytes are written or the
        upload ends; at once if that is already so. Replaces an earlier request."""
        with self._condition:
            self._notify_at, self._notify = size, callback
            call = self._due()
        if call is not None:
            call()

    def ready(self, frames: int, callback: Callable[[], None]) -> bool:
        """Whether the first `frames` frames (or all there will be) are on disk; if not,
        `callback` is called once they are."""
        layout = self.layout
        assert layout is not None  # set before the job that asks is submitted
        needed = layout.byte_after(frames)
        with self._condition:
            if self._ended or self._written >= needed:
                return True
            self._notify_at, self._notify = needed, callback
            return False

    def wait(self, upto: int) -> int:
        """Block until the bytes before `upto` are on disk or the upload ends; the end of what
        can be read, at most `upto`. Raises the upload's error if it failed."""
        with self._condition:
            while self._written < upto and not self._ended:
                self._condition.wait()
            if self._error is not None:
                raise self._error
            return min(upto, self._written)

    def _due(self) -> Callable[[], None] | None:
        """The pending callback if its moment has come (under the lock), cleared."""
        call = self._notify
        if call is None or (self._written < self._notify_at and not self._ended):
            return None
        self._notify = None
        return call

    def _end(self, error: ArengineError | None) -> None:
        with self._condition:
            if self._ended:
                return
            self._ended = True
            self._error = error
            self._condition.notify_all()
            call = self._due()
        if call is not None:
            call()


def abandoned() -> Cancelled:
    """The error waiting reads get when their job ends before the upload does."""
    return Cancelled("the request ended before its upload")

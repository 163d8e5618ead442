"""Admission control: two bounded counts, requests uploading and requests in the engine.

They are counted apart so that clients that upload slowly can only fill the upload slots: the
engine's slots are taken once a body is complete, and a request that arrives while the engine is
full is refused before its body is read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from arengine.errors import ErrorCode, Overloaded


class UploadProgress:
    """Bytes received so far by one upload (written by the event loop, read by metric scrapes)."""

    __slots__ = ("_admission", "received")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.received = 0

    def add(self, size: int) -> None:
        self.received += size
        self._admission.count_bytes(size)


class Admission:
    """`max_uploading` uploads and `max_pending` engine requests at once; `Overloaded` beyond.

    >>> admission = Admission(max_uploading=8, max_pending=2)
    >>> with admission.uploading_slot() as progress:
    ...     progress.add(4096)
    >>> with admission.pending_slot():
    ...     pass
    """

    def __init__(self, max_uploading: int, max_pending: int, max_listening: int = 16) -> None:
        self.max_uploading = max_uploading
        self.max_pending = max_pending
        self.max_listening = max_listening
        self._listening = 0
        self._uploads: set[UploadProgress] = set()
        self._pending = 0
        self._bytes_total = 0
        self._lock = threading.Lock()

    @property
    def uploading(self) -> int:
        """Requests receiving their body."""
        return len(self._uploads)

    @property
    def pending(self) -> int:
        """Requests whose body is complete, queued or processing in the engine."""
        return self._pending

    @property
    def listening(self) -> int:
        """Live streams open (`WS /v1/listen`)."""
        return self._listening

    @contextmanager
    def listening_slot(self) -> Iterator[None]:
        """Hold a live stream's slot while it is open; `Overloaded` if none is free. Counted
        apart from the requests: a stream holds its slot for hours."""
        with self._lock:
            if self._listening >= self.max_listening:
                raise Overloaded(
                    f"{self._listening} live streams are open, the limit is "
                    f"{self.max_listening}; retry later",
                    code=ErrorCode.TOO_MANY_LISTENERS,
                )
            self._listening += 1
        try:
            yield
        finally:
            with self._lock:
                self._listening -= 1

    @property
    def uploading_bytes(self) -> int:
        """Bytes received so far by the uploads in progress."""
        with self._lock:
            uploads = list(self._uploads)
        return sum(upload.received for upload in uploads)

    @property
    def upload_bytes_total(self) -> int:
        """Bytes received by every upload since the start, finished or not."""
        return self._bytes_total

    def count_bytes(self, size: int) -> None:
        with self._lock:
            self._bytes_total += size

    def check_room(self) -> None:
        """Refuse at once, before any body is read, a request the engine has no room for."""
        if self._pending >= self.max_pending:
            raise self._overloaded()

    @contextmanager
    def uploading_slot(self) -> Iterator[UploadProgress]:
        """Hold an upload slot while the body arrives; `Overloaded` if none is free."""
        progress = UploadProgress(self)
        with self._lock:
            if len(self._uploads) >= self.max_uploading:
                raise Overloaded(
                    f"{len(self._uploads)} uploads are in progress, the limit is "
                    f"{self.max_uploading}; retry shortly"
                )
            self._uploads.add(progress)
        try:
            yield progress
        finally:
            with self._lock:
                self._uploads.discard(progress)

    @contextmanager
    def pending_slot(self) -> Iterator[None]:
        """Hold an engine slot until the request is answered; `Overloaded` if none is free."""
        with self._lock:
            if self._pending >= self.max_pending:
                raise self._overloaded()
            self._pending += 1
        try:
            yield
        finally:
            with self._lock:
                self._pending -= 1

    def _overloaded(self) -> Overloaded:
        return Overloaded(
            f"{self._pending} requests are in the engine, the limit is {self.max_pending}; "
            "retry shortly"
        )

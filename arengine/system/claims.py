"""A directory several servers may share (an upload directory, a job store's data directory):
each server holds a shared `flock` on it for its life, and sweeps what a crashed server left only
when it can take that lock exclusively, that is when no other live server could still be writing
there. The kernel releases a dead server's lock, SIGKILL included.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class DirectoryClaim:
    """A server's shared lock on `directory`, from `hold` to `close`.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> first, second = DirectoryClaim.hold(folder), DirectoryClaim.hold(folder)
    >>> first.alone(lambda: "swept") is None  # the second server holds it too
    True
    >>> second.close()
    >>> first.alone(lambda: "swept")
    'swept'
    >>> first.close()
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def hold(cls, directory: Path) -> DirectoryClaim:
        """Take the shared lock on `directory` (waiting while another server sweeps it);
        OSError when the directory cannot be opened."""
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def alone(self, work: Callable[[], T]) -> T | None:
        """Run `work` with the lock held exclusively, if no other server holds it; None, and
        `work` not run, when one does. The shared lock is held again after."""
        if self._fd is None:
            return None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # A refused conversion may have dropped the shared lock (Linux does): take it again.
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            return None
        try:
            return work()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None

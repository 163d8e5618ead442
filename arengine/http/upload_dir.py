"""The upload directory, swept at start-up of the spooled files a crashed server left behind.

Only a directory named by `upload_dir` is swept: the system temporary directory is shared with
other programs (and other arengine servers). Only regular files of this user named as the spooler
names them (`arengine-`, eight random characters, `.upload`) are removed, and only when no other
live server uses the directory: every server holds a shared `flock` on the directory itself, and
sweeps only if it can take that lock exclusively (the kernel releases it when a server dies,
SIGKILL included).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
from pathlib import Path

log = logging.getLogger(__name__)

SPOOLED = re.compile(r"^arengine-[a-z0-9_]{8}\.upload$")
"""The names `tempfile.mkstemp(prefix="arengine-", suffix=".upload")` gives."""


class UploadDir:
    """A claim on an upload directory for a server's life: `UploadDir.claim(directory)` at
    start-up, `close()` at the end."""

    def __init__(self, lock: int | None, swept: int) -> None:
        self._lock = lock
        self.swept = swept

    @classmethod
    def claim(cls, directory: Path | None) -> UploadDir:
        """Lock `directory` for this server, sweeping it first when no other server uses it."""
        if directory is None:
            return cls(None, 0)
        try:
            lock = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            log.warning("upload directory %s not swept: %s", directory, error.strerror)
            return cls(None, 0)
        swept = 0
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("upload directory %s is in use by another server: not swept", directory)
        else:
            swept = sweep(directory)
        fcntl.flock(lock, fcntl.LOCK_SH)
        return cls(lock, swept)

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None


def sweep(directory: Path) -> int:
    """Remove the spooled uploads in `directory` (see the module docstring); how many."""
    removed = 0
    for entry in os.scandir(directory):
        if not SPOOLED.match(entry.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                os.unlink(entry.path)
                removed += 1
    if removed:
        log.warning("removed %d upload(s) left in %s by a server that stopped", removed, directory)
    return removed

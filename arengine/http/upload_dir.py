"""The upload directory, swept at start-up of the spooled files a crashed server left behind.

Only a directory named by `upload_dir` is swept: the system temporary directory is shared with
other programs (and other arengine servers). Only regular files of this user named as the spooler
names them (`arengine-`, eight random characters, `.upload`) are removed, and only when no other
live server uses the directory (`arengine.system.claims`: the lock the job store's sweep honours
too).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from pathlib import Path

from arengine.system.claims import DirectoryClaim

log = logging.getLogger(__name__)

SPOOLED = re.compile(r"^arengine-[a-z0-9_]{8}\.upload$")
"""The names `tempfile.mkstemp(prefix="arengine-", suffix=".upload")` gives."""


class UploadDir:
    """A claim on an upload directory for a server's life: `UploadDir.claim(directory)` at
    start-up, `close()` at the end."""

    def __init__(self, claim: DirectoryClaim | None, swept: int) -> None:
        self._claim = claim
        self.swept = swept

    @classmethod
    def claim(cls, directory: Path | None) -> UploadDir:
        """Lock `directory` for this server, sweeping it first when no other server uses it."""
        if directory is None:
            return cls(None, 0)
        try:
            claim = DirectoryClaim.hold(directory)
        except OSError as error:
            log.warning("upload directory %s not swept: %s", directory, error.strerror)
            return cls(None, 0)
        swept = claim.alone(lambda: sweep(directory))
        if swept is None:
            log.info("upload directory %s is in use by another server: not swept", directory)
        return cls(claim, swept or 0)

    def close(self) -> None:
        if self._claim is not None:
            self._claim.close()
            self._claim = None


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

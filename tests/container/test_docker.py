"""The Docker engine's own start-up, as the container suite does it."""

from __future__ import annotations

import os
from pathlib import Path

from tests.container.docker import remove_stale_pid_file


def test_a_pid_file_naming_a_gone_process_is_removed(tmp_path: Path) -> None:
    """A dockerd killed with the machine's session left /var/run/docker.pid behind; the next
    dockerd refused to start and every container test was skipped."""
    stale = tmp_path / "docker.pid"
    stale.write_text(f"{2**22 + 1}\n")  # above Linux's largest pid: no such process
    assert remove_stale_pid_file(stale)
    assert not stale.exists()


def test_a_pid_file_naming_a_live_process_is_kept(tmp_path: Path) -> None:
    live = tmp_path / "docker.pid"
    live.write_text(str(os.getpid()))
    assert not remove_stale_pid_file(live)
    assert live.read_text() == str(os.getpid())
    # No file, or one that names no pid: nothing to remove.
    assert not remove_stale_pid_file(tmp_path / "absent.pid")
    (tmp_path / "junk.pid").write_text("not a pid")
    assert not remove_stale_pid_file(tmp_path / "junk.pid")

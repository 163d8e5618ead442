"""The tests' fork server: a forked server behaves as one started from the command line."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from arengine.system.allocator import find_jemalloc
from tests.conftest import start_server, stop_server
from tests.forkserver import Forked, forkable


def test_a_forked_server_runs_as_the_command_would_and_reports_its_exit_as_popen_does(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path, "--models", "speech", env={"ARENGINE_API_KEYS": "k1,k2"})
    try:
        assert isinstance(server.process, Forked)
        assert server.process.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            server.process.wait(timeout=0.1)
        key = {"Authorization": "Bearer k1"}
        info = httpx.get(server.url + "/v1/info", headers=key).json()
        assert info["allocator"] == ("glibc" if find_jemalloc() is None else "jemalloc")
        assert httpx.get(server.url + "/v1/models").status_code == 401  # its own environment
        assert httpx.get(server.url + "/v1/models", headers=key).status_code == 200
        assert '"api_keys": 2' in server.log.read_text()
        if find_jemalloc() is not None:  # as MALLOC_CONF asks, though a fork stops them
            assert "jemalloc_bg_thd" in _thread_names(server.process.pid)
        server.process.send_signal(signal.SIGKILL)
        assert server.process.wait(timeout=30) == -signal.SIGKILL
        assert server.process.poll() == -signal.SIGKILL
        server.process.terminate()  # an ended process is not signalled again
    finally:
        stop_server(server)


def _thread_names(pid: int) -> set[str]:
    tasks = Path(f"/proc/{pid}/task")
    return {(task / "comm").read_text().strip() for task in tasks.iterdir()}


def test_a_server_stopped_by_sigterm_exits_0(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--models", "speech")
    stop_server(server)
    assert isinstance(server.process, Forked)
    assert server.process.returncode == 0
    assert "Finished server process" in server.log.read_text()


def test_what_changes_how_a_server_starts_is_started_from_the_command_line() -> None:
    assert forkable(("--models", "speech"), {"ARENGINE_API_KEYS": "k"})
    for flag in ("--jemalloc", "--no-jemalloc", "--malloc-conf=dirty_decay_ms:0"):
        assert not forkable(("--models", "speech", flag), {})
    for name in ("ONEDNN_MAX_CPU_ISA", "LD_PRELOAD", "ARENGINE_JEMALLOC", "PYTHONPATH"):
        assert not forkable((), {name: "x"})

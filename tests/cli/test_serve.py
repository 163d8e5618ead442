"""`arengine serve`'s own parser: the process it re-executes under jemalloc loads nothing heavy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arengine.system.allocator import find_jemalloc

BEFORE_REEXEC = """
import os, sys
def execve(*args):
    print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "av", "numpy"))))
    os._exit(0)
os.execve = execve
from arengine.cli import main
main(["serve", "--port", "1", "--models", "speech"])
print("not re-executed")
"""


@pytest.mark.skipif(find_jemalloc() is None, reason="no system jemalloc: serve does not re-execute")
def test_serve_re_executes_under_jemalloc_before_loading_torch() -> None:
    """torch, PyAV and numpy load once, in the process that serves: before, the first process
    loaded them too (2.5 s of every start)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("LD_PRELOAD", "ARENGINE_ALLOCATOR_REEXEC", "ARENGINE_JEMALLOC")
    }
    done = subprocess.run(
        [sys.executable, "-c", BEFORE_REEXEC], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "\n"  # re-executed, with none of them loaded


def test_an_unknown_serve_flag_is_refused_with_every_command_s_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from arengine.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", "--no-such-flag"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "{serve,recognize,listen,models,references,db}" in error
    assert "unrecognized arguments: --no-such-flag" in error

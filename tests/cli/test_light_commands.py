"""Commands that run no model load no torch: `--help`, a usage error, a `--server` run,
`listen`, `db` and a library's `references list` and `remove` answer in a second or two instead
of waiting for torch to import (about 4 s of CPU a process), and the kind table they read
(`arengine/kinds/declaration.py`) stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = """{m.split(".")[0] for m in sys.modules} & {"torch", "torchaudio", "onnxruntime"}"""
"""The heavy packages among those a process has imported."""

RUN = f"""
import sys
from arengine.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    code = done.code
else:
    code = 0
heavy = sorted({HEAVY})
print("exit", code, "heavy", ",".join(heavy) or "-")
"""


def _run(*args: str, cwd: Path) -> tuple[str, str]:
    """`arengine ARGS` in a fresh interpreter: its exit status and the heavy modules it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )
    words = done.stdout.splitlines()[-1].split()  # after what the command printed
    assert words[:1] == ["exit"], done.stderr
    return words[1], words[3]


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("recognize", "--help"),
        ("recognize", "a.wav", "--format", "xml"),  # a usage error
        ("recognize", "empty"),  # no audio among the inputs
        ("recognize", "a.wav", "--server", "http://127.0.0.1:9"),  # nothing listens there
        ("listen", "--help"),
        ("db", "current", "--data-dir", "data"),
        ("models", "--help"),
        ("references", "list", "jingles", "--models-dir", "."),  # no library there: 1
        ("references", "remove", "jingles", "7", "--models-dir", "."),
    ],
    ids=" ".join,
)
def test_a_command_that_runs_no_model_loads_no_torch(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "a.wav").write_bytes(b"RIFF")
    (tmp_path / "empty").mkdir()
    code, heavy = _run(*args, cwd=tmp_path)
    assert heavy == "-"
    assert code in ("0", "1", "2")


def test_the_kind_table_and_the_output_formats_load_no_torch() -> None:
    check = (
        "import sys, arengine.kinds.catalog, arengine.outputs.formats, arengine.cli.runner; "
        f"print(sorted({HEAVY}))"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_kind_names_its_recognizer_by_a_path_that_resolves() -> None:
    from arengine.kinds.base import Recognizer
    from arengine.kinds.catalog import KINDS

    for kind in KINDS.values():
        assert issubclass(kind.recognizer, Recognizer)
        assert f"{kind.recognizer.__module__}.{kind.recognizer.__name__}" == kind.recognizer_path

"""A short atheris run of the probe and decode path, seeded with every container."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.recordings import SOUNDFILE_TYPES, write

pytestmark = pytest.mark.slow

TARGET = Path(__file__).parent / "fuzz" / "decode_target.py"


def test_fuzzing_the_decode_path_finds_no_crash(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    tone = (0.3 * np.sin(np.arange(8000) / 5)).astype(np.float32)
    for extension in SOUNDFILE_TYPES:
        rate = 48000 if extension == "opus" else 8000
        write(tone, rate, corpus / f"seed.{extension}", channels=2)
    done = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            "-runs=3000",
            "-max_len=20000",
            "-timeout=20",
            # Room above libFuzzer's default 2048 MB for the child under coverage; an input
            # that makes decoding grow past 4 GB is still caught.
            "-rss_limit_mb=4096",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ARENGINE_FUZZ_SCRATCH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Done 3000 runs" in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus", "input"]


def test_importing_the_target_makes_no_folder(tmp_path: Path) -> None:
    """The suite's collection imports the target in every worker (doctests): a folder made at
    import was left in the temporary folder by each."""
    done = subprocess.run(
        [sys.executable, "-c", "import tests.fuzz.decode_target"],
        cwd=TARGET.parents[2],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []

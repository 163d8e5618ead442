"""`arengine recognize`'s progress: bars on a terminal (a pty here), plain lines on a pipe."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import soundfile as sf

from arengine.cli.runner import plan, recognize_files
from arengine.engine.engine import Engine
from arengine.outputs.formats import FORMATS
from arengine.settings import Settings
from tests.conftest import RecordingFactory

pytestmark = pytest.mark.slow

# Small segments and one engine thread: a 20-minute file takes many polls of the runner.
SLOW = ["--segment-s", "2", "--engine-threads", "1", "--model", "speech"]


@pytest.fixture
def long_file(twenty_minutes: Path) -> Path:
    """About 20 minutes at 8 kHz: a phrase every 25 s."""
    return twenty_minutes


def test_plain_lines_report_a_long_file_while_it_runs(
    long_file: Path, recording: RecordingFactory, tmp_path: Path
) -> None:
    short = recording("short.wav").path
    settings = Settings(segment_s=2, engine_threads=1, models="speech")
    engine = Engine(settings)
    engine.load_models()
    stream = io.StringIO()
    try:
        work = plan([long_file, short], FORMATS["csv"], tmp_path / "out")
        failures = recognize_files(engine, work, "speech", FORMATS["csv"], 2, stream, 0.0)
    finally:
        engine.close()
    assert failures == []
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    inside = [
        float(match.group(1))
        for line in lines
        if (
            match := re.match(rf"{re.escape(str(long_file))}: ([\d.]+) s of audio done, RTF ", line)
        )
    ]
    assert len(inside) >= 3, lines
    duration = sf.info(long_file).duration
    assert inside == sorted(inside) and 0 < inside[0] < inside[-1] <= round(duration, 1)
    finished = [i for i, line in enumerate(lines) if line.startswith("[")]
    assert len(finished) == 2
    assert "long.flac" in lines[finished[1]] and "[2/2]" in lines[finished[1]]
    assert lines.index(next(x for x in lines if " s of audio done" in x)) < finished[1]
    assert lines[-1].startswith("overall: 2/2 files") and "ETA 0 s" in lines[-1]


def test_terminal_gets_a_bar_per_file_and_an_overall_bar(long_file: Path, tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))  # rows, cols
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "arengine",
            "recognize",
            str(long_file),
            "--out",
            str(tmp_path),
            *SLOW,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    output = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0
    text = output.decode("utf-8", "replace")
    assert "\r" in text, "bars are redrawn in place"
    file_bars = re.findall(
        r"long\.flac:\s+\d+%\|[^|]*\| ([\d.]+)/([\d.]+) s audio[^\r\n]*RTF", text
    )
    moving = {float(done) for done, total in file_bars if 0 < float(done) < float(total)}
    assert len(moving) >= 2, "the file's bar moved inside the file"
    overall = re.findall(
        r"overall:\s+(\d+)%\|[^|]*\| ([\d.]+)/([\d.]+) s audio \[[^<]*<([^,\]]+)", text
    )
    assert any(0 < int(percent) < 100 for percent, *_ in overall), "overall moved inside the file"
    assert any(re.match(r"\d+:\d\d", eta) for *_, eta in overall), "overall shows an ETA"
    assert "long.flac: " in text and " tags -> " in text
    assert "Warning" not in text
    assert (tmp_path / "long.json").exists()

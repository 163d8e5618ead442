"""`arengine recognize`'s progress: bars on a terminal (a pty here), plain lines on a pipe."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import soundfile as sf

from arengine.cli.runner import Failure, plan, recognize_files
from arengine.outputs.formats import FORMATS
from arengine.service.engine import Engine
from arengine.settings import Settings
from tests.conftest import wait_until
from tests.gate import Gate, gated_models, marked

pytestmark = pytest.mark.slow

# Small segments and one engine thread; the `gate` test model (`tests/gate.py`) holds the long
# file at a first and then a second place, so the progress is seen inside it on any machine.
SLOW = ["--segment-s", "2", "--engine-threads", "1", "--model", "gate"]


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Gate]:
    return gated_models(tmp_path / "gated")


@pytest.fixture
def long_file(tmp_path: Path) -> Path:
    """Half a minute: a first mark at 10 s, a second at 21 s (2-s segments)."""
    pieces = [("quiet", 10.0), ("mark", 1.0), ("quiet", 10.0), ("mark2", 1.0), ("quiet", 10.0)]
    return marked(tmp_path / "long.wav", pieces)


def _held_at_two_places(gate: Gate, done: Callable[[], list[float]], reports: int = 1) -> None:
    """With `gate` closed: wait for `reports` progress reports at the first mark, let it
    through, wait for a report further on (held at the second mark), then open it."""
    assert wait_until(lambda: len([d for d in done() if d > 0]) >= reports, 120), done()
    first = max(done())
    gate.let_through(1)
    assert wait_until(lambda: max(done()) > first, 120), done()
    gate.open()


def test_plain_lines_report_a_long_file_while_it_runs(
    long_file: Path, models: tuple[Path, Gate], tmp_path: Path
) -> None:
    folder, gate = models
    short = marked(tmp_path / "short.wav", [("quiet", 1.0), ("loud", 1.0), ("quiet", 1.0)])
    settings = Settings(segment_s=2, engine_threads=1, models="gate", models_dir=folder)
    engine = Engine(settings)
    engine.load_models()
    stream = io.StringIO()
    failures: list[Failure] = []
    pattern = rf"{re.escape(str(long_file))}: ([\d.]+) s of audio done, RTF "

    def inside() -> list[float]:
        lines = stream.getvalue().splitlines()
        return [float(match[1]) for line in lines if (match := re.match(pattern, line))]

    def run() -> None:
        work = plan([long_file, short], FORMATS["csv"], tmp_path / "out")
        failures.extend(recognize_files(engine, work, "gate", FORMATS["csv"], 2, stream, 0.0))

    runner = threading.Thread(target=run)
    try:
        with gate.held():
            runner.start()
            # Plain lines come at every poll (every_s 0), held or not: two, then one more on.
            _held_at_two_places(gate, inside, reports=2)
        runner.join(120)
    finally:
        engine.close()
    assert failures == []
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    done = inside()
    assert len(done) >= 3, lines
    duration = sf.info(long_file).duration
    assert done == sorted(done) and 0 < done[0] < done[-1] <= round(duration, 1)
    finished = [i for i, line in enumerate(lines) if line.startswith("[")]
    assert len(finished) == 2
    assert "long.wav" in lines[finished[1]] and "[2/2]" in lines[finished[1]]
    assert lines.index(next(x for x in lines if " s of audio done" in x)) < finished[1]
    assert lines[-1].startswith("overall: 2/2 files") and "ETA 0 s" in lines[-1]


FILE_BAR = r"long\.wav:\s+\d+%\|[^|]*\| ([\d.]+)/([\d.]+) s audio[^\r\n]*RTF"


def test_terminal_gets_a_bar_per_file_and_an_overall_bar(
    long_file: Path, models: tuple[Path, Gate], tmp_path: Path
) -> None:
    folder, gate = models
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))  # rows, cols
    command = [sys.executable, "-m", "arengine", "recognize", str(long_file), "--out"]
    command += [str(tmp_path), *SLOW, "--models-dir", str(folder)]
    output = b""

    def read(wait_s: float) -> bool:
        """Read what the terminal has within `wait_s`; False once the child closed it."""
        nonlocal output
        if not select.select([leader], [], [], wait_s)[0]:
            return True
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            return False
        output += chunk
        return bool(chunk)

    def inside() -> list[float]:
        read(0.05)
        text = output.decode("utf-8", "replace")
        return [float(done) for done, total in re.findall(FILE_BAR, text) if float(done) > 0]

    with gate.held():
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower
        )
        os.close(follower)
        # A bar is drawn again only when it moves: once at the first mark, once at the second.
        _held_at_two_places(gate, inside)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and read(1.0):
        pass
    os.close(leader)
    assert process.wait(timeout=60) == 0
    text = output.decode("utf-8", "replace")
    assert "\r" in text, "bars are redrawn in place"
    file_bars = re.findall(FILE_BAR, text)
    moving = {float(done) for done, total in file_bars if 0 < float(done) < float(total)}
    assert len(moving) >= 2, "the file's bar moved inside the file"
    overall = re.findall(
        r"overall:\s+(\d+)%\|[^|]*\| ([\d.]+)/([\d.]+) s audio \[[^<]*<([^,\]]+)", text
    )
    assert any(0 < int(percent) < 100 for percent, *_ in overall), "overall moved inside the file"
    assert any(re.match(r"\d+:\d\d", eta) for *_, eta in overall), "overall shows an ETA"
    assert "long.wav: " in text and " tags -> " in text
    assert "Warning" not in text
    assert (tmp_path / "long.json").exists()

"""The benchmark tools work on tiny inputs (their timings are never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from loadtests.peers import frame_f1
from loadtests.recordings import write_recording


@pytest.mark.parametrize(
    ("name", "rate", "channels"), [("a.wav", 16000, 1), ("a.flac", 44100, 2), ("a.mp3", 44100, 2)]
)
def test_recordings_are_written_with_their_speech_intervals(
    tmp_path: Path, name: str, rate: int, channels: int
) -> None:
    path = tmp_path / name
    speech = write_recording(path, minutes=0.25, rate=rate, channels=channels, seed=3)
    info = sf.info(str(path))
    assert (info.samplerate, info.channels) == (rate, channels)
    assert info.duration == pytest.approx(15.0, abs=0.1)
    assert speech and all(0 <= start < end <= 15.0 for start, end in speech)
    assert json.loads((tmp_path / f"{name}.speech.json").read_text()) == [list(s) for s in speech]


def test_frame_f1() -> None:
    assert frame_f1([(1.0, 2.0)], [(1.0, 2.0)], 3.0) == 1.0
    assert frame_f1([(0.0, 1.0)], [(2.0, 3.0)], 3.0) == 0.0
    assert frame_f1([(0.0, 2.0)], [(1.0, 2.0)], 3.0) == pytest.approx(2 * 100 / 300)

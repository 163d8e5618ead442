"""Compressed uploads decoded in a forked child: the in-process chain's samples and answers.

The hostile files of `test_ffmpeg_hostile.py` go through both paths too (its `_decoded`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from arengine.audio import child
from arengine.audio.decode import DecodeReport, decode
from arengine.audio.segments import SegmentPlan
from arengine.audio.source import ModelInput, Reading, segment_sources
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import CorruptAudio, ErrorCode, TooLarge
from tests.conftest import wait_until
from tests.recordings import sine

LIMITS = AudioLimits(
    max_duration_s=600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)

ENCODINGS = {
    "a.mp3": ("-ac", "2", "-c:a", "libmp3lame"),
    "a.m4a": ("-ac", "2", "-c:a", "aac"),
    "a.webm": ("-c:a", "libopus"),
    "a.ogg": ("-ac", "2", "-c:a", "libvorbis"),
}


def _blocks(
    path: Path, in_child: bool, rates: tuple[int, ...] = (16000, 22050)
) -> list[np.ndarray]:
    info = probe(path, LIMITS)
    decoding = decode(path, info, rates, 10**9, None, in_child)
    try:
        first = np.concatenate(list(decoding))
        rest = [np.concatenate(list(decoding.reader(index))) for index in range(1, len(rates))]
    finally:
        decoding.close()
    assert decoding.info().frames > 0
    return [first, *rest]


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_the_child_gives_the_in_process_samples_to_the_bit(tmp_path: Path, name: str) -> None:
    rate = 48000 if name == "a.webm" else 44100
    path = sine(tmp_path / name, 20.0, rate, 440, *ENCODINGS[name])
    here, there = _blocks(path, False), _blocks(path, True)
    assert all(np.array_equal(a, b) for a, b in zip(here, there, strict=True))
    info = probe(path, LIMITS)
    answers = []
    for in_child in (False, True):
        decoding = decode(path, info, 16000, 10**9, None, in_child)
        for _ in decoding:
            pass
        answers.append(decoding.info())
    assert answers[0] == answers[1]


def test_the_frame_cap_is_counted_in_the_child(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.mp3", 20.0, 44100, 440, "-c:a", "libmp3lame")
    info = probe(path, LIMITS)
    decoding = decode(path, info, 16000, 5 * 44100, None, in_child=True)
    with pytest.raises(TooLarge) as caught:
        list(decoding)
    assert caught.value.code == ErrorCode.AUDIO_TOO_LONG
    assert decoding.report.frames <= 5 * 44100 + 65536


def test_a_child_that_dies_is_a_corrupt_file_not_a_dead_server(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.mp3", 60.0, 44100, 440, "-c:a", "libmp3lame")
    info = probe(path, LIMITS)
    decoding = child.ChildDecoding(path, info, 10**9, DecodeReport(), 4096)
    blocks = iter(decoding)
    next(blocks)
    os.kill(decoding._pid, 9)  # a crash on a hostile file, as the server would meet it
    with pytest.raises(CorruptAudio, match="stopped before the end"):
        list(blocks)


def test_closing_early_stops_the_child(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.mp3", 120.0, 44100, 440, "-c:a", "libmp3lame")
    info = probe(path, LIMITS)
    decoding = decode(path, info, 16000, 10**9, None, in_child=True)
    next(decoding)
    assert isinstance(decoding._child, child.ChildDecoding)
    pid = decoding._child._pid
    assert pid
    decoding.close()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    assert wait_until(gone)


def test_many_threads_share_the_fork_server(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.m4a", 15.0, 44100, 440, "-ac", "2", "-c:a", "aac")
    serial = _blocks(path, False, (16000,))[0]
    results: list[np.ndarray] = []

    def run() -> None:
        results.append(_blocks(path, True, (16000,))[0])

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6 and all(np.array_equal(result, serial) for result in results)


def test_the_engine_reads_compressed_uploads_through_a_child_when_asked(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.mp3", 5.0, 44100, 440, "-c:a", "libmp3lame")
    info = probe(path, LIMITS)
    plan = SegmentPlan(hop=160, context=0, segment_frames=200, preroll_frames=0)
    for in_child in (False, True):
        reading = Reading(LIMITS, 4, in_child=in_child)
        sources = segment_sources(path, info, [ModelInput(plan, 16000)], reading)
        try:
            assert (sources._decoding._child is not None) == in_child
            assert sum(segment.frames for segment in sources.per_model[0]) == 500
        finally:
            sources.close()

"""A WAV whose header disagrees with its file: one answer on every path (complete or still
arriving): the audio the file holds, and a warning where the header disagrees."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio import wav
from arengine.audio.arrival import Arrival
from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import InvalidInput
from arengine.types import AudioInfo
from tests import wav_headers
from tests.arriving import Arriving
from tests.wav_headers import CASES, RATE, SECONDS, lying

LIMITS = AudioLimits(
    max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


def _decoded(path: Path, arrival: Arrival | None = None) -> tuple[np.ndarray, AudioInfo]:
    info = probe(path, LIMITS, None, arrival)
    decoding = decode(path, info, RATE, 10**9, arrival)
    return np.concatenate(list(decoding)), decoding.info()


def _arriving(path: Path, target: Path) -> tuple[np.ndarray, AudioInfo]:
    """`path` decoded while it is written to `target` in pieces, with its length declared."""
    upload = Arriving(path, target)
    upload.start()
    assert upload.arrival.layout is not None  # read while it arrives, as the HTTP layer does
    got: list[tuple[np.ndarray, AudioInfo]] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            got.append(_decoded(upload.target, upload.arrival))
        except BaseException as error:  # handed to the test's thread
            failed.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    while upload.sent < len(upload.data):
        upload.send(20_000)
    upload.arrival.finish()
    reader.join(30)
    if failed:
        raise failed[0]
    return got[0]


Read = Callable[[Path], tuple[np.ndarray, AudioInfo]]

PATHS: dict[str, Callable[[Path, Path], tuple[np.ndarray, AudioInfo]]] = {
    "complete": lambda path, _: _decoded(path),
    "arriving": _arriving,
}


@pytest.fixture(params=sorted(PATHS))
def read(request: pytest.FixtureRequest, tmp_path: Path) -> Read:
    return lambda path: PATHS[request.param](path, tmp_path / "arriving.wav")


@pytest.fixture
def whole(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "whole.wav"
    path.write_bytes(wav_headers.whole())
    samples, info = _decoded(path)
    assert (info.duration_s, info.truncated, info.warnings) == (SECONDS, False, ())
    return path, samples


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_header_that_disagrees_gives_the_audio_the_file_holds(
    read: Read, whole: tuple[Path, np.ndarray], tmp_path: Path, case: str
) -> None:
    path = tmp_path / f"{case}.wav"
    path.write_bytes(lying(case))
    samples, info = read(path)
    assert np.array_equal(samples, whole[1])
    assert (info.duration_s, info.truncated, info.warnings) == (SECONDS, False, CASES[case][3])


def test_a_chunk_after_the_data_is_not_audio(
    read: Read,
    whole: tuple[Path, np.ndarray],
    tmp_path: Path,
) -> None:
    text = b"INFOISFT\x0e\x00\x00\x00arengine test\x00"
    listed = tmp_path / "listed.wav"
    data = whole[0].read_bytes() + b"LIST" + struct.pack("<I", len(text)) + text
    listed.write_bytes(data[:4] + struct.pack("<I", len(data) - 8) + data[8:])
    samples, info = read(listed)
    assert np.array_equal(samples, whole[1])
    assert (info.duration_s, info.truncated, info.warnings) == (SECONDS, False, ())


def test_a_data_size_of_0_with_nothing_after_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros(0, np.float32), RATE, subtype="PCM_16")
    with pytest.raises(InvalidInput) as caught:
        _decoded(path)
    assert caught.value.code == "empty_audio"


def test_an_rf64_length_is_read_from_its_ds64_chunk(read: Read, tmp_path: Path) -> None:
    path = tmp_path / "a.rf64"
    t = np.arange(int(SECONDS * RATE)) / RATE
    sf.write(path, 0.3 * np.sin(2 * np.pi * 440 * t), RATE, "PCM_16", format="RF64")
    where = wav.layout(path, path.stat().st_size)
    assert where is not None and where.frames == int(SECONDS * RATE)
    samples, info = read(path)
    assert len(samples) == int(SECONDS * RATE)
    assert (info.format, info.duration_s, info.truncated, info.warnings) == (
        "RF64",
        SECONDS,
        False,
        (),
    )
    cut = tmp_path / "cut.rf64"
    cut.write_bytes(path.read_bytes()[: where.byte_after(RATE)])  # 1 s of the 6 it states
    _, info = read(cut)  # before: not reported truncated (the check read the 32-bit size only)
    assert (info.duration_s, info.truncated) == (1.0, True)

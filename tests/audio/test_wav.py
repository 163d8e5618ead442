"""A WAV whose header disagrees with its file: one answer on every path (complete or still
arriving): the audio the file holds, and a warning where the header disagrees (issue 23, item 5)."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio.arrival import Arrival
from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import InvalidInput
from arengine.types import AudioInfo
from tests.arriving import Arriving

LIMITS = AudioLimits(
    max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
SECONDS = 6.0
RATE = 16000


def _whole(path: Path) -> Path:
    """A stereo 16-bit WAV of `SECONDS` with a 44-byte header: `data` at 36, its bytes at 44."""
    t = np.arange(int(SECONDS * RATE)) / RATE
    left = 0.4 * np.sin(2 * np.pi * 440 * t)
    sf.write(path, np.stack([left, 0.5 * left], axis=1), RATE, subtype="PCM_16")
    return path


def _patched(source: Path, path: Path, at: int, value: int, width: str = "<I") -> Path:
    data = bytearray(source.read_bytes())
    data[at : at + struct.calcsize(width)] = struct.pack(width, value)
    path.write_bytes(bytes(data))
    return path


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
    path = _whole(tmp_path / "whole.wav")
    samples, info = _decoded(path)
    assert (info.duration_s, info.truncated, info.warnings) == (SECONDS, False, ())
    return path, samples


def test_a_block_align_that_disagrees_is_warned_and_read_as_the_samples_are(
    read: Read,
    whole: tuple[Path, np.ndarray],
    tmp_path: Path,
) -> None:
    # Before: read as it arrived, 8-byte frames gave half the file (3 s of 6), no warning.
    path = _patched(whole[0], tmp_path / "align.wav", 32, 8, "<H")
    samples, info = read(path)
    assert np.array_equal(samples, whole[1])
    assert (info.duration_s, info.truncated) == (SECONDS, False)
    assert info.warnings == (
        "the WAV header's block_align is 8 bytes; 2 channel(s) of 16 bits are 4: read as 4",
    )


def test_a_data_chunk_stating_half_the_file_gives_all_of_it_with_a_warning(
    read: Read,
    whole: tuple[Path, np.ndarray],
    tmp_path: Path,
) -> None:
    # Before: 3 s of 6 decoded, no warning.
    half = int(SECONDS * RATE) * 4 // 2
    path = _patched(whole[0], tmp_path / "half.wav", 40, half)
    samples, info = read(path)
    assert np.array_equal(samples, whole[1])
    assert (info.duration_s, info.truncated) == (SECONDS, False)
    assert info.warnings == ("the header states 3.0 s; all 6.0 s in the file were decoded",)


@pytest.mark.parametrize("size", [0xFFFFFFFF, 0], ids=["pipe", "zero"])
def test_a_data_size_that_states_no_length_gives_the_whole_file(
    read: Read,
    whole: tuple[Path, np.ndarray],
    tmp_path: Path,
    size: int,
) -> None:
    # Before: 0xFFFFFFFF (written to a pipe) was reported truncated with a wrong warning; 0
    # (streaming writers) was a 422 empty_audio.
    path = _patched(whole[0], tmp_path / "unstated.wav", 40, size)
    samples, info = read(path)
    assert np.array_equal(samples, whole[1])
    assert (info.duration_s, info.truncated, info.warnings) == (SECONDS, False, ())


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

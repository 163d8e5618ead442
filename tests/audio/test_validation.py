"""Validation: the probe accepts every supported container and refuses bad files clearly."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import InvalidInput, TooLarge, UnsupportedFormat
from tests.recordings import REPORTED, SOUNDFILE_TYPES, write

LIMITS = AudioLimits(
    max_duration_s=60, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


@pytest.mark.parametrize("extension", sorted(SOUNDFILE_TYPES))
def test_every_container_is_probed(tmp_path: Path, extension: str) -> None:
    rate = 48000 if extension == "opus" else 22050
    path = write(np.zeros(rate, np.float32), rate, tmp_path / f"a.{extension}", channels=2)
    info = probe(path, LIMITS)
    assert (info.format, info.subtype) == REPORTED[extension]
    assert (info.sample_rate, info.channels) == (rate, 2)
    assert info.duration_s == pytest.approx(1.0, abs=0.1)


def test_the_extension_does_not_matter(tmp_path: Path) -> None:
    path = write(np.zeros(8000, np.float32), 8000, tmp_path / "a.mp3")
    disguised = path.rename(tmp_path / "a.wav")
    assert probe(disguised, LIMITS).format == "MP3"


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(InvalidInput) as caught:
        probe(tmp_path / "empty", LIMITS)
    assert caught.value.code == "empty_file"


@pytest.mark.parametrize("content", [b"\x00\x01garbage" * 100, b"hello, world\n" * 50])
def test_not_audio_is_unsupported(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.wav").write_bytes(content)
    with pytest.raises(UnsupportedFormat, match="accepted containers"):
        probe(tmp_path / "x.wav", LIMITS)


def test_a_zip_is_unsupported(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as archive:
        archive.writestr("a.txt", "not audio" * 100)
    with pytest.raises(UnsupportedFormat):
        probe(tmp_path / "a.zip", LIMITS)


def test_a_header_claiming_more_than_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "liar.wav"
    sf.write(path, np.zeros(1000, np.int16), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    data[40:44] = struct.pack("<I", 0xFFFFFFF0)  # the data chunk claims ~4 GiB
    path.write_bytes(bytes(data))
    assert probe(path, LIMITS).frames == 1000  # libsndfile counts the bytes that are there


def test_a_flac_of_unknown_length_is_decoded_whole(tmp_path: Path) -> None:
    # libsndfile alone refused this as "written to a pipe"; FFmpeg decodes it, and the length
    # comes from what is decoded.
    path = tmp_path / "piped.flac"
    sf.write(path, np.zeros(3 * 16000, np.float32), 16000)
    data = bytearray(path.read_bytes())
    (packed,) = struct.unpack(">Q", data[18:26])
    data[18:26] = struct.pack(">Q", packed & ~(2**36 - 1))  # total_samples 0: "unknown"
    path.write_bytes(bytes(data))
    info = probe(path, LIMITS)
    assert (info.frames, info.length_trusted) == (0, False)
    blocks = decode(path, info, 16000, max_frames=10**9)
    assert sum(len(block) for block in blocks) == 3 * 16000
    assert blocks.info().duration_s == 3.0


def test_a_flac_claiming_huge_total_samples(tmp_path: Path) -> None:
    path = tmp_path / "liar.flac"
    sf.write(path, np.zeros(1000, np.float32), 16000)
    data = bytearray(path.read_bytes())
    (packed,) = struct.unpack(">Q", data[18:26])
    data[18:26] = struct.pack(">Q", packed | (2**36 - 1))  # STREAMINFO total_samples: 2^36 - 1
    path.write_bytes(bytes(data))
    with pytest.raises(TooLarge):
        probe(path, LIMITS)


@pytest.mark.parametrize(
    ("rate", "channels", "code"),
    [
        (4000, 1, "unsupported_sample_rate"),
        (384000, 1, "unsupported_sample_rate"),
        (16000, 9, "unsupported_channels"),
    ],
)
def test_shapes_outside_the_limits(tmp_path: Path, rate: int, channels: int, code: str) -> None:
    path = tmp_path / "a.wav"
    sf.write(path, np.zeros((rate // 10, channels), np.float32), rate, subtype="PCM_16")
    with pytest.raises(InvalidInput) as caught:
        probe(path, LIMITS)
    assert caught.value.code == code
    assert "accepted" in caught.value.message


def test_too_long_from_the_header(tmp_path: Path) -> None:
    path = tmp_path / "long.flac"
    sf.write(path, np.zeros(8000 * 61, np.float32), 8000)
    with pytest.raises(TooLarge) as caught:
        probe(path, LIMITS)
    assert caught.value.code == "audio_too_long"


def test_zero_frames(tmp_path: Path) -> None:
    path = tmp_path / "none.wav"
    sf.write(path, np.zeros(0, np.float32), 16000)
    with pytest.raises(InvalidInput) as caught:
        probe(path, LIMITS)
    assert caught.value.code == "empty_audio"


@pytest.mark.parametrize(
    "subtype", ["PCM_U8", "PCM_24", "DOUBLE", "ULAW", "ALAW", "IMA_ADPCM", "MS_ADPCM", "FLOAT"]
)
def test_pcm_variants_are_accepted(tmp_path: Path, subtype: str) -> None:
    path = tmp_path / "a.wav"
    sf.write(path, np.zeros(16000, np.float32), 16000, subtype=subtype)
    assert probe(path, LIMITS).subtype == subtype

"""A WAV read while it is uploaded: the bytes counted, the layout read from its header, and
libsndfile's blocks identical to those of the complete file."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio.arrival import HEADER_BYTES, Arrival, wav_layout
from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import BodyTimeout, ErrorCode
from arengine.types import AudioInfo
from tests.arriving import Arriving

LIMITS = AudioLimits(
    max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


def _stereo_wav(path: Path, seconds: float = 20.0, rate: int = 16000) -> Path:
    rng = np.random.default_rng(7)
    t = np.arange(int(seconds * rate)) / rate
    left = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(len(t))
    right = 0.3 * np.sin(2 * np.pi * 660 * t)
    sf.write(path, np.stack([left, right], axis=1), rate, subtype="PCM_16")
    return path


def _decoded(path: Path, arrival: Arrival | None = None) -> tuple[np.ndarray, AudioInfo]:
    info = probe(path, LIMITS, None, arrival)
    decoding = decode(path, info, 16000, 10**9, arrival)
    return np.concatenate(list(decoding)), decoding.info()


def test_a_wav_read_as_it_arrives_decodes_exactly_as_the_complete_file(tmp_path: Path) -> None:
    source = _stereo_wav(tmp_path / "whole.wav")
    upload = Arriving(source, tmp_path / "arriving.wav")
    upload.start()
    got: list[tuple[np.ndarray, AudioInfo]] = []
    reader = threading.Thread(target=lambda: got.append(_decoded(upload.target, upload.arrival)))
    reader.start()
    while upload.sent < len(upload.data):  # pieces of odd sizes: frames split across them
        upload.send(12_345)
    upload.arrival.finish()
    reader.join(30)
    expected, expected_info = _decoded(source)
    samples, info = got[0]
    assert np.array_equal(samples, expected)
    assert info == expected_info


def test_an_upload_that_stops_short_gives_what_arrived_and_says_it_was_truncated(
    tmp_path: Path,
) -> None:
    source = _stereo_wav(tmp_path / "whole.wav")
    upload = Arriving(source, tmp_path / "arriving.wav")
    upload.start()
    upload.send(len(upload.data) // 2 - HEADER_BYTES)
    upload.arrival.finish()  # the body was complete: the client sent half a file
    samples, info = _decoded(upload.target, upload.arrival)
    whole, _ = _decoded(source)
    assert 0 < len(samples) < len(whole)
    assert np.array_equal(samples, whole[: len(samples)])
    assert info.truncated
    assert "the result covers what is there" in info.warnings[0]


def test_a_failed_upload_fails_the_waiting_read_with_its_error(tmp_path: Path) -> None:
    upload = Arriving(_stereo_wav(tmp_path / "whole.wav"), tmp_path / "arriving.wav")
    upload.start()
    failures: list[BodyTimeout] = []

    def read() -> None:
        try:
            _decoded(upload.target, upload.arrival)
        except BodyTimeout as error:
            failures.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    upload.arrival.fail(BodyTimeout("no body data for 30 s"))
    reader.join(30)
    assert not reader.is_alive()
    assert [error.code for error in failures] == [ErrorCode.BODY_TIMEOUT]


def test_ready_says_whether_frames_are_on_disk_and_calls_back_once_when_they_are(
    tmp_path: Path,
) -> None:
    upload = Arriving(_stereo_wav(tmp_path / "whole.wav"), tmp_path / "arriving.wav")
    upload.start()
    layout = upload.arrival.layout
    assert layout is not None
    calls: list[int] = []
    wanted = (HEADER_BYTES - layout.data_offset) // layout.frame_bytes + 1000
    assert not upload.arrival.ready(wanted, lambda: calls.append(upload.sent))
    upload.send(1000 * layout.frame_bytes - 1)  # one byte short
    assert calls == []
    upload.send(1)
    assert calls == [upload.sent]
    assert upload.arrival.ready(wanted, lambda: calls.append(-1))
    upload.send(4)
    assert calls == [upload.sent - 4]  # called once
    far = layout.frames
    assert not upload.arrival.ready(far, lambda: calls.append(-2))
    upload.arrival.finish()  # the end counts as arrived: nothing more will come
    assert calls[-1] == -2
    assert upload.arrival.ready(far, lambda: calls.append(-3))


def test_the_layout_comes_from_the_header_and_is_bounded_by_the_body(tmp_path: Path) -> None:
    path = _stereo_wav(tmp_path / "a.wav", seconds=2.0)
    size = path.stat().st_size
    layout = wav_layout(path, size)
    assert layout is not None
    assert (layout.data_offset, layout.frame_bytes, layout.end) == (44, 4, size)
    assert layout.frames == sf.info(str(path)).frames
    # A header that claims more than the declared body (a pipe writes 0xFFFFFFFF) is bounded.
    bounded = wav_layout(path, size - 400)
    assert bounded is not None
    assert (bounded.stated_end, bounded.end, bounded.frames) == (size - 400, size - 400, 31900)


@pytest.mark.parametrize(("fmt", "subtype"), [("FLAC", "PCM_16"), ("WAV", "IMA_ADPCM")])
def test_only_a_pcm_or_float_wav_is_read_as_it_arrives(
    tmp_path: Path, fmt: str, subtype: str
) -> None:
    path = tmp_path / f"a.{fmt.lower()}"
    sf.write(path, np.zeros(16000, np.float32), 16000, format=fmt, subtype=subtype)
    assert wav_layout(path, path.stat().st_size) is None

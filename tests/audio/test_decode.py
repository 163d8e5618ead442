"""Decoding: block by block, mono mix, a real resampler, caps counted while decoding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio.decode import decode, is_integer_pcm, read_blocks, to_mono
from arengine.audio.tee import Tee
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import InvalidInput, TooLarge

LIMITS = AudioLimits(
    max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


def _tone(freq: float, rate: int, seconds: float) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * freq * np.arange(int(rate * seconds)) / rate)).astype(
        np.float32
    )


def _peak_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    return float(np.argmax(spectrum) * rate / len(audio))


def _resampled(blocks: list[np.ndarray], rate_in: int, rate_out: int) -> np.ndarray:
    return np.concatenate(list(Tee(iter(blocks), rate_in, [rate_out]).reader(0)))


def test_resampling_keeps_frequencies_and_removes_what_cannot_be_kept() -> None:
    rate = 44100
    kept = _resampled(np.array_split(_tone(3000, rate, 2), 37), rate, 16000)
    assert len(kept) == pytest.approx(32000, abs=2)
    assert _peak_hz(kept, 16000) == pytest.approx(3000, abs=5)
    # 11 kHz is above the 8 kHz Nyquist limit: a naive decimation would alias it to 5 kHz.
    gone = _resampled([_tone(11000, rate, 2)], rate, 16000)
    assert np.sqrt(np.mean(gone[1000:-1000] ** 2)) < 0.01


def test_a_tee_gives_each_reader_the_stream_at_its_rate_whatever_order_they_read_in() -> None:
    rate = 44100
    blocks = np.array_split(_tone(1000, rate, 3), 11)
    tee = Tee(iter(blocks), rate, [16000, 22050, 16000])
    first, notes, again = (tee.reader(i) for i in range(3))
    head = next(notes)  # the 22.05 kHz reader pulls first: the others' blocks wait for them
    assert tee.held_samples(0) == tee.held_samples(2) > 0
    rest = [np.concatenate(list(reader)) for reader in (first, again)]
    assert tee.held_samples(1) > 0 and tee.held_samples(0) == tee.held_samples(2) == 0
    alone = [_resampled(list(blocks), rate, out) for out in (16000, 22050)]
    assert np.array_equal(rest[0], alone[0]) and np.array_equal(rest[1], alone[0])
    assert np.array_equal(np.concatenate([head, *notes]), alone[1])
    assert tee.held_samples(1) == 0


def test_a_closed_tee_drops_what_it_held_and_closes_its_source() -> None:
    closed: list[bool] = []

    def source() -> Iterator[np.ndarray]:
        try:
            yield from np.array_split(_tone(1000, 16000, 2), 4)
        finally:
            closed.append(True)

    tee = Tee(source(), 16000, [16000, 16000])
    next(tee.reader(0))
    assert tee.held_samples(1) == 8000
    tee.close()
    assert closed == [True] and tee.held_samples(1) == 0 and list(tee.reader(1)) == []


def test_channels_are_averaged() -> None:
    block = np.stack([np.full(10, 0.2, np.float32), np.full(10, 0.6, np.float32)], axis=1)
    (mono,) = to_mono(iter([block]))
    assert mono.dtype == np.float32
    assert np.allclose(mono, 0.4)


def test_non_finite_samples_are_refused() -> None:
    block = np.zeros((100, 1), np.float32)
    block[50] = np.nan
    with pytest.raises(InvalidInput, match="NaN or infinite"):
        list(to_mono(iter([block])))


def test_float_samples_beyond_full_scale_are_clipped() -> None:
    (mono,) = to_mono(iter([np.array([[1e30], [-3.0], [0.5]], np.float32)]))
    assert mono.tolist() == [1.0, -1.0, 0.5]


def test_duration_cap_is_counted_on_decoded_frames(tmp_path: Path) -> None:
    path = tmp_path / "long.flac"
    sf.write(path, np.zeros(50_000, np.float32), 8000)
    info = probe(path, LIMITS)
    with pytest.raises(TooLarge, match="more than 20000 frames"):
        list(read_blocks(path, info, max_frames=20_000, block_frames=4096))


def test_decode_chain_gives_mono_at_the_model_rate(tmp_path: Path) -> None:
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([_tone(440, 48000, 1.5)] * 2, axis=1), 48000)
    out = np.concatenate(list(decode(path, probe(path, LIMITS), 16000, max_frames=10**9)))
    assert len(out) == pytest.approx(24000, abs=2)
    assert _peak_hz(out, 16000) == pytest.approx(440, abs=2)


def test_integer_pcm_skips_the_checks_and_decodes_the_same_samples(tmp_path: Path) -> None:
    path = tmp_path / "stereo.wav"
    rng = np.random.default_rng(3)
    sf.write(path, rng.uniform(-1, 1, (40_000, 2)), 16000, subtype="PCM_16")
    info = probe(path, LIMITS)
    assert is_integer_pcm(info)
    checked = np.concatenate(list(to_mono(read_blocks(path, info, 10**9))))
    assert np.array_equal(np.concatenate(list(decode(path, info, 16000, 10**9))), checked)


def test_a_float_wav_is_still_checked_and_clipped(tmp_path: Path) -> None:
    path = tmp_path / "float.wav"
    sf.write(path, np.array([0.5, 1.5, -2.0], np.float32), 16000, subtype="FLOAT")
    info = probe(path, LIMITS)
    assert not is_integer_pcm(info)
    assert np.concatenate(list(decode(path, info, 16000, 10**9))).tolist() == [0.5, 1.0, -1.0]
    sf.write(path, np.array([0.5, np.nan, 0.1], np.float32), 16000, subtype="FLOAT")
    with pytest.raises(InvalidInput, match="NaN or infinite"):
        list(decode(path, probe(path, LIMITS), 16000, 10**9))


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24"])
def test_ffmpeg_mixes_down_in_c_to_the_mean_of_the_channels(tmp_path: Path, subtype: str) -> None:
    # FLAC goes to FFmpeg, whose filter graph (`ffmpeg.Mixdown`) scales, averages and gathers
    # what libsndfile gives as integers scaled to [-1, 1): the same samples, in full blocks.
    path = tmp_path / "three.flac"
    rng = np.random.default_rng(5)
    sf.write(path, rng.uniform(-1, 1, (100_000, 3)), 16000, subtype=subtype)
    info = probe(path, LIMITS)
    assert info.decoder == "ffmpeg"
    blocks = list(read_blocks(path, info, 10**9, block_frames=30_000))
    assert [block.shape for block in blocks] == [(30_000, 1)] * 3 + [(10_000, 1)]
    expected = sf.read(path, dtype="float32")[0].mean(axis=1)
    np.testing.assert_allclose(np.concatenate(blocks)[:, 0], expected, atol=1e-7)

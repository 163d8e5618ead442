"""When a recording was made: read from BWF, GUANO, AudioMoth's comment and the file name."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import soundfile as sf

from arengine.audio.recorded import birdnet_week, recorded_at, recording_time

RATE = 48000


def _chunk(ident: bytes, body: bytes) -> bytes:
    return ident + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def _wav(path: Path, before: list[bytes], after: tuple[bytes, ...] = ()) -> Path:
    """A 16-bit mono WAV of a second of tone, `before` chunks ahead of `data`, `after` after."""
    tone = (0.1 * np.sin(2 * np.pi * 440 * np.arange(RATE) / RATE) * 32767).astype("<i2")
    fmt = _chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, RATE, RATE * 2, 2, 16))
    body = b"WAVE" + fmt + b"".join(before) + _chunk(b"data", tone.tobytes()) + b"".join(after)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    samples, rate = sf.read(path)  # a WAV every reader takes
    assert rate == RATE and len(samples) == RATE
    return path


def _bext(date: bytes, clock: bytes, reference: int) -> bytes:
    body = b"Dawn chorus".ljust(256, b"\0") + b"SM4".ljust(32, b"\0") + b"".ljust(32, b"\0")
    body += date + clock + struct.pack("<II", reference & 0xFFFFFFFF, reference >> 32)
    return _chunk(b"bext", body + b"\0" * 256)


def test_bwf_time_reference_counts_samples_since_midnight(tmp_path: Path) -> None:
    reference = (5 * 3600 + 30 * 60) * RATE + RATE // 2
    path = _wav(tmp_path / "a.wav", [_bext(b"2025-05-01", b"05:31:10", reference)])
    assert recorded_at(path) == datetime(2025, 5, 1, 5, 30, 0, 500000)


def test_bwf_without_a_time_reference_gives_its_origination_time(tmp_path: Path) -> None:
    path = _wav(tmp_path / "a.wav", [_bext(b"2025:05:01", b"05-31-10", 0)])
    assert recorded_at(path) == datetime(2025, 5, 1, 5, 31, 10)


def test_guano_after_the_audio(tmp_path: Path) -> None:
    guano = b"GUANO|Version: 1.0\nMake: Wildlife Acoustics\nTimestamp: 2025-05-01T05:30:00-04:00\n"
    path = _wav(tmp_path / "a.wav", [], (_chunk(b"guan", guano),))
    found = recorded_at(path)
    assert found == datetime(2025, 5, 1, 9, 30, tzinfo=UTC)
    assert found is not None and found.utcoffset() == timedelta(hours=-4)


def test_audiomoth_comment_with_its_utc_offset(tmp_path: Path) -> None:
    comment = b"Recorded at 05:30:00 01/05/2025 (UTC+1) by AudioMoth 24F319055FDF2E2C at gain 2"
    info = b"INFO" + _chunk(b"ICMT", comment + b"\0")
    path = _wav(tmp_path / "a.wav", [_chunk(b"LIST", info)])
    assert recorded_at(path) == datetime(2025, 5, 1, 5, 30, tzinfo=timezone(timedelta(hours=1)))
    plain = b"INFO" + _chunk(b"ICMT", b"Recorded at 23:59:58 31/12/2024 (UTC) by AudioMoth")
    utc = _wav(tmp_path / "b.wav", [_chunk(b"LIST", plain)])
    assert recorded_at(utc) == datetime(2024, 12, 31, 23, 59, 58, tzinfo=UTC)


def test_the_file_name_when_the_file_says_nothing(tmp_path: Path) -> None:
    path = _wav(tmp_path / "upload-3f2a.wav", [])
    assert recorded_at(path) is None
    assert recorded_at(path, name="PA01_20250501_053000.WAV") == datetime(2025, 5, 1, 5, 30)
    assert recorded_at(path, name="20250501T053000.wav") == datetime(2025, 5, 1, 5, 30)
    assert recorded_at(path, name="take_20251340_053000.wav") is None  # month 13
    assert recorded_at(path, name="123202505010530001.wav") is None  # inside a longer number


def test_the_file_beats_its_name(tmp_path: Path) -> None:
    path = _wav(tmp_path / "SITE_20990101_000000.wav", [_bext(b"2025-05-01", b"05:31:10", 0)])
    assert recorded_at(path) == datetime(2025, 5, 1, 5, 31, 10)


def test_other_files_and_damage_give_none(tmp_path: Path) -> None:
    flac = tmp_path / "a.flac"
    sf.write(flac, np.zeros(RATE, dtype="f4"), RATE)
    assert recorded_at(flac) is None
    torn = _wav(tmp_path / "torn.wav", [_bext(b"2025-05-01", b"05:31:10", 0)])
    torn.write_bytes(torn.read_bytes()[:200])  # cut inside the bext chunk
    assert recorded_at(torn) is None


def test_birdnets_48_week_year() -> None:
    assert birdnet_week(datetime(2025, 1, 1)) == 1
    assert birdnet_week(datetime(2025, 5, 1)) == 16  # day 121 of 365: ceil(15.9)
    assert birdnet_week(datetime(2024, 12, 31)) == 48


def _guano(timestamp: bytes) -> bytes:
    return _chunk(b"guan", b"GUANO|Version: 1.0\nTimestamp: " + timestamp + b"\n")


def _moth(clock: bytes) -> bytes:
    return _chunk(b"LIST", b"INFO" + _chunk(b"ICMT", b"Recorded at " + clock + b" by AudioMoth"))


def test_a_time_too_late_for_the_recording_s_times_is_a_warning_and_no_time(
    tmp_path: Path,
) -> None:
    """9999-12-31 23:59:59 from any place: the wall clock of a tag after it is no date (the
    table formats answered 500); the time is left out, with a warning naming its place."""
    late = [
        ("name", [], "SITE_99991231_235959.wav"),
        ("bext", [_bext(b"9999-12-31", b"23:59:59", 0)], "a.wav"),
        ("GUANO", [_guano(b"9999-12-31T23:59:59")], "a.wav"),
        ("AudioMoth", [_moth(b"23:59:59 31/12/9999 (UTC)")], "a.wav"),
    ]
    for place, chunks, name in late:
        found = recording_time(_wav(tmp_path / name, chunks))
        assert found.when is None, place
        [warning] = found.warnings
        assert "9999-12-31T23:59:59" in warning and "too late" in warning, warning
    early = recording_time(_wav(tmp_path / "b.wav", [_guano(b"0001-01-01T00:00:00+05:00")]))
    assert early.when is None and "too early" in early.warnings[0]


def test_a_later_place_gives_the_time_when_an_earlier_one_is_impossible(tmp_path: Path) -> None:
    path = _wav(tmp_path / "SITE_20250501_053000.wav", [_guano(b"9999-12-31T23:59:59")])
    found = recording_time(path)
    assert found.when == datetime(2025, 5, 1, 5, 30)
    assert len(found.warnings) == 1 and "GUANO" in found.warnings[0]


def test_a_bext_time_reference_of_a_day_or_more_is_not_a_time_of_day(tmp_path: Path) -> None:
    """2**52 samples overflowed `timedelta` (500 `stage_failed` in every format); a day and a
    second moved the date silently. Both: a warning, and OriginationTime instead."""
    for reference in (1 << 52, (1 << 64) - 1, (86_400 + 1) * RATE, 86_400 * RATE):
        path = _wav(tmp_path / "a.wav", [_bext(b"2025-05-01", b"05:31:10", reference)])
        found = recording_time(path)
        assert found.when == datetime(2025, 5, 1, 5, 31, 10), reference
        [warning] = found.warnings
        assert "TimeReference" in warning and f"{reference} samples" in warning
    # The day's last sample is a time of that day.
    last = _wav(tmp_path / "b.wav", [_bext(b"2025-05-01", b"05:31:10", 86_400 * RATE - 1)])
    assert recorded_at(last) == datetime(2025, 5, 1, 23, 59, 59, 999979)


def test_impossible_times_in_the_file_are_warnings(tmp_path: Path) -> None:
    for chunk, place in (
        (_bext(b"2025-13-01", b"05:31:10", 0), "OriginationDate"),
        (_bext(b"2025-05-01", b"25:61:10", 0), "OriginationTime"),
        (_guano(b"2025-05-01 at dawn"), "GUANO"),
        (_moth(b"05:30:00 31/02/2025 (UTC)"), "AudioMoth"),
        (_moth(b"05:30:00 01/05/2025 (UTC+30)"), "AudioMoth"),
    ):
        found = recording_time(_wav(tmp_path / "a.wav", [chunk]))
        assert found.when is None and len(found.warnings) == 1, place
        assert place in found.warnings[0], found.warnings

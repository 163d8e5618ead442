"""When a recording was made, where the file says: BWF, GUANO, AudioMoth's comment, its name.

Automatic recorders write the wall-clock time of the first sample in one of a few places; this
reads, in this order of trust:

- a BWF `bext` chunk (Broadcast WAV, EBU Tech 3285): `OriginationDate` and, when
  `TimeReference` (samples since midnight) is set, that; else `OriginationTime`;
- a GUANO `guan` chunk (bat and bird recorders: Wildlife Acoustics, Pettersson, Titley):
  its `Timestamp` field, ISO 8601 with or without an offset;
- AudioMoth's `ICMT` comment (`LIST`/`INFO`): "Recorded at 05:30:00 01/05/2025 (UTC+1) by ...";
- the file name: `YYYYMMDD_HHMMSS` (AudioMoth, Song Meter: `SITE_20250501_053000.wav`).

A time with a zone (GUANO's offset, AudioMoth's UTC offset) comes back aware; the others naive
(the recorder's local clock). Only the chunk headers are read, so a file of any length costs a few
small reads.

What a file says is data, not a promise: a time that is not a date (month 13), a `TimeReference`
past one day, or a date so late that the recording's times after it are not dates any more
(9999-12-31) gives a warning and no time from that place; the next place is read then.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

_NAME = re.compile(r"(?<!\d)(\d{8})[_T-](\d{6})(?!\d)")
_AUDIOMOTH = re.compile(
    r"Recorded at (\d{2}):(\d{2}):(\d{2}) (\d{2})/(\d{2})/(\d{4})"  # hh:mm:ss dd/mm/yyyy
    r" \(UTC(?:([+-])(\d{1,2})(?::(\d{2}))?)?\)"
)
_MAX_TEXT = 1 << 16
"""The most bytes of a text chunk read (GUANO and INFO are a few hundred)."""
SPAN = timedelta(days=366)
"""How far past its first sample a recording's times must still be dates (a result holds at
most 116 days): an earlier or later start is refused, so no output format meets a time it
cannot write."""
_EARLIEST, _LATEST = datetime.min + timedelta(days=1), datetime.max - SPAN
"""A day of room before: an aware time's UTC offset moves it by less than a day."""


@dataclass(frozen=True, slots=True)
class RecordingTime:
    """When the first sample was recorded (None where the file says nothing usable), and why a
    time the file states was not used."""

    when: datetime | None
    warnings: tuple[str, ...] = ()


def recording_time(path: Path, name: str | None = None) -> RecordingTime:
    """The wall-clock time of the recording's first sample, and what was wrong with any time the
    file states but that cannot be used (each place that gives one is read in order of trust).

    `name` is the name the user gave the file (an upload's), when `path` is a temporary copy.

    >>> recording_time(Path("/nonexistent/SITE_99991231_235959.wav")).warnings
    ('the file name gives 9999-12-31T23:59:59, too late to be a recording time: ignored',)
    """
    chunks = _riff_chunks(path)
    sample_rate = _sample_rate(chunks.get(b"fmt "))
    warnings: list[str] = []
    readers: tuple[tuple[str, Callable[[list[str]], datetime | None]], ...] = (
        ("the bext chunk", lambda warn: _bext(chunks.get(b"bext"), sample_rate, warn)),
        ("the GUANO Timestamp", lambda warn: _guano(chunks.get(b"guan"), warn)),
        ("the AudioMoth comment", lambda warn: _audiomoth(chunks.get(b"LIST"), warn)),
        ("the file name", lambda warn: _from_name(name or path.name)),
    )
    for place, read in readers:
        found = read(warnings)
        if found is None:
            continue
        problem = _out_of_range(found)
        if problem is None:
            return RecordingTime(found, tuple(warnings))
        warnings.append(f"{place} gives {found.isoformat()}, {problem}: ignored")
    return RecordingTime(None, tuple(warnings))


def recorded_at(path: Path, name: str | None = None) -> datetime | None:
    """The wall-clock time of the recording's first sample, or None where the file says none
    (`recording_time` also says why a stated time was not used).

    >>> recorded_at(Path("/nonexistent/SITE_20250501_053000.wav"))
    datetime.datetime(2025, 5, 1, 5, 30)
    """
    return recording_time(path, name).when


def _out_of_range(when: datetime) -> str | None:
    naive = when.replace(tzinfo=None)
    if naive > _LATEST:
        return "too late to be a recording time"
    if naive < _EARLIEST:
        return "too early to be a recording time"
    return None


def birdnet_week(when: datetime) -> int:
    """BirdNET's week (1-48) of a date, as birdnetlib computes it from the day of the year.

    >>> birdnet_week(datetime(2025, 1, 1)), birdnet_week(datetime(2025, 12, 31))
    (1, 48)
    """
    day = when.timetuple().tm_yday
    days = 366 if when.year % 4 == 0 and (when.year % 100 != 0 or when.year % 400 == 0) else 365
    return max(1, min(48, -(-day * 48 // days)))


def _riff_chunks(path: Path) -> dict[bytes, bytes]:
    """The small chunks of a RIFF/WAVE file by id (the `data` chunk skipped); {} for others."""
    chunks: dict[bytes, bytes] = {}
    try:
        with path.open("rb") as source:
            head = source.read(12)
            if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
                return chunks
            while True:
                header = source.read(8)
                if len(header) < 8:
                    return chunks
                ident, size = header[:4], struct.unpack("<I", header[4:])[0]
                if ident == b"data" or size > _MAX_TEXT:
                    if ident == b"data" and head[:4] == b"RF64":
                        return chunks  # its real size is in ds64; the metadata comes first
                    source.seek(size + (size & 1), 1)
                    continue
                chunks.setdefault(ident, source.read(size))
                source.seek(size & 1, 1)
    except OSError:
        return chunks


def _sample_rate(fmt: bytes | None) -> int | None:
    return struct.unpack_from("<I", fmt, 4)[0] if fmt is not None and len(fmt) >= 8 else None


_DAY_S = 86_400


def _bext(chunk: bytes | None, sample_rate: int | None, warnings: list[str]) -> datetime | None:
    if chunk is None or len(chunk) < 346:
        return None
    date = chunk[320:330].decode("ascii", "replace")
    clock = chunk[330:338].decode("ascii", "replace")
    low, high = struct.unpack_from("<II", chunk, 338)
    digits = re.findall(r"\d+", date)
    if len(digits) != 3:
        return None
    try:
        day = datetime(int(digits[0]), int(digits[1]), int(digits[2]))
    except ValueError:
        warnings.append(f"the bext chunk's OriginationDate {date!r} is not a date: ignored")
        return None
    reference = (high << 32) | low
    if reference and sample_rate:
        # Samples since midnight: a day's worth or more is not a time of that day (and 2**52
        # samples overflowed `timedelta`); OriginationTime is the time then.
        if reference < _DAY_S * sample_rate:
            return day + timedelta(seconds=reference / sample_rate)
        warnings.append(
            f"the bext chunk's TimeReference ({reference} samples at {sample_rate} Hz) is not a "
            "time of day: OriginationTime used instead"
        )
    hms = [int(x) for x in re.findall(r"\d+", clock)]
    if len(hms) != 3:
        return None
    try:
        return day.replace(hour=hms[0], minute=hms[1], second=hms[2])
    except ValueError:
        warnings.append(f"the bext chunk's OriginationTime {clock!r} is not a time: ignored")
        return None


def _guano(chunk: bytes | None, warnings: list[str]) -> datetime | None:
    if chunk is None:
        return None
    for line in chunk.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Timestamp":
            try:
                return datetime.fromisoformat(value.strip())
            except ValueError:
                stated = value.strip()[:64]
                warnings.append(f"the GUANO Timestamp {stated!r} is not a time: ignored")
                return None
    return None


def _audiomoth(chunk: bytes | None, warnings: list[str]) -> datetime | None:
    if chunk is None or chunk[:4] != b"INFO":
        return None
    found = _AUDIOMOTH.search(chunk.decode("latin-1"))
    if found is None:
        return None
    hour, minute, second, day, month, year = (int(found.group(i)) for i in range(1, 7))
    sign, hours, minutes = found.group(7), int(found.group(8) or 0), int(found.group(9) or 0)
    offset = timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
    try:
        zone = UTC if not offset else timezone(offset)
        return datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError:
        warnings.append(f"the AudioMoth comment's time {found.group(0)!r} is not a time: ignored")
        return None


def _from_name(name: str) -> datetime | None:
    found = _NAME.search(Path(name).name)
    if found is None:
        return None
    try:
        return datetime.strptime(found.group(1) + found.group(2), "%Y%m%d%H%M%S")
    except ValueError:
        return None

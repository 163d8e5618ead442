"""What a file's first bytes and headers state, read without the decoders.

Which container a file starts like is declared in `containers.py`; this reads the headers that
validation and decoding check against what the file holds (a WAV's chunks, FLAC's sample count,
MP4's top-level boxes), and names the two decoders.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 64
"""Bytes read to recognise a file."""

LIBSNDFILE = "libsndfile"
FFMPEG = "ffmpeg"


def head(path: Path) -> bytes:
    """The first `HEAD_BYTES` bytes of `path`."""
    with open(path, "rb") as file:
        return file.read(HEAD_BYTES)


@dataclass(frozen=True, slots=True)
class WavHeader:
    """What a RIFF/WAVE (or RF64) header states, read without libsndfile (which refuses some of
    it, and trusts the rest). `wav.py` holds what is made of it."""

    sample_rate: int
    channels: int
    data_bytes: int
    """Bytes the `data` chunk claims (RF64: its `ds64` chunk)."""
    data_present: int
    """Bytes of it that the file holds."""
    data_offset: int = 0
    """Where the `data` chunk's bytes start."""
    format_tag: int = 0
    """1 PCM, 3 float, 0xFFFE extensible; others are compressed."""
    block_align: int = 0
    """Bytes per frame, as the header states it."""
    bits_per_sample: int = 0
    """Bits of each sample's container (8, 16, 24, 32, 64 for PCM and float)."""
    size_field: tuple[int, int] = (0, 4)
    """Where `data_bytes` is written: its offset in the file and its width in bytes."""


def wav_header(path: Path) -> WavHeader | None:
    """The `fmt ` and `data` chunks of a RIFF/WAVE or RF64 file; None if either is missing."""
    size = path.stat().st_size
    rate = channels = None
    tag = align = bits = 0
    ds64: tuple[int, int] | None = None  # RF64: where the data size is, and what it says
    with open(path, "rb") as file:
        if file.read(12)[8:12] != b"WAVE":
            return None
        for _ in range(_MAX_CHUNKS):
            chunk = file.read(8)
            if len(chunk) < 8:
                return None
            kind, length = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            start = file.tell()
            if kind == b"fmt ":
                fmt = file.read(16)
                tag, channels, rate = struct.unpack("<HHI", fmt[:8]) if len(fmt) >= 8 else (0, 0, 0)
                align = struct.unpack("<H", fmt[12:14])[0] if len(fmt) >= 14 else 0
                bits = struct.unpack("<H", fmt[14:16])[0] if len(fmt) == 16 else 0
            elif kind == b"ds64" and length >= 16:
                ds64 = (start + 8, struct.unpack("<Q", file.read(16)[8:])[0])
            elif kind == b"data" and rate is not None and channels is not None:
                field = (start - 4, 4)
                if length == 0xFFFFFFFF and ds64 is not None:
                    field, length = (ds64[0], 8), ds64[1]
                present = max(0, min(length, size - start))
                return WavHeader(rate, channels, length, present, start, tag, align, bits, field)
            file.seek(start + length + (length & 1))
    return None


_MAX_CHUNKS = 64
"""Chunks walked before `data`; a real WAV has a handful."""


def flac_total_samples(data: bytes) -> int:
    """STREAMINFO's total_samples (0: the encoder did not know, as when writing to a pipe)."""
    if not data.startswith(b"fLaC") or len(data) < 26 or data[4] & 0x7F != 0:
        return 0
    (packed,) = struct.unpack(">Q", data[18:26])
    return int(packed & (2**36 - 1))


def mp4_box_overrun(path: Path) -> str | None:
    """The first top-level MP4 box other than `mdat` that claims more bytes than the file holds.

    A cut-short `mdat` is a truncated recording (decoded as far as it goes); any other box that
    overruns the file is a lie about the index, which FFmpeg would trust when allocating.
    """
    size = path.stat().st_size
    at = 0
    with open(path, "rb") as file:
        for _ in range(_MAX_CHUNKS):
            file.seek(at)
            header = file.read(16)
            if len(header) < 8:
                return None
            length, kind = struct.unpack(">I", header[:4])[0], header[4:8]
            if length == 1 and len(header) == 16:
                length = struct.unpack(">Q", header[8:16])[0]
            if length == 0:
                length = size - at
            if length < 8:
                return None
            if at + length > size and kind != b"mdat":
                name = kind.decode("latin-1")
                return f"its {name!r} box claims {length} bytes; {size - at} are left in the file"
            at += length
    return None

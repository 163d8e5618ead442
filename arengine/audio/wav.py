"""A WAV's header read against what its file holds: one policy for every path.

Whether the upload came raw or as a multipart part, complete or still arriving
(`arrival.py`), a PCM or float WAV is read where its frames lie, not where its header says
they end:

- a frame is `channels x ceil(bits / 8)` bytes, as libsndfile reads it; a `block_align` that
  says otherwise is named in a warning;
- a data size of 0 or 0xFFFFFFFF followed by audio (streaming writers, a WAV written to a pipe)
  states no length: the frames run to the end of the file, with no warning;
- a data size that ends before the file does, followed by something that is not another chunk,
  understated the audio: all of it is decoded, with the warning `DecodeReport.finish` gives
  every header that states less than the file holds;
- a data size past the end of the file is a file cut short: what is there, `truncated`, warned.

The frames are read by libsndfile; where the header understates them, through a view of the
file whose data size is corrected (`_Restated`), so every subtype reads as libsndfile reads it.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import soundfile as sf

from arengine.audio import sniff
from arengine.errors import CorruptAudio

if TYPE_CHECKING:
    from arengine.audio.arrival import Arrival

UNSTATED = 0xFFFFFFFF
"""The data size a writer that cannot seek back leaves in the header."""

FIXED_FRAME_TAGS = (1, 3, 0xFFFE)
"""Format tags whose frames are a fixed number of bytes: PCM, float, extensible."""

_CHUNK_HEAD = 8


@dataclass(frozen=True, slots=True)
class WavLayout:
    """Where a WAV's frames lie: frame `n` is at `data_offset + n * frame_bytes`, the header's
    data chunk ends at `stated_end`, and the file (or the body still arriving) at `end`."""

    data_offset: int
    frame_bytes: int
    stated_end: int
    """Where the frames end as the header states it (within `end`); the file holds more when
    what follows is not a chunk."""
    end: int
    size_field: tuple[int, int] = (0, 4)
    """Where the header's data size is written: offset and width (`sniff.WavHeader`)."""
    restate: bool = False
    """libsndfile must be given the data size: the header's is 0, and audio follows."""
    warnings: tuple[str, ...] = ()
    """Where the header disagrees with itself (block_align), for the result."""

    @property
    def frames(self) -> int:
        """Frames the header states (all the file holds where it states none)."""
        return max(self.stated_end - self.data_offset, 0) // self.frame_bytes

    @property
    def most_frames(self) -> int:
        """Frames up to `end`: all the file can hold."""
        return max(self.end - self.data_offset, 0) // self.frame_bytes

    def byte_after(self, frames: int) -> int:
        """The end of the first `frames` frames (of the file, at most)."""
        return min(self.data_offset + frames * self.frame_bytes, self.end)


def layout(path: Path, end: int) -> WavLayout | None:
    """The layout of the PCM or float WAV at `path` whose bytes end at `end` (its size, or the
    declared length of a body still arriving); None for any other file."""
    header = sniff.wav_header(path)
    if header is None or header.format_tag not in FIXED_FRAME_TAGS:
        return None
    frame_bytes = header.channels * ((header.bits_per_sample + 7) // 8)
    if frame_bytes <= 0:
        return None
    warnings = []
    if header.block_align != frame_bytes:
        warnings.append(
            f"the WAV header's block_align is {header.block_align} bytes; {header.channels} "
            f"channel(s) of {header.bits_per_sample} bits are {frame_bytes}: read as {frame_bytes}"
        )
    offset = header.data_offset
    restate = header.data_bytes == 0 and more_after(path, offset, end)
    unstated = restate or header.data_bytes == UNSTATED
    stated_end = end if unstated else min(offset + header.data_bytes, end)
    return WavLayout(
        offset, frame_bytes, stated_end, end, header.size_field, restate, tuple(warnings)
    )


def more_after(path: Path, at: int, end: int) -> bool:
    """Whether the bytes at `at` (where a data chunk was said to end) are more audio rather than
    nothing, a pad byte, or another chunk (`LIST`, `id3 `: four printable characters and a size
    that fits before `end`)."""
    with open(path, "rb") as file:
        file.seek(at)
        head = file.read(_CHUNK_HEAD + 1)
    if len(head) < _CHUNK_HEAD:
        return False
    return not (_chunk(head[:_CHUNK_HEAD], at, end) or _chunk(head[1:], at + 1, end))


def _chunk(head: bytes, at: int, end: int) -> bool:
    if len(head) < _CHUNK_HEAD or not all(0x20 <= byte <= 0x7E for byte in head[:4]):
        return False
    length: int = struct.unpack("<I", head[4:])[0]
    return at + _CHUNK_HEAD + length <= end


def shortfall(path: Path) -> str | None:
    """The warning for a WAV whose header states more audio than the file holds (read once the
    file is complete), or None."""
    header = sniff.wav_header(path)
    if header is None or header.data_bytes == UNSTATED:
        return None
    if header.data_present >= header.data_bytes:
        return None
    return (
        f"the WAV header states {header.data_bytes} bytes of audio but the file holds "
        f"{header.data_present}: the result covers what is there"
    )


def blocks(
    path: Path, where: WavLayout, block_frames: int, arrival: Arrival | None = None
) -> Iterator[np.ndarray]:
    """libsndfile's `(frames, channels)` float32 blocks of the frames `where` places, through
    the frames the header states and on to the end of the file where more audio follows them.

    With `arrival`, the file is still being uploaded: it is reopened (at the frame reached)
    whenever all that was on disk has been read, since libsndfile counts a WAV's frames from the
    file's size when it opens it. Reading through a Python file object instead would take the
    GIL for every 8 KiB libsndfile reads; only a header that understates its data is read
    through one (`_Restated`).
    """
    done, limit, restated = 0, where.frames, where.restate
    while True:
        while done < limit:
            if arrival is not None:
                # Returns at once when the job's gate let this read start; waits if its
                # estimate fell short, or until the upload ends.
                arrival.wait(where.byte_after(done + min(block_frames, limit - done)))
            with _open(path, where if restated else None) as audio:
                if audio.frames <= done:  # the file ends before `limit`: cut short
                    return
                audio.seek(done)
                opened_at = done
                while done < limit and (block := read(audio, block_frames)) is not None:
                    block = block[: limit - done]
                    done += len(block)
                    yield block
                if done == opened_at:  # libsndfile counts frames it cannot read
                    return
        if restated or where.stated_end >= where.end:
            return
        if arrival is not None:
            arrival.wait(where.stated_end + _CHUNK_HEAD + 1)
        if not more_after(path, where.stated_end, where.end):
            return
        restated, limit = True, where.most_frames


def read(audio: sf.SoundFile, frames: int) -> np.ndarray | None:
    """Up to `frames` frames from `audio`; None at its end."""
    try:
        block = audio.read(frames, dtype="float32", always_2d=True)
    except (RuntimeError, ValueError) as error:
        raise CorruptAudio(f"the audio cannot be decoded: {error}") from None
    return block if len(block) else None


@contextmanager
def _open(path: Path, restated: WavLayout | None) -> Iterator[sf.SoundFile]:
    if restated is None:
        with sf.SoundFile(str(path)) as audio:
            yield audio
        return
    at, width = restated.size_field
    size = min(restated.end - restated.data_offset, 2 ** (8 * width) - 2)
    with _Restated(path, at, size.to_bytes(width, "little")) as file, sf.SoundFile(file) as audio:
        yield audio


class _Restated(io.RawIOBase):
    """The file at `path` with `field` written over its bytes at `at`: the header's data size
    corrected, for libsndfile to read every frame the file holds."""

    def __init__(self, path: Path, at: int, field: bytes) -> None:
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 (closed with this object)
        self._at, self._field = at, field

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        start = self._file.tell()
        count = self._file.readinto(buffer)
        lo, hi = max(start, self._at), min(start + count, self._at + len(self._field))
        if lo < hi:
            view = memoryview(buffer).cast("B")
            view[lo - start : hi - start] = self._field[lo - self._at : hi - self._at]
        return count

    def close(self) -> None:
        self._file.close()
        super().close()

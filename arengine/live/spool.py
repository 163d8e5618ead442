"""A live stream's audio on disk: raw PCM spooled as an open-ended WAV that the engine reads as
it arrives.

The opening message describes the audio (`StreamFormat`); the spool writes a WAV header whose
sizes say "unstated" (0xFFFFFFFF, as a writer to a pipe leaves them), then appends each binary
message, counting whole frames in the stream's `Arrival`. The engine reads the frames on disk as
for an upload still arriving (`arengine/audio/arrival.py`, `wav.py`), under a layout bounded by
the stream's longest duration. The file is named as uploads are, so a server that crashed with
a stream open sweeps it at its next start (`arengine/http/upload_dir.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from arengine.audio.arrival import Arrival
from arengine.audio.wav import UNSTATED, WavLayout
from arengine.errors import ErrorCode, InvalidInput
from arengine.live import decoder
from arengine.live.formats import CONTAINER_FORMATS, FORMATS, PCM_FORMATS
from arengine.settings import MAX_STREAM_TEXT_BYTES, MAX_STREAM_TEXT_DEPTH, size_text

DECODED = "s16le"
"""How a container stream's audio is spooled (at `decoder.RATE`, mono): 16 bits are as fine as
the Opus it came from, and take half the disk of float."""

_HEADER = 44
"""A canonical WAV header: RIFF, `fmt ` (16 bytes), `data`."""


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """What a live stream's opening message says of its audio: raw PCM, or a container whose
    child decoder (`decoder.py`) gives mono PCM at `decoder.RATE`."""

    format: str
    sample_rate: int
    channels: int

    @property
    def container(self) -> bool:
        """A container stream (`webm`, `ogg`), decoded before it is spooled."""
        return self.format in CONTAINER_FORMATS

    @property
    def spooled(self) -> StreamFormat:
        """The PCM the spool holds: this format, or a container's decoded audio."""
        return StreamFormat(DECODED, decoder.RATE, 1) if self.container else self

    @property
    def frame_bytes(self) -> int:
        return PCM_FORMATS[self.format][1] * self.channels

    @classmethod
    def parse(cls, text: str, max_channels: int, rates: tuple[int, int]) -> StreamFormat:
        """The opening message `{"format": "s16le", "sample_rate": 16000, "channels": 1}`;
        `InvalidInput` naming what is accepted otherwise.

        >>> StreamFormat.parse('{"format": "f32le", "sample_rate": 48000}', 8, (8000, 192000))
        StreamFormat(format='f32le', sample_rate=48000, channels=1)
        >>> StreamFormat.parse('{"format": "webm"}', 8, (8000, 192000)).spooled
        StreamFormat(format='s16le', sample_rate=48000, channels=1)
        """
        message = parse_message(text, "the opening message")
        if not isinstance(message, dict):
            raise _invalid("the opening message is not a JSON object")
        unknown = sorted(set(message) - {"format", "sample_rate", "channels"})
        if unknown:
            raise _invalid(f"the opening message has {', '.join(unknown)}")
        name, rate, channels = (message.get(key) for key in ("format", "sample_rate", "channels"))
        if not isinstance(name, str) or name not in FORMATS:
            raise _invalid(f"format {_shown(name)} is not accepted")
        if name in CONTAINER_FORMATS:
            if rate is not None or channels is not None:
                raise _invalid(f"a {name} stream states its own sample_rate and channels")
            return cls(name, decoder.RATE, 1)
        if not _whole(rate) or not rates[0] <= rate <= rates[1]:
            raise InvalidInput(
                f"sample_rate {rate!r}; accepted: {rates[0]} to {rates[1]} Hz",
                code=ErrorCode.UNSUPPORTED_SAMPLE_RATE,
            )
        channels = 1 if channels is None else channels
        if not _whole(channels) or not 1 <= channels <= max_channels:
            raise InvalidInput(
                f"channels {channels!r}; accepted: 1 to {max_channels}",
                code=ErrorCode.UNSUPPORTED_CHANNELS,
            )
        return cls(name, rate, channels)


def parse_message(text: str, what: str) -> Any:
    """A stream's text message (`what` names it) parsed as JSON within `MAX_STREAM_TEXT_BYTES`
    and `MAX_STREAM_TEXT_DEPTH`; `InvalidInput` otherwise. The depth is counted before parsing,
    so no message makes the parser recurse (a `RecursionError` is no `ValueError`).

    >>> parse_message('{"end": true}', "a message")
    {'end': True}
    """
    # Characters first: a long message is not encoded only to be measured.
    if len(text) > MAX_STREAM_TEXT_BYTES or len(text.encode()) > MAX_STREAM_TEXT_BYTES:
        raise _invalid(f"{what} passed {size_text(MAX_STREAM_TEXT_BYTES)}")
    if _depth(text) > MAX_STREAM_TEXT_DEPTH:
        raise _invalid(f"{what} nests deeper than {MAX_STREAM_TEXT_DEPTH} levels")
    try:
        return json.loads(text)
    except ValueError:
        raise _invalid(f"{what} is not JSON") from None


def _depth(text: str) -> int:
    """How deep the brackets of JSON `text` nest, strings skipped."""
    depth = deepest = 0
    for token in _BRACKETS.findall(text):
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')
"""A JSON string (skipped whole, even unterminated) or a bracket."""


def _shown(value: object) -> str:
    """`value` quoted in a message, cut short: a client's value may be long."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(problem: str) -> InvalidInput:
    formats = ", ".join(FORMATS)
    return InvalidInput(
        f"{problem}; a stream opens with a text message such as "
        f'{{"format": "s16le", "sample_rate": 16000, "channels": 1}} or {{"format": "webm"}} '
        f"(format: {formats})",
        code=ErrorCode.INVALID_STREAM_MESSAGE,
    )


def wav_header(fmt: StreamFormat) -> bytes:
    """A WAV header for `fmt` whose RIFF and data sizes are unstated."""
    tag, width = PCM_FORMATS[fmt.format]
    fmt_chunk = struct.pack(
        "<HHIIHH",
        tag,
        fmt.channels,
        fmt.sample_rate,
        fmt.sample_rate * fmt.frame_bytes,
        fmt.frame_bytes,
        8 * width,
    )
    return (
        b"RIFF"
        + struct.pack("<I", UNSTATED)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt_chunk))
        + fmt_chunk
        + b"data"
        + struct.pack("<I", UNSTATED)
    )


class LiveSpool:
    """One live stream's file: the header, then whole frames as they come.

    Written by the event loop; `arrival` is what the engine's job reads it through. Example::

        spool = LiveSpool.create(folder, StreamFormat("s16le", 16000, 1), max_frames=16000 * 60)
        spool.write(pcm)  # bytes of any length: whole frames reach the engine
        spool.end()
    """

    def __init__(self, path: Path, fd: int, fmt: StreamFormat, max_frames: int) -> None:
        self.path = path
        self.format = fmt
        self.max_frames = max_frames
        self._fd = fd
        self._partial = b""
        self.frames = 0
        """Whole frames written."""
        self.arrival = Arrival(open_ended=True)
        self.arrival.opened(path)
        end = _HEADER + max_frames * fmt.frame_bytes
        self.arrival.layout = WavLayout(_HEADER, fmt.frame_bytes, end, end, (40, 4))

    @classmethod
    def create(cls, folder: Path | None, fmt: StreamFormat, max_frames: int) -> LiveSpool:
        """A new spool in `folder` (the system's temporary folder if None), header written."""
        fd, name = tempfile.mkstemp(prefix="arengine-", suffix=".upload", dir=folder)
        os.write(fd, wav_header(fmt))
        return cls(Path(name), fd, fmt, max_frames)

    @property
    def seconds(self) -> float:
        """Audio seconds received."""
        return self.frames / self.format.sample_rate

    @property
    def full(self) -> bool:
        """`max_frames` are written: nothing more will be."""
        return self.frames >= self.max_frames

    def write(self, data: bytes) -> None:
        """Append `data`: the whole frames it completes, up to `max_frames` (the rest is
        dropped); a partial frame waits for the next message."""
        data = self._partial + data
        room = (self.max_frames - self.frames) * self.format.frame_bytes
        whole = min(len(data) - len(data) % self.format.frame_bytes, room)
        self._partial = data[whole:] if whole < room else b""
        view = memoryview(data)[:whole]
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.frames += whole // self.format.frame_bytes
        self.arrival.add(whole)

    def end(self) -> None:
        """No more audio: the engine reads to the last whole frame and finishes."""
        self.arrival.finish()

    def close(self) -> None:
        """Close and delete the file (the engine's reader has its own descriptor)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self.path.unlink(missing_ok=True)

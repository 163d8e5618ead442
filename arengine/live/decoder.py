"""A live container stream (`{"format": "webm"}`, `"ogg"`) decoded to PCM in a child process.

The chunks a browser's MediaRecorder sends are pieces of one WebM file, not frames: only a
demuxer reading them in order can tell where Opus packets lie. Each such stream gets one child
process, `python -m arengine.live.decoder webm`, that reads the chunks on its standard input and
writes mono 16-bit PCM at `RATE` on its standard output, which the server spools as a PCM stream
(`spool.py`). The child decodes as an upload is decoded (`arengine/audio/ffmpeg.py`): FFmpeg's
libraries from the av wheel, only the stream's demuxer, only the Opus and Vorbis decoders, no
nested opens, mixed down (and resampled, for Vorbis at another rate) in C; damaged packets,
oversized packets and a change of parameters are met as `arengine/audio/decode.py` meets them.
A process rather than a thread: FFmpeg's demuxer pulls its input, so it blocks whenever the
client has sent nothing yet, and an engine thread must never wait on a client; and a crash on
hostile input ends that one stream, not the server.

Back-pressure holds through the pipes: the server writes a chunk and waits until the child has
taken it (`StreamDecoder.feed`), the child blocks writing PCM that the server has not read, and
the server reads no further WebSocket message while the spool is `listen_buffer_s` ahead of the
engine. A child's memory is its interpreter and a few packets; the pipes hold 64 KiB each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import av
import numpy as np

from arengine.audio import ffmpeg
from arengine.audio.chains import Links
from arengine.audio.decode import PacketDecoder
from arengine.errors import ArengineError, CorruptAudio, ErrorCode, InvalidInput
from arengine.live.formats import CONTAINER_FORMATS

DECODERS = ("opus", "vorbis")
"""The codecs a live container stream may carry (what WebM allows; Ogg's Opus and Vorbis)."""

RATE = 48000
"""The child's output rate: Opus's own, so an Opus stream is never resampled before the engine
resamples it for each model, as a posted file is."""

BLOCK = 960
"""Frames the child writes at a time: 20 ms, one Opus packet, so none waits for the next."""

_READ = 1 << 16
"""Bytes of PCM taken from the child at a time (its pipe's capacity)."""


class StreamDecoder:
    """The server's side of one child: `feed` chunks, `pump` its PCM into a spool, `end`, and
    always `close` (which kills a child still running and reaps it). Example::

        decoder = await StreamDecoder.start("webm")
        pumping = asyncio.ensure_future(decoder.pump(spool))
        await decoder.feed(chunk)
        await decoder.end()
        await pumping  # the child's error, if it failed
        await decoder.close()
    """

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        if process.stdin is None or process.stdout is None or process.stderr is None:
            raise ValueError("the decoder's process needs pipes on all three streams")
        self._process = process
        self._stdin, self._stdout, self._stderr = process.stdin, process.stdout, process.stderr

    @classmethod
    async def start(cls, container: str) -> StreamDecoder:
        """A child decoding a `container` stream (a key of `formats.CONTAINER_FORMATS`)."""
        package = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": package if not path else package + os.pathsep + path}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "arengine.live.decoder",
            container,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        return cls(process)

    @property
    def pid(self) -> int:
        return self._process.pid

    async def feed(self, data: bytes) -> None:
        """Give the child `data`, returning once it has taken it; nothing if it has ended
        (`pump` gives its error)."""
        with contextlib.suppress(ConnectionError):
            self._stdin.write(data)
            await self._stdin.drain()

    async def end(self) -> None:
        """No more chunks: the child decodes what it has and exits."""
        self._stdin.close()
        with contextlib.suppress(ConnectionError):
            await self._stdin.wait_closed()

    async def pump(self, write: Callable[[bytes], None], full: Callable[[], bool]) -> None:
        """Pass the child's PCM to `write(bytes)` until it exits or `full()`; its error (an
        `ArengineError`) if it failed."""
        while not full():
            data = await self._stdout.read(_READ)
            if not data:
                break
            write(data)
        if full():
            return
        if await self._process.wait() != 0:
            raise _error(await self._stderr.read(_READ))

    async def close(self) -> None:
        """Kill the child if it still runs, and reap it."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        await self._process.wait()


_CODES = {code.value: code for code in ErrorCode}


def _error(report: bytes) -> ArengineError:
    """The child's error line (`main`) as the error it names."""
    try:
        fields = json.loads(report.decode(errors="replace").strip().splitlines()[-1])
        error = ArengineError(str(fields["message"]), code=_CODES[fields["code"]])
    except (ValueError, IndexError, KeyError, TypeError):
        error = CorruptAudio("the stream's decoder failed")
    return error


class _Input:
    """The child's standard input as FFmpeg reads it: what has come, never waiting for a full
    buffer (a file object's `read(n)` on a pipe would hold 32 KiB, seconds of Opus, back)."""

    def __init__(self, fd: int, container: str) -> None:
        self._fd = fd
        self._read = 0
        self.ended = False
        self.links = Links(CONTAINER_FORMATS[container])
        """The chained files the stream carries: a second one of another codec is refused."""

    def read(self, size: int) -> bytes:
        data = os.read(self._fd, size)
        self.ended = self.ended or not data
        self.links.seen(self._read, data)
        self._read += len(data)
        return data


def decode(container: str, source: _Input, out: BinaryIO) -> None:
    """Decode the `container` stream on `source` to `out` as mono s16le at `RATE`;
    `ArengineError` for what the stream cannot be."""
    try:
        with ffmpeg.open_file(source, CONTAINER_FORMATS[container], DECODERS) as demuxed:
            choice = _audio_stream(demuxed, container)
            mixdown = ffmpeg.Mixdown(BLOCK, RATE)
            first: tuple[int, int] | None = None
            for frames in _frames(demuxed, choice, container, source):
                for frame in frames:
                    first = _unchanged(frame, first, container)
                    _write(mixdown.push(frame), out)
                out.flush()
            _write(mixdown.flush(), out)
    except ffmpeg.ParametersChanged as change:
        how = f" ({change})" if str(change) else ""
        raise InvalidInput(
            f"the {container} stream changes its codec parameters{how}; accepted: one sample "
            "rate and channel count per stream, in one codec",
            code=ErrorCode.AUDIO_FORMAT_CHANGED,
        ) from None
    except av.error.FFmpegError as error:
        raise CorruptAudio(f"the {container} stream cannot be read: {error}") from None
    out.flush()


def _audio_stream(demuxed: Any, container: str) -> ffmpeg.StreamChoice:
    """The first audio stream, refused unless Opus or Vorbis."""
    streams = ffmpeg.audio_streams(demuxed)
    if not streams:
        raise InvalidInput(
            f"the {container} stream has no audio track", code=ErrorCode.NO_AUDIO_STREAM
        )
    choice = ffmpeg.describe_stream(demuxed, streams[0])
    if choice.decoder not in DECODERS:
        raise ArengineError(
            f"the {container} stream carries {choice.decoder}; accepted: Opus or Vorbis",
            code=ErrorCode.UNSUPPORTED_CODEC,
        )
    return choice


def _frames(
    demuxed: Any, choice: ffmpeg.StreamChoice, container: str, source: _Input
) -> Iterator[list[av.AudioFrame]]:
    """Each packet's decoded frames, under the upload path's policy (`decode.PacketDecoder`:
    damaged packets skipped and counted, decode bombs refused); a demuxer error ends the stream
    where the client stopped sending."""
    packets = PacketDecoder(
        demuxed.streams[choice.index].codec_context, choice.channels, f"the {container} stream"
    )
    for packet, error in ffmpeg.packets(demuxed, choice.index, source.links):
        if error is not None:
            if source.ended and packets.total:
                return  # the client stopped mid-cluster: what came is decoded
            raise CorruptAudio(f"the {container} stream cannot be read: {error}")
        yield packets.decode(packet)


def _unchanged(
    frame: av.AudioFrame, first: tuple[int, int] | None, container: str
) -> tuple[int, int]:
    """The stream's rate and channels, as its first frame gave them; a change is refused."""
    shape = (frame.sample_rate, frame.layout.nb_channels)
    if first is not None and shape != first:
        raise InvalidInput(
            f"the {container} stream changes from {first[0]} Hz, {first[1]} channel(s) to "
            f"{shape[0]} Hz, {shape[1]}; accepted: one sample rate and channel count per stream",
            code=ErrorCode.AUDIO_FORMAT_CHANGED,
        )
    return shape


def _write(blocks: Iterable[np.ndarray], out: BinaryIO) -> None:
    for block in blocks:
        # Scaled as libsndfile reads 16-bit PCM back (by 1/32768), so the round trip is exact.
        pcm = np.clip(np.rint(block[:, 0] * 32768.0), -32768, 32767).astype("<i2")
        out.write(pcm.tobytes())


def main(argv: list[str]) -> int:
    """`python -m arengine.live.decoder webm`: 0 when the stream ended; 1 with the error as a
    JSON line `{"code": ..., "message": ...}` on standard error."""
    if len(argv) != 1 or argv[0] not in CONTAINER_FORMATS:
        print(f"usage: python -m arengine.live.decoder {'|'.join(CONTAINER_FORMATS)}")
        return 2
    try:
        decode(argv[0], _Input(sys.stdin.fileno(), argv[0]), sys.stdout.buffer)
    except ArengineError as error:
        sys.stderr.write(json.dumps({"code": error.code.value, "message": error.message}) + "\n")
        return 1
    except BrokenPipeError:  # the server went first: nobody is left to tell
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""FFmpeg, through PyAV's bundled libraries, opened as narrowly as it can be.

FFmpeg reads hundreds of formats, some of which open other files or the network (HLS, concat,
image2, lavfi, sdp/rtp/rtsp, tee, data, subfile). arengine gives it only the spooled upload, as a
Python file object (never a name FFmpeg could read as a URL); lets it probe only the demuxers of
`containers.CONTAINERS` and open only the decoders in `containers.DECODERS`; and refuses every
nested open a demuxer asks for (`_refuse_nested`), so a playlist cannot reach a file or a socket
even if it were recognised.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import av
import av.container
import av.filter
import numpy as np

from arengine.audio import containers
from arengine.audio.chains import Links
from arengine.audio.containers import DEMUXERS

_OPTIONS = {
    "format_whitelist": ",".join(DEMUXERS),
    "codec_whitelist": ",".join(containers.DECODERS),
    # Every protocol refused by name; the upload itself comes through a file object, not a protocol.
    "protocol_whitelist": "none",
    "probesize": str(5 << 20),
}


class NestedOpenRefused(PermissionError):
    """A demuxer asked to open something other than the upload."""


class ParametersChanged(Exception):
    """The stream changes its codec parameters midway (a chained Ogg with another rate, say);
    its message, if any, says how ("Opus to Vorbis")."""


def _refuse_nested(url: str, flags: int, options: dict[str, str]) -> Any:
    raise NestedOpenRefused(f"nested open of {url[:80]!r} refused")


@contextmanager
def open_upload(
    path: Path, demuxer: str | None = None, links: Links | None = None
) -> Iterator[av.container.InputContainer]:
    """The upload at `path`, opened by FFmpeg through a file object; PyAV's errors pass through.

    `demuxer` (one of `DEMUXERS`) skips FFmpeg's probe; otherwise it chooses among `DEMUXERS`.
    `links` is shown every byte FFmpeg reads (a chained stream's files, `chains.py`).
    """
    with open(path, "rb") as raw, open_file(_Shown(raw, links) if links else raw, demuxer) as file:
        yield file


class _Shown:
    """A file read through, each read's bytes shown to `links` at their offset."""

    def __init__(self, file: BinaryIO, links: Links) -> None:
        self._file = file
        self._links = links

    def read(self, size: int = -1) -> bytes:
        at = self._file.tell()
        data = self._file.read(size)
        self._links.seen(at, data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()


@contextmanager
def open_file(
    file: Any, demuxer: str | None = None, decoders: Iterable[str] = containers.DECODERS
) -> Iterator[av.container.InputContainer]:
    """`file` (an object with `read`, and `seek` when it can) opened as `open_upload` opens a
    path, its decoders narrowed to `decoders` (names of `containers.DECODERS`)."""
    if demuxer is not None and demuxer not in DEMUXERS:
        raise ValueError(f"demuxer {demuxer!r} is not allowed; allowed: {', '.join(DEMUXERS)}")
    codecs = [name for name in decoders if name in containers.DECODERS]
    container = av.open(
        file,
        "r",
        format=demuxer,
        options={**_OPTIONS, "codec_whitelist": ",".join(codecs)},
        io_open=_refuse_nested,
        metadata_errors="replace",
    )
    try:
        yield container
    finally:
        container.close()


@dataclass(frozen=True, slots=True)
class StreamChoice:
    """The audio stream chosen in an opened container."""

    index: int
    decoder: str
    sample_rate: int
    channels: int
    claimed_frames: int
    """Frames the container's header states (0 when it does not say)."""


def demuxer_name(container: av.container.InputContainer) -> str | None:
    """The allowlisted demuxer that opened `container` (FFmpeg names like `mov,mp4,m4a,...`)."""
    names = container.format.name.split(",")
    return next((name for name in names if name in DEMUXERS), None)


def audio_streams(container: av.container.InputContainer) -> list[int]:
    """Indices of the audio streams, in order."""
    return [stream.index for stream in container.streams if stream.type == "audio"]


def describe_stream(container: av.container.InputContainer, index: int) -> StreamChoice:
    """The facts of stream `index` that validation checks."""
    stream = container.streams[index]
    context: Any = stream.codec_context
    decoder = context.codec.name if context is not None else stream.codec.name
    rate = int(context.sample_rate or 0) if context is not None else 0
    channels = int(context.channels or 0) if context is not None else 0
    return StreamChoice(index, decoder, rate, channels, _claimed_frames(container, index, rate))


def _claimed_frames(container: av.container.InputContainer, index: int, rate: int) -> int:
    stream = container.streams[index]
    if stream.duration and stream.time_base:
        return max(0, round(stream.duration * stream.time_base * rate))
    return 0


class Mixdown:
    """Decoded frames to mono float32 blocks of `block` samples, in FFmpeg's C code.

    A filter graph (`abuffer -> aformat=fltp -> pan -> aformat=flt -> asetnsamples ->
    abuffersink`) does the per-frame work: integer samples scaled to [-1, 1] (s16 by 1/32768,
    as libsndfile does), the channels averaged with equal weights (the mean `decode.to_mono`
    takes, to the bit for one or two channels), and frames of a thousand samples gathered into
    blocks. Python pushes each frame and takes a
    block now and then; FFmpeg releases the GIL while it filters (see BENCHMARKS.md, "Decoding
    in C"). The graph is built from the first frame's rate, format and channels; a frame that
    differs is the caller's to refuse before `push`. With `rate`, FFmpeg also resamples to it
    (a live container stream's fixed rate, `arengine/live/decoder.py`).
    """

    def __init__(self, block: int, rate: int | None = None) -> None:
        self._block = block
        self._rate = rate
        self._graph: av.filter.Graph | None = None
        self._source: Any = None
        self._sink: Any = None
        self._pending = 0

    def push(self, frame: av.AudioFrame) -> Iterator[np.ndarray]:
        """Give FFmpeg `frame`; the blocks that are complete, as `(samples, 1)` views."""
        if self._graph is None:
            self._build(frame)
        self._source.push(frame)
        self._pending += frame.samples
        if self._pending >= self._block:
            self._pending = 0
            yield from self._ready()

    def flush(self) -> Iterator[np.ndarray]:
        """The rest, the last block shorter; the graph is spent afterwards."""
        if self._graph is not None:
            self._source.push(None)
            yield from self._ready()

    def _ready(self) -> Iterator[np.ndarray]:
        while True:
            try:
                frame = self._sink.pull()
            except (av.error.BlockingIOError, av.error.EOFError):
                return
            plane = memoryview(frame.planes[0])  # keeps the frame's buffer alive
            yield np.frombuffer(plane, np.float32, frame.samples)[:, None]

    def _build(self, frame: av.AudioFrame) -> None:
        channels = frame.layout.nb_channels
        graph = av.filter.Graph()
        source = graph.add_abuffer(
            sample_rate=frame.sample_rate,
            format=frame.format.name,
            layout=frame.layout.name,
            channels=channels,
        )
        steps = [source, graph.add("aformat", "sample_fmts=fltp")]
        if channels > 1:
            weights = "+".join(f"{1 / channels!r}*c{index}" for index in range(channels))
            steps.append(graph.add("pan", f"mono|c0={weights}"))
        if self._rate is not None and self._rate != frame.sample_rate:
            steps.append(graph.add("aresample", str(self._rate)))
        steps.append(graph.add("aformat", "sample_fmts=flt:channel_layouts=mono"))
        steps.append(graph.add("asetnsamples", f"n={self._block}:p=0"))
        steps.append(graph.add("abuffersink"))
        for upstream, downstream in itertools.pairwise(steps):
            upstream.link_to(downstream)
        graph.configure()
        self._graph, self._source, self._sink = graph, source, steps[-1]


def packets(
    container: av.container.InputContainer, index: int, links: Links | None = None
) -> Iterator[tuple[av.Packet[Any] | None, Exception | None]]:
    """The packets of stream `index`, then None to flush the decoder; a demuxer error ends the
    stream and is yielded instead of raised, so the caller decides truncated or corrupt.
    `ParametersChanged` where the stream changes format, FFmpeg's or `links`'s finding."""
    stream = container.streams[index]
    for other in container.streams:
        if other.index != index:
            # Video and other tracks: skipped by the demuxer, never decoded.
            other.discard = av.stream.Discard.all
    demux = container.demux(stream)
    while True:
        try:
            packet = next(demux)
        except StopIteration:
            return
        except av.error.PatchWelcomeError:
            # FFmpeg's Ogg demuxer stops where a chained stream changes its codec parameters.
            raise ParametersChanged() from None
        except av.error.FFmpegError as error:
            _check_links(links)  # its Ogg demuxer stops where the codec changes
            yield None, error
            return
        # Matroska's demuxer passes a second file's packets on to the first file's decoder.
        _check_links(links, packet.pos)
        yield packet, None


def _check_links(links: Links | None, position: int | None = None) -> None:
    """`ParametersChanged` if `links` found a file of another format, and the packet at
    `position` (None: unknown, or a demuxer error) lies in it (the demuxer reads ahead)."""
    if links is None or links.changed is None:
        return
    if position is None or position < 0 or position >= links.changed_at:
        raise ParametersChanged(links.changed)

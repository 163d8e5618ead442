"""One part of a compressed file decoded from a seek, as a decoding from the start gives it.

Decoding in parts (`parts.py`) gives each part to a child (`child.py`) that runs this chain: the
in-process chain's demuxer, decoder, allowlists, packet-size cap, change of rate refused and
mixdown (`decode`, `ffmpeg.Mixdown`), started from a seek to `Span.warmup` samples before the
part, for the decoder's state (MP3's bit reservoir, AAC's overlap). Which samples belong to the
part is decided by each frame's timestamp, counted from the stream's start as a decoding from
the start counts them, so the parts put end to end give its samples: to the bit for MP3, FLAC and
Opus, within the AAC decoder's noise for M4A (`tests/audio/test_parts.py`). A seek that lands
past the part's start (an index that lies) is not trusted: the part is decoded again from the
start of the file; timestamps that go back (two files one after the other) stop the part, and
the server decodes the file whole instead (`parts.py`). Damaged packets are counted for the
packets whose timestamps lie in the part, so the parts' counts add up to one decoding's, and
kept in a `decode.Damage` for the policy over the whole file (`parts.py`); the first part, whose
packets before it are none, refuses as one decoding does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np

from arengine.audio import containers, ffmpeg
from arengine.audio.chains import Links
from arengine.audio.decode import (
    Damage,
    DecodeReport,
    PacketDecoder,
    check_parameters,
    stopped_early,
    stream_packets,
    too_long,
)
from arengine.types import AudioInfo


@dataclass(frozen=True, slots=True)
class Span:
    """A part of a file: its samples from `first` to `end` (None: to the end of the file),
    numbered as a decoding from the start numbers them; decoding starts `warmup` samples
    earlier."""

    first: int
    end: int | None
    warmup: int


@dataclass(slots=True)
class SpanReport:
    """What decoding a span found, beyond `DecodeReport`."""

    damage: Damage = field(default_factory=Damage)
    reached_end: bool = False
    """The decoder got to `Span.end`; otherwise the file ended before it, and so the parts after
    this one hold nothing."""
    broken: bool = False
    """The timestamps went back (two files one after the other, say): the span stopped there,
    and its samples from the seek on cannot be placed; the file is decoded whole instead."""


class _SeekMissed(Exception):
    """The seek landed after the span's first sample."""


def read_span(
    path: Path,
    info: AudioInfo,
    max_frames: int,
    report: DecodeReport,
    found: SpanReport,
    block_frames: int,
    span: Span,
) -> Iterator[np.ndarray]:
    """Mono float32 blocks of `span` of the file at `path` (FFmpeg's), at its own rate; stop with
    `TooLarge` past `max_frames` counted from the span's start. A span with no samples (the file
    ends before it) gives none; `found.reached_end` says which."""
    if span.first > 0:
        try:
            yield from _counted(
                _blocks(path, info, report, found, block_frames, span, True),
                report,
                max_frames,
                info,
            )
            return
        except _SeekMissed:
            found.damage = Damage()
    yield from _counted(
        _blocks(path, info, report, found, block_frames, span, False), report, max_frames, info
    )


def _counted(
    blocks: Iterator[np.ndarray], report: DecodeReport, max_frames: int, info: AudioInfo
) -> Iterator[np.ndarray]:
    for block in blocks:
        report.frames += len(block)
        if report.frames > max_frames:
            raise too_long(max_frames, info.sample_rate)
        yield block


def _blocks(
    path: Path,
    info: AudioInfo,
    report: DecodeReport,
    found: SpanReport,
    block_frames: int,
    span: Span,
    seek: bool,
) -> Iterator[np.ndarray]:
    demuxer = containers.demuxer_for(info.format)
    mixdown = ffmpeg.Mixdown(block_frames)
    cut = _Cut()
    links = Links.of(demuxer)
    end = span.end if span.end is not None else 1 << 62
    position: int | None = None  # where the next frame would start, in samples
    with ffmpeg.open_upload(path, demuxer, links) as container:
        stream = container.streams[info.stream]
        origin = stream.start_time or 0
        tick = float(stream.time_base or 0) * info.sample_rate  # samples per timestamp unit
        slack = info.sample_rate // 1000 + 1  # Matroska's timestamps: whole milliseconds
        damage = found.damage if span.first > 0 else None
        packets = PacketDecoder(stream.codec_context, info.channels, damage=damage)
        if seek:
            _seek(container, stream, origin + round((span.first - span.warmup) / tick))
        at = span.first
        # Bound late on purpose: the message names where the change was met.
        for packet, error in stream_packets(container, info, lambda: at, links):  # noqa: B023
            if error is not None:
                # Before any frame: corrupt for the first part, the file's end for a later one.
                at_s = (position if position is not None else span.first) / info.sample_rate
                stopped_early(report, at_s, error)
                break
            counted = _inside(_index(packet.pts, origin, tick), span.first, end)
            for frame in packets.decode(packet, counted):
                start = _index(frame.pts, origin, tick)
                start = start if start is not None else (position if position is not None else 0)
                if seek and position is None and start > span.first:
                    raise _SeekMissed
                if position is not None and start < position - slack:
                    found.broken = True
                    break
                if start >= end:
                    found.reached_end = True
                    break
                check_parameters(frame, info, start)
                at = position = start + frame.samples
                drop = min(frame.samples, max(0, span.first - start))
                keep = max(0, min(frame.samples, end - start) - drop)
                if keep:
                    cut.add(drop, keep, frame.samples)
                    yield from cut.apply(mixdown.push(frame))
            if found.reached_end or found.broken:
                break
        yield from cut.apply(mixdown.flush())
    found.damage.bad, found.damage.total = packets.bad, packets.total


def _seek(container: Any, stream: Any, timestamp: int) -> None:
    """Seek to the packet at or before `timestamp`; a demuxer that cannot: from the start."""
    try:
        container.seek(max(0, timestamp), stream=stream, backward=True)
    except av.error.FFmpegError:
        raise _SeekMissed from None


def _index(pts: int | None, origin: int, tick: float) -> int | None:
    """The sample a timestamp stands for, counted from the stream's start."""
    return None if pts is None else round((pts - origin) * tick)


def _inside(index: int | None, first: int, end: int) -> bool:
    """Whether a packet at `index` is this span's to count (the flush at the end, None, is the
    span's that meets the end of the file; one before the stream's start, as MP3's first packet
    is, the first span's)."""
    if index is None:
        return True
    return (first == 0 or first <= index) and index < end


class _Cut:
    """Which of the samples pushed into the mixdown to keep, in order: runs of (keep, count)."""

    def __init__(self) -> None:
        self._runs: list[list[Any]] = []
        self._head = 0

    def add(self, drop: int, keep: int, samples: int) -> None:
        """A frame of `samples` pushed: `drop` dropped, then `keep` kept, the rest dropped."""
        for kept, count in ((False, drop), (True, keep), (False, samples - drop - keep)):
            if count == 0:
                continue
            if len(self._runs) > self._head and self._runs[-1][0] == kept:
                self._runs[-1][1] += count
            else:
                self._runs.append([kept, count])

    def apply(self, blocks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """The kept samples of the mixdown's blocks."""
        for block in blocks:
            at = 0
            while at < len(block):
                run = self._runs[self._head]
                take = min(run[1], len(block) - at)
                if run[0]:
                    yield block[at : at + take]
                at += take
                run[1] -= take
                if run[1] == 0:
                    self._head += 1
        if self._head > 64:
            del self._runs[: self._head]
            self._head = 0

"""Parallel decoding of one long compressed file: several decoders ("lanes") at once.

A recording is cut into chunks of `chunk_segments` segments. Lane `d` of `P` decodes chunks
`d, d + P, d + 2P, ...`: it moves forward to each chunk's start, less the model's pre-roll and
context and a warm-up for the decoder and the resampler, skipping the packets in between without
decoding them, and discards what it decodes before the chunk's first sample. The samples are
those of sequential decoding (FFmpeg's packets carry exact timestamps in these containers;
`tests/audio/test_lanes.py` compares samples and tags), and each lane holds one decoder and one
chunk's blocks, so memory stays bounded: the job lets no lane run more than `segments_ahead`
segments ahead of post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import soxr

from arengine.audio import containers, decode, ffmpeg, sniff
from arengine.audio.decode import BLOCK_FRAMES, DecodeReport, to_mono
from arengine.audio.segments import Segment, Segmenter, SegmentPlan
from arengine.errors import CorruptAudio
from arengine.types import AudioInfo

DECODER_WARMUP_S = 1.0
"""Audio decoded and dropped before a chunk: refills MP3's bit reservoir, AAC's and Vorbis'
overlap, Opus' pre-roll (80 ms is enough for Opus; MP3 and AAC need a frame or two)."""

SKIP_LIMIT_S = 2.0
"""Audio a lane skips packet by packet to reach its next chunk; farther, it seeks."""

RESAMPLER_WARMUP_S = 0.25
"""Audio resampled and dropped before a chunk: soxr's filter is far shorter."""


def parallel_lanes(info: AudioInfo, plan: SegmentPlan, rate_out: int, ahead: int) -> int:
    """How many lanes to decode `info` with: 1 (sequential) unless it is long and seekable."""
    container = containers.named(info.format)
    chunk_s = _chunk_segments(ahead) * plan.segment_samples / rate_out
    long = info.duration_s > 2 * chunk_s
    seekable = container is not None and container.seekable  # `containers.Container.seekable`
    if info.decoder != sniff.FFMPEG or not seekable or not long:
        return 1
    return max(1, ahead // 2)


def _chunk_segments(ahead: int) -> int:
    """Segments per chunk: two lanes each get a chunk inside the `ahead` window."""
    return max(1, ahead // 2)


@dataclass(slots=True)
class Lane:
    """One decoder and where it is: the chunk it decodes and the next segment it will give."""

    number: int
    chunk: int
    next_index: int
    segments: Segmenter | None = None
    container: Any = None
    files: ExitStack | None = None
    report: DecodeReport = field(default_factory=DecodeReport)
    received_end: int = 0
    read_to: list[int] = field(default_factory=lambda: [0])
    """End (in the stream's time base) of the last packet the lane's demuxer gave."""
    """Model-rate audio samples up to which this lane has decoded (global index)."""
    busy: bool = False
    finished: bool = False


class LaneDecoding:
    """Segments of one file from several lanes; the job asks for work under its own lock."""

    def __init__(
        self,
        path: Path,
        info: AudioInfo,
        plan: SegmentPlan,
        rate_out: int,
        max_frames: int,
        lanes: int,
        ahead: int,
    ) -> None:
        self._path, self._info, self._plan = path, info, plan
        self._rate_out, self._max_frames = rate_out, max_frames
        self._chunk = _chunk_segments(ahead)
        self._lanes = [Lane(d, d, d * self._chunk) for d in range(lanes)]
        self.segment_count: int | None = None
        """Known once a lane has found the end (the smallest index where one did)."""

    def take(self, window_end: int) -> Lane | None:
        """An idle lane whose next segment is below `window_end`, marked busy (under the lock)."""
        lane = self.free(window_end)
        if lane is not None:
            lane.busy = True
        return lane

    def free(self, window_end: int) -> Lane | None:
        """The idle lane that `take` would give, without taking it (under the lock)."""
        free = [
            lane
            for lane in self._lanes
            if not (lane.busy or lane.finished)
            and lane.next_index < window_end
            and (self.segment_count is None or lane.next_index < self.segment_count)
        ]
        if not free:
            return None
        return min(free, key=lambda item: item.next_index)

    def produce(self, lane: Lane) -> Segment | None:
        """The lane's next segment, or None where it found the end (outside the lock)."""
        if lane.segments is None:
            lane.segments = self._open_chunk(lane)
        segment = next(lane.segments, None)
        if segment is None:
            return None
        lane.next_index += 1
        if lane.next_index == (lane.chunk + 1) * self._chunk:
            lane.segments.close()
            lane.segments = None
            lane.chunk += len(self._lanes)
            lane.next_index = lane.chunk * self._chunk
        return segment

    def release(self, lane: Lane, ended: bool) -> None:
        """Hand the lane back (under the lock); `ended`: it found the end at `next_index`."""
        lane.busy = False
        if ended:
            lane.finished = True
            count = self.segment_count
            self.segment_count = lane.next_index if count is None else min(count, lane.next_index)
            self._close_lane(lane)

    def abandon(self, lane: Lane) -> None:
        """A lane whose decoding failed: never handed out again (under the lock)."""
        lane.busy = False
        lane.finished = True

    @property
    def total_samples(self) -> int:
        return max(lane.received_end for lane in self._lanes)

    def info(self) -> AudioInfo:
        """What was decoded, all lanes together."""
        report = DecodeReport()
        report.frames = max(lane.report.frames for lane in self._lanes)
        for lane in self._lanes:
            report.truncated |= lane.report.truncated
            report.warnings += [w for w in lane.report.warnings if w not in report.warnings]
        return report.finish(self._info)

    def close(self) -> None:
        for lane in self._lanes:
            self._close_lane(lane)

    def _close_lane(self, lane: Lane) -> None:
        if lane.segments is not None:
            lane.segments.close()
            lane.segments = None
        if lane.files is not None:
            lane.files.close()
            lane.files, lane.container = None, None

    def _open_chunk(self, lane: Lane) -> Segmenter:
        if lane.files is None:
            lane.files = ExitStack()
            demuxer = containers.demuxer_for(self._info.format)
            lane.container = lane.files.enter_context(ffmpeg.open_upload(self._path, demuxer))
        first = lane.chunk * self._chunk
        blocks = self._chunk_blocks(lane, self._first_sample(first))
        if first == 0:
            return Segmenter(blocks, self._plan)
        return Segmenter.starting_at(blocks, self._plan, first)

    def _first_sample(self, index: int) -> int:
        plan = self._plan
        if index == 0:
            return 0
        return index * plan.segment_samples - plan.preroll_frames * plan.hop - plan.context

    def _chunk_blocks(self, lane: Lane, first: int) -> Iterator[np.ndarray]:
        info, rate, cap = self._info, self._rate_out, self._max_frames
        blocks = chunk_blocks(lane.container, info, first, rate, cap, lane.report, lane.read_to)
        for block in blocks:
            lane.received_end = max(lane.received_end, block.received_end)
            yield block.samples


@dataclass(frozen=True, slots=True)
class _Block:
    samples: np.ndarray
    received_end: int


def chunk_blocks(
    container: Any,
    info: AudioInfo,
    first: int,
    rate_out: int,
    max_frames: int,
    report: DecodeReport,
    read_to: list[int],
) -> Iterator[_Block]:
    """Mono blocks at `rate_out` beginning exactly at output sample `first`."""
    gcd = math.gcd(info.sample_rate, rate_out)
    step_in, step_out = info.sample_rate // gcd, rate_out // gcd
    warm = math.ceil(RESAMPLER_WARMUP_S * info.sample_rate / step_in) if first else 0
    grid = max(0, first // step_out - warm)
    feed_from = grid * step_in  # a source frame that falls on the output grid
    out_at = grid * step_out
    stream = soxr.ResampleStream(info.sample_rate, rate_out, 1, dtype="float32", quality="HQ")
    source = _frames_from(container, info, feed_from, max_frames, report, read_to)
    for mono in to_mono(source):
        out = stream.resample_chunk(mono) if info.sample_rate != rate_out else mono
        yield from _trimmed(out, out_at, first)
        out_at += len(out)
    if info.sample_rate != rate_out:
        tail = stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        yield from _trimmed(tail, out_at, first)


def _trimmed(out: np.ndarray, out_at: int, first: int) -> Iterator[_Block]:
    keep = out[max(0, first - out_at) :]
    if len(keep):
        yield _Block(keep, out_at + len(out))


def _frames_from(
    container: Any,
    info: AudioInfo,
    start: int,
    max_frames: int,
    report: DecodeReport,
    read_to: list[int],
) -> Iterator[np.ndarray]:
    """Mono `(frames, 1)` float32 blocks from source frame `start` on, mixed down in C."""
    stream = container.streams[info.stream]
    context = stream.codec_context
    # Integer arithmetic in time-base units: Fractions per packet cost more than decoding.
    num, den = stream.time_base.numerator * info.sample_rate, stream.time_base.denominator
    base = ((stream.start_time or 0) * num + den // 2) // den
    skip_to = max(0, start - round(DECODER_WARMUP_S * info.sample_rate) + base) * den // num
    far = round(SKIP_LIMIT_S * info.sample_rate) * den // num
    if read_to[0] > skip_to:
        # The lane's last chunk read past this one's warm-up (short segments): go back. The
        # demuxer has indexed what it read, so this seek does not rescan the file.
        container.seek(skip_to, stream=stream, backward=True)
    elif skip_to - read_to[0] > far:
        # Forward past the other lanes' chunks in FFmpeg's C code: skipping them packet by
        # packet here makes a Python object of each (BENCHMARKS.md, Parallel decoding). FLAC
        # without a seek table refuses; its packets are skipped below.
        with suppress(av.error.FFmpegError):
            container.seek(skip_to, stream=stream, backward=True)
    context.flush_buffers()
    mixdown = ffmpeg.Mixdown(BLOCK_FRAMES)
    drop: int | None = None
    """Samples before `start` in the first frame given to the mixdown (None: none given yet)."""
    at = start
    # Bound late on purpose: the message names where a parameter change was met.
    for packet, error in decode.stream_packets(container, info, lambda: at):  # noqa: B023
        if error is not None:
            decode.stopped_early(report, at / info.sample_rate, error)
            break
        if packet.pts is not None:
            read_to[0] = packet.pts + (packet.duration or 0)
            if read_to[0] < skip_to:
                continue
        try:
            frames = context.decode(packet)
        except av.error.FFmpegError:
            continue  # damaged packets are counted by the sequential path's policy
        for frame in frames:
            if frame.pts is None:
                continue
            at = (frame.pts * num + den // 2) // den - base
            if drop is None and start > 0 and at > start:
                raise CorruptAudio(f"seeking landed after {start} frames; the file is damaged")
            if at + frame.samples > max_frames:
                raise decode.too_long(max_frames, info.sample_rate)
            decode.check_parameters(frame, info, at)
            report.frames = max(report.frames, at + frame.samples)
            if at + frame.samples <= start:
                continue
            if drop is None:
                drop = max(0, start - at)
            for block in mixdown.push(frame):
                yield block[drop:]
                drop = 0
    for block in mixdown.flush():
        yield block[drop or 0 :]
        drop = 0

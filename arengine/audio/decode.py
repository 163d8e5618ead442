"""Decoding as a chain of small generators: file blocks -> mono -> resampled, all float32.

Each generator holds one block at a time, so memory does not depend on the recording's length.
Two decoders feed the chain (libsndfile for uncompressed containers, FFmpeg for the rest) under
one policy for what goes wrong, counted while decoding rather than trusted from a header:

- more than `max_frames`, a packet decoding to more than `MAX_PACKET_BYTES`, or a change of
  sample rate or channels midway: refused (413, 413, 422);
- damaged packets: skipped and counted in the result's warnings; more than `MAX_BAD_PACKETS`
  (and more than 5 % of the packets): refused as corrupt (400);
- a file that ends early (a read error after audio was decoded, or fewer frames than an exact
  header states): what was decoded is returned, with `truncated` and a warning;
- a header that states less than the file holds: everything is decoded, with a warning (a WAV's
  header: `wav.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import soundfile as sf

from arengine.audio import containers, ffmpeg, sniff, wav
from arengine.audio.arrival import Arrival
from arengine.audio.chains import Links
from arengine.audio.tee import Tee
from arengine.errors import CorruptAudio, ErrorCode, InvalidInput, TooLarge
from arengine.settings import MAX_PACKET_BYTES, size_text
from arengine.types import AudioInfo

if TYPE_CHECKING:
    from arengine.audio.child import ChildDecoding
    from arengine.audio.parts import PartDecoding

BLOCK_FRAMES = 65536
"""Frames decoded per read: 1.5 s at 44.1 kHz, a few hundred KiB even for 8 channels."""

SNDFILE_BLOCK_BYTES = 1 << 20
"""float32 bytes per libsndfile read of a whole file: 262,144 mono frames (16 s at 16 kHz), never
fewer than `BLOCK_FRAMES`. Each read, and each step after it (mono, the tee, the segmenter), costs
the same Python under the GIL whatever its size; libsndfile's own work runs without it, so larger
reads take the GIL less often (BENCHMARKS.md, Threads against processes)."""


def file_block_frames(info: AudioInfo) -> int:
    """Frames per read of a whole (not live) file: `SNDFILE_BLOCK_BYTES` for libsndfile, else
    `BLOCK_FRAMES` (FFmpeg's filter graph hands over blocks of that many)."""
    if info.decoder == sniff.FFMPEG:
        return BLOCK_FRAMES
    return max(BLOCK_FRAMES, SNDFILE_BLOCK_BYTES // (4 * max(1, info.channels)))


MAX_BAD_PACKETS = 8
"""Damaged packets tolerated (skipped and reported) before the stream counts as corrupt."""


@dataclass(slots=True)
class Damage:
    """The damaged packets of one part of a file (`spans.py`), kept so that the policy can be
    applied to the whole file once the parts before it are counted: `worst[m - 1]` is the most
    `20 * bad - total` reached at a damaged packet of the part once its `bad >= m` (None: never),
    all the policy needs of the part (`refused`)."""

    bad: int = 0
    total: int = 0
    worst: list[int | None] = field(default_factory=lambda: [None] * (MAX_BAD_PACKETS + 1))

    def note(self, bad: int, total: int) -> None:
        """A damaged packet: the part's `bad`-th, its `total`-th packet."""
        self.bad, self.total = bad, total
        for least in range(1, min(bad, MAX_BAD_PACKETS + 1) + 1):
            worst = self.worst[least - 1]
            if worst is None or 20 * bad - total > worst:
                self.worst[least - 1] = 20 * bad - total

    def refused(self, bad_before: int, total_before: int) -> bool:
        """Whether one decoder of the whole file, having counted `bad_before` damaged packets
        of `total_before` before this part, would have refused the file in it: `bad > 8` and
        `20 * bad > total` at one of its damaged packets."""
        least = max(1, MAX_BAD_PACKETS + 1 - bad_before)
        worst = self.worst[least - 1]
        return worst is not None and worst > total_before - 20 * bad_before


@dataclass(slots=True)
class DecodeReport:
    """What decoding found; filled in by the decoder, read once it is exhausted."""

    frames: int = 0
    truncated: bool = False
    warnings: list[str] = field(default_factory=list)

    def finish(self, info: AudioInfo) -> AudioInfo:
        """`info` with the decoded length, and what decoding found, for the result."""
        warnings = [*info.warnings, *self.warnings]
        # FFmpeg's lengths come from timestamps, a little off; libsndfile's are exact.
        slack = info.sample_rate if info.decoder == sniff.FFMPEG else 0
        if info.length_trusted and info.frames and self.frames > info.frames + slack:
            warnings.append(
                f"the header states {info.duration_s:.1f} s; all "
                f"{self.frames / info.sample_rate:.1f} s in the file were decoded"
            )
        tolerance = max(info.sample_rate, info.frames // 100)
        truncated = self.truncated or (
            info.length_trusted and self.frames < info.frames - tolerance
        )
        if truncated and not self.truncated:
            warnings.append(
                f"the header states {info.duration_s:.1f} s but the file ends at "
                f"{self.frames / info.sample_rate:.1f} s: the result covers what is there"
            )
        return replace(info, frames=self.frames, truncated=truncated, warnings=tuple(warnings))


def read_blocks(
    path: Path,
    info: AudioInfo,
    max_frames: int,
    report: DecodeReport | None = None,
    block_frames: int = BLOCK_FRAMES,
    arrival: Arrival | None = None,
) -> Iterator[np.ndarray]:
    """Yield `(frames, channels)` float32 blocks (FFmpeg's already mono: `(frames, 1)`); stop
    with `TooLarge` past `max_frames`.

    The cap is counted on decoded frames, not taken from the header, so a small compressed file
    that decodes to hours is stopped after `max_frames`. With `arrival`, the WAV at `path` is
    still being uploaded and is read as it arrives.
    """
    report = report if report is not None else DecodeReport()
    if info.decoder == sniff.FFMPEG:
        blocks = _ffmpeg_blocks(path, info, report, block_frames)
    else:
        blocks = _sndfile_blocks(path, info, report, block_frames, arrival)
    for block in blocks:
        report.frames += len(block)
        if report.frames > max_frames:
            raise too_long(max_frames, info.sample_rate)
        yield block
    if report.frames == 0:
        raise InvalidInput("the recording has no audio frames", code=ErrorCode.EMPTY_AUDIO)


def _sndfile_blocks(
    path: Path,
    info: AudioInfo,
    report: DecodeReport,
    block_frames: int,
    arrival: Arrival | None,
) -> Iterator[np.ndarray]:
    where = arrival.layout if arrival is not None else wav.layout(path, path.stat().st_size)
    try:
        if where is not None:  # a PCM or float WAV: where its frames lie (`wav.py`)
            yield from wav.blocks(path, where, block_frames, arrival)
        else:
            with sf.SoundFile(str(path)) as audio:
                while (block := wav.read(audio, block_frames)) is not None:
                    yield block
    except sf.LibsndfileError as error:
        raise CorruptAudio(f"the audio cannot be decoded: {error.error_string}") from None
    # Checked once read, when an upload read as it arrived has ended too.
    shortfall = wav.shortfall(path)
    if shortfall is not None:
        report.truncated = True
        report.warnings.append(shortfall)


@dataclass
class PacketDecoder:
    """One stream's packets decoded under the damage and size policy, for uploads and live
    container streams alike: a damaged packet is skipped (no frames) and counted, and more than
    `MAX_BAD_PACKETS` of them, over 5% of the packets so far, is `CorruptAudio`; a packet that
    decodes to more than `MAX_PACKET_BYTES` (counted as float32 samples, as the blocks Python
    would make of them) is a decode bomb."""

    context: Any
    channels: int
    what: str = "the audio stream"
    bad: int = 0
    total: int = 0
    damage: Damage | None = None
    """Where a later part of the file is decoded (`spans.py`): the policy is the whole file's,
    so its damaged packets are noted here for the parts before it to be added, not refused."""

    def decode(self, packet: Any, counted: bool = True) -> list[av.AudioFrame]:
        """`packet`'s frames; `counted`: False for a packet another span counts (decoded only
        for the decoder's state)."""
        self.total += counted
        try:
            frames: list[av.AudioFrame] = self.context.decode(packet)
        except av.error.FFmpegError:
            self.bad += counted
            if self.damage is not None:
                if counted:
                    self.damage.note(self.bad, self.total)
                return []
            if self.bad > MAX_BAD_PACKETS and self.bad * 20 > self.total:
                raise damaged(self.what, self.bad, self.total) from None
            return []
        if sum(frame.samples for frame in frames) * self.channels * 4 > MAX_PACKET_BYTES:
            raise TooLarge(
                f"one packet decodes to more than {size_text(MAX_PACKET_BYTES)}",
                code=ErrorCode.DECODE_BOMB,
            )
        return frames


def damaged(what: str, bad: int, total: int) -> CorruptAudio:
    """The error for a stream past the damaged-packet policy."""
    return CorruptAudio(f"{what} is damaged: {bad} of {total} packets cannot be decoded")


def damage_warning(bad: int, total: int) -> str:
    """The result's warning for damaged packets skipped."""
    return f"{bad} damaged packet(s) of {total} were skipped"


def _ffmpeg_blocks(
    path: Path, info: AudioInfo, report: DecodeReport, block_frames: int
) -> Iterator[np.ndarray]:
    """FFmpeg's frames as mono `(frames, 1)` blocks of `block_frames`, mixed down in C
    (`ffmpeg.Mixdown`): Python handles each packet, never each sample."""
    decoded = 0
    demuxer = containers.demuxer_for(info.format)
    mixdown = ffmpeg.Mixdown(block_frames)
    links = Links.of(demuxer)
    with ffmpeg.open_upload(path, demuxer, links) as container:
        packets = PacketDecoder(container.streams[info.stream].codec_context, info.channels)
        # Bound late on purpose: the message names where the change was met.
        for packet, error in stream_packets(container, info, lambda: decoded, links):  # noqa: B023
            if error is not None:
                stopped_early(report, decoded / info.sample_rate, error)
                break
            for frame in packets.decode(packet):
                check_parameters(frame, info, decoded)
                decoded += frame.samples
                yield from mixdown.push(frame)
        yield from mixdown.flush()
    if packets.bad:
        report.warnings.append(damage_warning(packets.bad, packets.total))


def too_long(max_frames: int, sample_rate: int) -> TooLarge:
    """The error for a recording that decodes to more than `max_frames` frames."""
    return TooLarge(
        f"the recording decodes to more than {max_frames} frames ({max_frames / sample_rate:g} s)",
        code=ErrorCode.AUDIO_TOO_LONG,
    )


def stream_packets(
    container: Any, info: AudioInfo, decoded: Callable[[], int], links: Links | None
) -> Iterator[tuple[Any, Exception | None]]:
    """`ffmpeg.packets` of `info`'s stream; a change of codec or of its parameters is refused
    (422), naming where it was met (`decoded()` frames in)."""
    try:
        yield from ffmpeg.packets(container, info.stream, links)
    except ffmpeg.ParametersChanged as change:
        how = f" ({change})" if str(change) else ""
        raise InvalidInput(
            f"the {info.format} stream changes its codec parameters{how} after "
            f"{decoded() / info.sample_rate:.1f} s; accepted: one sample rate and channel count "
            "per recording, in one codec",
            code=ErrorCode.AUDIO_FORMAT_CHANGED,
        ) from None


def check_parameters(frame: av.AudioFrame, info: AudioInfo, decoded: int) -> None:
    """A change of rate or channels at `decoded` frames is refused (422)."""
    channels = frame.layout.nb_channels
    if frame.sample_rate != info.sample_rate or channels != info.channels:
        raise InvalidInput(
            f"the stream changes from {info.sample_rate} Hz, {info.channels} channel(s) to "
            f"{frame.sample_rate} Hz, {channels} channel(s) at {decoded / info.sample_rate:.1f} s; "
            "accepted: one sample rate and channel count per recording",
            code=ErrorCode.AUDIO_FORMAT_CHANGED,
        )


def stopped_early(report: DecodeReport, at_s: float, error: Exception) -> None:
    """A demuxer error at `at_s`: corrupt at the start, otherwise the file ends there
    (`truncated`, with a warning)."""
    if at_s == 0:
        raise CorruptAudio(f"the audio cannot be read: {error}") from None
    report.truncated = True
    report.warnings.append(
        f"the file cannot be read after {at_s:.1f} s ({error}): the result covers what was decoded"
    )


def to_mono(blocks: Iterator[np.ndarray], bounded: bool = False) -> Iterator[np.ndarray]:
    """Average the channels; reject non-finite samples; clip float audio to [-1, 1].

    `bounded`: the samples were integers (libsndfile's PCM), so they are finite and within
    [-1, 1) already; the check and the clip, a third of this step's time, are skipped.
    """
    for block in blocks:
        # The block may be a decoder's frame buffer: changed only in a copy, unless not at all.
        mono = block[:, 0] if bounded and block.shape[1] == 1 else block[:, 0].copy()
        for channel in range(1, block.shape[1]):  # faster than mean() over a strided axis
            mono += block[:, channel]
        if block.shape[1] > 1:
            mono *= np.float32(1 / block.shape[1])
        if bounded:
            yield mono
            continue
        # One float64 sum finds a NaN or an infinity without overflowing on finite samples.
        if not np.isfinite(mono.sum(dtype=np.float64)):
            raise InvalidInput(
                "the audio contains NaN or infinite samples", code=ErrorCode.NON_FINITE_AUDIO
            )
        yield np.clip(mono, -1.0, 1.0, out=mono)


def is_integer_pcm(info: AudioInfo) -> bool:
    """Integer samples read by libsndfile, which scales them into [-1, 1)."""
    return info.decoder == sniff.LIBSNDFILE and info.subtype.startswith("PCM_")


class Decoding:
    """The whole chain for one upload: mono float32 blocks at each rate of `rates` (one reader
    per rate given, each distinct rate resampled once); `info()` at the end.

    Iterating a `Decoding` reads its first reader. Example: `blocks = Decoding(path,
    probe(path, limits), 16000, cap)`; after `np.concatenate(list(blocks))`,
    `blocks.info().duration_s` is the decoded length.
    """

    def __init__(
        self,
        path: Path,
        info: AudioInfo,
        rates: int | Sequence[int],
        max_frames: int,
        arrival: Arrival | None = None,
        block_frames: int = BLOCK_FRAMES,
        in_child: bool = False,
        parts: int = 1,
    ) -> None:
        self._probed = info
        self.block_frames = block_frames
        self.report = DecodeReport()
        wanted = parts if in_child else 0
        self._child = _child(path, info, max_frames, self.report, block_frames, wanted, arrival)
        mono: Iterator[np.ndarray]
        if self._child is not None:
            mono = iter(self._child)
        else:
            blocks = read_blocks(path, info, max_frames, self.report, block_frames, arrival)
            mono = to_mono(blocks, bounded=is_integer_pcm(info))
        self._tee = Tee(mono, info.sample_rate, [rates] if isinstance(rates, int) else rates)
        self._first = self._tee.reader(0)

    def __iter__(self) -> Iterator[np.ndarray]:
        return self

    def __next__(self) -> np.ndarray:
        return next(self._first)

    def reader(self, index: int) -> Iterator[np.ndarray]:
        """The blocks at `rates[index]`; a reader ahead of the others decodes for all of them."""
        return self._first if index == 0 else self._tee.reader(index)

    def held_samples(self, index: int) -> int:
        """Samples decoded for reader `index` that it has not taken yet."""
        return self._tee.held_samples(index)

    def close(self) -> None:
        """Stop decoding (and its child) and release the file."""
        self._tee.close()
        if self._child is not None:
            self._child.close()

    def info(self) -> AudioInfo:
        """What was decoded: the probed info with the decoded length, truncation and warnings."""
        return self.report.finish(self._probed)


def _child(
    path: Path,
    info: AudioInfo,
    max_frames: int,
    report: DecodeReport,
    block_frames: int,
    parts: int,
    arrival: Arrival | None,
) -> ChildDecoding | PartDecoding | None:
    """The file's blocks decoded in a child (`child.py`) when `parts` (0: in process) and FFmpeg
    decodes the whole file (not one still arriving), in up to `parts` parts by a child each
    where the file is long and seekable (`parts.py`); None (decoded in process) otherwise, or
    where no child can be had."""
    # child.py and parts.py run this module's chain: imported when used.
    from arengine.audio import child
    from arengine.audio import parts as split

    if not parts or arrival is not None or not child.usable(info):
        return None
    count = split.part_count(info, parts, path) if split.usable(info) else 1
    try:
        if count > 1:
            return split.PartDecoding(path, info, max_frames, report, block_frames, count)
        return child.ChildDecoding(path, info, max_frames, report, block_frames)
    except (OSError, RuntimeError):
        return None


def decode(
    path: Path,
    info: AudioInfo,
    rates: int | Sequence[int],
    max_frames: int,
    arrival: Arrival | None = None,
    in_child: bool = False,
    parts: int = 1,
) -> Decoding:
    """The whole chain: mono float32 blocks at `rates` from a file probed as `info` (still
    arriving, with `arrival`); with `in_child`, FFmpeg's formats decoded in a child process, a
    long seekable file in up to `parts` parts by a child each."""
    return Decoding(path, info, rates, max_frames, arrival, in_child=in_child, parts=parts)

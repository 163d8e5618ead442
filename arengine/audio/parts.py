"""One long compressed file decoded in parts, each by its own forked child (`child.py`) at once.

One child decodes on one core; a 35-minute MP3 takes it about as long as `ffmpeg -threads 1`,
and the request's resampling, model and upload come on top. Here the file is split into parts,
each decoded by a child of the same fork server running the same chain from a seek
(`spans.read_span`: FFmpeg's libraries through PyAV, the allowlists, the packet-size cap, a
change of rate refused; the later parts write to a nameless temporary file, so that they decode
ahead of the engine), and the server reads the parts in order as one child's blocks: mono
float32 at the file's own rate, resampled once per model rate by the server (`tee`), as for one
child.

Every part starts on a whole second, `WARMUP_S` early for the decoder's state, and is cut by the
frames' timestamps, so the parts end to end are one decoding's samples (MP3, FLAC and Opus to
the bit, AAC within its decoder's noise: `tests/audio/test_parts.py`). The plan trusts no
header: a part whose child did not reach the part's end ends the file there (the later parts are
stopped unread), the last part reads to the end of the file, the frame cap is counted on what
comes out, and a part whose timestamps go back (two files one after the other) hands the rest of
the file to one child decoding it whole, its first samples (those the parts gave) dropped. The
damaged-packet policy is the whole file's: each part counts the packets whose timestamps lie in
it, and each part's counts are added to those before it (`decode.Damage.refused`), so a file is
refused where one child would refuse it, and the warning gives one child's counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np

from arengine.audio import containers, ffmpeg, sniff
from arengine.audio.child import ChildDecoding
from arengine.audio.decode import DecodeReport, damage_warning, damaged, too_long
from arengine.audio.spans import Span
from arengine.errors import ErrorCode, InvalidInput, TooLarge
from arengine.types import AudioInfo

MIN_PART_S = 60
"""The shortest part: forking a child costs a few milliseconds, a minute of MP3 ~3 s of decoding,
and each part decodes `WARMUP_S` twice."""

WARMUP_S = 1
"""Seconds decoded and dropped before a part: MP3's bit reservoir, AAC's overlap."""


MATROSKA_OPUS = ("Matroska/WebM", "Opus")
"""Opus in Matroska (WebM) is decoded in parts too: Matroska's timestamps are milliseconds, and
Opus's always fall on them (48 kHz, frames of 20 ms), so its parts equal one child's to the bit
(`tests/audio/test_parts.py`); other codecs in Matroska are not split."""


def usable(info: AudioInfo) -> bool:
    """Whether `info`'s file can be decoded in parts: FFmpeg's, in a container whose packet
    timestamps are sample-exact (`containers.Container.seekable`), or Opus in WebM."""
    container = containers.named(info.format)
    exact = container is not None and container.seekable
    return info.decoder == sniff.FFMPEG and (exact or (info.format, info.subtype) == MATROSKA_OPUS)


def part_count(info: AudioInfo, most: int, path: Path | None = None) -> int:
    """How many parts to decode `info` in: at most `most`, each at least `MIN_PART_S` long by
    the header (a guess that the plan checks as it reads). Where the stream states no length
    (Matroska's is the segment's), the container's, from the file at `path`."""
    seconds = length_s(info, path) if most > 1 else info.duration_s
    return max(1, min(most, int(seconds // MIN_PART_S)))


def length_s(info: AudioInfo, path: Path | None) -> float:
    """The length the parts split, in seconds: the header's, or where the stream states none
    (Matroska's is the segment's) the container's, read from the file at `path` (0: none)."""
    return info.duration_s or (_container_s(path) if path is not None else 0.0)


def _container_s(path: Path) -> float:
    """The length the container's header states, in seconds (0: none, or not readable)."""
    try:
        with ffmpeg.open_upload(path) as container:
            return max(0.0, (container.duration or 0) / av.time_base)
    except (av.error.FFmpegError, OSError, PermissionError):
        return 0.0


def starts(seconds: float, parts: int) -> list[int]:
    """Where each of `parts` parts of `seconds` starts, in whole seconds.

    >>> starts(2100.0, 2)
    [0, 1050]
    """
    return [int(seconds * part / parts) for part in range(parts)]


class PartDecoding:
    """The mono float32 blocks one `ChildDecoding` gives for the file at `path`, decoded in
    `parts` parts by a child each, all at once; `report` is filled in as one child fills it.
    Iterate once, then `close` (also early: the children are stopped). Example: `blocks =
    PartDecoding(path, info, cap, report, 65536, parts=2)`; `np.concatenate(list(blocks))`
    equals one `ChildDecoding`'s blocks concatenated."""

    def __init__(
        self,
        path: Path,
        info: AudioInfo,
        max_frames: int,
        report: DecodeReport,
        block_frames: int,
        parts: int,
    ) -> None:
        self._info, self._cap, self._report = info, max_frames, report
        self._path, self._block = path, block_frames
        rate = info.sample_rate
        at = [second * rate for second in starts(length_s(info, path), parts)]
        self._children: list[ChildDecoding] = []
        try:
            for number, first in enumerate(at):
                end = at[number + 1] if number + 1 < len(at) else None
                span = Span(first, end, min(first, WARMUP_S * rate))
                cap = max(0, max_frames - first)
                # Part 0 is read as it is decoded; the later parts wait their turn, so their
                # children write to a file rather than stop at a full pipe.
                spool = number > 0
                self._children.append(
                    ChildDecoding(path, info, cap, DecodeReport(), block_frames, span, spool)
                )
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[np.ndarray]:
        try:
            yield from self._read()
        finally:
            self.close()

    def _read(self) -> Iterator[np.ndarray]:
        given = bad = total = 0
        for number, child in enumerate(self._children):
            try:
                for block in child:
                    given += len(block)
                    self._report.frames = given
                    yield block
            except TooLarge as error:
                if error.code != ErrorCode.AUDIO_TOO_LONG:
                    raise
                raise too_long(self._cap, self._info.sample_rate) from None
            if child.found.broken:
                yield from self._whole(given)
                return
            damage = child.found.damage
            if damage.refused(bad, total):
                raise damaged("the audio stream", bad + damage.bad, total + damage.total)
            bad, total = bad + damage.bad, total + damage.total
            part = child.report
            self._report.truncated |= part.truncated
            self._report.warnings.extend(part.warnings)
            last = number == len(self._children) - 1
            if part.truncated or (not last and not child.found.reached_end):
                break  # the file ends in this part: the later parts hold nothing of it
        if given == 0:
            raise InvalidInput("the recording has no audio frames", code=ErrorCode.EMPTY_AUDIO)
        self._report.frames = given
        if bad:
            self._report.warnings.append(damage_warning(bad, total))

    def _whole(self, given: int) -> Iterator[np.ndarray]:
        """The rest of the file after the `given` samples the parts gave, from one child
        decoding it whole (its report replaces theirs): a part whose timestamps went back."""
        self.close()
        report = DecodeReport()
        whole = ChildDecoding(self._path, self._info, self._cap, report, self._block)
        self._children.append(whole)
        skip = given
        for block in whole:
            keep = block[min(skip, len(block)) :]
            skip -= len(block) - len(keep)
            self._report.frames = report.frames
            if len(keep):
                yield keep
        self._report.truncated = report.truncated
        self._report.warnings[:] = report.warnings

    def close(self) -> None:
        """Stop every child still decoding, and close the pipes."""
        for child in self._children:
            child.close()

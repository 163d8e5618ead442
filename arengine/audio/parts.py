"""One long compressed file decoded in parts, each by an `ffmpeg` child process at once.

Decoding in the server's process costs a Python object per packet (PyAV) under the GIL, ~80,000
for a 35-minute MP3, and one process decodes on one core. Here `ffmpeg` decodes, mixes down and
resamples (its `aresample`) in a child process per part, each writing float32 to a spool file
that the engine reads in blocks of up to 1 MiB as it is written (the read releases the GIL), in
order, so memory holds one block whatever the length. The file has no name (unlinked as it is
made, handed to the child as a descriptor), so nothing is left behind if the server is killed.
Files, not pipes: a pipe holds 1 MiB (16 s at 16 kHz), so part 0's child would decode only as
far ahead as the engine reads.

Every part starts on a whole second, so the model rate's grid falls on it, `WARMUP_S` early for
the decoder's and the resampler's state, and reads `TAIL_S` past its end; both are cut off by
sample count. MP3 and FLAC parts then equal one `ffmpeg` decoding the whole file to the bit, AAC
within its decoder's noise (`tests/audio/test_parts.py`). The plan trusts no header: a part that
ends short ends the file there (the later parts are not read), the last part reads to the end of
the file, and the frame cap is counted on what comes out.

The child is opened as narrowly as `ffmpeg.open_upload` opens PyAV: the same demuxer, codec and
protocol allowlists, the demuxer and decoder validation chose insisted on, one allocation at most
`MAX_ALLOC_BYTES`, and a change of rate or channels refused (`-reinit_filter 0` makes it an
error) rather than resampled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from arengine.audio import containers, sniff
from arengine.audio.decode import DecodeReport, too_long
from arengine.errors import CorruptAudio, ErrorCode, InvalidInput
from arengine.types import AudioInfo

FFMPEG = shutil.which("ffmpeg")
"""The `ffmpeg` program on PATH; None: parts are not used and PyAV decodes sequentially."""

MIN_PART_S = 60
"""The shortest part: starting a child costs ~0.1 CPU s, a minute of MP3 takes ~3 s to decode."""

WARMUP_S = 1
"""Seconds decoded and dropped before a part: MP3's bit reservoir, AAC's overlap, the resampler."""

TAIL_S = 1
"""Seconds read past a part's end and dropped: the resampler's last samples see what follows."""

MAX_ALLOC_BYTES = 64 << 20
"""The largest single allocation a child may make (`-max_alloc`): packets, frames and index
tables of real files are far smaller; a packet that claims more fails instead of growing."""

PROTOCOLS = "file"
"""The child reads the upload by name (the `file` protocol, nothing else): the demuxer allowlist
holds no playlist or reference format, and `mov` follows no external references by default."""

READ_BYTES = 1 << 20
"""Most bytes per read from a part: 262,144 samples, 16 s at 16 kHz."""

POLL_S = 0.005
"""The wait before reading again where a part's file holds nothing new yet."""

_FORMAT_CHANGED = "Changing audio frame properties on the fly is not supported"

_DAMAGED = "Error while decoding stream"

_NOT_REPORTED = ("not on whitelist", "Last message repeated")
"""ffmpeg's lines about the allowlist refusing a video track's decoder while it probes the
streams (the track is never decoded), and the repeats of such lines."""


def usable(info: AudioInfo) -> bool:
    """Whether `info`'s file can be decoded in parts: FFmpeg's, seekable to the sample, and the
    `ffmpeg` program present."""
    container = containers.named(info.format)
    seekable = container is not None and container.seekable
    return FFMPEG is not None and info.decoder == sniff.FFMPEG and seekable


def part_count(info: AudioInfo, most: int) -> int:
    """How many parts to decode `info` in: at most `most`, each at least `MIN_PART_S` long by
    the header (a guess that the plan checks as it reads)."""
    return max(1, min(most, int(info.duration_s // MIN_PART_S)))


def starts(info: AudioInfo, parts: int) -> list[int]:
    """Where each part starts, in whole seconds."""
    return [int(info.duration_s * part / parts) for part in range(parts)]


def command(
    path: Path, info: AudioInfo, rate_out: int, begin_s: int, length_s: float, output: str
) -> list[str]:
    """The `ffmpeg` command that writes mono float32 at `rate_out` of `length_s` seconds of
    `path` from `begin_s` to `output` (a file, or `pipe:N` for descriptor N)."""
    if FFMPEG is None:
        raise RuntimeError("no ffmpeg program on PATH")
    demuxer = containers.demuxer_for(info.format)
    if demuxer is None or info.subtype not in containers.DECODERS.values():
        raise ValueError(f"{info.format} {info.subtype} is not decoded by FFmpeg")
    decoder = next(name for name, shown in containers.DECODERS.items() if shown == info.subtype)
    weights = "+".join(f"{1 / info.channels!r}*c{index}" for index in range(info.channels))
    return [
        FFMPEG,
        *("-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1"),
        *("-max_alloc", str(MAX_ALLOC_BYTES), "-reinit_filter", "0"),
        *("-f", demuxer, "-format_whitelist", demuxer),
        *("-codec_whitelist", ",".join(containers.DECODERS), "-c:a", decoder),
        *("-protocol_whitelist", PROTOCOLS, "-probesize", str(5 << 20)),
        *(("-ss", str(begin_s)) if begin_s else ()),
        *("-t", f"{length_s:.3f}", "-i", f"file:{path}"),
        *("-map", f"0:{info.stream}", "-af", f"pan=mono|c0={weights},aresample={rate_out}"),
        *("-f", "f32le", "-y", output),
    ]


@dataclass(slots=True)
class _Part:
    """One child and where its samples go, in model-rate samples."""

    process: subprocess.Popen[bytes]
    errors: IO[bytes]
    spool: IO[bytes]
    """The nameless file it writes (to its own offset; the engine reads at its own)."""
    skip: int
    """Samples of the warm-up, dropped."""
    end: int | None
    """Where the next part begins (the index in the whole decoding); None for the last part,
    which reads to the end of the file."""
    expected: int
    """What the child writes, warm-up and tail included, if the file goes on past the part."""


class PartDecoding:
    """Mono float32 blocks at `rate_out` of one file, decoded in parts by `ffmpeg` children.

    Iterating gives the blocks in order, as a `decode.Decoding` reader does. Example:
    `blocks = PartDecoding(path, probe(path, limits), 16000, cap, parts=2)`; once read,
    `blocks.info()` is what was decoded.
    """

    def __init__(
        self, path: Path, info: AudioInfo, rate_out: int, max_frames: int, parts: int
    ) -> None:
        self._probed, self._rate = info, rate_out
        self._cap = max_frames * rate_out // info.sample_rate
        self.report = DecodeReport()
        self.damaged = 0
        """Packets the children could not decode and skipped."""
        self.block_frames = READ_BYTES // 4
        at = starts(info, parts)
        # ffmpeg takes durations up to 2^63 microseconds; a cap past a year is no cap.
        cap_s = min(max_frames / info.sample_rate, 366 * 86400)
        self._parts: list[_Part] = []
        try:
            for number, first_s in enumerate(at):
                last = number == len(at) - 1
                begin_s = max(0, first_s - WARMUP_S)
                length_s = cap_s - begin_s + TAIL_S if last else at[number + 1] + TAIL_S - begin_s
                self._parts.append(self._start(path, begin_s, length_s))
                part = self._parts[-1]
                part.skip = (first_s - begin_s) * rate_out
                part.expected = round(length_s * rate_out)
                part.end = None if last else at[number + 1] * rate_out
        except BaseException:
            self.close()
            raise
        self._blocks = self._read()

    def __iter__(self) -> Iterator[np.ndarray]:
        return self

    def __next__(self) -> np.ndarray:
        return next(self._blocks)

    def reader(self, index: int) -> Iterator[np.ndarray]:
        """The blocks (one model only: `index` 0)."""
        if index != 0:
            raise ValueError("parts decode for one model: reader 0 only")
        return self

    def held_samples(self, index: int) -> int:
        """Nothing is held beyond the block being read."""
        return 0

    def info(self) -> AudioInfo:
        """What was decoded: the probed info with the decoded length, truncation and warnings."""
        return self.report.finish(self._probed)

    def close(self) -> None:
        """Stop every child and remove the spool files."""
        self._blocks_close()
        for part in self._parts:
            if part.process.poll() is None:
                part.process.kill()
            part.process.wait()
            part.errors.close()
            part.spool.close()

    def _blocks_close(self) -> None:
        blocks = getattr(self, "_blocks", None)
        if blocks is not None:
            blocks.close()

    def _start(self, path: Path, begin_s: int, length_s: float) -> _Part:
        spool = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `close`)
        errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `close`)
        target = f"pipe:{spool.fileno()}"  # ffmpeg's pipe protocol writes to that descriptor
        args = command(path, self._probed, self._rate, begin_s, length_s, target)
        try:
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                pass_fds=(spool.fileno(),),
            )
        except BaseException:
            errors.close()
            spool.close()
            raise
        return _Part(process, errors, spool, 0, None, 0)

    def _read(self) -> Iterator[np.ndarray]:
        given = 0
        for part in self._parts:
            received = 0
            for raw in self._samples(part):
                keep = raw[max(0, part.skip - received) :]
                received += len(raw)
                if part.end is not None:
                    keep = keep[: max(0, part.end - given)]
                if len(keep):
                    given += len(keep)
                    self._count(given)
                    yield _checked(keep)
            self._finished(part, given)
            if part.end is not None and received < part.expected - TAIL_S * self._rate // 2:
                # The file ends inside this part (its child did not reach the tail): what the
                # later parts read is not there. A part a little short for damaged packets it
                # skipped ends where they were: the next part's samples follow, as in process.
                break
        if given == 0:
            raise InvalidInput("the recording has no audio frames", code=ErrorCode.EMPTY_AUDIO)
        if self.damaged:
            # Counted per part: a packet in two parts' overlap counts twice.
            self.report.warnings.append(f"{self.damaged} damaged packet(s) were skipped")

    def _count(self, given: int) -> None:
        if given > self._cap:
            raise too_long(
                self._cap * self._probed.sample_rate // self._rate, self._probed.sample_rate
            )
        self.report.frames = given * self._probed.sample_rate // self._rate

    def _samples(self, part: _Part) -> Iterator[np.ndarray]:
        """The part's samples as its child writes them; where the engine has caught up with the
        child, it waits `POLL_S` a time (not holding the GIL)."""
        at = 0  # read with `preadv` at an offset of our own: the child moves the shared one
        while True:
            running = part.process.poll() is None  # before the read: then 0 bytes is the end
            block = np.empty(READ_BYTES // 4, np.float32)
            got = os.preadv(part.spool.fileno(), [block.data.cast("B")], at)
            whole = got - got % 4  # a sample half written is read again once it is whole
            at += whole
            if whole:
                yield block[: whole // 4]
            elif not running:
                return
            else:
                time.sleep(POLL_S)

    def _finished(self, part: _Part, given: int) -> None:
        code = part.process.wait()
        damaged, reason = _read_errors(part.errors)
        if reason == _FORMAT_CHANGED:
            raise InvalidInput(
                f"the {self._probed.format} stream changes its codec parameters after "
                f"{given / self._rate:.1f} s; accepted: one sample rate and channel count per "
                "recording",
                code=ErrorCode.AUDIO_FORMAT_CHANGED,
            )
        self.damaged += damaged
        if code == 0 and reason is None:
            return
        reason = reason or f"ffmpeg exited with {code}"
        if given == 0 and code != 0:
            raise CorruptAudio(f"the audio cannot be read: {reason}")
        warning = f"FFmpeg reported after {given / self._rate:.1f} s: {reason}"
        if code != 0:
            self.report.truncated = True
            warning += "; the result covers what was decoded"
        if warning not in self.report.warnings:
            self.report.warnings.append(warning)


def _read_errors(errors: IO[bytes]) -> tuple[int, str | None]:
    """From a child's error lines: the damaged packets it skipped, and the last line worth
    reporting (`_FORMAT_CHANGED` where the stream changed its rate or channels). Read line by
    line: a file of many damaged packets writes a line for each."""
    errors.seek(0)
    damaged, reason = 0, None
    for raw in errors:
        line = raw.decode("utf-8", "replace").strip()
        if _FORMAT_CHANGED in line:
            return damaged, _FORMAT_CHANGED
        if _DAMAGED in line:
            damaged += 1
        elif line and not line.startswith("[") and not any(n in line for n in _NOT_REPORTED):
            reason = line[:200]  # `[decoder @ ...]` lines: the details of a damaged packet
    return damaged, reason


def _checked(samples: np.ndarray) -> np.ndarray:
    """Finite samples within [-1, 1], as `decode.to_mono` makes them."""
    # One float64 sum finds a NaN or an infinity without overflowing on finite samples.
    if not np.isfinite(samples.sum(dtype=np.float64)):
        raise InvalidInput(
            "the audio contains NaN or infinite samples", code=ErrorCode.NON_FINITE_AUDIO
        )
    clipped: np.ndarray = np.clip(samples, -1.0, 1.0)
    return clipped

"""Decoding as a chain of small generators: file blocks -> mono -> resampled, all float32.

Each generator holds one block at a time, so memory does not depend on the recording's length.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from arengine.errors import CorruptAudio, ErrorCode, InvalidInput, TooLarge

BLOCK_FRAMES = 65536
"""Frames decoded per read: 1.5 s at 44.1 kHz, a few hundred KiB even for 8 channels."""


def read_blocks(
    path: Path, max_frames: int, block_frames: int = BLOCK_FRAMES
) -> Iterator[np.ndarray]:
    """Yield `(frames, channels)` float32 blocks; stop with `TooLarge` past `max_frames`.

    The cap is counted on decoded frames, not taken from the header, so a small compressed file
    that decodes to hours is stopped after `max_frames`.
    """
    decoded = 0
    try:
        with sf.SoundFile(str(path)) as audio:
            while (block := _read(audio, block_frames)) is not None:
                decoded += len(block)
                if decoded > max_frames:
                    raise TooLarge(
                        f"the recording decodes to more than {max_frames} frames "
                        f"({max_frames / audio.samplerate:g} s)",
                        code=ErrorCode.AUDIO_TOO_LONG,
                    )
                yield block
    except sf.LibsndfileError as error:
        raise CorruptAudio(f"the audio cannot be decoded: {error.error_string}") from None


def _read(audio: sf.SoundFile, frames: int) -> np.ndarray | None:
    try:
        block = audio.read(frames, dtype="float32", always_2d=True)
    except (RuntimeError, ValueError) as error:
        raise CorruptAudio(f"the audio cannot be decoded: {error}") from None
    return block if len(block) else None


def to_mono(blocks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """Average the channels; reject non-finite samples; clip float audio to [-1, 1]."""
    for block in blocks:
        mono = block[:, 0] if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)
        if not np.isfinite(mono).all():
            raise InvalidInput(
                "the audio contains NaN or infinite samples", code=ErrorCode.NON_FINITE_AUDIO
            )
        yield np.clip(mono, -1.0, 1.0)


def resample(blocks: Iterator[np.ndarray], rate_in: int, rate_out: int) -> Iterator[np.ndarray]:
    """Resample a mono stream with soxr (band-limited, high quality), block by block."""
    if rate_in == rate_out:
        yield from blocks
        return
    stream = soxr.ResampleStream(rate_in, rate_out, 1, dtype="float32", quality="HQ")
    for block in blocks:
        out = stream.resample_chunk(block)
        if len(out):
            yield out
    tail = stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
    if len(tail):
        yield tail


def decode(path: Path, rate_in: int, rate_out: int, max_frames: int) -> Iterator[np.ndarray]:
    """The whole chain: mono float32 blocks at `rate_out` from a file probed at `rate_in`."""
    return resample(to_mono(read_blocks(path, max_frames)), rate_in, rate_out)

"""WAVs whose header disagrees with the file: the same bytes for the tests of
every path (decoding, in-process HTTP, a real server reading while the upload arrives), and the
one answer each path must give: all the audio, `truncated: false`, and these warnings."""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile as sf

SECONDS = 6.0
RATE = 16000
_FRAMES = int(SECONDS * RATE)

CASES: dict[str, tuple[int, str, int, tuple[str, ...]]] = {
    # name: (offset, struct format, value written there, the warnings of the answer)
    "block_align": (
        32,
        "<H",
        8,
        ("the WAV header's block_align is 8 bytes; 2 channel(s) of 16 bits are 4: read as 4",),
    ),
    "half": (
        40,
        "<I",
        _FRAMES * 2,
        ("the header states 3.0 s; all 6.0 s in the file were decoded",),
    ),
    "pipe": (40, "<I", 0xFFFFFFFF, ()),
    "zero": (40, "<I", 0, ()),
}
"""Before: read while arriving, `block_align` 8 gave 3 s of 6; `half` gave 3 s with no warning;
0xFFFFFFFF was reported truncated with a wrong warning; 0 was a 422 `empty_audio`."""


def whole() -> bytes:
    """A 6-s stereo 16-bit WAV of a tone, header 44 bytes: block_align at 32, data size at 40."""
    t = np.arange(_FRAMES) / RATE
    left = 0.4 * np.sin(2 * np.pi * 440 * t)
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([left, 0.5 * left], axis=1), RATE, "PCM_16", format="WAV")
    return buffer.getvalue()


def lying(case: str) -> bytes:
    """`whole()` with the header field of `case` rewritten."""
    at, fmt, value, _ = CASES[case]
    data = bytearray(whole())
    data[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return bytes(data)

"""Every input format arengine accepts, declared once: the answer to "where does a new input
format go?".

A container is one `Container` in `CONTAINERS`: the name results and messages give it, how its
first bytes are recognised, the FFmpeg demuxer allowed to open it, libsndfile's names for it when
libsndfile decodes it (uncompressed containers: exact and fastest there, see BENCHMARKS.md),
and what its header and packets can be trusted with. A codec is one entry of `DECODERS` (FFmpeg's
audio decoders) or `SUBTYPES` (libsndfile's). Everything else reads these: `sniff` (what a file
starts like), `ffmpeg` (the demuxer and decoder allowlists), `validation` (what is accepted and
whose length is exact), `decode` (which demuxer to insist on) and `parts` (which demuxer, and
which can be decoded from several offsets at once).

To add an input format: add its `Container` (and its codecs to `DECODERS` or `SUBTYPES`), a test
file for it in `tests/audio/test_ffmpeg.py`, and its name to the README's list of formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

_W64 = b"riff\x2e\x91\xcf\x11\xa5\xd6\x28\xdb\x04\xc1\x00\x00"
_ASF = b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"


@dataclass(frozen=True, slots=True)
class Container:
    """One input format: its name, how it is recognised, and who may open it."""

    name: str
    """As results (`audio.format`) and messages name it."""
    starts_like: Callable[[bytes], bool]
    """Whether a file's first bytes (`sniff.HEAD_BYTES` of them) look like this container."""
    demuxer: str | None = None
    """The FFmpeg demuxer allowed to open it, insisted on when FFmpeg's own probe gives up (a
    200-byte MP3 holds too few frames for the probe to be sure); None: never given to FFmpeg."""
    sndfile: tuple[str, ...] = ()
    """libsndfile's names for it, when libsndfile decodes it instead of FFmpeg."""
    trusted_length: bool = False
    """The header's length is exact (sample counts or tables), so a claim over the cap is refused
    before decoding. Elsewhere (an MP3 without a Xing header, Matroska's Duration) it is a guess."""
    seekable: bool = False
    """Packet timestamps are sample-exact, so `parts` may decode it from several offsets. Not
    Matroska (milliseconds), nor Ogg: FFmpeg's first Vorbis frame is shorter than its timestamps
    say, which shifts audio decoded from an offset by 448 samples (`tests/audio/test_parts.py`
    keeps Ogg and WebM out of parts)."""
    audio: bool = True
    """False for files recognised only to be refused by name (playlists, archives), never
    given to FFmpeg at all."""


def _riff_wave(data: bytes) -> bool:
    return data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE"


def _aiff(data: bytes) -> bool:
    return data[:4] == b"FORM" and data[8:12] in (b"AIFF", b"AIFC")


def _mp4(data: bytes) -> bool:
    return data[4:8] in (b"ftyp", b"moov", b"mdat", b"wide", b"free")


def _mp3(data: bytes) -> bool:
    frame_sync = len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0
    return data.startswith(b"ID3") or (frame_sync and data[1] & 0x06 != 0)


def _adts(data: bytes) -> bool:
    return len(data) > 1 and data[0] == 0xFF and data[1] & 0xF6 == 0xF0


def _m3u(data: bytes) -> bool:
    return data.lstrip(b"\xef\xbb\xbf").startswith(b"#EXTM3U")


def _starts(magic: bytes) -> Callable[[bytes], bool]:
    return lambda data: data.startswith(magic)


CONTAINERS: tuple[Container, ...] = (
    Container("WAV", _riff_wave, "wav", sndfile=("WAV", "WAVEX", "RF64")),
    Container("W64", _starts(_W64), "w64", sndfile=("W64",)),
    Container("AIFF", _aiff, "aiff", sndfile=("AIFF",)),
    Container("FLAC", _starts(b"fLaC"), "flac", trusted_length=True, seekable=True),
    Container("Ogg", _starts(b"OggS"), "ogg"),
    Container("MP4/MOV", _mp4, "mov", trusted_length=True, seekable=True),
    Container("Matroska/WebM", _starts(b"\x1a\x45\xdf\xa3"), "matroska"),
    Container("ASF (WMA)", _starts(_ASF), "asf"),
    Container("AMR", _starts(b"#!AMR"), "amr"),
    Container(
        "an HLS/M3U playlist",
        lambda d: d.lstrip(b"\xef\xbb\xbf").startswith(b"#EXTM3U"),
        audio=False,
    ),
    Container("an ffconcat script", _starts(b"ffconcat"), audio=False),
    Container("a ZIP archive", _starts(b"PK\x03\x04"), audio=False),
    Container("AAC (ADTS)", _adts, "aac"),
    Container("MP3", _mp3, "mp3", seekable=True),
)
"""Every container, in the order their first bytes are tested: the frame-sync tests (ADTS, MP3)
come last because they match the least."""

DECODERS: dict[str, str] = {
    "aac": "AAC",
    "mp3float": "MP3",
    "mp2float": "MP2",
    "mp1float": "MP1",
    "opus": "Opus",
    "vorbis": "Vorbis",
    "flac": "FLAC",
    "alac": "ALAC",
    "wmav1": "WMA v1",
    "wmav2": "WMA v2",
    "wmapro": "WMA Pro",
    "wmalossless": "WMA Lossless",
    "amrnb": "AMR-NB",
    "amrwb": "AMR-WB",
    "ac3": "AC-3",
    "eac3": "E-AC-3",
    **{f"pcm_{kind}": f"PCM {kind}" for kind in ("s16le", "s16be", "s24le", "s24be", "s32le")},
    **{f"pcm_{kind}": f"PCM {kind}" for kind in ("s32be", "f32le", "f32be", "f64le", "u8")},
    "pcm_s8": "PCM s8",
    "pcm_mulaw": "mu-law",
    "pcm_alaw": "A-law",
    "adpcm_ms": "MS ADPCM",
    "adpcm_ima_wav": "IMA ADPCM",
}
"""FFmpeg audio decoders allowed, with the codec name a user recognises. No video decoder is
listed, so FFmpeg's stream analysis cannot open one either."""

SUBTYPES = frozenset(
    {
        "PCM_S8",
        "PCM_U8",
        "PCM_16",
        "PCM_24",
        "PCM_32",
        "FLOAT",
        "DOUBLE",
        "ULAW",
        "ALAW",
        "IMA_ADPCM",
        "MS_ADPCM",
    }
)
"""Codecs libsndfile decodes in its containers (its names, as results report them)."""

DEMUXERS: dict[str, Container] = {c.demuxer: c for c in CONTAINERS if c.demuxer is not None}
"""FFmpeg's demuxers allowed to open an upload, and their containers."""

SNDFILE_FORMATS = frozenset(name for c in CONTAINERS for name in c.sndfile)
"""libsndfile's names of the containers it decodes."""

ACCEPTED = ", ".join(sorted({*(c.name for c in DEMUXERS.values()), *SNDFILE_FORMATS}))
"""Every container accepted, as named in messages."""


def recognise(data: bytes) -> Container | None:
    """The container `data` (a file's first bytes) starts like; None if it looks like nothing
    known."""
    return next((c for c in CONTAINERS if c.starts_like(data)), None)


def named(name: str) -> Container | None:
    """The container that results and messages call `name` (None for libsndfile's own names)."""
    return next((c for c in CONTAINERS if c.name == name), None)


def demuxer_for(name: str) -> str | None:
    """The FFmpeg demuxer to open a file probed as `name` with (None: let FFmpeg probe)."""
    container = named(name)
    return None if container is None else container.demuxer

"""Stage 1, validation: probe an upload and reject what cannot be processed, before heavy work."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from arengine.errors import CorruptAudio, ErrorCode, InvalidInput, TooLarge, UnsupportedFormat
from arengine.types import AudioInfo

FORMATS = frozenset({"WAV", "WAVEX", "RF64", "W64", "AIFF", "FLAC", "OGG", "MP3"})
"""Containers arengine decodes (libsndfile's names)."""

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
        "VORBIS",
        "OPUS",
        "MPEG_LAYER_I",
        "MPEG_LAYER_II",
        "MPEG_LAYER_III",
    }
)
"""Codecs arengine decodes (libsndfile's names)."""


_UNKNOWN = 2**62
"""libsndfile reports 2**63 - 1 frames when a header does not say."""


@dataclass(frozen=True, slots=True)
class AudioLimits:
    """What a recording may be; built from the settings."""

    max_duration_s: float
    max_channels: int
    min_sample_rate: int
    max_sample_rate: int


def probe(path: Path, limits: AudioLimits) -> AudioInfo:
    """Read the header of `path` and check it against `limits`; raise an `ArengineError` if not.

    Example: `probe(Path("speech.flac"), limits).format` is `"FLAC"`.
    """
    if os.path.getsize(path) == 0:
        raise InvalidInput("the uploaded file is empty", code=ErrorCode.EMPTY_FILE)
    info = _read_header(path)
    checked = AudioInfo(
        format=info.format,
        subtype=info.subtype,
        sample_rate=int(info.samplerate),
        channels=int(info.channels),
        frames=max(int(info.frames), 0),
    )
    _check_codec(checked)
    _check_shape(checked, limits)
    _check_frames(checked, limits)
    return checked


def _read_header(path: Path) -> sf._SoundFileInfo:
    try:
        return sf.info(str(path))
    except sf.LibsndfileError as error:
        text = str(error.error_string)
        if "not recognised" in text or "unknown format" in text.lower():
            raise UnsupportedFormat(
                f"not a recognised audio file; accepted containers: {', '.join(sorted(FORMATS))}"
            ) from None
        raise CorruptAudio(f"the audio header cannot be read: {text}") from None
    except (RuntimeError, ValueError) as error:
        raise CorruptAudio(f"the audio header cannot be read: {error}") from None


def _check_codec(info: AudioInfo) -> None:
    if info.format not in FORMATS:
        raise UnsupportedFormat(
            f"container {info.format} is not accepted; accepted: {', '.join(sorted(FORMATS))}"
        )
    if info.subtype not in SUBTYPES:
        raise UnsupportedFormat(
            f"codec {info.subtype} is not accepted; accepted: {', '.join(sorted(SUBTYPES))}"
        )


def _check_shape(info: AudioInfo, limits: AudioLimits) -> None:
    if not 1 <= info.channels <= limits.max_channels:
        raise InvalidInput(
            f"{info.channels} channels; accepted: 1 to {limits.max_channels}",
            code=ErrorCode.UNSUPPORTED_CHANNELS,
        )
    if not limits.min_sample_rate <= info.sample_rate <= limits.max_sample_rate:
        raise InvalidInput(
            f"sample rate {info.sample_rate} Hz; accepted: {limits.min_sample_rate} "
            f"to {limits.max_sample_rate} Hz",
            code=ErrorCode.UNSUPPORTED_SAMPLE_RATE,
        )


def _check_frames(info: AudioInfo, limits: AudioLimits) -> None:
    # libsndfile already clamps an uncompressed file's frames to its bytes; a compressed header
    # (a FLAC total_samples, say) may still lie upwards, which the decode-time cap also catches.
    if info.frames >= _UNKNOWN:
        # A FLAC written to a pipe has total_samples 0; libsndfile then cannot seek it to decode.
        raise CorruptAudio(
            "the header does not state the recording's length (written to a "
            "pipe?); re-encode it to a file",
            code=ErrorCode.UNKNOWN_LENGTH,
        )
    if info.duration_s > limits.max_duration_s:
        raise TooLarge(
            f"the recording lasts {info.duration_s:.1f} s; the limit is "
            f"{limits.max_duration_s:g} s",
            code=ErrorCode.AUDIO_TOO_LONG,
        )
    if info.frames == 0:
        raise InvalidInput("the recording has no audio frames", code=ErrorCode.EMPTY_AUDIO)

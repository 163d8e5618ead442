"""Stage 1, validation: probe an upload and reject what cannot be processed, before heavy work."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import av
import soundfile as sf

from arengine.audio import containers, ffmpeg, sniff, wav
from arengine.audio.arrival import Arrival
from arengine.audio.containers import ACCEPTED, DECODERS, DEMUXERS, SNDFILE_FORMATS, SUBTYPES
from arengine.errors import CorruptAudio, ErrorCode, InvalidInput, TooLarge, UnsupportedFormat
from arengine.settings import MAX_STREAMS
from arengine.types import AudioInfo


@dataclass(frozen=True, slots=True)
class AudioLimits:
    """What a recording may be; built from the settings."""

    max_duration_s: float
    max_channels: int
    min_sample_rate: int
    max_sample_rate: int


def probe(
    path: Path, limits: AudioLimits, audio_stream: int | None = None, arrival: Arrival | None = None
) -> AudioInfo:
    """Read the header of `path` and check it against `limits`; raise an `ArengineError` if not.

    `audio_stream` picks the n-th audio stream (0-based) of a file that has several (the `stream`
    query); the first otherwise.
    With `arrival`, `path` is a WAV still being uploaded, its header already there.

    Example: `probe(Path("speech.m4a"), limits).format` is `"MP4/MOV"`.
    """
    if os.path.getsize(path) == 0:
        raise InvalidInput("the uploaded file is empty", code=ErrorCode.EMPTY_FILE)
    head = sniff.head(path)
    container = containers.recognise(head)
    found = None if container is None else container.name
    if container is not None and not container.audio:
        raise UnsupportedFormat(f"found {found}, not audio; accepted containers: {ACCEPTED}")
    if container is not None and container.sndfile:  # uncompressed: libsndfile decodes it
        if audio_stream:
            raise InvalidInput(
                f"a {found} file has one audio stream; stream accepts 0",
                code=ErrorCode.UNKNOWN_STREAM,
            )
        info = _probe_sndfile(path, limits, arrival)
    else:
        overrun = sniff.mp4_box_overrun(path) if found == "MP4/MOV" else None
        if overrun is not None:
            raise CorruptAudio(f"the MP4 file is damaged or forged: {overrun}")
        info = _probe_ffmpeg(path, found, audio_stream)
        if info.format == "FLAC":  # FFmpeg estimates a length the header leaves out
            claim = sniff.flac_total_samples(head)
            info = replace(info, frames=claim, length_trusted=claim > 0)
    _check_shape(info, limits)
    _check_frames(info, limits)
    return info


def _probe_sndfile(path: Path, limits: AudioLimits, arrival: Arrival | None) -> AudioInfo:
    try:
        header = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, ValueError) as error:
        _explain_wav(path, limits)
        text = getattr(error, "error_string", None) or str(error)
        raise CorruptAudio(f"the WAV/AIFF header cannot be read: {text}") from None
    info = AudioInfo(
        format=header.format,
        subtype=header.subtype,
        sample_rate=int(header.samplerate),
        channels=int(header.channels),
        frames=max(int(header.frames), 0),
    )
    # A PCM or float WAV: where its frames lie (`wav.py`); for one still being uploaded, as
    # found when its header arrived.
    where = arrival.layout if arrival is not None else wav.layout(path, os.path.getsize(path))
    if where is not None:
        info = replace(info, frames=where.frames, warnings=where.warnings)
    if arrival is not None and arrival.open_ended:  # a live stream: no length until it ends
        info = replace(info, frames=0, length_trusted=False)
    _check_codec(info)
    return info


def _explain_wav(path: Path, limits: AudioLimits) -> None:
    """libsndfile refuses a WAV whose rate or channels are 0 with "SF_INFO struct incomplete":
    say what the header holds instead, as for any other rate or channel count."""
    header = sniff.wav_header(path)
    if header is not None:
        _check_shape(AudioInfo("WAV", "", header.sample_rate, header.channels, 0), limits)


def _probe_ffmpeg(path: Path, found: str | None, audio_stream: int | None) -> AudioInfo:
    try:
        demuxer, choice = _open_stream(path, None, audio_stream)
    except av.error.FFmpegError as error:
        if found is None:
            raise UnsupportedFormat(
                f"not a recognised audio file; accepted containers: {ACCEPTED}"
            ) from None
        demuxer, choice = _open_again(path, found, audio_stream, error)
    if choice.decoder not in DECODERS:
        accepted = ", ".join(sorted(set(DECODERS.values())))
        raise UnsupportedFormat(
            f"codec {choice.decoder} is not accepted; accepted: {accepted}",
            code=ErrorCode.UNSUPPORTED_CODEC,
        )
    return AudioInfo(
        format=DEMUXERS[demuxer].name,
        subtype=DECODERS[choice.decoder],
        sample_rate=choice.sample_rate,
        channels=choice.channels,
        frames=choice.claimed_frames,
        decoder=sniff.FFMPEG,
        stream=choice.index,
        length_trusted=DEMUXERS[demuxer].trusted_length and choice.claimed_frames > 0,
    )


def _open_stream(
    path: Path, demuxer: str | None, audio_stream: int | None
) -> tuple[str, ffmpeg.StreamChoice]:
    with ffmpeg.open_upload(path, demuxer) as container:
        name = ffmpeg.demuxer_name(container)
        if name is None:  # cannot happen with the whitelist; checked again all the same
            raise UnsupportedFormat(f"{container.format.name} is not accepted: {ACCEPTED}")
        index = _pick_stream(ffmpeg.audio_streams(container), len(container.streams), audio_stream)
        return name, ffmpeg.describe_stream(container, index)


def _open_again(
    path: Path, found: str, audio_stream: int | None, first: av.error.FFmpegError
) -> tuple[str, ffmpeg.StreamChoice]:
    """FFmpeg's probe gave up on a file that starts like `found`: insist on that demuxer."""
    forced = containers.demuxer_for(found)
    try:
        if forced is not None:
            return _open_stream(path, forced, audio_stream)
    except av.error.FFmpegError:
        pass
    raise CorruptAudio(
        f"the file starts like {found} but its header cannot be read ({first.strerror}); "
        "it may be cut short or damaged"
    ) from None


def _pick_stream(audio: list[int], streams: int, wanted: int | None) -> int:
    if streams > MAX_STREAMS:
        raise InvalidInput(
            f"the file has {streams} streams; accepted: at most {MAX_STREAMS}",
            code=ErrorCode.TOO_MANY_STREAMS,
        )
    if not audio:
        raise InvalidInput(
            f"the file has {streams} stream(s) and none is audio (video is not decoded)",
            code=ErrorCode.NO_AUDIO_STREAM,
        )
    if wanted is not None and not 0 <= wanted < len(audio):
        raise InvalidInput(
            f"stream {wanted}: the file has {len(audio)} audio stream(s); stream accepts 0 to "
            f"{len(audio) - 1}",
            code=ErrorCode.UNKNOWN_STREAM,
        )
    return audio[wanted or 0]


def _check_codec(info: AudioInfo) -> None:
    if info.format not in SNDFILE_FORMATS:
        raise UnsupportedFormat(f"container {info.format} is not accepted; accepted: {ACCEPTED}")
    if info.subtype not in SUBTYPES:
        raise UnsupportedFormat(
            f"codec {info.subtype} is not accepted; accepted: {', '.join(sorted(SUBTYPES))}",
            code=ErrorCode.UNSUPPORTED_CODEC,
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
    # Only a trustworthy claim refuses early; every other length is counted while decoding, and
    # an empty recording is refused when decoding finds no frames.
    if not info.length_trusted:
        return
    if info.duration_s > limits.max_duration_s:
        raise TooLarge(
            f"the header states {info.duration_s:.1f} s; the limit is {limits.max_duration_s:g} s",
            code=ErrorCode.AUDIO_TOO_LONG,
        )
    if info.frames == 0 and info.decoder == sniff.LIBSNDFILE:
        raise InvalidInput("the recording has no audio frames", code=ErrorCode.EMPTY_AUDIO)

"""FFmpeg decoding: every container people record in, opened narrowly, lengths from decoding.

Containers and codecs people record in, video files' audio tracks, call recordings, a chosen
stream, and a video without audio, each as it was found in the wild.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import InvalidInput
from arengine.types import AudioInfo
from tests.recordings import ffmpeg as run
from tests.recordings import sine

LIMITS = AudioLimits(
    max_duration_s=120, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


def _decoded(path: Path, stream: int | None = None) -> tuple[AudioInfo, np.ndarray]:
    """The result's audio info and the mono 16 kHz samples."""
    info = probe(path, LIMITS, stream)
    blocks = decode(path, info, 16000, int(LIMITS.max_duration_s * info.sample_rate))
    audio = np.concatenate(list(blocks))
    return blocks.info(), audio


def _peak_hz(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    return float(np.argmax(spectrum) * 16000 / len(audio))


def _amr(path: Path, seconds: float) -> Path:
    # Debian's ffmpeg has no AMR encoder; the av wheel's libopencore_amrnb does.
    with av.open(str(path), "w", format="amr") as out:
        stream = out.add_stream("libopencore_amrnb", rate=8000, layout="mono")
        t = np.arange(int(8000 * seconds)) / 8000
        tone = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)
        for start in range(0, len(tone), 160):
            frame = av.AudioFrame.from_ndarray(tone[None, start : start + 160], "s16", "mono")
            frame.sample_rate = 8000
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


CONTAINERS = [  # name, ffmpeg arguments, (container, codec), index of the audio stream
    ("a.m4a", ["-c:a", "aac"], ("MP4/MOV", "AAC"), 0),
    ("a.webm", ["-c:a", "libopus"], ("Matroska/WebM", "Opus"), 0),
    ("a.wma", ["-c:a", "wmav2"], ("ASF (WMA)", "WMA v2"), 0),
    ("a.mka", ["-c:a", "libvorbis"], ("Matroska/WebM", "Vorbis"), 0),
    ("a.aac", ["-c:a", "aac", "-f", "adts"], ("AAC (ADTS)", "AAC"), 0),
]


@pytest.mark.parametrize(("name", "args", "names", "index"), CONTAINERS)
def test_audio_containers_are_decoded(
    tmp_path: Path, name: str, args: list[str], names: tuple[str, str], index: int
) -> None:
    path = sine(tmp_path / name, 2.0, 44100, 1000, "-ac", "2", *args)
    info, audio = _decoded(path)
    assert (info.format, info.subtype, info.decoder) == (*names, "ffmpeg")
    assert (info.sample_rate, info.channels, info.stream) == (
        48000 if "libopus" in args else 44100,
        2,
        index,
    )
    assert info.duration_s == pytest.approx(2.0, abs=0.06)
    assert len(audio) == pytest.approx(32000, abs=1000)
    assert _peak_hz(audio) == pytest.approx(1000, abs=10)


@pytest.mark.parametrize("name", ["v.mp4", "v.mov", "v.mkv"])
def test_video_files_give_their_audio_track(tmp_path: Path, name: str) -> None:
    video = ["-f", "lavfi", "-i", "testsrc=size=64x48:rate=10:d=2"]
    path = sine(tmp_path / name, 2.0, 44100, 700, *video, "-c:v", "libx264", "-c:a", "aac")
    info, audio = _decoded(path)
    assert (info.format, info.subtype, info.stream) == (
        "Matroska/WebM" if name.endswith("mkv") else "MP4/MOV",
        "AAC",
        1,  # the video is stream 0, never decoded
    )
    assert _peak_hz(audio) == pytest.approx(700, abs=10)


def test_amr_call_recordings(tmp_path: Path) -> None:
    info, audio = _decoded(_amr(tmp_path / "call.amr", 2.0))
    assert (info.format, info.subtype, info.sample_rate) == ("AMR", "AMR-NB", 8000)
    assert info.duration_s == pytest.approx(2.0, abs=0.05)
    assert _peak_hz(audio) == pytest.approx(440, abs=10)


def test_stream_picks_another_audio_track(tmp_path: Path) -> None:
    first = sine(tmp_path / "a.wav", 1.0, 16000, 440)
    second = sine(tmp_path / "b.wav", 1.0, 16000, 1500)
    path = tmp_path / "two.mkv"
    run(
        "-i", str(first), "-i", str(second), "-map", "0:a", "-map", "1:a", "-c:a", "flac", f"{path}"
    )
    assert _peak_hz(_decoded(path)[1]) == pytest.approx(440, abs=10)
    info, audio = _decoded(path, stream=1)
    assert info.stream == 1 and _peak_hz(audio) == pytest.approx(1500, abs=10)
    with pytest.raises(InvalidInput, match="accepts 0 to 1") as caught:
        probe(path, LIMITS, audio_stream=2)
    assert caught.value.code == "unknown_stream"


def test_a_video_without_audio_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "silent.mp4"
    run("-f", "lavfi", "-i", "testsrc=size=32x24:rate=5:d=1", "-c:v", "libx264", str(path))
    with pytest.raises(InvalidInput, match="none is audio") as caught:
        probe(path, LIMITS)
    assert caught.value.code == "no_audio_stream"

"""Real audio for the tests: espeak-ng speech, tones, noise and silence, in every container."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SOUNDFILE_TYPES = {  # extension: (libsndfile format, subtype)
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "opus": ("OGG", "OPUS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
}
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
REPORTED = {  # extension: (container, codec) as arengine reports them
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "FLAC"),
    "ogg": ("Ogg", "Vorbis"),
    "opus": ("Ogg", "Opus"),
    "mp3": ("MP3", "MP3"),
}


@dataclass(frozen=True)
class Recording:
    """A written file and the seconds where it holds speech."""

    path: Path
    speech: list[tuple[float, float]]
    duration_s: float


def speak(text: str, folder: Path, voice: str = "en") -> tuple[np.ndarray, int]:
    """espeak-ng's speech for `text`, trimmed to where its energy is, as float32."""
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is missing: run deploy/setup.sh --test")
    out = folder / f"espeak-{abs(hash((text, voice)))}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(out), text], check=True)
    audio, rate = sf.read(out, dtype="float32")
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return audio[loud[0] : loud[-1] + 1], rate


def compose(
    pieces: list[tuple[str, float]],
    rate: int,
    folder: Path,
    phrases: list[np.ndarray],
    phrase_rate: int,
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Silence, tone, noise and speech pieces in order; returns audio and the speech intervals.

    `pieces` is a list of (kind, seconds) with kind in silence, tone, noise, speech (seconds
    ignored for speech: the next phrase is used whole).
    """
    rng = np.random.default_rng(7)
    parts: list[np.ndarray] = []
    speech: list[tuple[float, float]] = []
    at = 0.0
    phrase = 0
    for kind, seconds in pieces:
        n = int(seconds * rate)
        if kind == "silence":
            piece = np.zeros(n, np.float32)
        elif kind == "tone":
            piece = 0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / rate).astype(np.float32)
        elif kind == "noise":
            piece = (0.05 * rng.standard_normal(n)).astype(np.float32)
        else:
            piece = soxr.resample(phrases[phrase % len(phrases)], phrase_rate, rate).astype(
                np.float32
            )
            phrase += 1
            speech.append((at, at + len(piece) / rate))
        parts.append(piece)
        at += len(piece) / rate
    return np.concatenate(parts), speech


def write(audio: np.ndarray, rate: int, path: Path, channels: int = 1) -> Path:
    """Write mono `audio` duplicated to `channels`, in the container named by the extension."""
    fmt, subtype = SOUNDFILE_TYPES[path.suffix[1:]]
    frames = np.repeat(audio[:, None], channels, axis=1) * np.linspace(1.0, 0.6, channels)
    # libsndfile crashes writing long OGG in one call; blocks of a few thousand frames work.
    with sf.SoundFile(path, "w", rate, channels, subtype, format=fmt) as out:
        for start in range(0, len(frames), 4096):
            out.write(frames[start : start + 4096].astype(np.float32))
    return path


def ffmpeg(*args: str) -> None:
    """Debian's ffmpeg (installed by deploy/setup.sh --test), only to make test files."""
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("ffmpeg is missing: run deploy/setup.sh --test")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-nostdin", *args], check=True)


def sine(path: Path, seconds: float, rate: int, freq: float = 440.0, *args: str) -> Path:
    """A tone made by ffmpeg's lavfi source and encoded as `args` say, into `path`."""
    ffmpeg("-f", "lavfi", "-i", f"sine=f={freq}:sample_rate={rate}:d={seconds}", *args, str(path))
    return path


def tones(
    path: Path,
    freqs: list[float],
    rate: int,
    amplitude: float = 0.3,
    seconds: float = 1.0,
    gap_s: float = 0.5,
) -> tuple[Path, list[float]]:
    """Plain sine tones, `gap_s` of silence before each and after the last, written to `path`;
    returns it and where each tone starts (s)."""
    t = np.arange(int(seconds * rate)) / rate
    gap = np.zeros(int(gap_s * rate))
    parts, starts = [gap], []
    for freq in freqs:
        starts.append(sum(len(part) for part in parts) / rate)
        parts += [amplitude * np.sin(2 * np.pi * freq * t), gap]
    return write(np.concatenate(parts).astype(np.float32), rate, path), starts


DEBIAN_SOUNDS = Path("/usr/share/sounds")
"""Debian's sound-theme-freedesktop (telephone, alarm clock, camera shutter, bell...) and
alsa-utils (voices naming speaker positions, pink noise): real recordings, installed by
`deploy/setup.sh --test`."""


def debian_sounds() -> list[Path]:
    """Every recording of the two packages, in a fixed order; an error if they are missing."""
    found = sorted(DEBIAN_SOUNDS.glob("freedesktop/stereo/*.oga"))
    found += sorted(DEBIAN_SOUNDS.glob("alsa/*.wav"))
    if len(found) < 40:
        raise RuntimeError(
            "sound-theme-freedesktop or alsa-utils is missing: deploy/setup.sh --test"
        )
    return found


def mono_16k(path: Path) -> np.ndarray:
    """A recording as float32 mono at 16 kHz (channels averaged, soxr's resampler)."""
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    mono = audio.mean(axis=1)
    return np.asarray(soxr.resample(mono, rate, 16000), dtype=np.float32)


def event_windows(audio: np.ndarray, window: int = 15600, hop: int = 7680) -> np.ndarray:
    """`(n, window)` windows every `hop` samples; a recording shorter than one is zero-padded."""
    padded = np.pad(audio, (0, max(0, window - len(audio))))
    starts = range(0, len(padded) - window + 1, hop)
    return np.stack([padded[start : start + window] for start in starts])

"""Write long test recordings to disk without holding them in memory.

    python -m loadtests.recordings out/35min.wav --minutes 35 --rate 16000 --channels 1
    python -m loadtests.recordings out/2h.flac --minutes 120 --rate 44100 --channels 2

Speech comes from espeak-ng (several voices), between silence, tones and noise; the speech
intervals are written next to the file as `<file name>.speech.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack.",
    "We also need a small plastic snake and a big toy frog for the kids.",
    "She can scoop these things into three red bags, and we will go meet her on Wednesday.",
    "When the sunlight strikes raindrops in the air, they act as a prism and form a rainbow.",
]
VOICES = ["en", "en-us", "en+f3", "en-gb", "en+m3", "en-us+f2"]
SOUNDFILE_TYPES = {
    ".wav": ("WAV", "PCM_16"),
    ".flac": ("FLAC", "PCM_16"),
    ".mp3": ("MP3", "MPEG_LAYER_III"),
}


def phrases(rate: int) -> list[np.ndarray]:
    """Every sentence in every voice, at `rate`, as float32."""
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for i, (text, voice) in enumerate((t, v) for t in SENTENCES for v in VOICES):
            path = Path(folder) / f"{i}.wav"
            subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
            audio, source_rate = sf.read(path, dtype="float32")
            out.append(soxr.resample(audio, source_rate, rate).astype(np.float32))
    return out


def write_recording(
    path: Path, minutes: float, rate: int, channels: int, seed: int = 0
) -> list[tuple[float, float]]:
    """Write `minutes` of mixed audio to `path`; return the speech intervals in seconds."""
    rng = np.random.default_rng(seed)
    spoken = phrases(rate)
    total = int(minutes * 60 * rate)
    written = 0
    speech: list[tuple[float, float]] = []
    fmt, subtype = SOUNDFILE_TYPES[path.suffix]
    gains = np.linspace(1.0, 0.7, channels, dtype=np.float32)
    with sf.SoundFile(path, "w", rate, channels, subtype, format=fmt) as out:
        while written < total:
            kind = rng.choice(["speech", "speech", "speech", "silence", "noise", "tone"])
            if kind == "speech":
                piece = spoken[int(rng.integers(len(spoken)))] * np.float32(rng.uniform(0.4, 1.0))
                speech.append((written / rate, (written + len(piece)) / rate))
            else:
                n = int(rng.uniform(0.3, 4.0) * rate)
                if kind == "silence":
                    piece = np.zeros(n, np.float32)
                elif kind == "noise":
                    piece = (rng.uniform(0.005, 0.05) * rng.standard_normal(n)).astype(np.float32)
                else:
                    piece = (
                        0.2 * np.sin(2 * np.pi * rng.uniform(200, 2000) * np.arange(n) / rate)
                    ).astype(np.float32)
            piece = piece[: total - written]
            # libsndfile crashes writing long OGG/MP3 in one call: write blocks of 4096 frames.
            for start in range(0, len(piece), 4096):
                out.write(piece[start : start + 4096, None] * gains)
            written += len(piece)
    if speech and speech[-1][1] > total / rate:
        speech[-1] = (speech[-1][0], total / rate)
    path.with_name(path.name + ".speech.json").write_text(json.dumps(speech))
    return speech


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--rate", type=int, default=16000)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.path.parent.mkdir(parents=True, exist_ok=True)
    speech = write_recording(args.path, args.minutes, args.rate, args.channels, args.seed)
    print(f"{args.path}: {args.minutes} min, {len(speech)} speech intervals")


if __name__ == "__main__":
    main()

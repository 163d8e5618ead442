"""libsndfile against FFmpeg (PyAV), per format: decoding speed per core and sample agreement.

    python -m loadtests.decoders loadtests/out/5min-44k.wav --out loadtests/out/decoders

Encodes the given WAV (44.1 kHz stereo is the interesting case) with Debian's ffmpeg into each
format both libraries read, decodes every file with both on one thread (FFmpeg also mixes down
to mono, in C, as the engine does), best of three, and prints a Markdown table: speed in
multiples of real time, and the agreement of the two decodes as the signal-to-difference ratio
after aligning them (the lag is printed: decoders trim encoder delay differently). Only to
choose the decoder per format; arengine's choice is in `arengine/audio/sniff.py`.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import soundfile as sf

ENCODINGS = {
    "wav": ["-c:a", "pcm_s16le"],
    "flac": ["-c:a", "flac"],
    "ogg": ["-c:a", "libvorbis", "-q:a", "4"],
    "opus": ["-c:a", "libopus", "-b:a", "64k"],
    "mp3": ["-c:a", "libmp3lame", "-b:a", "128k"],
}


def sndfile_decode(path: Path) -> np.ndarray:
    blocks = []
    with sf.SoundFile(str(path)) as audio:
        while len(block := audio.read(65536, dtype="float32", always_2d=True)):
            blocks.append(block)
    return np.concatenate(blocks)


def ffmpeg_decode(path: Path) -> np.ndarray:
    """Decoded and mixed down to mono float32 blocks as the engine does (`ffmpeg.Mixdown`)."""
    from arengine.audio.ffmpeg import Mixdown, open_upload

    blocks: list[np.ndarray] = []
    mixdown = Mixdown(65536)
    with open_upload(path) as container:
        stream = container.streams.audio[0]
        for packet in container.demux(stream):
            for frame in stream.codec_context.decode(packet):
                blocks.extend(block.copy() for block in mixdown.push(frame))
        blocks.extend(block.copy() for block in mixdown.flush())
    return np.concatenate(blocks)


def best_of(
    decoder: Callable[[Path], np.ndarray], path: Path, runs: int = 3
) -> tuple[float, np.ndarray]:
    best = float("inf")
    audio = np.zeros((0, 1), np.float32)
    for _ in range(runs):
        started = time.perf_counter()
        audio = decoder(path)
        best = min(best, time.perf_counter() - started)
    return best, audio


def agreement(a: np.ndarray, b: np.ndarray, rate: int) -> tuple[float, int]:
    """Signal-to-difference ratio in dB of two decodes, and the lag (samples) that aligns them."""
    a, b = a.mean(axis=1), b.mean(axis=1)
    window = a[rate : rate * 6]
    lags = range(-3000, 3001)
    scores = [float(np.dot(window, b[rate + lag : rate * 6 + lag])) for lag in lags]
    lag = lags[int(np.argmax(scores))]
    n = min(len(a), len(b) - lag) - rate
    x, y = a[rate : rate + n], b[rate + lag : rate + lag + n]
    noise = float(np.sum((x - y) ** 2))
    return 10 * np.log10(float(np.sum(x**2)) / max(noise, 1e-30)), lag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--out", type=Path, default=Path("loadtests/out/decoders"))
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    info = sf.info(str(options.source))
    seconds = info.frames / info.samplerate
    print(f"source: {options.source} ({seconds:.0f} s, {info.samplerate} Hz, {info.channels} ch)")
    versions = f"PyAV {av.__version__}, FFmpeg {av.ffmpeg_version_info}"
    print(f"{versions}, libsndfile {sf.__libsndfile_version__}")
    print("| format | libsndfile | FFmpeg | agreement (lag) |")
    print("|---|---|---|---|")
    for name, args in ENCODINGS.items():
        path = options.out / f"recording.{name}"
        command = ["ffmpeg", "-v", "error", "-y", "-i", str(options.source), *args, str(path)]
        subprocess.run(command, check=True)
        t_sf, a_sf = best_of(sndfile_decode, path)
        t_ff, a_ff = best_of(ffmpeg_decode, path)
        ratio, lag = agreement(a_sf, a_ff, info.samplerate)
        print(
            f"| {name} | {seconds / t_sf:.0f}x | {seconds / t_ff:.0f}x | {ratio:.1f} dB ({lag}) |"
        )


if __name__ == "__main__":
    main()

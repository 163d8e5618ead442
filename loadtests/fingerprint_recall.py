"""The fingerprint kind's recall per distortion: what a broadcast does to a known recording.

    python -m loadtests.fingerprint_recall --out /tmp/fp                 # small: 20 references
    python -m loadtests.fingerprint_recall --out /tmp/fp --refs 10000    # the issue's scale

References: `--queries` (10) pieces of 30 s rendered by fluidsynth (FluidR3, two random
melodies each, `tests/fingerprints.py`; Debian ships no MIDI files of music to render here),
the rest up to `--refs` synthetic (random notes of a few harmonics, `loadtests/fingerprint.py`)
as distractors. Each query is a 10-s excerpt of a rendered piece (a random offset) inside 24 s
of quiet noise (30 dB under it), distorted one way:

- `clean`; `mp3` (64 kbps through ffmpeg); `noise` (white, 5 dB SNR); `talk` (espeak-ng's
  speech over 4 s in the middle at 5 dB under the music);
- `speed` from 90% to 110% in 2% steps (resampled: tempo and pitch together, soxr), `tempo`
  (ffmpeg's `atempo`: pitch kept) and `pitch` (`asetrate` then `atempo` back: tempo kept).

A query is found when a tag of its reference overlaps the excerpt with its reference offset
within 0.5 s of the truth and its speed (and pitch) within 1%. Printed per distortion: recall,
mean offset and factor errors of the found, wrong tags (another reference, or its own at a
wrong offset), query speed (x real time, one thread) and, once, the library's size per hour of
reference audio. The machine's load average is printed: its other users share the cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE, add_recording
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
from arengine.types import Tag
from loadtests.fingerprint import recognize, resampled, synthetic
from tests.fingerprints import piece
from tests.recordings import speak

EXCERPT_S = 10.0
LEAD_S = 7.0
"""Seconds of quiet before the excerpt (and after it)."""
STEPS = tuple(round(0.90 + 0.02 * i, 2) for i in range(11))


@dataclass(frozen=True)
class Query:
    reference: int
    """The library's id of the reference the excerpt is from."""
    ref_start: float
    samples: np.ndarray
    speed: float
    pitch: float


def ffmpeg(samples: np.ndarray, folder: Path, *args: str, suffix: str = ".wav") -> np.ndarray:
    """`samples` through ffmpeg with `args` (filters or an encoding), back at `SAMPLE_RATE`."""
    source, target = folder / "in.wav", folder / f"out{suffix}"
    sf.write(source, samples, SAMPLE_RATE, subtype="FLOAT")
    command = ["ffmpeg", "-v", "error", "-y", "-i", str(source), *args, str(target)]
    subprocess.run(command, check=True)
    if suffix != ".wav":
        back = folder / "back.wav"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(target), "-ar",
                        str(SAMPLE_RATE), "-ac", "1", str(back)], check=True)  # fmt: skip
        target = back
    out, _ = sf.read(target, dtype="float32")
    return np.asarray(out)


def distortions(folder: Path) -> dict[str, Callable[[np.ndarray], tuple[np.ndarray, float, float]]]:
    """Name -> (excerpt -> the distorted excerpt, its speed, its pitch)."""
    speech, rate = speak("Good morning, this is your station, and here is the news.", folder)
    voice = np.interp(np.arange(0, len(speech), rate / SAMPLE_RATE), np.arange(len(speech)),
                      speech).astype(np.float32)[: 4 * SAMPLE_RATE]  # fmt: skip
    rng = np.random.default_rng(5)

    def talk(x: np.ndarray) -> tuple[np.ndarray, float, float]:
        out, at = x.copy(), (len(x) - len(voice)) // 2
        part = out[at : at + len(voice)]
        gain = np.sqrt(np.mean(part**2) / np.mean(voice**2)) * 10 ** (-5 / 20)
        part += voice * gain
        return out, 1.0, 1.0

    def noise(x: np.ndarray) -> tuple[np.ndarray, float, float]:
        level = np.sqrt(np.mean(x**2)) * 10 ** (-5 / 20)
        return (x + rng.standard_normal(len(x)) * level).astype(np.float32), 1.0, 1.0

    table: dict[str, Callable[[np.ndarray], tuple[np.ndarray, float, float]]] = {
        "clean": lambda x: (x, 1.0, 1.0),
        "mp3": lambda x: (ffmpeg(x, folder, "-b:a", "64k", suffix=".mp3"), 1.0, 1.0),
        "noise": noise,
        "talk": talk,
    }
    for f in STEPS:
        if f != 1.0:
            for change in ("speed", "tempo", "pitch"):
                table[f"{change} {f:.2f}"] = _changed(change, f, folder)
    return table


def _changed(
    change: str, f: float, folder: Path
) -> Callable[[np.ndarray], tuple[np.ndarray, float, float]]:
    """A speed (resampled), tempo (`atempo`) or pitch (`asetrate`, `atempo` back) change."""
    shift = f"asetrate={SAMPLE_RATE * f:.0f},aresample={SAMPLE_RATE},atempo={1 / f:.6f}"

    def distort(x: np.ndarray) -> tuple[np.ndarray, float, float]:
        if change == "speed":
            return resampled(x, f), f, f
        if change == "tempo":
            return ffmpeg(x, folder, "-af", f"atempo={f}"), f, 1.0
        return ffmpeg(x, folder, "-af", shift), 1.0, f

    return distort


def placed(excerpt: np.ndarray, seed: int) -> np.ndarray:
    """The excerpt between `LEAD_S` of quiet noise on either side."""
    lead = np.zeros(round(LEAD_S * SAMPLE_RATE), dtype=np.float32)
    out = np.concatenate([lead, excerpt, lead])
    level = np.sqrt(np.mean(excerpt**2)) * 10 ** (-30 / 20)
    noise = np.random.default_rng(seed).standard_normal(len(out)) * level
    noisy: np.ndarray = (out + noise).astype(np.float32)
    return noisy


def judge(tags: list[Tag], query: Query) -> tuple[bool, float, float, int]:
    """Found (right reference, offset within 0.5 s, factors within 1%), its offset error, its
    factor error, and the wrong tags."""
    right, wrong = None, 0
    for tag in tags:
        overlap = min(tag.end, LEAD_S + EXCERPT_S / query.speed) - max(tag.start, LEAD_S)
        if tag.reference != str(query.reference) or overlap <= 0:
            wrong += 1
            continue
        # Where the tag's start lies in the reference, had the excerpt played on before it.
        offset = (tag.reference_start or 0.0) - (tag.start - LEAD_S) * (tag.speed or 1.0)
        error = abs(offset - query.ref_start)
        factor = max(abs((tag.speed or 1.0) / query.speed - 1),
                     abs((tag.pitch or 1.0) / query.pitch - 1))  # fmt: skip
        if right is None or error < right[1]:
            right = (error <= 0.5 and factor <= 0.01, error, factor)
    if right is None:
        return False, float("nan"), float("nan"), wrong
    return right[0], right[1], right[2], wrong + (0 if right[0] else 1)


def build(folder: Path, refs: int, queries: int, seconds: float) -> tuple[Path, list[np.ndarray]]:
    path = folder / f"recall-{refs}.sqlite"
    path.unlink(missing_ok=True)
    library = Library.create(path)
    rendered = [piece(1000 + i, folder, seconds) for i in range(queries)]
    started = time.perf_counter()
    for i in range(refs):
        samples = rendered[i] if i < queries else synthetic(i, seconds)
        add_recording(library, f"ref {i}", samples, {})
    index_s = time.perf_counter() - started
    with library.connection() as connection:  # every page in the file
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    hours = refs * seconds / 3600
    size = os.path.getsize(path) / 1e6 / hours
    print(f"{refs} references ({hours:.2f} h): indexed at {hours * 3600 / index_s:.0f}x real "
          f"time, {size:.1f} MB per hour of reference audio")  # fmt: skip
    return path, rendered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: temp)")
    parser.add_argument("--refs", type=int, default=20, help="references in the library")
    parser.add_argument("--queries", type=int, default=10, help="rendered pieces queried")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds a reference")
    parser.add_argument("--only", default="", help="distortions whose name starts so")
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = args.out or Path(tempfile.mkdtemp(prefix="fingerprint-recall-"))
    folder.mkdir(parents=True, exist_ok=True)
    path, rendered = build(folder, args.refs, min(args.queries, args.refs), args.seconds)
    recognizer = FingerprintRecognizer(path, segment_s=30.0)
    rng = np.random.default_rng(11)
    starts = [float(rng.uniform(0.0, args.seconds - EXCERPT_S)) for _ in rendered]
    print("distortion  recall  offset err s  factor err %  wrong tags  x real time  load avg")
    for name, distort in distortions(folder).items():
        if not name.startswith(args.only):
            continue
        results, busy_s, audio_s = [], 0.0, 0.0
        for i, samples in enumerate(rendered):
            at = round(starts[i] * SAMPLE_RATE)
            excerpt, speed, pitch = distort(samples[at : at + round(EXCERPT_S * SAMPLE_RATE)])
            recording = placed(excerpt, i)
            started = time.perf_counter()
            tags = recognize(recognizer, recording)
            busy_s += time.perf_counter() - started
            audio_s += len(recording) / SAMPLE_RATE
            results.append(judge(tags, Query(i + 1, starts[i], recording, speed, pitch)))
        hits = [r for r in results if r[0]]
        offset = np.mean([r[1] for r in hits]) if hits else float("nan")
        factor = 100 * np.mean([r[2] for r in hits]) if hits else float("nan")
        print(f"{name:10}  {len(hits):>2}/{len(results):<3}  {offset:12.3f}  {factor:12.2f}  "
              f"{sum(r[3] for r in results):10d}  {audio_s / busy_s:11.0f}  "
              f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

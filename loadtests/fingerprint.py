"""The fingerprint kind: robustness to speed change, and speed against the library's size.

    python -m loadtests.fingerprint speed --out /tmp/fp
    python -m loadtests.fingerprint scale --out /tmp/fp --sizes 10,100,1000
    python -m loadtests.fingerprint audfprint --sizes 10,100 --checkout ../audfprint \
        --python ../audfprint-venv/bin/python

`speed`: eight FluidR3 pieces (`tests/fingerprints.py`) as the library; each is played 10 s long
inside noise (10 dB SNR) at a speed from 93% to 107%, either resampled (pitch moves with the
speed, as a broadcast played fast does: ffmpeg's `asetrate`) or time-stretched with its pitch
kept (ffmpeg's `atempo`); prints the share of placements found (the right reference tagged
over it).

`audfprint`: the same references and query for audfprint (`--checkout` of `dpwe/audfprint`,
`--python` an interpreter with numpy, scipy, docopt, joblib and psutil) and arengine (recall per
distortion against audfprint and Olaf: `loadtests/fingerprint_recall.py`).

`scale`: libraries of N synthetic references (30 s of random notes of a few harmonics each, no
two alike), printing indexing speed (fingerprint and store, x real time on one thread), the
SQLite file's size per hour of reference audio, and matching speed (features, lookup and
tagging, x real time) and recall on a 2-minute recording holding 4 excerpts under noise. The
machine's load average is printed with each line: its other users share the cores.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch

from arengine.audio.segments import Segmenter
from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE, add_recording
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
from arengine.types import Tag
from loadtests.fingerprint_peers import Audfprint, reference_name
from tests.fingerprints import Placed, mix, piece

SPEEDS = (0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0, 1.005, 1.01, 1.02, 1.03, 1.05, 1.07)


def recognize(recognizer: FingerprintRecognizer, samples: np.ndarray) -> list[Tag]:
    """The engine's path for one recording, on this thread: segments, features, infer, tagger."""
    tagger = recognizer.tagger({})
    tags: list[Tag] = []
    for segment in Segmenter(iter([samples]), recognizer.plan):
        tags += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    return tags + tagger.finish(len(samples))


def library_bytes(path: Path) -> int:
    """The size of a library's SQLite file with every page of its WAL moved into it. On a
    connection of its own: the library's connections begin a transaction when they open (its
    engine's `begin` hook), and inside one SQLite refuses a checkpoint (table is locked)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return os.path.getsize(path)


def resampled(samples: np.ndarray, speed: float) -> np.ndarray:
    """Played `speed` times as fast, pitch moving with it (a tape or `asetrate`)."""
    out: np.ndarray = soxr.resample(samples, SAMPLE_RATE * speed, SAMPLE_RATE)
    return out.astype(np.float32)


def stretched(samples: np.ndarray, speed: float, folder: Path) -> np.ndarray:
    """Played `speed` times as fast with its pitch kept (ffmpeg's `atempo`)."""
    source, target = folder / "in.wav", folder / "out.wav"
    sf.write(source, samples, SAMPLE_RATE, subtype="FLOAT")
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(source), "-af", f"atempo={speed}", str(target)],
        check=True,
    )
    out, _ = sf.read(target, dtype="float32")
    return np.asarray(out)


def found(tags: list[Tag], placed: list[Placed], lengths: list[float]) -> int:
    """Placements with a tag of their reference over at least half of them."""
    hits = 0
    for item, length in zip(placed, lengths, strict=True):
        end = item.at + length
        for tag in tags:
            overlap = min(tag.end, end) - max(tag.start, item.at)
            if tag.extra.get("reference") == str(item.index + 1) and overlap >= length / 2:
                hits += 1
                break
    return hits


def speed_robustness(folder: Path) -> None:
    pieces = [piece(seed, folder) for seed in range(8)]
    library = Library.create(folder / "speed.sqlite")
    for i, samples in enumerate(pieces):
        add_recording(library, f"piece {i}", samples, {})
    recognizer = FingerprintRecognizer(library.path, segment_s=30.0)
    print("speed  resampled (pitch moves)  stretched (pitch kept)")
    for speed in SPEEDS:
        row = []
        for change in ("resampled", "stretched"):
            played = [
                resampled(p, speed) if change == "resampled" else stretched(p, speed, folder)
                for p in pieces
            ]
            placed = [
                Placed(i, 3.0 + 15.0 * i, 0.0, len(p) / SAMPLE_RATE) for i, p in enumerate(played)
            ]
            recording = mix(125.0, played, placed, snr_db=10.0, seed=1)
            lengths = [len(p) / SAMPLE_RATE for p in played]
            hits = found(recognize(recognizer, recording), placed, lengths)
            row.append(f"{hits}/{len(placed)}")
        print(f"{speed:5.3f}  {row[0]:>23}  {row[1]:>22}", flush=True)


def synthetic(seed: int, seconds: float) -> np.ndarray:
    """Random notes, each a few harmonics with a decay, some overlapping: peaks like music's."""
    rng = np.random.default_rng(seed)
    out = np.zeros(round(seconds * SAMPLE_RATE), dtype=np.float32)
    at = 0.0
    while at < seconds:
        length = rng.uniform(0.1, 0.6)
        t = np.arange(round(length * SAMPLE_RATE)) / SAMPLE_RATE
        pitch = 110.0 * 2 ** (rng.integers(0, 48) / 12)
        tone = sum(np.sin(2 * np.pi * pitch * k * t) / k for k in (1, 2, 3, 4))
        start = round(at * SAMPLE_RATE)
        stop = min(len(out), start + len(t))
        out[start:stop] += (0.2 * tone * np.exp(-3 * t))[: stop - start]
        at += length * rng.uniform(0.5, 1.0)
    return out


def scaling(folder: Path, sizes: list[int], seconds: float) -> None:
    print("refs  ref audio h  index x RT  MB per h  match x RT  recall  load avg")
    references: list[np.ndarray] = []
    for size in sizes:
        path = folder / f"scale-{size}.sqlite"
        path.unlink(missing_ok=True)
        library = Library.create(path)
        while len(references) < size:
            references.append(synthetic(len(references), seconds))
        started = time.perf_counter()
        for i, samples in enumerate(references[:size]):
            add_recording(library, f"ref {i}", samples, {})
        index_s = time.perf_counter() - started
        audio_h = size * seconds / 3600
        chosen = np.random.default_rng(size).choice(size, 4, replace=False)
        placed = [Placed(int(i), 5.0 + 28.0 * n, 5.0, 25.0) for n, i in enumerate(chosen)]
        recording = mix(120.0, references, placed, snr_db=5.0, seed=size)
        recognizer = FingerprintRecognizer(library.path, segment_s=30.0)
        recognize(recognizer, recording)  # warm the page cache and connection
        started = time.perf_counter()
        tags = recognize(recognizer, recording)
        match_s = time.perf_counter() - started
        hits = found(tags, placed, [20.0] * len(placed))
        megabytes = library_bytes(path) / 1e6
        print(
            f"{size:4d}  {audio_h:11.2f}  {audio_h * 3600 / index_s:10.0f}  "
            f"{megabytes / audio_h:8.1f}  {120.0 / match_s:10.0f}  {hits}/{len(placed):<4}  "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )


def audfprint_side_by_side(folder: Path, checkout: Path, python: Path, size: int) -> None:
    """audfprint (`dpwe/audfprint`, built in a throwaway folder with its own interpreter) and
    arengine on the same WAV files: `size` references of 30 s, and a 2-minute query holding
    four 20-s excerpts under noise at 5 dB SNR. Both index from the files (decoding included)
    and match on one core; audfprint's times include its process start (about a second of
    imports), and it is told to report four matches (`--max-matches 4 --find-time-range`)."""
    from arengine.audio.validation import AudioLimits
    from arengine.kinds.fingerprint.references import add_file

    refs = folder / "peers-refs"
    refs.mkdir(exist_ok=True)
    references = [synthetic(i, 30.0) for i in range(size)]
    files = [refs / reference_name(i + 1) for i in range(size)]
    for path, samples in zip(files, references, strict=True):
        sf.write(path, samples, SAMPLE_RATE, subtype="PCM_16")
    chosen = np.random.default_rng(size).choice(size, 4, replace=False)
    placed = [Placed(int(i), 5.0 + 28.0 * n, 5.0, 25.0) for n, i in enumerate(chosen)]
    query = folder / "peers-query.wav"
    sf.write(query, mix(120.0, references, placed, snr_db=5.0, seed=size), SAMPLE_RATE)
    audio_s = size * 30.0

    audfprint = Audfprint(checkout, python, folder)
    index_s = audfprint.index(files)
    matched = audfprint.match([query], matches=4)
    named = {int(tag.extra.get("reference") or 0) - 1 for tag in matched.tags.get(str(query), [])}
    hits = len(named & {int(i) for i in chosen})
    _report("audfprint", audio_s / index_s, 120.0 / matched.seconds, hits, audfprint.size())

    path = folder / "peers.sqlite"
    path.unlink(missing_ok=True)
    library = Library.create(path)
    limits = AudioLimits(max_duration_s=3600.0, max_channels=8, min_sample_rate=8000,
                         max_sample_rate=192000)  # fmt: skip
    started = time.perf_counter()
    for i, name in enumerate(files):
        add_file(library, name, limits, f"ref{i}", {})
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    recording, _ = sf.read(query, dtype="float32")
    tags = recognize(FingerprintRecognizer(path, segment_s=30.0), recording)
    match_s = time.perf_counter() - started
    hits = found(tags, placed, [20.0] * len(placed))
    _report("arengine", audio_s / index_s, 120.0 / match_s, hits, library_bytes(path))


def _report(tool: str, index_x: float, match_x: float, hits: int, size: int) -> None:
    megabytes = size / 1e6
    load = os.getloadavg()[0]
    print(f"{tool:10} index {index_x:6.0f}x  match {match_x:6.0f}x  found {hits}/4  "
          f"{megabytes:.2f} MB  load {load:.1f}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("speed", "scale", "audfprint"))
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: temp)")
    parser.add_argument("--sizes", default="10,100,1000", help="scale: library sizes")
    parser.add_argument("--seconds", type=float, default=30.0, help="scale: seconds a reference")
    parser.add_argument("--checkout", type=Path, help="audfprint: a checkout of dpwe/audfprint")
    parser.add_argument("--python", type=Path, help="audfprint: an interpreter with its needs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = args.out or Path(tempfile.mkdtemp(prefix="fingerprint-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.part == "speed":
        speed_robustness(folder)
    elif args.part == "audfprint":
        for size in [int(size) for size in args.sizes.split(",")]:
            audfprint_side_by_side(folder, args.checkout, args.python, size)
    else:
        scaling(folder, [int(size) for size in args.sizes.split(",")], args.seconds)


if __name__ == "__main__":
    main()

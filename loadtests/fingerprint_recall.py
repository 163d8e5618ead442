"""The fingerprint kind's recall per distortion: what a broadcast does to a known recording.

    python -m loadtests.fingerprint_recall --out /tmp/fp                 # small: 20 references
    python -m loadtests.fingerprint_recall --out /tmp/fp --refs 10000    # the issue's scale
    python -m loadtests.fingerprint_recall --library L/jingles/library.sqlite  # a built one
    python -m loadtests.fingerprint_recall --out /tmp/fp --olaf ../olaf/bin/olaf_core \
        --audfprint ../audfprint --audfprint-python ../audfprint-venv/bin/python \
        --only clean,mp3,noise,talk,speed --steps 0.95,0.97,1.03,1.05

References: `--queries` (10) pieces of 30 s rendered by fluidsynth (FluidR3, two random
melodies each, `tests/fingerprints.py`; Debian ships no MIDI files of music to render here),
the rest up to `--refs` synthetic (random notes of a few harmonics, `loadtests/fingerprint.py`)
as distractors; or, with `--library`, a copy of a library already built (for example
`loadtests/references_db.py --out L`'s 10,000 references, whose indexing takes half an hour)
with the rendered pieces added to it. Each query is a 10-s excerpt of a rendered piece (a random
offset) inside 24 s of quiet noise (30 dB under it), distorted one way:

- `clean`; `mp3` (64 kbps through ffmpeg); `noise` (white, 5 dB SNR); `talk` (espeak-ng's
  speech over 4 s in the middle at 5 dB under the music);
- `speed` from 90% to 110% in 2% steps (resampled: tempo and pitch together, soxr), `tempo`
  (ffmpeg's `atempo`: pitch kept) and `pitch` (`asetrate` then `atempo` back: tempo kept).

A query is found when a tag of its reference overlaps the excerpt with its reference offset
within 0.5 s of the truth and its speed (and pitch) within 1%. Printed per distortion: recall,
mean offset and factor errors of the found, wrong tags (another reference, or its own at a
wrong offset), query speed (x real time, one thread) and, once, the library's size per hour of
reference audio. The machine's load average is printed: its other users share the cores.

Peers (`loadtests/fingerprint_peers.py`: Olaf, audfprint), when given, index the same references
and match the same excerpts, both as 16-bit WAV files, through their own command lines. Neither
reports a speed: a peer's tag is judged by its reference and its offset, carried back to the
excerpt's start at the played speed. Their speed is shown by the wall clock (Olaf: a command per
query, since its lines do not name the query; audfprint: one per distortion; process start and
library load included) and by their own timers (`fingerprint_peers.own_seconds`). Last, a table
of recall per distortion with a column per system.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE, add_recording
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
from arengine.types import Tag
from loadtests.fingerprint import library_bytes, recognize, resampled, synthetic
from loadtests.fingerprint_peers import Audfprint, Olaf, Peer, reference_name
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


def distortions(
    folder: Path, steps: tuple[float, ...] = STEPS
) -> dict[str, Callable[[np.ndarray], tuple[np.ndarray, float, float]]]:
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
    for f in steps:
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


def judge(tags: list[Tag], query: Query, factors: bool = True) -> tuple[bool, float, float, int]:
    """Found (right reference, offset within 0.5 s, factors within 1%), its offset error, its
    factor error, and the wrong tags. Without `factors` (a peer that reports no speed) the
    offset is carried back to the excerpt's start at the true speed and no factor is judged."""
    right, wrong = None, 0
    for tag in tags:
        overlap = min(tag.end, LEAD_S + EXCERPT_S / query.speed) - max(tag.start, LEAD_S)
        if tag.extra.get("reference") != str(query.reference) or overlap <= 0:
            wrong += 1
            continue
        # Where the tag's start lies in the reference, had the excerpt played on before it.
        speed = (tag.extra.get("speed") or 1.0) if factors else query.speed
        offset = (tag.extra.get("reference_start") or 0.0) - (tag.start - LEAD_S) * speed
        error = abs(offset - query.ref_start)
        factor = float("nan")
        if factors:
            factor = max(abs((tag.extra.get("speed") or 1.0) / query.speed - 1),
                         abs((tag.extra.get("pitch") or 1.0) / query.pitch - 1))  # fmt: skip
        if right is None or error < right[1]:
            right = (error <= 0.5 and not factor > 0.01, error, factor)
    if right is None:
        return False, float("nan"), float("nan"), wrong
    return right[0], right[1], right[2], wrong + (0 if right[0] else 1)


def as_wav(path: Path, samples: np.ndarray) -> Path:
    """`samples` as a 16-bit WAV file for the peers, scaled down where they would clip."""
    sf.write(path, samples / max(1.0, float(np.abs(samples).max())), SAMPLE_RATE, subtype="PCM_16")
    return path


@dataclass(frozen=True)
class Built:
    path: Path
    rendered: list[np.ndarray]
    ids: list[int]
    """The library's id of each rendered piece."""
    written: list[Path]
    """With peers, every reference as a WAV file."""


def build(folder: Path, refs: int, queries: int, seconds: float, files: Path | None) -> Built:
    """The library, the rendered pieces and, with `files`, every reference as a WAV there."""
    path = folder / f"recall-{refs}.sqlite"
    path.unlink(missing_ok=True)
    library = Library.create(path)
    rendered = [piece(1000 + i, folder, seconds) for i in range(queries)]
    written, ids, index_s = [], [], 0.0
    for i in range(refs):
        samples = rendered[i] if i < queries else synthetic(i, seconds)
        started = time.perf_counter()
        ids.append(add_recording(library, f"ref {i}", samples, {}))
        index_s += time.perf_counter() - started
        if files is not None:
            written.append(as_wav(files / reference_name(i + 1), samples))
    indexed("arengine", refs * seconds, index_s, library_bytes(path))
    return Built(path, rendered, ids[:queries], written)


def built_on(folder: Path, library: Path, queries: int, seconds: float) -> Built:
    """A copy of `library` with the rendered pieces added: the queries' references among its."""
    path = folder / f"recall-{library.stem}.sqlite"
    path.unlink(missing_ok=True)
    # SQLite's backup, not a file copy: what is still in the write-ahead log is copied too.
    with closing(sqlite3.connect(library)) as source, closing(sqlite3.connect(path)) as target:
        source.backup(target)
    rendered = [piece(1000 + i, folder, seconds) for i in range(queries)]
    copy = Library(path)
    ids = [add_recording(copy, f"queried {i}", samples, {}) for i, samples in enumerate(rendered)]
    print(f"arengine: {len(copy.references())} references in the copy of {library}, "
          f"{library_bytes(path) / 1e6:.0f} MB")  # fmt: skip
    return Built(path, rendered, ids, [])


def indexed(system: str, audio_s: float, index_s: float, size: int) -> None:
    print(f"{system}: {audio_s / 3600:.2f} h of references indexed at {audio_s / index_s:.0f}x "
          f"real time, {size / 1e6 / (audio_s / 3600):.1f} MB per hour")  # fmt: skip


Matcher = Callable[[list[np.ndarray], list[Path]], tuple[list[list[Tag]], float, float]]
"""(recordings, their WAV files) -> tags per recording, seconds taken, seconds by its own timer."""


def engine(recognizer: FingerprintRecognizer) -> Matcher:
    def match(recordings: list[np.ndarray], _: list[Path]) -> tuple[list[list[Tag]], float, float]:
        tags, busy_s = [], 0.0
        for recording in recordings:
            started = time.perf_counter()
            tags.append(recognize(recognizer, recording))
            busy_s += time.perf_counter() - started
        return tags, busy_s, busy_s

    return match


def peer(tool: Peer) -> Matcher:
    """Its command line over the queries' files."""

    def match(_: list[np.ndarray], files: list[Path]) -> tuple[list[list[Tag]], float, float]:
        matched = tool.match(files)
        tags = [matched.tags.get(str(path), []) for path in files]
        return tags, matched.seconds, matched.own_seconds

    return match


def peers(
    args: argparse.Namespace, folder: Path, files: list[Path], audio_s: float
) -> dict[str, Matcher]:
    tools: list[Peer] = []
    if args.olaf:
        tools.append(Olaf(args.olaf, folder))
    if args.audfprint:
        tools.append(Audfprint(args.audfprint, args.audfprint_python, folder))
    matchers = {}
    for tool in tools:
        indexed(tool.name, audio_s, tool.index(files), tool.size())
        matchers[tool.name] = peer(tool)
    return matchers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: temp)")
    parser.add_argument("--refs", type=int, default=20, help="references in the library")
    parser.add_argument("--queries", type=int, default=10, help="rendered pieces queried")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds a reference")
    parser.add_argument("--only", default="", help="distortions whose name starts so (commas: any)")
    parser.add_argument("--steps", default=",".join(map(str, STEPS)), help="speed factors")
    parser.add_argument("--olaf", type=Path, help="Olaf's `bin/olaf_core` (make compile_core)")
    parser.add_argument("--audfprint", type=Path, help="a checkout of dpwe/audfprint")
    parser.add_argument("--audfprint-python", type=Path, help="an interpreter with its needs")
    parser.add_argument(
        "--library", type=Path, help="a built library (SQLite) to add the queries to, copied"
    )
    args = parser.parse_args()
    if args.library and (args.olaf or args.audfprint):
        parser.error("--library holds no audio for the peers to index: leave them out")
    torch.set_num_threads(1)
    folder = args.out or Path(tempfile.mkdtemp(prefix="fingerprint-recall-"))
    files = folder / "peers" if args.olaf or args.audfprint else None
    for made in (folder, files):
        if made is not None:
            made.mkdir(parents=True, exist_ok=True)
    if args.library:
        built = built_on(folder, args.library, args.queries, args.seconds)
    else:
        queries = min(args.queries, args.refs)
        built = build(folder, args.refs, queries, args.seconds, files)
    rendered = built.rendered
    systems = {"arengine": engine(FingerprintRecognizer(built.path, segment_s=30.0))}
    if files is not None:
        systems |= peers(args, files, built.written, args.refs * args.seconds)
    rng = np.random.default_rng(11)
    starts = [float(rng.uniform(0.0, args.seconds - EXCERPT_S)) for _ in rendered]
    steps = tuple(float(f) for f in args.steps.split(","))
    recall: dict[str, dict[str, str]] = {}
    print("distortion  system     recall  offset err s  factor err %  wrong tags  x real time  "
          "own timer  load avg")  # fmt: skip
    for name, distort in distortions(folder, steps).items():
        if not name.startswith(tuple(args.only.split(","))):
            continue
        asked = []
        for i, samples in enumerate(rendered):
            at = round(starts[i] * SAMPLE_RATE)
            excerpt, speed, pitch = distort(samples[at : at + round(EXCERPT_S * SAMPLE_RATE)])
            asked.append(Query(built.ids[i], starts[i], placed(excerpt, i), speed, pitch))
        recordings = [q.samples for q in asked]
        wavs = [as_wav(files / f"q{i}.wav", r) for i, r in enumerate(recordings)] if files else []
        audio_s = sum(len(r) for r in recordings) / SAMPLE_RATE
        for system, match in systems.items():
            tags, busy_s, own_s = match(recordings, wavs)
            results = [judge(t, q, system == "arengine") for t, q in zip(tags, asked, strict=True)]
            recall.setdefault(name, {})[system] = f"{sum(r[0] for r in results)}/{len(results)}"
            row(name, system, results, audio_s / busy_s, audio_s / own_s)
    print(f"\n| distortion | {' | '.join(systems)} |\n|---|{'---|' * len(systems)}")
    for name, found in recall.items():
        print(f"| {name} | {' | '.join(found.values())} |")


def row(name: str, system: str, results: list[tuple[bool, float, float, int]], speed: float,
        own: float) -> None:  # fmt: skip
    hits = [r for r in results if r[0]]
    offset = np.mean([r[1] for r in hits]) if hits else float("nan")
    factor = 100 * np.mean([r[2] for r in hits]) if hits else float("nan")
    print(f"{name:10}  {system:9}  {len(hits):>2}/{len(results):<3}  {offset:12.3f}  "
          f"{factor:12.2f}  {sum(r[3] for r in results):10d}  {speed:11.0f}  {own:9.0f}  "
          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

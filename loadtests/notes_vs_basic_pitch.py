"""`notes` against Spotify basic-pitch's own `predict()`, and `pitch` beside them, on recordings
rendered here with known notes: note F1 (mir_eval, onset within 50 ms, offsets ignored) and speed.

    python -m loadtests.notes_vs_basic_pitch --out /tmp/notes-bench --seconds 120 \
        --basic-pitch-python /tmp/convert-venv/bin/python

Recordings (FluidR3_GM through fluidsynth, MIDI written here):
- `mixed`: one-voice melodies (piano, guitar, violin, flute) between espeak-ng speech, white and
  brown noise and silence; only the melodies are notes;
- `poly`: chords under a melody (piano melody, guitar chords, string bass), no pauses.

basic-pitch runs in another Python (`--basic-pitch-python`: a throwaway venv with `basic-pitch`
installed `--no-deps` plus onnxruntime, librosa, resampy, pretty_midi, scipy, scikit-learn), with
its ONNX model under onnxruntime; it is never a dependency of arengine. Both run on the same file
(a 44.1 kHz WAV), on the same cores (onnxruntime's default threads, the engine's threads), timed
from the file on disk (decoding and resampling included) to the notes, model load and warm-up
excluded: wall seconds, and CPU seconds of the process (steadier on a shared machine). Also
reported: F1 between basic-pitch's notes and ours (`agree`), `notes` with basic-pitch's own
settings, and the `pitch` model's F1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch

from arengine.service.engine import Engine
from arengine.settings import Settings
from loadtests.recordings import phrases
from tests.music import FLUTE, GUITAR, PIANO, VIOLIN, Note, f1, melody, polyphonic_piece, render

_PREDICT = """
import json, sys, time, logging
logging.disable(logging.WARNING)
from basic_pitch import FilenameSuffix, build_icassp_2022_model_path
from basic_pitch.inference import Model, predict
model = Model(build_icassp_2022_model_path(FilenameSuffix.onnx))
predict(sys.argv[1], model)  # warm-up
started, cpu = time.perf_counter(), time.process_time()
_, _, events = predict(sys.argv[1], model)
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
notes = [[float(s), float(e), int(p)] for s, e, p, _, _ in events]
print(json.dumps({"seconds": seconds, "cpu": cpu, "notes": notes}))
"""


PREDICT = {"onset_threshold": 0.5, "frame_threshold": 0.3, "min_note_ms": 127.7, "melodia": 1}
"""basic-pitch's `predict()` defaults, as `notes` overrides."""
HEADER = (
    "| recording | system | precision | recall | F1 | agree with basic-pitch | wall s | CPU s "
    "| x real time (wall) |"
)


def mixed(
    seconds: float, folder: Path, rate: int = 22050, seed: int = 0
) -> tuple[np.ndarray, list[Note]]:
    """Melodies of 4 s among speech, noise and silence."""
    rng = np.random.default_rng(1 + seed)
    speech = phrases(rate)
    programs = [PIANO, GUITAR, VIOLIN, FLUTE]
    parts: list[np.ndarray] = []
    notes: list[Note] = []
    at, i = 0.0, 0
    while at < seconds:
        tune = melody(0.0, 4.0, programs[i % 4], seed=1000 * seed + i)
        audio = render(tune, folder, rate)[: int(4.5 * rate)]
        notes += [Note(n.start + at, n.end + at, n.midi, n.program) for n in tune]
        filler = [
            speech[(i + 7 * seed) % len(speech)],
            (0.05 * rng.standard_normal(int(2 * rate))).astype(np.float32),
            (np.cumsum(rng.standard_normal(int(2 * rate))) * 0.002).astype(np.float32),
            np.zeros(int(0.5 * rate), np.float32),
        ][i % 4]
        for piece in (audio, filler):
            parts.append(piece)
            at += len(piece) / rate
        i += 1
    return np.concatenate(parts), notes


Estimate = tuple[float, float, int]
"""`(start, end, midi)` of one transcribed note."""


def ours(
    engine: Engine, path: Path, model: str, overrides: dict[str, float]
) -> tuple[float, float, list[Estimate]]:
    recognizer = engine.check(model, overrides)
    started, cpu = time.perf_counter(), time.process_time()
    result = engine.recognize(path, recognizer, overrides, "bench").future.result()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    notes: list[Estimate] = []
    for tag in result.tags:
        number = tag.extra.get("midi")
        midi: int = number if number is not None else _midi(tag.extra.get("frequency_hz"))
        notes.append((tag.start, tag.end, midi))
    return seconds, cpu, notes


def _midi(frequency: float | None) -> int:
    return round(69 + 12 * float(np.log2((frequency or 440.0) / 440)))


def theirs(python: str, path: Path) -> tuple[float, float, list[Estimate]]:
    out = subprocess.run(
        [python, "-c", _PREDICT, str(path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=path.parent,  # not the repository: its folders would shadow packages
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return data["seconds"], data["cpu"], [(s, e, int(p)) for s, e, p in data["notes"]]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/notes-bench"))
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--basic-pitch-python", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--override", action="append", default=[], help="name=value for notes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    overrides = {k: float(v) for k, v in (o.split("=") for o in args.override)}
    recordings = {}
    audio, truth = mixed(args.seconds, args.out)
    recordings["mixed"] = (audio, truth)
    piece = polyphonic_piece(args.seconds)
    recordings["poly"] = (render(piece, args.out), piece)
    torch.set_num_threads(1)
    engine = Engine(Settings(engine_threads=args.threads, models="notes,pitch"))
    engine.load_models()
    print(HEADER)
    print("|---" * 9 + "|")
    for name, (audio, truth) in recordings.items():
        path = args.out / f"{name}.wav"
        sf.write(path, soxr.resample(audio, 22050, 44100), 44100, subtype="PCM_16")
        duration = len(audio) / 22050
        bp_seconds, bp_cpu, bp_notes = theirs(args.basic_pitch_python, path)
        rows = [("basic-pitch predict()", bp_seconds, bp_cpu, bp_notes)]
        rows.append(("notes, predict()'s settings", *ours(engine, path, "notes", PREDICT)))
        rows.append(("notes", *ours(engine, path, "notes", overrides)))
        rows.append(("pitch", *ours(engine, path, "pitch", {})))
        for system, seconds, cpu, notes in rows:
            p, r, score = f1(truth, notes)
            agree = f1([Note(s, e, m) for s, e, m in bp_notes], notes)[2]
            print(
                f"| {name} ({duration:.0f} s) | {system} | {p:.3f} | {r:.3f} | {score:.3f} | "
                f"{agree:.3f} | {seconds:.2f} | {cpu:.2f} | {duration / seconds:.0f} |"
            )
    engine.close()


if __name__ == "__main__":
    main()

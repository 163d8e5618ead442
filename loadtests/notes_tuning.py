"""Tune the `notes` post-processing defaults on recordings that the benchmark does not use.

    python -m loadtests.notes_tuning --out /tmp/notes-tune --seconds 90

Renders `mixed` and `poly` recordings with other seeds than `notes_vs_basic_pitch` (seed 1),
computes the activations once, then prints note F1 (onset 50 ms) for a grid of parameters.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import torch

from arengine.audio.segments import Segmenter
from arengine.kinds.notes.recognizer import NotesRecognizer
from arengine.kinds.notes.tagger import NotesParams
from arengine.models import DEFAULT_MODELS_DIR
from loadtests.notes_vs_basic_pitch import mixed
from tests.music import Note, f1, polyphonic_piece, render

GRID: dict[str, list[float]] = {
    "onset_threshold": [0.75, 0.8, 0.85, 0.9],
    "frame_threshold": [0.25, 0.3, 0.35],
    "min_note_ms": [100.0, 127.7, 150.0],
    "melodia": [0],
}


def scores(recognizer: NotesRecognizer, audio: np.ndarray) -> list[np.ndarray]:
    segments = Segmenter(iter([audio]), recognizer.plan)
    return [recognizer.infer(recognizer.features(s), s) for s in segments]


def evaluate(
    recognizer: NotesRecognizer,
    parts: list[np.ndarray],
    samples: int,
    truth: list[Note],
    overrides: dict[str, float],
) -> tuple[float, ...]:
    tagger = recognizer.tagger(overrides)
    tags = [t for part in parts for t in tagger.push(part)] + tagger.finish(samples)
    return f1(truth, [(t.start, t.end, t.extra.get("midi") or 0) for t in tags])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("/tmp/notes-tune"))
    parser.add_argument("--seconds", type=float, default=90)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    recognizer = NotesRecognizer(DEFAULT_MODELS_DIR / "notes" / "nmp.pt", segment_s=30)
    sets = {}
    audio, truth = mixed(args.seconds, args.out, seed=2)
    sets["mixed"] = (scores(recognizer, audio), len(audio), truth)
    piece = polyphonic_piece(args.seconds, seed=2)
    audio = render(piece, args.out)
    sets["poly"] = (scores(recognizer, audio), len(audio), piece)
    names = list(GRID)
    print("| " + " | ".join(names) + " | mixed P | mixed F1 | poly P | poly F1 | mean F1 |")
    print("|---" * (len(names) + 5) + "|")
    for values in itertools.product(*GRID.values()):
        overrides = dict(zip(names, values, strict=True))
        NotesParams().with_overrides(overrides)
        row = []
        for parts, samples, truth in sets.values():
            p, _, score = evaluate(recognizer, parts, samples, truth, overrides)
            row += [p, score]
        cells = " | ".join(f"{x:.3f}" for x in row)
        print(f"| {' | '.join(str(v) for v in values)} | {cells} | {(row[1] + row[3]) / 2:.3f} |")


if __name__ == "__main__":
    main()

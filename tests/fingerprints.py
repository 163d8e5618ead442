"""Fingerprint test material: distinct FluidR3 pieces as references, and long recordings that
hold some of them at known times under noise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE
from tests.music import FLUTE, GUITAR, PIANO, VIOLIN, melody, render

PROGRAMS = (PIANO, FLUTE, VIOLIN, GUITAR)


def piece(seed: int, folder: Path, seconds: float = 10.0) -> np.ndarray:
    """Two melodies of their own (instruments and notes from `seed`), at `SAMPLE_RATE`, cut
    where the notes end (the reverb's fading tail is not part of the piece)."""
    notes = melody(0.0, seconds, PROGRAMS[seed % 4], seed)
    notes += melody(0.0, seconds, PROGRAMS[(seed + 3) % 4], seed + 100)
    return render(notes, folder, SAMPLE_RATE)[: round(seconds * SAMPLE_RATE)]


@dataclass(frozen=True)
class Placed:
    """Reference `index`'s stretch `[ref_start, ref_end)` seconds, placed at `at` seconds."""

    index: int
    at: float
    ref_start: float
    ref_end: float

    @property
    def end(self) -> float:
        return self.at + self.ref_end - self.ref_start


def mix(
    seconds: float, pieces: list[np.ndarray], placed: list[Placed], snr_db: float, seed: int = 0
) -> np.ndarray:
    """`seconds` of white noise `snr_db` under the pieces' level, the placed stretches added."""
    out = np.zeros(round(seconds * SAMPLE_RATE), dtype=np.float32)
    for item in placed:
        stretch = pieces[item.index][
            round(item.ref_start * SAMPLE_RATE) : round(item.ref_end * SAMPLE_RATE)
        ]
        at = round(item.at * SAMPLE_RATE)
        out[at : at + len(stretch)] += stretch
    level = float(np.sqrt(np.mean(np.concatenate(pieces) ** 2)))
    noise = np.random.default_rng(seed).standard_normal(len(out)) * level * 10 ** (-snr_db / 20)
    mixed: np.ndarray = (out + noise).astype(np.float32)
    return mixed

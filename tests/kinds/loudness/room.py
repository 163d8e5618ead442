"""Synthetic rooms for the loudness kind's tests, written by the tests themselves: noise at a
set level, with events at times that fall on the kind's 50-ms windows (so tag bounds are exact)."""

from __future__ import annotations

import numpy as np

RATE = 16000
WINDOW = 800
"""The shipped manifest's 50-ms window at 16 kHz."""
SLAM = (5.0, 5.2)
"""The door slam: a noise burst decaying from 0.5 over 0.2 s (its level stays above -30 dBFS)."""
ALARM = (10.0, 17.75)
"""The alarm: 3 kHz beeps at 0.1 (-23 dBFS), 0.25 s on and 0.25 s off from 10 s; the last one
ends at 17.75."""


def noise(seconds: float, dbfs: float, seed: int = 1) -> np.ndarray:
    """White noise whose level (mean square) is `dbfs`."""
    rng = np.random.default_rng(seed)
    samples = rng.standard_normal(round(seconds * RATE)) * 10 ** (dbfs / 20)
    return samples.astype(np.float32)


def quiet_room(seconds: float = 25.0) -> np.ndarray:
    """A quiet room (-60 dBFS) with the door slam and the beeping alarm."""
    audio = noise(seconds, -60)
    start, end = (round(t * RATE) for t in SLAM)
    t = np.arange(end - start) / RATE
    audio[start:end] += noise(SLAM[1] - SLAM[0], -6, seed=2) * np.exp(-t / 0.1)
    beep = round(0.25 * RATE)
    tone = 0.1 * np.sin(2 * np.pi * 3000 * np.arange(beep) / RATE)
    for on in np.arange(ALARM[0], ALARM[1], 0.5):
        first = round(on * RATE)
        audio[first : first + beep] += tone.astype(np.float32)
    return audio


def burst(audio: np.ndarray, start_s: float, seconds: float, dbfs: float) -> np.ndarray:
    """`audio` with noise at `dbfs` added from `start_s` for `seconds`."""
    out = audio.copy()
    first = round(start_s * RATE)
    out[first : first + round(seconds * RATE)] += noise(seconds, dbfs, seed=3)
    return out

"""The level of audio windows in dBFS: what the `loudness` kind computes instead of a network.

A window's level is its mean square in decibels relative to full scale, `10 * log10(mean(x**2))`:
0 dBFS is a full-scale square wave, a full-scale sine is -3.01 dBFS (the RMS convention, not
AES17's, which calls that sine 0). Digital silence is floored at `FLOOR_DBFS`, so a level is
always a finite number.
"""

from __future__ import annotations

import numpy as np

FLOOR_DBFS = -120.0
"""The level of digital silence (and of anything quieter): below 24-bit audio's noise floor."""
_FLOOR_POWER = 10 ** (FLOOR_DBFS / 10)


def levels_dbfs(samples: np.ndarray, window: int) -> np.ndarray:
    """The level of each whole `window`-sample window of `samples`, in dBFS, as float32.

    Samples past the last whole window are ignored (the segmenter pads a recording's last
    window with zeros, which lowers that window's level by its share of padding).

    >>> levels_dbfs(np.ones(8, np.float32), 4).tolist()
    [0.0, 0.0]
    >>> levels_dbfs(np.float32([0, 0, 0, 0, 0, np.nan, 0, 0]), 4).tolist()
    [-120.0, -120.0]
    """
    frames = len(samples) // window
    windows = samples[: frames * window].reshape(frames, window).astype(np.float64)
    power = np.einsum("ij,ij->i", windows, windows) / window
    # fmax: a NaN sample (a float file may hold one) makes its window silent, not NaN.
    result: np.ndarray = (10 * np.log10(np.fmax(power, _FLOOR_POWER))).astype(np.float32)
    return result

"""How well two sets of speech intervals agree: F1 over 10 ms frames."""

from __future__ import annotations

import numpy as np

Intervals = list[tuple[float, float]]


def frame_f1(ours: Intervals, theirs: Intervals, seconds: float) -> float:
    """F1 of two sets of intervals over 10 ms frames."""
    n = int(seconds * 100) + 1

    def mask(intervals: Intervals) -> np.ndarray:
        out = np.zeros(n, bool)
        for start, end in intervals:
            out[int(start * 100) : int(end * 100)] = True
        return out

    a, b = mask(ours), mask(theirs)
    return float(2 * (a & b).sum() / max(1, a.sum() + b.sum()))

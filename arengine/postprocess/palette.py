"""Scores as palette codes: an array of few distinct values held as a byte per score and the
sorted values, so that thresholds compare bytes instead of floats.

A job keeps the events model's scores this way (its int8 arithmetic gives 32 distinct values over
two hours; `arengine/jobs/scores.py`), and new thresholds read 1 byte a score instead of 4. The
codes keep the order of the values, so `score >= t` is `code >= palette.at_least(t)` exactly, and
the highest code of a group is the code of its highest score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_VALUES = 256
"""Distinct values a palette holds: a code is one byte."""
_GLANCE = 4096
"""Scores looked at first: more than 256 values among them and the whole is not sorted."""


@dataclass(frozen=True, slots=True)
class Palette:
    """`values[codes]` are the scores; `values` ascending, without NaN.

    >>> coded = Palette.of(np.array([[0.5, 0.25], [0.25, 0.75]], np.float32))
    >>> coded.codes.tolist(), coded.values.tolist()
    ([[1, 0], [0, 2]], [0.25, 0.5, 0.75])
    >>> coded.at_least(np.array([0.5])).tolist()
    [1]
    """

    codes: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, scores: np.ndarray) -> Palette | None:
        """`scores` coded, or None when they do not fit (more than 256 values, a NaN, or values
        that differ only in the sign of zero)."""
        if len(np.unique(scores.ravel()[:_GLANCE])) > MAX_VALUES:
            return None  # a model's scores of many values (notes: 1.1 million per segment)
        values, codes = np.unique(scores, return_inverse=True)
        if len(values) > MAX_VALUES or np.isnan(values).any():
            return None
        coded = cls(codes.astype(np.uint8).reshape(scores.shape), values)
        if coded.decode().tobytes() != np.ascontiguousarray(scores).tobytes():
            return None  # -0.0 and 0.0 share a code: not exact
        return coded

    @property
    def shape(self) -> tuple[int, ...]:
        shape: tuple[int, ...] = self.codes.shape
        return shape

    def decode(self) -> np.ndarray:
        decoded: np.ndarray = self.values[self.codes]
        return decoded

    def at_least(self, thresholds: np.ndarray) -> np.ndarray:
        """Per threshold, the lowest code whose value is at least it (compared as float64, as
        the taggers compare scores)."""
        wide = self.values.astype(np.float64)
        return np.searchsorted(wide, np.asarray(thresholds, np.float64), side="left")

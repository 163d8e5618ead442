"""A loudness model as a gate for a request's other models: they skip the segments in which it
hears nothing loud (`gate=<loudness model>` on `POST /v1/recognize`, `POST /v1/jobs` and
`WS /v1/listen`).

A segment is skipped when no window of everything its model hears (its context and look-ahead
included), cut into windows of the gate's length at the model's rate, reaches `threshold_dbfs`:
the lowest level the gate's own trigger could ever call loud, `min(absolute_dbfs,
background_floor_dbfs + rise_db)` of its manifest's parameters, since its background is never
below its floor. The decision reads the segment alone, never a running background, so it is the
same whatever order the engine threads take segments in and when a job resumes; and it never
skips a segment in which the gate itself could tag a sound.

A skipped segment is treated as the silence the gate took it for: its model's scores for a
segment of zeros of the same shape go to post-processing in its place. They are computed once
per shape and request (a recording has at most three: the first, the others, the last), or per
segment for a model whose scores depend on where the segment is (`Recognizer.positional`), so
a gated model's tags are its tags of the recording with its quiet stretches muted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from arengine.audio.segments import Segment
from arengine.kinds.base import Recognizer
from arengine.kinds.loudness.level import levels_dbfs
from arengine.kinds.loudness.recognizer import LoudnessRecognizer


def threshold_dbfs(gate: LoudnessRecognizer) -> float:
    """The lowest window level `gate`'s trigger could call loud, whatever its background.

    >>> threshold_dbfs(LoudnessRecognizer(16000, segment_s=30))  # floor -70 + rise 15
    -55.0
    """
    params = gate.params
    return float(min(params.absolute_dbfs, params.background_floor_dbfs + params.rise_db))


def loud(samples: np.ndarray, window: int, threshold: float) -> bool:
    """Whether any `window`-sample window of `samples` (all of them, when shorter than one
    window) is at least `threshold` dBFS.

    >>> loud(np.zeros(800, np.float32), 400, -55.0), loud(np.full(800, 0.01, np.float32), 400, -55)
    (False, True)
    """
    if not len(samples):
        return False
    levels = levels_dbfs(samples, min(window, len(samples)))
    return bool(levels.max() >= threshold)


class LoudnessGate:
    """The `Gate` (`arengine/engine/hooks.py`) of one request: its models skip the segments in
    which `gate` hears nothing loud; one per request, shared by its engine threads.

    Example::

        gate = LoudnessGate(loudness, (speech,))
        gate.stand_in(0, segment)  # None: infer it; else the scores of silence in its place
    """

    def __init__(self, gate: LoudnessRecognizer, recognizers: Sequence[Recognizer]) -> None:
        self.name = gate.name
        self.threshold = threshold_dbfs(gate)
        window_s = gate.plan.hop / gate.sample_rate
        self._recognizers = tuple(recognizers)
        self._windows = tuple(max(1, round(window_s * r.sample_rate)) for r in recognizers)
        self._silences: dict[tuple[int, int, int, int], np.ndarray] = {}
        self._lock = threading.Lock()

    def stand_in(self, model: int, segment: Segment) -> np.ndarray | None:
        """None when `segment` has a loud window (model `model` infers it); else its model's
        scores for silence in its place."""
        if loud(segment.samples, self._windows[model], self.threshold):
            return None
        return self._silence(model, segment)

    def _silence(self, model: int, segment: Segment) -> np.ndarray:
        """Model `model`'s scores for zeros shaped as `segment`, made once per shape (two
        threads may both make a missing one: they make the same); a copy, as a tagger's own."""
        recognizer = self._recognizers[model]
        key = (model, len(segment.samples), segment.skip_frames, segment.frames)
        with self._lock:
            found = None if recognizer.positional else self._silences.get(key)
        if found is None:
            zeros = Segment(
                segment.index,
                segment.first_frame,
                segment.skip_frames,
                segment.frames,
                np.zeros_like(segment.samples),
            )
            found = recognizer.infer(recognizer.features(zeros), zeros)
            if not recognizer.positional:  # a positional model's is never asked for again
                with self._lock:
                    self._silences[key] = found
        return found.copy()

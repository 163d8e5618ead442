"""The notes model kind: basic-pitch's polyphonic transcription, 88 keys, frames at 86 per second.

The recording is cut on basic-pitch's own grid of windows (its `predict()`): window `w` covers
43,844 samples from sample `36164 * w - 3840`, and its frames 15 .. 156 (the middle 142, as its
`unwrap_output` keeps) are the recording's frames `142 * w ..`; frame `142 * w + j` is centred on
sample `36164 * w + 256 * j`. A segment is a whole number of windows (the plan's "frame" is one
window), so every activation is the one `predict()` computes, however the recording is segmented
and in whatever order segments run. Each window is normalised on its own (basic-pitch's
NormalizedLog), which is why the windows, not the segments, fix the result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.notation import note_name
from arengine.kinds.notes.network import HOP, KEYS, LOWEST_MIDI, SAMPLE_RATE, WINDOW, BasicPitch
from arengine.kinds.notes.tagger import NOTE_COLUMNS, FrameGrid, NotesParams, NotesTagger

EDGE_FRAMES = 15
"""Frames dropped at each edge of a window, as basic-pitch's `unwrap_output` does."""
KEPT_FRAMES = 142
STEP = WINDOW - 2 * EDGE_FRAMES * HOP
"""Samples between windows: 36,164 (141.27 frames: windows overlap by 30 frames, less 0.73)."""
CONTEXT = EDGE_FRAMES * HOP
LOOKAHEAD = WINDOW - CONTEXT - STEP
WINDOWS_PER_CALL = 3
"""Windows per forward call: the largest activation (onset features) stays near 5 MB, under
jemalloc's 8 MiB `oversize_threshold`. With 6 a call (10 MB), jemalloc with the server's settings
handed every call's buffers back to the kernel: 27,000 page faults over 30 s of audio against
700-2,000, 195x real time against 300x on one thread (`loadtests.page_faults notes`); under glibc
270x against 255x."""
NOTE_LABELS = tuple(note_name(LOWEST_MIDI + key) for key in range(KEYS))
"""A0 .. C8, the piano's keys."""


class NotesRecognizer(Recognizer):
    """The `notes` model kind: scores are `(frames, 440)`: note, onset and contour activations.

    >>> recognizer = NotesRecognizer(Path("models/notes/nmp.pt"), segment_s=30)
    >>> recognizer.plan.segment_frames  # windows of 36,164 samples: 29.5 s
    18
    """

    kind = "notes"
    _params: NotesParams
    max_batch = 1
    """A segment is already a batch of windows; larger batches measured no faster per window."""
    sample_rate = SAMPLE_RATE
    score_hop = HOP
    """Samples between frames inside a window (the plan's step is a whole window)."""
    labels: tuple[str, ...] = NOTE_LABELS
    kept_apart = NOTE_COLUMNS

    def __init__(
        self,
        weights: Path,
        segment_s: float,
        name: str = "notes",
        params: NotesParams | None = None,
    ) -> None:
        self.name = name
        self._model = BasicPitch.load(weights)
        self._params = params or NotesParams()
        windows = max(1, round(segment_s * SAMPLE_RATE / STEP))
        self.plan = SegmentPlan(
            hop=STEP, context=CONTEXT, segment_frames=windows, preroll_frames=0, lookahead=LOOKAHEAD
        )

    def features(self, segment: Segment) -> Tensor:
        """The segment's `(windows, 43844)` basic-pitch windows."""
        return torch.from_numpy(segment.samples).unfold(0, WINDOW, STEP)

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        """`(142 * windows, 440)` scores: note, onset and contour activations per frame."""
        parts = []
        with torch.inference_mode():
            for i in range(0, len(features), WINDOWS_PER_CALL):
                out = self._model(features[i : i + WINDOWS_PER_CALL], edge=EDGE_FRAMES)
                both = torch.cat([out.note, out.onset, out.contour], dim=2)
                parts.append(both.reshape(-1, 440))
        result: np.ndarray = torch.cat(parts).numpy()
        return result

    def tagger(self, overrides: Overrides) -> NotesTagger:
        params = self._params.with_overrides(overrides)
        return NotesTagger(params, SAMPLE_RATE, FrameGrid(HOP, KEPT_FRAMES, STEP))

    def warm_up(self) -> None:
        """One window of a tone, so the first request does not pay for lazy initialisation."""
        t = torch.arange(WINDOW, dtype=torch.float32) / SAMPLE_RATE
        with torch.inference_mode():
            self._model((0.3 * torch.sin(2 * torch.pi * 440 * t)).unsqueeze(0))

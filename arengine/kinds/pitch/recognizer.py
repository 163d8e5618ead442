"""The `pitch` kind's recognizer: CREPE tiny (`network.py`) on the 1024-sample window centred on
every 10-ms frame, to note tags (`tagger.py`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.pitch.network import (
    CHUNK_FRAMES,
    HOP,
    SAMPLE_RATE,
    WINDOW,
    Crepe,
    decode,
    normalise,
)
from arengine.kinds.pitch.tagger import NOTE_LABELS, PitchParams, PitchTagger


class PitchRecognizer(Recognizer):
    """The `pitch` model kind: CREPE tiny pitch, 10 ms frames, to note tags (C1 .. B7).

    Frame `i` of a segment is the 1024-sample window centred on the segment's sample `i * 160`.

    >>> recognizer = PitchRecognizer(Path("models/pitch/tiny.pth"), segment_s=30)
    >>> recognizer.plan.segment_frames
    3000
    """

    kind = "pitch"
    _params: PitchParams
    sample_rate = SAMPLE_RATE
    labels: tuple[str, ...] = NOTE_LABELS

    def __init__(
        self,
        weights: Path,
        segment_s: float,
        name: str = "pitch",
        params: PitchParams | None = None,
    ) -> None:
        self.name = name
        self._model = Crepe.load(weights)
        self._params = params or PitchParams()
        self.plan = SegmentPlan(
            hop=HOP,
            context=WINDOW // 2,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / HOP)),
            preroll_frames=0,
            lookahead=WINDOW // 2,
        )

    def features(self, segment: Segment) -> Tensor:
        """The normalised `(skip_frames + frames, 1024)` windows of the segment."""
        samples = torch.from_numpy(segment.samples)
        frames = samples.unfold(0, WINDOW, HOP)[: segment.skip_frames + segment.frames]
        return normalise(frames)

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        frames = features[segment.skip_frames :]
        with torch.inference_mode():
            chunks = [
                decode(self._model(frames[i : i + CHUNK_FRAMES]))
                for i in range(0, len(frames), CHUNK_FRAMES)
            ]
        result: np.ndarray = torch.cat(chunks).numpy()
        return result

    def tagger(self, overrides: Overrides) -> PitchTagger:
        params = self._params.with_overrides(overrides)
        return PitchTagger(params, sample_rate=SAMPLE_RATE, hop=HOP)

    def warm_up(self) -> None:
        """One call on a short tone, so the first request does not pay for lazy initialisation."""
        t = torch.arange(WINDOW + 15 * HOP, dtype=torch.float32) / SAMPLE_RATE
        tone = torch.sin(2 * torch.pi * 440 * t)
        with torch.inference_mode():
            decode(self._model(normalise(tone.unfold(0, WINDOW, HOP))))

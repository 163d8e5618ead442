"""The `speech` kind's recognizer: silero-vad's probabilities (`network.py`) in 32-ms windows,
segments batched into one forward call, to speech tags (`tagger.py`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.speech.network import CONTEXT, MAX_BATCH, SAMPLE_RATE, WINDOW
from arengine.kinds.speech.tagger import SpeechParams, SpeechTagger


class SpeechRecognizer(Recognizer):
    """The `speech` model kind: silero-vad probabilities to speech tags.

    >>> from arengine.kinds.speech.network import SpeechModel
    >>> recognizer = SpeechRecognizer(SpeechModel.from_silero_package(), segment_s=30, preroll_s=2)
    >>> recognizer.plan.segment_frames
    938
    """

    kind = "speech"
    _params: SpeechParams
    sample_rate = SAMPLE_RATE
    labels: tuple[str, ...] = ("speech",)

    def __init__(
        self,
        model: nn.Module,
        segment_s: float,
        preroll_s: float,
        name: str = "speech",
        params: SpeechParams | None = None,
        max_batch: int = 1,
    ) -> None:
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be 1 to {MAX_BATCH}, got {max_batch}")
        self.name = name
        self.max_batch = max_batch
        self._model = model
        self._params = params or SpeechParams()
        self.plan = SegmentPlan(
            hop=WINDOW,
            context=CONTEXT,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / WINDOW)),
            preroll_frames=round(preroll_s * SAMPLE_RATE / WINDOW),
        )

    def features(self, segment: Segment) -> Tensor:
        return torch.from_numpy(segment.samples).unsqueeze(0)

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        with torch.inference_mode():
            probabilities = self._model(features)[0]
        scores: np.ndarray = probabilities[segment.skip_frames :].numpy()
        return scores

    def infer_batch(
        self, features: Sequence[Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        """`infer` for several segments in one forward call: one score array per segment.

        Rows are right-padded with zeros to the longest: a window's STFT sees only its own 576
        samples and the LSTM runs forward in time, so padding after a row's last window changes
        none of its probabilities. One call over 4 segments costs ~0.9x of 4 calls on one core
        (the LSTM's per-step cost is shared; BENCHMARKS.md).
        """
        width = max(feature.shape[1] for feature in features)
        x = torch.zeros(len(features), width)
        for row, feature in zip(x, features, strict=True):
            row[: feature.shape[1]] = feature[0]
        with torch.inference_mode():
            probabilities = self._model(x)
        return [
            probabilities[row, segment.skip_frames : (feature.shape[1] - CONTEXT) // WINDOW].numpy()
            for row, (feature, segment) in enumerate(zip(features, segments, strict=True))
        ]

    def tagger(self, overrides: Overrides) -> SpeechTagger:
        params = self._params.with_overrides(overrides)
        return SpeechTagger(params, sample_rate=SAMPLE_RATE, hop=WINDOW)

    def warm_up(self) -> None:
        """One call on silence, so the first request does not pay for lazy initialisation."""
        with torch.inference_mode():
            self._model(torch.zeros(1, CONTEXT + 64 * WINDOW))

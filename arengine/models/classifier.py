"""The `classifier` kind: a user's model (ONNX, torch.export or TorchScript) over log-mel windows.

The manifest gives the log-mel parameters, the analysis window and hop in seconds, and whether the
model's outputs go through a sigmoid (independent labels) or a softmax (exclusive labels).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.models.mel import LogMel, MelParams
from arengine.models.recognizer import Overrides
from arengine.models.runtimes import Network
from arengine.postprocess.labels import LabelParams, LabelTagger
from arengine.postprocess.vocabulary import Vocabulary

ACTIVATIONS = ("sigmoid", "softmax")


class ClassifierRecognizer:
    """Windows of `window_s` every `hop_s` -> log-mel -> model -> activation -> label tags."""

    kind = "classifier"
    max_batch = 1

    def __init__(
        self,
        name: str,
        module: Network,
        sample_rate: int,
        labels: tuple[str, ...],
        mel: MelParams,
        window_s: float,
        hop_s: float,
        activation: str,
        segment_s: float,
        params: LabelParams,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r}; accepted: {', '.join(ACTIVATIONS)}")
        self.name = name
        self.sample_rate = sample_rate
        self.labels = labels
        self.vocabulary = vocabulary or Vocabulary(labels)
        self.window = round(window_s * sample_rate)
        hop = round(hop_s * sample_rate)
        if not 0 < hop <= self.window or self.window < mel.n_fft:
            raise ValueError(
                f"need 0 < hop_s <= window_s and a window of at least n_fft "
                f"({mel.n_fft}) samples; got window_s={window_s}, hop_s={hop_s}"
            )
        self.plan = SegmentPlan(
            hop=hop,
            context=0,
            segment_frames=max(1, round(segment_s / hop_s)),
            preroll_frames=0,
            lookahead=self.window - hop,
        )
        self._module = module
        self._mel = LogMel(sample_rate, mel)
        self._activation = activation
        self._params = params
        self._check_output()

    def features(self, segment: Segment) -> torch.Tensor:
        samples = torch.from_numpy(segment.samples)
        windows = samples.unfold(0, self.window, self.plan.hop)[
            : segment.skip_frames + segment.frames
        ]
        return self._mel(windows)

    def infer(self, features: torch.Tensor, segment: Segment) -> np.ndarray:
        with torch.inference_mode():
            logits = self._module(features)
        scores = torch.sigmoid(logits) if self._activation == "sigmoid" else logits.softmax(-1)
        out: np.ndarray = scores[segment.skip_frames :].float().numpy()
        return out

    def infer_batch(
        self, features: Sequence[torch.Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        """One `infer` per segment: batching does not pay for this model (max_batch 1)."""
        return [self.infer(f, s) for f, s in zip(features, segments, strict=True)]

    def tagger(self, overrides: Overrides) -> LabelTagger:
        return LabelTagger(
            self.labels,
            self._params.for_request(overrides, self.vocabulary),
            self.sample_rate,
            self.plan.hop,
            self.window,
            vocabulary=self.vocabulary,
        )

    def defaults(self) -> dict[str, float]:
        return self._params.defaults()

    def warm_up(self) -> None:
        self._check_output()

    def _check_output(self) -> None:
        """The model must give one score per label for each window: checked at load time."""
        features = self._mel(torch.zeros(2, self.window))
        with torch.inference_mode():
            logits = self._module(features)
        if tuple(logits.shape) != (2, len(self.labels)):
            raise ValueError(
                f"the model returns shape {tuple(logits.shape)} for 2 windows; "
                f"expected (2, {len(self.labels)}) for labels {list(self.labels)}"
            )

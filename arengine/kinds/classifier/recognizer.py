"""The `classifier` kind: a user's model (ONNX, torch.export or TorchScript) over log-mel windows.

The manifest gives the log-mel parameters, the analysis window and hop in seconds, and whether the
model's outputs go through a sigmoid (independent labels) or a softmax (exclusive labels).

The model's input is `(windows, n_mels, frames)` float32, where `windows` varies from call to call
and `frames = 1 + (round(window_s * sample_rate) - n_fft) // hop` (frames are not centred): 0.5-s
windows at 16 kHz with `n_fft` 512 and hop 160 have 47 frames, not 50. `GET /v1/models` states it
as `input_shape`; a model exported for another shape is refused at load time with the fix.
"""

from __future__ import annotations

import numpy as np
import torch

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.classifier.runtimes import Network, declared_shape
from arengine.kinds.mel import LogMel, MelParams
from arengine.postprocess.labels import LabelParams, LabelTagger
from arengine.postprocess.vocabulary import Vocabulary

ACTIVATIONS = ("sigmoid", "softmax")


class ClassifierRecognizer(Recognizer):
    """Windows of `window_s` every `hop_s` -> log-mel -> model -> activation -> label tags."""

    kind = "classifier"
    _params: LabelParams

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
        self.input_shape: tuple[int | None, ...] = (None, mel.n_mels, mel.frames(self.window))
        """`(windows, n_mels, frames)`: `windows` (`None`) varies from call to call."""
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

    def tagger(self, overrides: Overrides) -> LabelTagger:
        return LabelTagger(
            self.labels,
            self._params.for_request(overrides, self.vocabulary),
            self.sample_rate,
            self.plan.hop,
            self.window,
            vocabulary=self.vocabulary,
        )

    def warm_up(self) -> None:
        self._check_output()

    def _check_output(self) -> None:
        """The model must take the input the server sends and give one score per label for each
        window: checked at load time, with the fix when it does not."""
        declared = declared_shape(self._module)
        if declared is not None and not _fits(declared, self.input_shape):
            raise ValueError(self._input_advice(declared))
        features = self._mel(torch.zeros(2, self.window))
        try:
            with torch.inference_mode():
                logits = self._module(features)
        except Exception as error:  # the runtime's own message is kept, after the fix
            raise ValueError(f"{self._input_advice(declared)}; the runtime said: {error}") from None
        if tuple(logits.shape) != (2, len(self.labels)):
            raise ValueError(
                f"the model returns shape {tuple(logits.shape)} for 2 windows; "
                f"expected (2, {len(self.labels)}) for labels {list(self.labels)}"
            )

    def _input_advice(self, declared: tuple[int | None, ...] | None) -> str:
        """What the server sends, how the frame count follows from the manifest, and what to
        change where the model declares another shape."""
        mel = self._mel.params
        _, mels, frames = self.input_shape
        sends = (
            f"the model does not take the input the server sends: float32 (windows, {mels}, "
            f"{frames}), the number of windows varying from call to call; {frames} frames = "
            f"1 + ({self.window}-sample window - n_fft {mel.n_fft}) // hop {mel.hop} "
            f"(window_s {self.window / self.sample_rate:g} at {self.sample_rate} Hz, frames not "
            f"centred; models/README.md)"
        )
        if declared is None or len(declared) != 3:
            shown = "" if declared is None else f"; the model declares {_shape(declared)}"
            return f"{sends}{shown}. Export it for (windows, {mels}, {frames}), windows dynamic"
        fixes = []
        if declared[0] is not None:
            fixes.append("export it with a dynamic first axis (windows)")
        if declared[1] not in (None, mels):
            fixes.append(f"set [features] n_mels = {declared[1]}")
        if declared[2] not in (None, frames):
            samples = mel.samples(declared[2])
            fixes.append(
                f"set [model] window_s = {round(samples / self.sample_rate, 6)} ({samples} "
                f"samples, {declared[2]} frames) or export it with {frames} frames"
            )
        if not fixes:
            return f"{sends}. The model declares {_shape(declared)}, which fits: it fails inside"
        return f"{sends}. The model declares {_shape(declared)}: {', and '.join(fixes)}"


def _fits(declared: tuple[int | None, ...], sent: tuple[int | None, ...]) -> bool:
    """Each axis the model fixes has that size in what the server sends; a varying axis fits
    only a free one."""
    return len(declared) == len(sent) and all(
        axis is None or axis == size for axis, size in zip(declared, sent, strict=True)
    )


def _shape(shape: tuple[int | None, ...]) -> str:
    """`(windows, 32, 50)`: a free first axis is the windows; other free axes show as `?`."""
    axes = [
        ("windows" if i == 0 else "?") if axis is None else str(axis)
        for i, axis in enumerate(shape)
    ]
    return f"({', '.join(axes)})"

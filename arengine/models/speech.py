"""The speech model: silero-vad's 16 kHz network, rewritten to be stateless and segment-at-a-time.

silero-vad's own TorchScript model keeps its LSTM state and audio context on the module, so two
threads sharing it corrupt each other's results, and it is driven one 32 ms window per Python call.
Here the state is a local of `forward`: the STFT and the conv encoder run over every window of the
segment at once, and only the LSTM walks the sequence, in one call.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from arengine.models.recognizer import Overrides
from arengine.postprocess.speech import SpeechParams, SpeechTagger
from arengine.segments import Segment, SegmentPlan

SAMPLE_RATE = 16000
WINDOW = 512
"""Samples per output probability (32 ms at 16 kHz)."""
CONTEXT = 64
"""Samples of the previous window that every window sees (silero-vad's audio context)."""
_N_FFT = 256
_HOP = 128
_BINS = _N_FFT // 2 + 1


class SpeechModel(nn.Module):
    """Per-window speech probabilities for whole segments; holds only immutable weights.

    Input: `(batch, CONTEXT + n * WINDOW)` float32 samples at 16 kHz, the first `CONTEXT` samples
    being the audio just before the segment (zeros at the start of a recording).
    Output: `(batch, n)` probabilities, one per 512-sample window.

    >>> model = SpeechModel.from_silero_package()
    >>> model(torch.zeros(1, CONTEXT + 10 * WINDOW)).shape
    torch.Size([1, 10])
    """

    def __init__(self) -> None:
        super().__init__()
        self.stft_conv = nn.Conv1d(1, 2 * _BINS, kernel_size=_N_FFT, stride=_HOP, bias=False)
        self.conv1 = nn.Conv1d(_BINS, 128, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(128, 64, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, kernel_size=3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, 128, kernel_size=3, padding=1)
        self.lstm = nn.LSTM(128, 128, batch_first=True)
        self.final_conv = nn.Conv1d(128, 1, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        context, window = 64, 512  # TorchScript cannot read module globals
        batch = x.shape[0]
        n = (x.shape[1] - context) // window
        # Each window is its 64-sample context plus 512 new samples, reflect-padded by 64.
        frames = x.unfold(1, context + window, window).reshape(batch * n, 1, context + window)
        frames = nn.functional.pad(frames, (0, context), mode="reflect")
        spec = self.stft_conv(frames)
        bins = spec.shape[1] // 2
        magnitude = torch.sqrt(spec[:, :bins] ** 2 + spec[:, bins:] ** 2)
        h = torch.relu(self.conv1(magnitude))
        h = torch.relu(self.conv2(h))
        h = torch.relu(self.conv3(h))
        h = torch.relu(self.conv4(h)).reshape(batch, n, 128)
        h, _ = self.lstm(h)
        logits = self.final_conv(torch.relu(h).transpose(1, 2))
        return torch.sigmoid(logits).squeeze(1)

    @classmethod
    def from_silero_package(cls) -> SpeechModel:
        """The model with the weights of the installed `silero-vad` package."""
        from importlib.resources import files

        return cls.from_silero_archive(Path(str(files("silero_vad.data") / "silero_vad.jit")))

    @classmethod
    def from_silero_archive(cls, archive: Path) -> SpeechModel:
        """Copy the weights of silero-vad's TorchScript model (`silero_vad.jit`).

        Manifests may point only at the copy inside the installed package, never at a user path.
        The package's `silero_vad_16k.safetensors` is not used: in silero-vad 6.2.3 it holds other
        weights than the package's TorchScript and ONNX models (probabilities differ by up to 0.96).
        """
        with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; we only read weights
            warnings.simplefilter("ignore", DeprecationWarning)
            packaged = torch.jit.load(str(archive), map_location="cpu").state_dict()  # type: ignore[no-untyped-call]
        names = {
            "stft_conv.weight": "_model.stft.forward_basis_buffer",
            "final_conv.weight": "_model.decoder.decoder.2.weight",
            "final_conv.bias": "_model.decoder.decoder.2.bias",
        }
        for i in range(4):
            for kind in ("weight", "bias"):
                names[f"conv{i + 1}.{kind}"] = f"_model.encoder.{i}.reparam_conv.{kind}"
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            names[f"lstm.{kind}_l0"] = f"_model.decoder.rnn.{kind}"
        model = cls()
        model.load_state_dict({ours: packaged[theirs] for ours, theirs in names.items()})
        model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return model


class SpeechRecognizer:
    """The `speech` model kind: silero-vad probabilities to speech tags.

    >>> recognizer = SpeechRecognizer(SpeechModel.from_silero_package(), segment_s=30, preroll_s=2)
    >>> recognizer.plan.segment_frames
    938
    """

    kind = "speech"
    sample_rate = SAMPLE_RATE
    labels: tuple[str, ...] = ("speech",)

    def __init__(
        self,
        model: nn.Module,
        segment_s: float,
        preroll_s: float,
        name: str = "speech",
        params: SpeechParams | None = None,
    ) -> None:
        self.name = name
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

    def tagger(self, overrides: Overrides) -> SpeechTagger:
        params = self._params.with_overrides(overrides)
        return SpeechTagger(params, sample_rate=SAMPLE_RATE, hop=WINDOW)

    def defaults(self) -> dict[str, float]:
        return self._params.as_dict()

    def warm_up(self) -> None:
        """One call on silence, so the first request does not pay for lazy initialisation."""
        with torch.inference_mode():
            self._model(torch.zeros(1, CONTEXT + 64 * WINDOW))

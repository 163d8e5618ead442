"""The `music` kind: musicnn (Pons and Serra, 2019) trained on MagnaTagATune, 50 tags per 3-s patch.

The network is re-declared from musicnn 0.1.0's `models.py` (`build_musicnn`, MTT_musicnn: 64
mid-end filters, 200 back-end units) and reads weights converted once from its TF1 checkpoint
(`models/music/convert.py`). TensorFlow lays tensors out `(batch, time, freq, channels)`; here
they are `(batch, channels, time, freq)`, with the same arithmetic:

- front end: batch norm of the log-mel patch; two timbral convolutions (7 frames x 38 and x 67
  mel bands, 204 filters, valid in frequency) and three temporal ones (128, 64, 32 frames x 1
  band, 51 filters, TensorFlow's "same" padding in time), each ReLU -> batch norm -> max over
  frequency; 561 channels per frame;
- mid end: three 7-frame convolutions over all channels (64 filters) with ReLU and batch norm,
  the last two residual; the front end and the three outputs concatenated (753 per frame);
- back end: max and mean over time, interleaved per channel as TensorFlow's flatten orders them,
  batch norm, dense 200 + ReLU, batch norm, dense 50, sigmoid.

Batch norms are inference-mode (moving averages, epsilon 1e-3, TensorFlow's default).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from arengine.kinds.mel import mel_filterbank

SAMPLE_RATE = 16000
N_FFT = 512
FFT_HOP = 256
N_MELS = 96
PATCH_FRAMES = 187
"""Spectrogram frames per patch: musicnn's `n_frames` for 3-s inputs (2.992 s of hops)."""
PATCH_HOP = PATCH_FRAMES * FFT_HOP
"""Samples per patch; patches do not overlap (musicnn's default `input_overlap=False`)."""
CONTEXT = N_FFT // 2
"""librosa centres frames: frame 0 of a patch starts half a window before the patch."""
BN_EPS = 1e-3
LABELS: tuple[str, ...] = (
    "guitar", "classical", "slow", "techno", "strings", "drums", "electronic", "rock", "fast",
    "piano", "ambient", "beat", "violin", "vocal", "synth", "female", "indian", "opera", "male",
    "singing", "vocals", "no vocals", "harpsichord", "loud", "quiet", "flute", "woman",
    "male vocal", "no vocal", "pop", "soft", "sitar", "solo", "man", "classic", "choir", "voice",
    "new age", "dance", "male voice", "female vocal", "beats", "harp", "cello", "no voice",
    "weird", "country", "metal", "female voice", "choral",
)  # fmt: skip
"""musicnn's `MTT_LABELS`, in the order of the network's outputs."""


class MusicLogMel:
    """musicnn's input: `log10(10000 * mel + 1)` of librosa's mel power spectrogram.

    librosa's `melspectrogram(sr=16000, n_fft=512, hop_length=256, n_mels=96)`: periodic Hann
    window, power 2, Slaney mel filters to 8 kHz; musicnn then rounds the mel power to float16.
    The rounding is kept (the network was trained on it); the logarithm is taken in float32, where
    musicnn's float16 arithmetic overflows to infinity once `10000 * mel` passes 65504 (loud
    low bands), which would turn its scores into NaN.
    """

    def __init__(self) -> None:
        filters = mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS, 0.0, SAMPLE_RATE / 2)
        self._filters = torch.from_numpy(filters.astype(np.float32))
        self._window = torch.hann_window(N_FFT, periodic=True)

    def __call__(self, samples: Tensor) -> Tensor:
        """`CONTEXT + n * PATCH_HOP` samples -> `(n, PATCH_FRAMES, N_MELS)` patches."""
        spectrum = torch.stft(
            samples, N_FFT, FFT_HOP, window=self._window, center=False, return_complex=True
        )
        power = spectrum.real**2 + spectrum.imag**2
        mel = torch.matmul(self._filters, power).half().float()
        patches = torch.log10(10000 * mel + 1).T
        return patches.reshape(-1, PATCH_FRAMES, N_MELS)


_FRONT = ((204, (7, 38)), (204, (7, 67)), (51, (128, 1)), (51, (64, 1)), (51, (32, 1)))
"""Front-end branches (filters, (frames, mel bands)): timbral 7x38 and 7x67 (0.4 and 0.7 of the
96 bands, 1.6 x 128 filters), temporal 128, 64 and 32 frames (1.6 x 32 filters)."""


def _norm(channels: int) -> nn.BatchNorm1d:
    return nn.BatchNorm1d(channels, eps=BN_EPS)


class Musicnn(nn.Module):
    """MTT_musicnn: `(patches, 187, 96)` log-mel -> `(patches, 50)` tag probabilities.

    Holds only immutable weights; any number of threads may call it at once.

    >>> model = Musicnn.load(Path("models/music/musicnn_mtt.pth"))
    >>> model(MusicLogMel()(torch.zeros(CONTEXT + 2 * PATCH_HOP))).shape
    torch.Size([2, 50])
    """

    def __init__(self) -> None:
        super().__init__()
        self.input_norm = _norm(1)
        self.front = nn.ModuleList(nn.Conv2d(1, c, kernel) for c, kernel in _FRONT)
        self.front_norms = nn.ModuleList(_norm(c) for c, _ in _FRONT)
        self.mid = nn.ModuleList(nn.Conv1d(c, 64, 7) for c in (561, 64, 64))
        self.mid_norms = nn.ModuleList(_norm(64) for _ in range(3))
        self.pool_norm = _norm(2 * 753)
        self.dense = nn.Linear(2 * 753, 200)
        self.dense_norm = _norm(200)
        self.out = nn.Linear(200, len(LABELS))

    def forward(self, patches: Tensor) -> Tensor:
        x = self.input_norm(patches.reshape(-1, 1, PATCH_FRAMES * N_MELS))
        x = x.reshape(-1, 1, PATCH_FRAMES, N_MELS)
        branches = zip(self.front, self.front_norms, _FRONT, strict=True)
        front = torch.cat([_front(conv, norm, k[0], x) for conv, norm, (_, k) in branches], dim=1)
        mids = [front]
        for i, (conv, norm) in enumerate(zip(self.mid, self.mid_norms, strict=True)):
            y = norm(torch.relu(conv(nn.functional.pad(mids[-1], (3, 3)))))
            mids.append(y if i == 0 else y + mids[-1])  # the last two are residual
        features = torch.cat(mids, dim=1)  # (patches, 753, frames)
        # TensorFlow concatenates max and mean on a last axis and flattens: interleaved.
        pooled = torch.stack([features.amax(2), features.mean(2)], dim=2).flatten(1)
        hidden = self.dense_norm(torch.relu(self.dense(self.pool_norm(pooled))))
        return torch.sigmoid(self.out(hidden))

    @classmethod
    def load(cls, path: Path) -> Musicnn:
        """The network with the converted weights (a state dict), in eval mode, frozen."""
        model = cls()
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return model


def _front(conv: nn.Module, norm: nn.Module, length: int, x: Tensor) -> Tensor:
    """One front-end branch: pad in time, conv, ReLU, batch norm, max over frequency."""
    # The timbral convolutions pad 3 frames each side by hand; the temporal ones use
    # TensorFlow's "same", which pads one more frame after than before for an even kernel.
    before = (length - 1) // 2
    y = torch.relu(conv(nn.functional.pad(x, (0, 0, before, length - 1 - before))))
    y = norm(y.flatten(2)).reshape(y.shape)
    pooled: Tensor = y.amax(3)
    return pooled

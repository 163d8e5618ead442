"""BirdNET GLOBAL 6K V2.4's network (Kahl et al.), re-declared from its TFLite graph.

TensorFlow lays tensors out `(batch, height, width, channels)`, here `(batch, channels, height,
width)` with height the 96 mel bands and width the 511 spectrogram frames, with the same
arithmetic: the spectrogram (`spectrogram.py`); a 4x8 stride-2 convolution (TensorFlow's SAME
padding: more after than before) with ReLU; max and average pooling over pairs of frames,
concatenated and mixed by a 1x1 convolution; EfficientNet-style blocks (1x1 expansion, swish, 3x3
depthwise, swish, squeeze-and-excite in stages 2-4, 1x1 projection, residuals after each stage's
first block, which halves both axes); a per-channel affine with ReLU, a 3x3 convolution to 1,024
with ReLU, the mean, a 1,024 -> 6,522 dense layer. Batch norm is folded into the convolutions.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import Tensor, nn

from arengine.kinds.birds.convert import CONVERSION, cache_dir, convert, frozen, sha256_of
from arengine.kinds.birds.spectrogram import BirdnetSpectrogram
from arengine.kinds.birds.tflite import read_graph

STAGES = ((36, 3, 72, 0), (72, 4, 288, 18), (108, 5, 864, 27), (192, 4, 1536, 48))
"""Body stages: (width, blocks, expanded width, squeeze-and-excite width; 0 for none)."""
EARLY_BLOCKS = STAGES[0][1] + STAGES[1][1]
"""The blocks of the first two stages: `Birdnet.early` runs them, `Birdnet.embeddings` the rest."""


def _same(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int]) -> Tensor:
    """TensorFlow's SAME padding: `ceil(size / stride)` outputs, the odd pixel after."""
    pads: list[int] = []
    for size, k, s in reversed(list(zip(x.shape[2:], kernel, stride, strict=True))):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return nn.functional.pad(x, pads)


def _swish(x: Tensor) -> Tensor:
    """`x * sigmoid(x)` in one pass, in place: `x` is always a layer's fresh output."""
    return nn.functional.silu(x, inplace=True)


def _pointwise(conv: nn.Conv2d, x: Tensor) -> Tensor:
    """A 1x1 convolution as one matrix product over channels-last pixels: torch's CPU
    convolution takes its slow im2col path for these shapes (a third of the time, measured)."""
    pixels = x.permute(0, 2, 3, 1)  # free for a channels-last tensor
    return nn.functional.linear(pixels, conv.weight[:, :, 0, 0], conv.bias).permute(0, 3, 1, 2)


FUSED: bool = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
"""Whether `_conv` runs oneDNN's convolutions with the activation or the residual fused."""


def _conv(
    conv: nn.Conv2d, x: Tensor, activation: str = "none", residual: Tensor | None = None
) -> Tensor:
    """`conv(x)`, then `activation` ("none", "relu" or "swish") or `+ residual`, channels-last.

    oneDNN (torch's `mkldnn` operators, those `torch.compile` emits for the same graph) applies
    the activation or the sum to each output tile while it is in cache: one pass over the
    output instead of two or three, and its 1x1 kernels beat the matrix products `_pointwise`
    uses (1.15-1.3x less CPU for the whole network, measured on 4 windows a call). Without
    oneDNN, the same in plain torch.
    """
    if not FUSED:
        pointwise = conv.kernel_size == (1, 1) and conv.stride == (1, 1)
        y = _pointwise(conv, x) if pointwise else conv(x)
        if residual is not None:
            return y.add_(residual)
        if activation == "relu":
            return torch.relu_(y)
        return _swish(y) if activation == "swish" else y
    arguments = (list(conv.padding), list(conv.stride), list(conv.dilation), conv.groups)
    out: Tensor
    if residual is not None:
        out = torch.ops.mkldnn._convolution_pointwise.binary(
            x, residual, conv.weight, conv.bias, *arguments, "add", None, None, [], None
        )
    else:
        out = torch.ops.mkldnn._convolution_pointwise(
            x, conv.weight, conv.bias, *arguments, activation, [], None
        )
    return out


class Block(nn.Module):
    """Expand 1x1, swish, depthwise 3x3, swish, squeeze-and-excite, project 1x1, residual."""

    def __init__(self, inputs: int, width: int, expanded: int, squeeze: int, first: bool) -> None:
        super().__init__()
        self.first = first
        self.expand = nn.Conv2d(inputs, expanded, 1)
        # A stage's first block pads one pixel all round by hand and strides 2 (VALID); the
        # others use SAME, which for a 3x3 stride-1 kernel is the same one pixel.
        self.depthwise = nn.Conv2d(
            expanded, expanded, 3, stride=2 if first else 1, padding=1, groups=expanded
        )
        self.reduce = nn.Conv2d(expanded, squeeze, 1) if squeeze else None
        self.restore = nn.Conv2d(squeeze, expanded, 1) if squeeze else None
        self.project = nn.Conv2d(expanded, width, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = _conv(self.expand, x, "swish")
        y = _conv(self.depthwise, y, "swish")
        if self.reduce is not None and self.restore is not None:  # squeeze and excite
            squeezed = _swish(_pointwise(self.reduce, y.mean((2, 3), keepdim=True)))
            y = y.mul_(torch.sigmoid(_pointwise(self.restore, squeezed)))
        return _conv(self.project, y, residual=None if self.first else x)


class Birdnet(nn.Module):
    """BirdNET GLOBAL 6K V2.4: `(n, 144000)` 48-kHz windows -> `(n, 6522)` logits.

    Holds only immutable weights; any number of threads may call it at once.

    >>> model = Birdnet.load(Path("BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite"))  # doctest: +SKIP
    >>> model(torch.zeros(2, WINDOW)).shape  # doctest: +SKIP
    torch.Size([2, 6522])
    """

    post_scale: Tensor
    post_shift: Tensor

    def __init__(self, classes: int = 6522) -> None:
        super().__init__()
        self.spectrogram = BirdnetSpectrogram()
        self.stem = nn.Conv2d(2, 24, (4, 8), stride=2)
        self.pool_mix = nn.Conv2d(48, 24, 1)
        blocks: list[Block] = []
        inputs = 24
        for width, count, expanded, squeeze in STAGES:
            for i in range(count):
                blocks.append(Block(inputs, width, expanded, squeeze, first=i == 0))
                inputs = width
        self.blocks = nn.ModuleList(blocks)
        self.register_buffer("post_scale", torch.zeros(192))
        self.register_buffer("post_shift", torch.zeros(192))
        self.head = nn.Conv2d(192, 1024, 3)
        self.dense = nn.Linear(1024, classes)

    def early(self, windows: Tensor) -> Tensor:
        """The spectrogram, stem, pooling and the first `EARLY_BLOCKS` blocks: `(n, 72, 12, 32)`."""
        x: Tensor = self.spectrogram(windows)
        x = _conv(self.stem, _same(x, (4, 8), (2, 2)), "relu")
        pixels = x.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)
        n, height, width, channels = pixels.shape
        # Pools of 1 x 2, stride 2, as elementwise ops on the two halves of each pair (a
        # reduction over an axis of 2 took 3.6x as long): the same numbers, `mean` is `sum / 2`.
        pairs = pixels.reshape(n, height, width // 2, 2, channels)
        left, right = pairs[:, :, :, 0], pairs[:, :, :, 1]
        pooled = torch.cat([torch.maximum(left, right), (left + right) * 0.5], dim=3)
        x = _conv(self.pool_mix, pooled.permute(0, 3, 1, 2))
        for block in self.blocks[:EARLY_BLOCKS]:
            x = block(x)
        return x

    def embeddings(self, early: Tensor) -> Tensor:
        """The 1,024 features before the dense layer, from `early`'s output."""
        x = early
        for block in self.blocks[EARLY_BLOCKS:]:
            x = block(x)
        x = torch.relu(x * self.post_scale[:, None, None] + self.post_shift[:, None, None])
        features: Tensor = _conv(self.head, x, "relu").mean((2, 3))
        return features

    def forward(self, windows: Tensor) -> Tensor:
        logits: Tensor = self.dense(self.embeddings(self.early(windows)))
        return logits

    @classmethod
    def load(cls, tflite: Path, cache: Path | None = None) -> Birdnet:
        """The network with weights converted from `tflite`, in eval mode, frozen; the converted
        state dict is kept under `cache` (default `cache_dir()`), named by the source's sha256."""
        folder = cache or cache_dir()
        cached = folder / f"birdnet-{sha256_of(tflite)}-{CONVERSION}.pt"
        model = cls()
        if cached.is_file():
            state = torch.load(cached, map_location="cpu", weights_only=True)
        else:
            state = convert(read_graph(tflite), _conv_names())
            folder.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")
            torch.save(state, partial)
            partial.replace(cached)
        model.load_state_dict(state)
        frozen(model)
        model.spectrogram.fold()
        for module in model.modules():  # as the activations are: no conversion per call
            if isinstance(module, nn.Conv2d):
                module.weight.data = module.weight.contiguous(memory_format=torch.channels_last)
        return model


def _conv_names() -> list[str]:
    """The state-dict names of the convolutions in the graph's execution order."""
    names = ["stem", "pool_mix"]
    index = 0
    for _, count, _, excite in STAGES:
        for _ in range(count):
            block = f"blocks.{index}"
            names += [f"{block}.expand", f"{block}.depthwise"]
            names += [f"{block}.reduce", f"{block}.restore"] if excite else []
            names.append(f"{block}.project")
            index += 1
    return [*names, "head"]

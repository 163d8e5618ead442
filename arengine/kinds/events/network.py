"""The `events` kind: Google's YAMNet, 521 AudioSet sound classes per 0.975-s window.

The network is the TFLite graph of `yamnet_audio_classifier_with_metadata.tflite` re-declared
in torch, with the constants `models/events/convert_yamnet.py` read from it. Per window of 15,600
samples at 16 kHz:

- log-mel patch, as the graph computes it: 96 frames of 400 samples every 160 (a periodic Hann
  window), a 512-point FFT's magnitude, the graph's 64-band mel matrix, `log(mel + 0.001)`;
- a MobileNet-v1 body: a 3x3 convolution (stride 2), then 13 pairs of a 3x3 depthwise and a 1x1
  convolution, each with ReLU6 and TensorFlow's "same" padding; mean over time and frequency;
  a 1024 x 521 dense layer and a sigmoid.

The graph is quantised: int8 weights with per-channel scales, and every activation rounded to int8
with its own scale and zero point. The port runs the convolutions as oneDNN's int8 kernels on the
same grids (`_Int8Layer`), as the runtime does; without oneDNN, in float on the integer grids
(`_Layer`, each activation rounded to the same int8 grid). Either way its scores follow the
runtime's to a step of its output grid (1/256) on most windows, rather than drifting by the
quantisation error that a plain float network would accumulate over 28 layers.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import Tensor, nn

SAMPLE_RATE = 16000
WINDOW = 15600
"""Samples per window: 0.975 s, 96 frames of 10 ms plus the last frame's 15 ms tail."""
FRAME = 400
FRAME_HOP = 160
N_FFT = 512
N_CLASSES = 521
HOP_S = 0.48
"""YAMNet's own hop between windows; a manifest's `[model] hop_s` changes it."""
LAYERS = 27
"""Convolutions: the first, then 13 depthwise-pointwise pairs."""
CHUNK_WINDOWS = 64
"""Windows per forward call: a whole segment at the default hop and segment length (64), which
amortises torch's per-layer overhead and reads each layer's weights once a segment (3% less CPU
than 32, 10% less than 16); the int8 path's widest activations (64 x 64 x 48 x 32 bytes) stay
under 8 MiB, jemalloc's oversize threshold (see `music.CHUNK_PATCHES`)."""


MEL_FRAMES = 512
"""10-ms frames per pass of the log-mel: its FFT's temporaries (about 1 MiB) stay in the L2 cache
and are reused by the allocator, where a whole segment's (3,120 frames, 6 MiB) were 4x slower."""


class _Quant(nn.Module):
    """Round to an int8 grid and back: `clamp(round(x / scale) + zero, -128, 127)`, dequantised.

    Folding ReLU6 into the clamp is what the runtime does too: its activations' zero point is
    -128 and their scale 6/255, so the grid spans exactly 0 to 6.
    """

    def __init__(self, quant: Tensor) -> None:
        super().__init__()
        scale, zero = float(quant[0]), float(quant[1])
        self.scale = scale
        self.inverse = 1.0 / scale
        self.low = -128.0 - zero
        self.high = 127.0 - zero

    def forward(self, x: Tensor) -> Tensor:
        """In place: `x` is always a fresh intermediate of the caller's forward pass."""
        return x.mul_(self.inverse).round_().clamp_(self.low, self.high).mul_(self.scale)


class Yamnet(nn.Module):
    """`(windows, 15600)` samples in [-1, 1] -> `(windows, 521)` independent class scores.

    Holds only immutable weights; any number of threads may call it at once.

    >>> model = Yamnet.load(Path("models/events/yamnet.pt"))
    >>> model(torch.zeros(2, WINDOW)).shape
    torch.Size([2, 521])
    """

    window: Tensor
    mel: Tensor
    mel_offset: Tensor

    def __init__(self, state: dict[str, Tensor]) -> None:
        super().__init__()
        self.register_buffer("window", state["window"].float())
        self.register_buffer("mel", state["mel"].float().T.contiguous())
        self.register_buffer("mel_offset", state["mel_offset"].float())
        self.input_quant = _Quant(state["input.quant"])
        self.convs = nn.ModuleList()
        self.quants = nn.ModuleList()
        self._layers: list[_Layer] = []
        self._int8: list[_Int8Layer] = []
        scale = self.input_quant.scale  # of this layer's input grid
        source = self.input_quant
        for i in range(LAYERS):
            prefix = f"layers.{i}"
            weight = state[f"{prefix}.weight"].double()
            weight *= state[f"{prefix}.weight_scale"].double().reshape(-1, 1, 1, 1)
            channels = weight.shape[0]
            depthwise = bool(state[f"{prefix}.depthwise"])
            stride = int(state[f"{prefix}.stride"])
            conv = nn.Conv2d(
                channels if depthwise else weight.shape[1],
                channels,
                weight.shape[2],
                stride=stride,
                padding=1 if weight.shape[2] > 1 and stride == 1 else 0,
                groups=channels if depthwise else 1,
            )
            quant = _Quant(state[f"{prefix}.quant"])
            # On the integer grids: the input's scale and the output's inverse folded in.
            weight *= scale * quant.inverse
            conv.weight = nn.Parameter(weight.float().contiguous(memory_format=torch.channels_last))
            conv.bias = nn.Parameter((state[f"{prefix}.bias"].double() * quant.inverse).float())
            self.convs.append(conv)
            self.quants.append(quant)
            self._layers.append(_Layer(conv, quant.low, quant.high))
            if INT8 and int8_sums_exact():  # oneDNN's operators exist only with oneDNN
                self._int8.append(_Int8Layer(state, prefix, conv, source, quant))
            scale, source = quant.scale, quant
        self.last_scale = scale
        self.pool_quant = _Quant(state["pool.quant"])
        self.fc = nn.Linear(1024, N_CLASSES)
        self.fc.weight = nn.Parameter(state["fc.weight"].float() * state["fc.weight_scale"].float())
        self.fc.bias = nn.Parameter(state["fc.bias"].float())
        self.fc_quant = _Quant(state["fc.quant"])
        self.score_quant = _Quant(state["score.quant"])

    def log_mel(self, samples: Tensor) -> Tensor:
        """`(..., samples)` -> `(..., frames, 64)`: a frame of 400 samples every 160, on the
        input's int8 grid.

        `MEL_FRAMES` frames at a time, so that the FFT's temporaries stay in cache and the
        allocator reuses them; the magnitude from the real and imaginary parts' squares (as
        `abs` would, several times faster)."""
        frames = samples.unfold(-1, FRAME, FRAME_HOP)
        rows = frames.reshape(-1, FRAME)  # a view for one stream of samples
        mel = torch.empty(len(rows), self.mel.shape[1])
        for start in range(0, len(rows), MEL_FRAMES):
            spectrum = torch.fft.rfft(rows[start : start + MEL_FRAMES] * self.window, N_FFT)
            parts = torch.view_as_real(spectrum)
            real, imaginary = parts[..., 0], parts[..., 1]
            magnitude = (real * real).addcmul_(imaginary, imaginary).sqrt_()
            torch.matmul(magnitude, self.mel, out=mel[start : start + MEL_FRAMES])
        grid: Tensor = self.input_quant(mel.add_(self.mel_offset).log_())
        return grid.reshape(*frames.shape[:-1], -1)

    def patches(self, windows: Tensor) -> Tensor:
        """`(n, 15600)` samples -> `(n, 1, 96, 64)` log-mel patches."""
        return self.log_mel(windows).unsqueeze(1)

    def forward(self, windows: Tensor) -> Tensor:
        return self.body(self.patches(windows))

    def body(self, patches: Tensor) -> Tensor:
        """`(n, 1, 96, 64)` patches -> `(n, 521)` scores."""
        x = patches.mul(self.input_quant.inverse).round_()  # the input's int8 grid, as integers
        if INT8 and self._int8:
            u = x.sub_(self.input_quant.low).to(torch.uint8)
            u = u.contiguous(memory_format=torch.channels_last)
            for int8 in self._int8:
                u = int8(u)
            x = u.float().sub_(self._int8[-1].output_zero)
        else:
            for layer in self._layers:
                x = layer(x)
        pooled = self.pool_quant(x.mean(dim=(2, 3)).mul_(self.last_scale))
        scores: Tensor = self.score_quant(torch.sigmoid(self.fc_quant(self.fc(pooled))))
        return scores

    @classmethod
    def load(cls, path: Path) -> Yamnet:
        """The network with the converted weights, in eval mode, frozen."""
        model = cls(torch.load(path, map_location="cpu", weights_only=True))
        model.eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return model


FUSED: bool = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
"""Whether `_Layer` runs oneDNN's convolutions with the clamp fused."""


class _Layer:
    """One convolution on integer grids: its input is the previous activation's int8 values
    (`q`, with the dequantised value `q * scale`), its weights carry that scale and the inverse
    of its own output's, so `round(clamp(conv(q), low, high))` is its output's int8 values.

    Clamping before rounding is the same as after, the bounds being whole numbers; that lets
    oneDNN apply the clamp (its `hardtanh`, ReLU6 included) to each output tile in cache, one
    pass over the output fewer, and `round_` is the only other pass. The quantiser's two
    multiplications are folded into the weights at load. Without oneDNN, the same in plain
    torch.
    """

    def __init__(self, conv: nn.Conv2d, low: float, high: float) -> None:
        self.conv = conv
        self.low, self.high = low, high
        self.arguments = (list(conv.padding), list(conv.stride), list(conv.dilation), conv.groups)
        # TensorFlow's "same" for a 3x3 kernel at stride 2 on the even sizes this network has:
        # 0 before and 1 after, by hand (at stride 1 it is the convolution's own 1 each side).
        # Zero is the activations' real zero, and 0 on every integer grid.
        self.pad = conv.kernel_size[0] > 1 and conv.stride[0] == 2

    def __call__(self, x: Tensor) -> Tensor:
        if self.pad:
            x = nn.functional.pad(x, (0, 1, 0, 1))
        if FUSED:
            out: Tensor = torch.ops.mkldnn._convolution_pointwise(
                x.contiguous(memory_format=torch.channels_last),
                self.conv.weight,
                self.conv.bias,
                *self.arguments,
                "hardtanh",
                [self.low, self.high],
                None,
            )
        else:
            out = self.conv(x).clamp_(self.low, self.high)
        return out.round_()


INT8: bool = FUSED
"""Whether `Yamnet.body` may run the convolutions as oneDNN's int8 kernels (`_Int8Layer`): it
does where they also sum exactly (`int8_sums_exact`)."""


@functools.cache
def int8_sums_exact() -> bool:
    """Whether oneDNN's int8 convolutions sum u8 x s8 products exactly on this CPU.

    With VNNI or AMX they do (int32 sums). Without them (AVX2, AVX-512 before VNNI, or
    `ONEDNN_MAX_CPU_ISA` capping the kernels there) pairs of products are added in int16 and
    saturate: a loud input's activations (255) against large weights (127) lose half their sum,
    and on AVX-512 without VNNI the events scores moved by up to 17 steps of their grid on
    Debian's sounds. Probed once with exactly such a convolution: 64 inputs of 255 against
    weights of 127, -127, -128 and 127 alternating, and a ramp summing to 0, each channel
    scaled to land on a whole output step.
    """
    channels = 64
    u = torch.full((1, channels, 1, 1), 255, dtype=torch.uint8)
    u = u.contiguous(memory_format=torch.channels_last)
    weight = torch.full((4, channels, 1, 1), 127, dtype=torch.int8)
    weight[1] = -127
    weight[2, ::2] = -128
    weight[3] = (torch.arange(channels) * 2 - 63).to(torch.int8).reshape(channels, 1, 1)
    sums = 255 * weight.double().sum(dim=(1, 2, 3))
    weight_scale = 100.0 / sums.abs().clamp(min=1)
    expected = (sums * weight_scale).round() + 128
    one = [1, 1]
    packed = torch.ops.onednn.qconv_prepack(weight, weight_scale, 1.0, 0, one, [0, 0], one, 1, None)
    out = torch.ops.onednn.qconv2d_pointwise(
        u,
        1.0,
        0,
        packed,
        weight_scale,
        torch.zeros(4, dtype=torch.int64),
        torch.zeros(4),
        one,
        [0, 0],
        one,
        1,
        1.0,
        128,
        None,
        "none",
        [],
        None,
    )
    return bool(torch.equal(out.flatten().double(), expected))


class _Int8Layer:
    """One convolution as the runtime computes it: uint8 activations, int8 weights with their
    per-channel scales, int32 sums, the result requantised to the output's uint8 grid.

    The graph's int8 activations shifted by 128 are oneDNN's uint8 ones (zero point `zero +
    128`; ReLU6 is the saturation at 0 and 255 of its output grid, whose zero point is 0). Its
    VNNI kernels do 4 int8 products where float does one: 4.6x less CPU for the body than
    `_Layer` in float (measured on 32 windows, one thread). oneDNN requantises as `(acc * s_in
    * s_w + bias) / s_out`, XNNPACK (the runtime's default) as `(acc + bias) * scale` rounded
    once: fed the same input, one value in about 700,000 lands one step off (BENCHMARKS.md).
    """

    def __init__(
        self,
        state: dict[str, Tensor],
        prefix: str,
        conv: nn.Conv2d,
        source: _Quant,
        quant: _Quant,
    ) -> None:
        self.input_scale, self.input_zero = source.scale, round(-source.low)
        self.output_scale, self.output_zero = quant.scale, round(-quant.low)
        self.weight_scale = state[f"{prefix}.weight_scale"].double()
        self.weight_zero = torch.zeros(len(self.weight_scale), dtype=torch.int64)
        self.bias = state[f"{prefix}.bias"].float()
        self.stride, self.padding = list(conv.stride), list(conv.padding)
        self.groups = conv.groups
        self.pad = conv.kernel_size[0] > 1 and conv.stride[0] == 2  # see `_Layer`
        self.weight = torch.ops.onednn.qconv_prepack(
            state[f"{prefix}.weight"].to(torch.int8),
            self.weight_scale,
            self.input_scale,
            self.input_zero,
            self.stride,
            self.padding,
            [1, 1],
            self.groups,
            None,
        )

    def __call__(self, u: Tensor) -> Tensor:
        if self.pad:  # with the zero point: the real zero
            u = nn.functional.pad(u, (0, 1, 0, 1), value=self.input_zero)
            u = u.contiguous(memory_format=torch.channels_last)
        out: Tensor = torch.ops.onednn.qconv2d_pointwise(
            u,
            self.input_scale,
            self.input_zero,
            self.weight,
            self.weight_scale,
            self.weight_zero,
            self.bias,
            self.stride,
            self.padding,
            [1, 1],
            self.groups,
            self.output_scale,
            self.output_zero,
            None,
            "none",
            [],
            None,
        )
        return out

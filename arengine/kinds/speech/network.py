"""The speech model: silero-vad's 16 kHz network, rewritten to be stateless and segment-at-a-time.

silero-vad's own TorchScript model keeps its LSTM state and audio context on the module, so two
threads sharing it corrupt each other's results, and it is driven one 32 ms window per Python call.
Here the state is a local of `forward`: the STFT and the conv encoder run over every window of the
segment at once, and only the LSTM walks the sequence, in one call. silero's STFT is a 258x256 conv
whose basis is a periodic-Hann-windowed DFT, so it is computed as `torch.fft.rfft` of windowed
frames, and the encoder's short convs as matrix products: 2x faster on one core for the same
probabilities (within 1e-7 of `tests.kinds.speech.reference`; BENCHMARKS.md has the profile).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

SAMPLE_RATE = 16000
WINDOW = 512
"""Samples per output probability (32 ms at 16 kHz)."""
CONTEXT = 64
"""Samples of the previous window that every window sees (silero-vad's audio context)."""
_N_FFT = 256
_HOP = 128
_BINS = _N_FFT // 2 + 1
MAX_BATCH = 16
"""Most segments per forward call a manifest may ask for (`[model] batch`)."""
_CHUNK_WINDOWS = 256
"""Windows per STFT-and-encoder step (about 1 MiB of frames)."""
_HANN_TOLERANCE = 1e-6
"""How far silero's STFT basis may be from a periodic-Hann-windowed DFT (6.2.3: 2.1e-7)."""


def read_silero_weights(archive: Path) -> dict[str, Tensor]:
    """silero-vad's TorchScript weights (`silero_vad.jit`) under its network's layer names.

    Names: `stft_conv.weight` (258, 1, 256), `conv1`..`conv4` and `final_conv` (`.weight`,
    `.bias`), `lstm.weight_ih_l0` and the other LSTM tensors, as `nn.Conv1d`/`nn.LSTM` name them.
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
    return {ours: packaged[theirs].detach().clone() for ours, theirs in names.items()}


def hann_dft_distance(basis: Tensor) -> float:
    """Largest difference between a (258, 1, 256) STFT basis and the periodic-Hann-windowed DFT."""
    time = torch.arange(_N_FFT, dtype=torch.float64)
    angle = 2 * torch.pi * torch.arange(_BINS, dtype=torch.float64)[:, None] * time / _N_FFT
    window = torch.hann_window(_N_FFT, periodic=True, dtype=torch.float64)
    expected = torch.cat([torch.cos(angle) * window, -torch.sin(angle) * window])
    return float((basis.to(torch.float64).reshape(2 * _BINS, _N_FFT) - expected).abs().max())


def _taps(weight: Tensor, *taps: int) -> Tensor:
    """Conv1d taps stacked for `rows @ stacked`: (len(taps) * in_channels, out_channels)."""
    return torch.cat([weight[:, :, tap].t() for tap in taps]).contiguous()


class SpeechModel(nn.Module):
    """Per-window speech probabilities for whole segments; holds only immutable weights.

    silero-vad's network, computed as an FFT and matrix products (the reference, with its STFT as
    a conv, is `tests.kinds.speech.reference`; the two agree within 1e-5).
    Input: `(batch, CONTEXT + n * WINDOW)` float32 samples at 16 kHz, the first `CONTEXT` samples
    being the audio just before the segment (zeros at the start of a recording).
    Output: `(batch, n)` probabilities, one per 512-sample window.

    >>> model = SpeechModel.from_silero_package()
    >>> model(torch.zeros(1, CONTEXT + 10 * WINDOW)).shape
    torch.Size([1, 10])
    """

    hann: Tensor
    conv1_first: Tensor
    conv1_inner: Tensor
    conv1_last: Tensor
    conv1_bias: Tensor
    conv2_first: Tensor
    conv2_inner: Tensor
    conv2_bias: Tensor
    conv3_first: Tensor
    conv3_bias: Tensor
    conv4_centre: Tensor
    conv4_bias: Tensor
    out_weight: Tensor
    out_bias: Tensor

    def __init__(self, weights: Mapping[str, Tensor]) -> None:
        super().__init__()
        distance = hann_dft_distance(weights["stft_conv.weight"])
        if distance > _HANN_TOLERANCE:
            raise ValueError(
                f"the STFT basis is not a periodic-Hann-windowed DFT (max difference {distance:.1e}"
                f", allowed {_HANN_TOLERANCE:.0e}): these silero-vad weights need another model"
            )
        derived = {
            "hann": torch.hann_window(_N_FFT, periodic=True),
            "conv1_first": _taps(weights["conv1.weight"], 1, 2),
            "conv1_inner": _taps(weights["conv1.weight"], 0, 1, 2),
            "conv1_last": _taps(weights["conv1.weight"], 0, 1),
            "conv2_first": _taps(weights["conv2.weight"], 1, 2),
            "conv2_inner": _taps(weights["conv2.weight"], 0, 1, 2),
            "conv3_first": _taps(weights["conv3.weight"], 1, 2),
            "conv4_centre": _taps(weights["conv4.weight"], 1),
            "out_weight": weights["final_conv.weight"].reshape(1, 128).t().contiguous(),
            "out_bias": weights["final_conv.bias"],
        }
        for i in range(1, 5):
            derived[f"conv{i}_bias"] = weights[f"conv{i}.bias"]
        # Plain attributes, not buffers: every buffer read goes through nn.Module.__getattr__, which
        # held the GIL for 12% of a loaded server's GIL-holding samples (loadtests/gil_profile.py).
        for name, tensor in derived.items():
            object.__setattr__(self, name, tensor.detach().clone())
        object.__setattr__(self, "_encoder", [getattr(self, name) for name in _ENCODER])
        self.lstm = nn.LSTM(128, 128, batch_first=True)
        prefix = "lstm."
        self.lstm.load_state_dict(
            {key[len(prefix) :]: value for key, value in weights.items() if key.startswith(prefix)}
        )
        self.eval()
        self.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        lstm = self.lstm
        weights = [lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0]
        sizes = (WINDOW, CONTEXT, _CHUNK_WINDOWS)
        probabilities: Tensor = _probabilities(
            x, self.hann, self._encoder, weights, self.out_weight, self.out_bias, sizes
        )
        return probabilities

    def spectrum(self, x: Tensor, n: int) -> Tensor:
        """`_spectrum` with this model's window: `(batch * n, 4 * 129)` STFT magnitudes."""
        magnitudes: Tensor = _spectrum(x, n, self.hann)
        return magnitudes

    def encode(self, spectrum: Tensor) -> Tensor:
        """`_encode` with this model's encoder: `(rows, 128)`."""
        encoded: Tensor = _encode(spectrum, self._encoder)
        return encoded

    @classmethod
    def from_silero_package(cls) -> SpeechModel:
        """The model with the weights of the installed `silero-vad` package."""
        return cls(read_silero_weights(silero_package_archive()))

    @classmethod
    def from_silero_archive(cls, archive: Path) -> SpeechModel:
        """The model with the weights of silero-vad's TorchScript model (`silero_vad.jit`).

        Manifests may point only at the copy inside the installed package, never at a user path.
        """
        return cls(read_silero_weights(archive))


_ENCODER = (
    "conv1_bias", "conv1_first", "conv1_inner", "conv1_last", "conv2_bias", "conv2_first",
    "conv2_inner", "conv3_bias", "conv3_first", "conv4_bias", "conv4_centre",
)  # fmt: skip
"""The encoder's tensors in the order `_encode` takes them."""


# The forward is TorchScript: one call runs every op of a segment with the GIL released. Called
# from Python, each of its ~75 ops a segment released the GIL and took it back, so with the
# server's other threads wanting it (the event loop, the taggers, the other engine threads) an
# op could wait for the interpreter's switch interval before it ran: beside one thread spinning
# in Python, a 30-s segment took 1,500 ms as Python calls and 96 ms as one scripted call (16 ms
# alone either way; the same probabilities to the bit).
@torch.jit.script
def _spectrum(x: Tensor, n: int, hann: Tensor) -> Tensor:
    """STFT magnitudes of every window: `(batch * n, 4 * 129)`, its four frames side by side.

    Window i is x[512 i : 512 i + 576] reflect-padded by 64 on the right, framed at a hop of
    128: frames 0-2 lie in the stream and frame 3 ends in the reflection. All four are read
    straight from the stream, windowed and written once (no unfold, pad or conv copies).
    `x`: `(batch, CONTEXT + n * WINDOW)` or longer, each row's samples contiguous.
    """
    batch, row, start = x.shape[0], x.stride(0), x.storage_offset()
    frames = torch.empty([batch, n, 4, 256], dtype=x.dtype)
    inside = x.as_strided([batch, n, 3, 256], [row, 512, 128, 1], start)
    torch.mul(inside, hann, out=frames[:, :, :3])
    tail = x.as_strided([batch, n, 192], [row, 512, 1], start + 384)
    torch.mul(tail, hann[:192], out=frames[:, :, 3, :192])
    mirrored = x.as_strided([batch, n, 64], [row, 512, 1], start + 511).flip(2)
    torch.mul(mirrored, hann[192:], out=frames[:, :, 3, 192:])
    spectrum = torch.fft.rfft(frames.view(batch * n, 4, 256))
    magnitude = spectrum.real.square() + spectrum.imag.square()
    result: Tensor = magnitude.sqrt_().view(batch * n, 4 * 129)
    return result


@torch.jit.script
def _encode(spectrum: Tensor, w: list[Tensor]) -> Tensor:
    """conv1-4 with ReLUs, as matrix products over rows of (frame, channel): `(rows, 128)`;
    `w` holds the tensors named by `_ENCODER`, in that order.

    conv1 (k=3, pad 1) keeps 4 frames, conv2 and conv3 (stride 2) make 2 then 1, and conv4
    (k=3, pad 1) on a single frame uses only its centre tap. Each output frame is one product
    of the adjacent input frames it sees (a contiguous slice of the row) with those taps
    stacked: the zero-padding taps are never computed.
    """
    rows = spectrum.shape[0]
    h1 = torch.empty([rows, 4, 128], dtype=spectrum.dtype)
    torch.addmm(w[0], spectrum[:, :258], w[1], out=h1[:, 0])
    torch.addmm(w[0], spectrum[:, :387], w[2], out=h1[:, 1])
    torch.addmm(w[0], spectrum[:, 129:], w[2], out=h1[:, 2])
    torch.addmm(w[0], spectrum[:, 258:], w[3], out=h1[:, 3])
    flat = h1.relu_().view(rows, 512)
    h2 = torch.empty([rows, 2, 64], dtype=spectrum.dtype)
    torch.addmm(w[4], flat[:, :256], w[5], out=h2[:, 0])
    torch.addmm(w[4], flat[:, 128:], w[6], out=h2[:, 1])
    h3 = torch.addmm(w[7], h2.relu_().view(rows, 128), w[8]).relu_()
    return torch.addmm(w[9], h3, w[10]).relu_()


@torch.jit.script
def _probabilities(
    x: Tensor,
    hann: Tensor,
    encoder: list[Tensor],
    lstm: list[Tensor],
    out_w: Tensor,
    out_b: Tensor,
    sizes: tuple[int, int, int],
) -> Tensor:
    """`(batch, n)` probabilities of `(batch, CONTEXT + n * WINDOW)` samples (`SpeechModel`);
    `sizes` is `(WINDOW, CONTEXT, _CHUNK_WINDOWS)` (TorchScript reads no module constants)."""
    window, context, chunk = sizes
    batch = x.shape[0]
    n = (x.shape[1] - context) // window
    x = x.contiguous()
    encoded = torch.empty([batch, n, 128], dtype=x.dtype)
    # The STFT and the encoder go a chunk of windows at a time: their temporaries stay in the
    # core's L2 cache and under jemalloc's 8 MiB oversize threshold, whose allocations are
    # returned to the kernel and page-faulted back in on every call (measured: 2270 faults and
    # +50% time per 30 s segment in one piece).
    step = max(1, chunk // batch)
    for first in range(0, n, step):
        count = min(step, n - first)
        part = x[:, first * window : first * window + context + count * window]
        rows = _encode(_spectrum(part, count, hann), encoder)
        encoded[:, first : first + count] = rows.view(batch, count, 128)
    zeros = torch.zeros([1, batch, 128], dtype=x.dtype)
    # torch.lstm(input, (h0, c0), [w_ih, w_hh, b_ih, b_hh], bias, layers, dropout, train,
    # bidirectional, batch_first): nn.LSTM's own call.
    h, _, _ = torch.lstm(encoded, [zeros, zeros], lstm, True, 1, 0.0, False, False, True)
    return torch.sigmoid(torch.relu(h) @ out_w + out_b).squeeze(2)


def silero_package_archive() -> Path:
    """The installed `silero-vad` package's TorchScript model."""
    from importlib.resources import files

    return Path(str(files("silero_vad.data") / "silero_vad.jit"))

"""Spotify's basic-pitch network (Bittner et al., ICASSP 2022, Apache-2.0) as a plain torch module.

The network is re-declared from basic-pitch 0.4.0's `models.py` and `layers/nnaudio.py` (its ONNX
export `nmp.onnx` is the reference), with the weights taken from that ONNX file's initializers by
`models/notes/convert_basic_pitch.py`:

1. a constant-Q transform (nnAudio's CQT2010v2): one 36-bin octave kernel (256 taps) applied to the
   signal, then to the signal low-passed and halved 8 times, 9 octaves from 27.5 Hz, bottom 309
   bins kept, hop 256 samples (86.13 frames/s at 22.05 kHz);
2. power in dB, rescaled to [0, 1] over each window (min and max of the whole window), then the
   folded batch norm (one scale and shift);
3. harmonic stacking: the CQT shifted by 0.5, 1, 2 .. 7 harmonics (8 channels, 264 bins);
4. a small CNN with three heads: contour (264 bins, 3 per semitone), note and onset (88 keys,
   A0 .. C8). Batch norms are folded into the convolutions, as in the ONNX graph.

Some of it is computed another way than the graph's, for speed (BENCHMARKS.md, "Where the notes
forward goes"): the contour head's 3x39 convolution by FFT over the CQT, the one-channel
convolutions one kernel row at a time, and frames a caller drops are not computed. The sums are
the same, in another order: activations within 1.3e-6 of the direct convolutions.

The module holds only immutable weights: every engine thread can call it at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional

SAMPLE_RATE = 22050
WINDOW = 43844
"""Samples per network call: 2 s minus one hop, as basic-pitch trained it."""
HOP = 256
FRAMES = 172
"""Output frames per window; frame `j` is centred on the window's sample `j * 256`."""
KEYS = 88
LOWEST_MIDI = 21
"""A0, the note of key 0."""
CONTOUR_BINS = 264
_OCTAVES = 9
_BINS_PER_OCTAVE = 36
_CQT_BINS = 309
_SHIFTS = (-36, 0, 36, 57, 72, 84, 93, 101)
"""Bins to shift for harmonics 0.5, 1, 2 .. 7: `round(36 * log2(h))`."""
_EDGE = 19
"""Half the contour convolution's 39 bins."""
_STRIDE = 3
"""The note and onset heads' stride in frequency: 3 contour bins a key."""
_FFT_BINS = 384
"""FFT length of the contour convolution over the CQT (see `_over_cqt`)."""
_LEFT = tuple(h for h, shift in enumerate(_SHIFTS) if shift > 0)
"""Stack channels whose zero padding below bin 0 stands where the CQT has bins."""
_RIGHT = tuple(h for h, shift in enumerate(_SHIFTS) if shift + CONTOUR_BINS < _CQT_BINS)
"""Stack channels whose zero padding above bin 263 stands where the CQT has bins."""

SHAPES: dict[str, tuple[int, ...]] = {
    "cqt_real": (36, 1, 256),
    "cqt_imag": (36, 1, 256),
    "lowpass": (1, 1, 256),
    "cqt_scale": (_CQT_BINS,),
    "norm": (2,),
    "contour1.weight": (8, 8, 3, 39),
    "contour1.bias": (8,),
    "contour2.weight": (1, 8, 5, 5),
    "contour2.bias": (1,),
    "note1.weight": (32, 1, 7, 7),
    "note1.bias": (32,),
    "note2.weight": (1, 32, 7, 3),
    "note2.bias": (1,),
    "onset1.weight": (32, 8, 5, 5),
    "onset1.bias": (32,),
    "onset2.weight": (1, 33, 3, 3),
    "onset2.bias": (1,),
}
"""Every tensor of the weights file and its shape."""


def _smooth(n: int) -> int:
    """The least 5-smooth number (factors 2, 3, 5 only) >= n: an FFT size that is fast."""
    while True:
        rest = n
        for factor in (2, 3, 5):
            while rest % factor == 0:
                rest //= factor
        if rest == 1:
            return n
        n += 1


def _over_cqt(weight: Tensor) -> Tensor:
    """The `(8, 8, 3, 39)` contour convolution over the stack as `(3, 8, 1, 193)` spectra of one
    convolution over the CQT. Channel `h` of the stack is the CQT shifted by `_SHIFTS[h]` bins, so
    tap `k` of channel `h` reads CQT bin `f + k - 19 + _SHIFTS[h]`: the channels' taps add up to
    one kernel of 176 offsets (-55 .. 120), exact wherever all 39 taps stay inside the stack's 264
    bins (outputs 19 .. 244; `_contour_hidden` corrects the others). 384 bins hold the CQT's 309
    and that reach from any of the 264 outputs without wrapping around. Summed in float64."""
    channels, _, rows, taps = weight.shape
    kernel = torch.zeros(channels, rows, _FFT_BINS, dtype=torch.float64)
    for h, shift in enumerate(_SHIFTS):
        for k in range(taps):
            # A cross-correlation's offset `d` is the circular convolution's tap `-d`.
            kernel[:, :, -(k - taps // 2 + shift) % _FFT_BINS] += weight[:, h, :, k].double()
    spectrum: Tensor = torch.fft.rfft(kernel)
    return spectrum.to(torch.complex64).transpose(0, 1).unsqueeze(2).contiguous()


def _cut(x: Tensor, have: int, want: int, reach: int) -> tuple[Tensor, int]:
    """The frames of `x` (time second to last, `have` frames left out at either end) that a
    convolution reaching `reach` frames either way needs for outputs with `want` left out, and
    the zero padding in time it needs: frames beyond the window's are zeros, as in "same"."""
    need = max(0, want - reach)
    cut = need - have
    return x[..., cut : x.shape[-2] - cut, :], reach - (want - need)


def _beyond(cqt: Tensor, channels: tuple[int, ...], first: int, zeros: tuple[int, int]) -> Tensor:
    """Stack channels `channels` over the 19 bins from `first`, where the stack is cut off (bins
    below 0 or above 263), as if it were not: the CQT's bins, shifted (zero beyond the CQT's
    own 309); `zeros` bins of zeros added below and above. `(windows, channels, time, bins)`
    channels-last."""
    low, high = _EDGE - min(_SHIFTS), _EDGE + max(_SHIFTS) + CONTOUR_BINS - _CQT_BINS
    wide = functional.pad(cqt, (low, high))
    start = [low + first + _SHIFTS[h] for h in channels]
    strip = torch.stack([wide[..., b : b + _EDGE] for b in start], dim=-1)
    return functional.pad(strip, (0, 0, *zeros)).permute(0, 3, 1, 2)


def _channel(x: Tensor) -> Tensor:
    """`(windows, time, freq)` as one channel, `(windows, 1, time, freq)`, with channels-last
    strides. With `x[:, None]`'s, the note head's first convolution came out in the contiguous
    layout, and the next one's copy to channels-last took 10x as long as the convolution."""
    return x[..., None].permute(0, 3, 1, 2)


def _by_phases(weight: Tensor) -> Tensor:
    """A `(out, 1, rows, taps)` kernel of stride 3 in frequency as `(out, 3, rows, reach)` over
    the input's 3 phases (bins `3j`, `3j + 1`, `3j + 2` as 3 channels): tap `k` of output `j`
    reads padded bin `3j + k`, that is phase `k % 3` at `j + k // 3`."""
    out, _, rows, taps = weight.shape
    phased = torch.zeros(out, _STRIDE, rows, -(-taps // _STRIDE), dtype=weight.dtype)
    for k in range(taps):
        phased[:, k % _STRIDE, :, k // _STRIDE] = weight[:, 0, :, k]
    return phased.contiguous(memory_format=torch.channels_last)


def _by_rows(weight: Tensor) -> Tensor:
    """A `(1, channels, rows, taps)` kernel as `(rows, channels, 1, taps)`: a channel per row."""
    return weight[0].permute(1, 0, 2).unsqueeze(2).contiguous(memory_format=torch.channels_last)


class Activations(NamedTuple):
    """The three outputs, each `(windows, 172 - 2 * edge, bins)` in [0, 1] (see `forward`)."""

    note: Tensor
    onset: Tensor
    contour: Tensor


class BasicPitch(nn.Module):
    """basic-pitch's activations for `(windows, 43844)` float32 audio at 22.05 kHz.

    >>> model = BasicPitch.load(Path("models/notes/nmp.pt"))
    >>> model(torch.zeros(2, WINDOW)).note.shape
    torch.Size([2, 172, 88])
    """

    def __init__(self, weights: dict[str, Tensor]) -> None:
        super().__init__()
        for name, shape in SHAPES.items():
            tensor = weights[name]
            if tuple(tensor.shape) != shape:
                raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {shape}")
            tensor = tensor.to(torch.float32).contiguous()
            if tensor.dim() == 4:
                # oneDNN runs these convolutions about 5x faster channels-last (the 3x39 one:
                # 84 ms a window contiguous, 17 ms channels-last, one core).
                tensor = tensor.contiguous(memory_format=torch.channels_last)
            self.register_buffer(name.replace(".", "_"), tensor)
        # The onset head's weights for its two inputs apart (see `forward`).
        onset = self._w("onset2.weight")
        self.register_buffer("onset2_note", onset[:, :1].contiguous())
        self.register_buffer("onset2_rows", _by_rows(onset[:, 1:]))
        for layer in ("contour2", "note2"):
            self.register_buffer(f"{layer}_rows", _by_rows(self._w(f"{layer}.weight")))
        self.register_buffer("note1_phases", _by_phases(self._w("note1.weight")))
        kernels = torch.cat([self._w("cqt_real"), self._w("cqt_imag")])
        self.register_buffer("cqt_kernels", kernels)
        length = WINDOW
        for _ in range(_OCTAVES - 1):
            size = _smooth(length + 254)
            self.register_buffer(f"lowpass_{size}", self._lowpass(size), persistent=False)
            length //= 2
        contour = self._w("contour1.weight")
        self.register_buffer("contour1_spectrum", _over_cqt(contour))
        # The taps that reach the stack's zero padding, on the channels where the CQT has bins
        # there (see `_contour_hidden`).
        left, right = contour[:, _LEFT, :, :_EDGE], contour[:, _RIGHT, :, -_EDGE:]
        self.register_buffer("contour1_left", left.contiguous(memory_format=torch.channels_last))
        self.register_buffer("contour1_right", right.contiguous(memory_format=torch.channels_last))

    def _w(self, name: str) -> Tensor:
        tensor: Tensor = getattr(self, name.replace(".", "_"))
        return tensor

    def forward(self, audio: Tensor, edge: int = 0) -> Activations:
        """The activations of frames `edge .. 171 - edge` of each window: `(windows, 172 - 2 *
        edge, bins)`. The frames left out are not computed, nor the hidden frames only they
        need (`predict()` keeps the middle 142 frames, `edge=15`: a tenth of the forward)."""
        if not 0 <= edge < FRAMES // 2:
            raise ValueError(f"edge must be 0 .. {FRAMES // 2 - 1} frames, not {edge}")
        cqt = self.log_cqt(audio)
        # Frames left out at either end of each layer's output: those the next layers need, by
        # their kernels' reach in time (1 frame for the onset head's last convolution, ...).
        onset_in = max(0, edge - 1)
        note_in = max(0, onset_in - 3)
        contour_out = max(0, note_in - 3)
        contour_in = max(0, contour_out - 2)
        stack_in = max(0, onset_in - 2)
        # In-place ReLU: out of place, on these channels-last tensors, it took 27 ms a call for
        # 8 windows (a fifth of the forward); in place, under 1 ms.
        hidden = torch.relu_(self._contour_hidden(cqt, contour_in))
        cuts = (contour_in, contour_out)
        contours = torch.sigmoid_(self._by_rows(hidden, "contour2", (2, 2), cuts))
        cuts = (contour_out, note_in)
        hidden = torch.relu_(self._note_hidden(contours, cuts))
        notes = torch.sigmoid_(self._by_rows(hidden, "note2", (3, 1), (note_in, onset_in)))
        harmonics = self.harmonic_stack(cqt[:, stack_in : FRAMES - stack_in])
        cuts = (stack_in, onset_in)
        hidden = torch.relu_(self._conv(harmonics, "onset1", (2, 1), (1, 3), cuts))
        # The onset head's convolution over [note, hidden], as the sum of one over each: the
        # same sums without copying the 33 channels together (a tenth of the forward).
        onsets = self._by_rows(hidden, "onset2", (1, 1), (onset_in, edge))
        near, padding = _cut(_channel(notes), onset_in, edge, 1)
        onsets += functional.conv2d(near, self._w("onset2_note"), None, padding=(padding, 1))[:, 0]
        notes, contours = _cut(notes, onset_in, edge, 0)[0], _cut(contours, contour_out, edge, 0)[0]
        return Activations(notes, torch.sigmoid_(onsets), contours)

    def _conv(
        self,
        x: Tensor,
        layer: str,
        padding: tuple[int, int],
        stride: tuple[int, int],
        cuts: tuple[int, int],
    ) -> Tensor:
        """A Keras "same" convolution (batch norm folded in), on `(windows, ch, time, freq)`
        lacking `cuts[0]` frames at either end, for outputs lacking `cuts[1]`."""
        x, time = _cut(x, *cuts, padding[0])
        weight, bias = self._w(f"{layer}.weight"), self._w(f"{layer}.bias")
        return functional.conv2d(x, weight, bias, stride=stride, padding=(time, padding[1]))

    def _note_hidden(self, contours: Tensor, cuts: tuple[int, int]) -> Tensor:
        """The note head's 7x7 convolution (1 to 32 channels, stride 3 in frequency, "same"
        padding: 3 frames, 2 bins below) on `(windows, time, 264)` contours, frames cut as
        `_conv`'s: `(windows, 32, time, 88)` channels-last. Computed over the contours' 3 phases
        as a stride-1 convolution (`_by_phases`, the same products): oneDNN ran the one-channel
        strided one at a third of the core's peak (2026-11-28, AMD EPYC, one thread, 3 windows:
        1.84 against 0.74 ms)."""
        x, time = _cut(contours, *cuts, 3)
        kernel = self._w("note1_phases")
        width = _STRIDE * (KEYS - 1 + kernel.shape[-1])
        padded = functional.pad(x, (2, width - CONTOUR_BINS - 2))
        windows, frames = padded.shape[:2]
        # Bin 3j + p is phase p's column j: a view with channels-last strides, no copy.
        phases = padded.view(windows, frames, width // _STRIDE, _STRIDE).permute(0, 3, 1, 2)
        return functional.conv2d(phases, kernel, self._w("note1.bias"), padding=(time, 0))

    def _contour_hidden(self, cqt: Tensor, cut: int) -> Tensor:
        """The contour head's 3x39 convolution over the stack, bias added, `cut` frames left
        out at either end: `(windows, 8, 172 - 2 * cut, 264)` channels-last. It was 42% of the
        forward, oneDNN near the core's peak (2026-11-23, AMD EPYC, one thread, 6 windows: 35 ms
        of 83); as one convolution over the CQT (see `_over_cqt`) by FFT, about 4x less."""
        frames = FRAMES - 2 * cut
        padded = functional.pad(cqt, (0, 0, 1, 1))[:, cut : cut + frames + 2]
        spectrum = torch.fft.rfft(padded, n=_FFT_BINS)
        kernel, bias = self._w("contour1_spectrum"), self._w("contour1.bias")
        shape = (len(cqt), len(bias), frames, CONTOUR_BINS)
        hidden = torch.empty(shape, memory_format=torch.channels_last)
        # One channel at a time, written into the channels-last layout with its bias: the same
        # sums, in temporaries an eighth the size, which the allocator hands back without
        # mapping fresh pages (all 8 at once: 1,300 page faults a window against 380, and 9.6
        # ms a window against 6.1, glibc; page faults were a third of the forward's CPU).
        for channel in range(len(bias)):
            mixed = spectrum[:, :frames] * kernel[0, channel]
            for row in range(1, kernel.shape[0]):
                mixed.addcmul_(spectrum[:, row : row + frames], kernel[row, channel])
            over_cqt = torch.fft.irfft(mixed, n=_FFT_BINS)[..., :CONTOUR_BINS]
            torch.add(over_cqt, bias[channel], out=hidden[:, channel])
        # Over the CQT, the 19 bins at either end also summed CQT bins where the stack has its
        # zero padding: those taps' sums are taken away.
        left = _beyond(padded, _LEFT, -_EDGE, (0, _EDGE - 1))
        hidden[..., :_EDGE] -= functional.conv2d(left, self._w("contour1_left"))
        right = _beyond(padded, _RIGHT, CONTOUR_BINS, (_EDGE - 1, 0))
        hidden[..., -_EDGE:] -= functional.conv2d(right, self._w("contour1_right"))
        return hidden

    def _by_rows(
        self, x: Tensor, layer: str, padding: tuple[int, int], cuts: tuple[int, int]
    ) -> Tensor:
        """A "same" convolution to one channel as one convolution per kernel row, the rows'
        outputs added shifted in time: `(windows, time, freq)`, frames cut as `_conv`'s. oneDNN
        ran these one-channel convolutions at about 7 GMAC/s, a quarter of the forward
        (2026-11-23, AMD EPYC, one thread, 6 windows: 20 ms of 83); as kernel rows to channels
        they take 2.5-3.5x less (the sums in another order: outputs within 3e-6)."""
        x, time = _cut(x, *cuts, padding[0])
        by_row = functional.conv2d(x, self._w(f"{layer}_rows"), None, padding=(0, padding[1]))
        if time:
            by_row = functional.pad(by_row, (0, 0, time, time))
        frames = FRAMES - 2 * cuts[1]
        out = by_row[:, 0, :frames].clone()
        for row in range(1, by_row.shape[1]):
            out += by_row[:, row, row : row + frames]
        out += self._w(f"{layer}.bias")
        return out

    def cqt_power(self, audio: Tensor) -> Tensor:
        """`(windows, 309, 172)` CQT power, lowest bin (27.5 Hz) first."""
        x = audio.unsqueeze(1)
        hop = HOP
        octaves = [self._octave(x, hop)]
        for _ in range(_OCTAVES - 1):
            x = self._halve(x)
            hop //= 2
            octaves.insert(0, self._octave(x, hop))
        # Each octave's 36 real then 36 imaginary bins: all real bins, all imaginary ones.
        both = torch.stack(octaves, dim=1).reshape(len(audio), _OCTAVES, 2, _BINS_PER_OCTAVE, -1)
        real, imag = (part.flatten(1, 2)[:, -_CQT_BINS:] for part in both.unbind(2))
        scale = self._w("cqt_scale").unsqueeze(1)
        power: Tensor = (real * scale).square() + (imag * scale).square()
        return power

    def _halve(self, x: Tensor) -> Tensor:
        """nnAudio's `downsampling_by_n` (match_torch_exactly): the 256-tap low-pass filter over
        the zero-padded signal, every second output. Done by FFT: a 1-channel 256-tap convolution
        ran at under 1 GMAC/s in oneDNN (8.5 ms a window for the 8 octaves, 2.1 ms this way;
        the outputs differ by under 1e-6)."""
        padded = functional.pad(x, (127, 127))
        length = padded.shape[-1]
        size = _smooth(length)
        filtered: Tensor = torch.fft.irfft(torch.fft.rfft(padded, size) * self._lowpass(size), size)
        return filtered[..., : length - 255 : 2]

    def _lowpass(self, size: int) -> Tensor:
        """The low-pass filter's conjugate spectrum at FFT size `size`: kept for the sizes that
        a window's 8 halvings use (computed each call, they were a tenth of the CQT)."""
        kept: Tensor | None = self._buffers.get(f"lowpass_{size}")
        if kept is not None:
            return kept
        spectrum: Tensor = torch.fft.rfft(self._w("lowpass").reshape(-1), size)
        return spectrum.conj()

    def _octave(self, x: Tensor, hop: int) -> Tensor:
        """`(windows, 72, 172)`: the octave's 36 real bins, then its 36 imaginary ones (one
        convolution for both: a fifth less than two)."""
        padded = functional.pad(x, (128, 128), mode="reflect")
        return functional.conv1d(padded, self._w("cqt_kernels"), stride=hop)

    def log_cqt(self, audio: Tensor) -> Tensor:
        """basic-pitch's NormalizedLog and batch norm: `(windows, 172, 309)`."""
        # The ONNX graph takes the magnitude's square root and squares it again; same float ops.
        power = self.cqt_power(audio).sqrt().square()
        db = torch.log(power + 1e-10) * 0.4342944819 * 10.0
        offset = db - db.amin(dim=(1, 2), keepdim=True)
        peak = offset.amax(dim=(1, 2), keepdim=True)
        normalised = torch.where(peak == 0, torch.zeros_like(offset), offset / peak)
        norm = self._w("norm")
        # Bins last only now: the element-wise steps over the transposed power took 2x as long
        # as the CQT's convolutions.
        return (normalised * norm[0] + norm[1]).transpose(1, 2).contiguous()

    @staticmethod
    def harmonic_stack(cqt: Tensor) -> Tensor:
        """`(windows, 172, 309)` to `(windows, 8, 172, 264)` channels-last: bin `b` of channel
        `h` is bin `b + shift[h]` of the input (zero outside it)."""
        low, high = -min(_SHIFTS), max(_SHIFTS) + CONTOUR_BINS - _CQT_BINS
        padded = functional.pad(cqt, (low, high))
        channels = [padded[:, :, low + shift : low + shift + CONTOUR_BINS] for shift in _SHIFTS]
        # Stacked last, the channels-last layout the convolutions want, without another copy.
        return torch.stack(channels, dim=-1).permute(0, 3, 1, 2)

    @classmethod
    def load(cls, path: Path) -> BasicPitch:
        """The network with the weights written by `models/notes/convert_basic_pitch.py`, frozen."""
        weights = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(weights, dict):
            raise ValueError(f"{path} does not hold a dict of tensors")
        missing = sorted(set(SHAPES) - set(weights))
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}")
        model = cls(weights)
        model.eval()
        return model

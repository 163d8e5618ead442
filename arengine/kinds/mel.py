"""Log-mel features in plain torch (torchaudio does not import here); the filterbank is librosa's.

The filterbank is computed once per model, in float64, with the Slaney mel scale and Slaney area
normalisation, which are librosa's defaults (`librosa.filters.mel(htk=False, norm="slaney")`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

_F_SP = 200.0 / 3  # Hz per mel below 1 kHz (Slaney)
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / _F_SP
    logarithmic = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(hz >= _MIN_LOG_HZ, logarithmic, linear)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * _F_SP
    logarithmic = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, logarithmic, linear)


def mel_filterbank(
    sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float
) -> np.ndarray:
    """`(n_mels, n_fft // 2 + 1)` triangular filters, equal to librosa's default filterbank.

    >>> mel_filterbank(16000, 512, 64, 0.0, 8000.0).shape
    (64, 257)
    """
    if not 0 <= fmin < fmax <= sample_rate / 2:
        raise ValueError(
            f"need 0 <= fmin < fmax <= {sample_rate / 2:g} Hz, got fmin={fmin}, fmax={fmax}"
        )
    bins = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(edges)
    ramps = np.subtract.outer(edges, bins)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    normalised: np.ndarray = weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return normalised


@dataclass(frozen=True, slots=True)
class MelParams:
    """Log-mel parameters, as a manifest gives them."""

    n_fft: int = 512
    hop: int = 160
    n_mels: int = 64
    fmin: float = 0.0
    fmax: float = 8000.0
    log_offset: float = 1e-6

    def frames(self, samples: int) -> int:
        """Feature frames in a window of `samples`: frames are not centred (no padding), so
        `1 + (samples - n_fft) // hop`.

        >>> MelParams(n_fft=512, hop=160).frames(8000)  # 0.5 s at 16 kHz: 47 frames, not 50
        47
        """
        return 1 + (samples - self.n_fft) // self.hop

    def samples(self, frames: int) -> int:
        """The shortest window that has `frames` feature frames.

        >>> MelParams(n_fft=512, hop=160).samples(50)
        8352
        """
        return self.n_fft + (frames - 1) * self.hop


class LogMel:
    """`log(mel(|STFT|^2) + offset)` of batches of windows; immutable, so thread-safe.

    >>> LogMel(16000, MelParams())(torch.zeros(3, 16000)).shape
    torch.Size([3, 64, 97])
    """

    def __init__(self, sample_rate: int, params: MelParams) -> None:
        self.params = params
        filters = mel_filterbank(sample_rate, params.n_fft, params.n_mels, params.fmin, params.fmax)
        self._filters = torch.from_numpy(filters.astype(np.float32))
        self._window = torch.hann_window(params.n_fft, periodic=True)

    def __call__(self, windows: torch.Tensor) -> torch.Tensor:
        """`(batch, samples)` -> `(batch, n_mels, frames)`; frames are not centred (no padding)."""
        spectrum = torch.stft(
            windows,
            self.params.n_fft,
            self.params.hop,
            window=self._window,
            center=False,
            return_complex=True,
        )
        power = spectrum.real**2 + spectrum.imag**2
        return torch.log(torch.matmul(self._filters, power) + self.params.log_offset)

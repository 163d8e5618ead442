"""Log-mel features: the filterbank equals librosa's; the STFT path matches a direct computation."""

from __future__ import annotations

import librosa
import numpy as np
import pytest
import torch

from arengine.kinds.mel import LogMel, MelParams, mel_filterbank


@pytest.mark.parametrize(
    ("rate", "n_fft", "n_mels", "fmin", "fmax"),
    [
        (16000, 512, 64, 0.0, 8000.0),
        (16000, 400, 40, 50.0, 7600.0),
        (22050, 2048, 128, 0.0, 11025.0),
        (44100, 1024, 96, 300.0, 16000.0),
    ],
)
def test_filterbank_equals_librosa(
    rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float
) -> None:
    ours = mel_filterbank(rate, n_fft, n_mels, fmin, fmax)
    theirs = librosa.filters.mel(
        sr=rate, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, dtype=np.float64
    )
    assert ours.shape == theirs.shape
    assert np.allclose(ours, theirs, rtol=1e-6, atol=1e-10)


def test_bad_frequency_range_is_refused() -> None:
    with pytest.raises(ValueError, match="fmin < fmax"):
        mel_filterbank(16000, 512, 40, 4000.0, 9000.0)


def test_log_mel_matches_librosa_power_melspectrogram() -> None:
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(16000).astype(np.float32) * 0.1
    params = MelParams(n_fft=512, hop=160, n_mels=40, fmin=0.0, fmax=8000.0, log_offset=1e-6)
    ours = LogMel(16000, params)(torch.from_numpy(audio)[None])[0].numpy()
    theirs = librosa.feature.melspectrogram(
        y=audio,
        sr=16000,
        n_fft=512,
        hop_length=160,
        n_mels=40,
        fmin=0.0,
        fmax=8000.0,
        center=False,
        power=2.0,
    )
    assert ours.shape == theirs.shape
    assert np.allclose(ours, np.log(theirs + 1e-6), atol=1e-3)

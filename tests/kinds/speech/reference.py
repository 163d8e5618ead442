"""silero-vad's network as silero writes it (the STFT as a 258x256 conv): the reference, not served.

`arengine.kinds.speech.network.SpeechModel` computes the same function faster (an FFT, and the
convs as matrix products); tests and `loadtests/speech_equivalence.py` hold it to this module's
probabilities. This is the forward arengine served before that rewrite, kept line for line.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn


class ConvSpeechModel(nn.Module):
    """Per-window speech probabilities, `(batch, 64 + n * 512)` samples in, `(batch, n)` out.

    >>> from arengine.kinds.speech.network import read_silero_weights, silero_package_archive
    >>> model = ConvSpeechModel(read_silero_weights(silero_package_archive()))
    >>> model(torch.zeros(1, 64 + 10 * 512)).shape
    torch.Size([1, 10])
    """

    def __init__(self, weights: Mapping[str, Tensor]) -> None:
        super().__init__()
        self.stft_conv = nn.Conv1d(1, 258, kernel_size=256, stride=128, bias=False)
        self.conv1 = nn.Conv1d(129, 128, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(128, 64, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, kernel_size=3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, 128, kernel_size=3, padding=1)
        self.lstm = nn.LSTM(128, 128, batch_first=True)
        self.final_conv = nn.Conv1d(128, 1, kernel_size=1)
        self.load_state_dict(dict(weights))
        self.eval()
        self.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        context, window = 64, 512
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

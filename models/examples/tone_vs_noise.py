"""Build, train and export a small classifier that arengine serves: tones versus noise bursts.

    .venv/bin/python models/examples/tone_vs_noise.py models/tones                 # torch.export
    .venv/bin/python models/examples/tone_vs_noise.py models/tones --format onnx   # ONNX
    .venv/bin/python models/examples/tone_vs_noise.py models/tones --format pt     # TorchScript
    .venv/bin/arengine serve --models-dir models      # now serves `tones` beside `speech`
    curl -F file=@beeps.wav 'http://127.0.0.1:8000/v1/recognize?model=tones'

It synthesises its own training audio, computes the same log-mel features the server computes
(`arengine.kinds.mel.LogMel`, with the manifest's parameters), trains for a fixed number of steps
(a few seconds), and writes the model (`model.pt2`, `model.onnx` or `model.pt`) and `manifest.toml`
into the output folder. The number of windows per call varies (segments differ in length), so every
format is exported with a dynamic first dimension. The export is traced on the server's own
features of one window, so its frame axis is the one the server sends: 47 frames for 0.5-s windows
(`1 + (8000 - n_fft 512) // hop 160`; frames are not centred), which `GET /v1/models` states as
`input_shape`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn

from arengine.kinds.mel import LogMel, MelParams

RATE = 16000
WINDOW_S = 0.5
HOP_S = 0.25
LABELS = ("tone", "noise")
MEL = MelParams(n_fft=512, hop=160, n_mels=32, fmin=50.0, fmax=8000.0, log_offset=1e-6)


class TinyClassifier(nn.Module):
    """Log-mel `(batch, mels, frames)` -> one logit per label."""

    def __init__(self, mels: int, labels: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(mels, 16, kernel_size=3, padding=1)
        self.out = nn.Linear(16, labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.conv(features)).mean(dim=2)
        logits: torch.Tensor = self.out(hidden)
        return logits


def synthesize(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Windows of tones, noise, both, or near-silence, with their 0/1 targets per label."""
    n = int(WINDOW_S * RATE)
    t = np.arange(n) / RATE
    windows, targets = [], []
    for _ in range(count):
        tone, noise = rng.random() < 0.5, rng.random() < 0.5
        x = rng.normal(0, 0.001, n)
        if tone:
            x += rng.uniform(0.1, 0.5) * np.sin(2 * np.pi * rng.uniform(200, 3000) * t)
        if noise:
            x += rng.uniform(0.05, 0.3) * rng.standard_normal(n)
        windows.append(x.astype(np.float32))
        targets.append([float(tone), float(noise)])
    return np.stack(windows), np.array(targets, np.float32)


def train(steps: int = 400, seed: int = 0, examples: int = 768) -> TinyClassifier:
    """Train for `steps` batches of 64 drawn from `examples` synthesised windows (their features
    computed once): the same model on any machine, in a few seconds of CPU."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    windows, targets = synthesize(examples, rng)
    with torch.no_grad():
        features = LogMel(RATE, MEL)(torch.from_numpy(windows))
    labels = torch.from_numpy(targets)
    model = TinyClassifier(MEL.n_mels, len(LABELS))
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    loss = nn.BCEWithLogitsLoss()
    for _ in range(steps):
        batch = torch.from_numpy(rng.integers(0, examples, 64))
        optimiser.zero_grad()
        loss(model(features[batch]), labels[batch]).backward()
        optimiser.step()
    return model.eval()


MANIFEST = """\
# A classifier trained by models/examples/tone_vs_noise.py.
name = "{name}"
kind = "classifier"
sample_rate = {rate}
labels = {labels}

[segments]
length_s = 30.0

[features]
type = "log_mel"
n_fft = {mel.n_fft}
hop = {mel.hop}
n_mels = {mel.n_mels}
fmin = {mel.fmin}
fmax = {mel.fmax}
log_offset = {mel.log_offset}

[model]
activation = "sigmoid"
window_s = {window_s}
hop_s = {hop_s}

[weights]
file = "{weights}"

[postprocess]
threshold = 0.5
min_duration_ms = 250
merge_gap_ms = 250

[card]
task = "tone and noise-burst detection (a worked example)"
licence = "MIT"
source = "models/examples/tone_vs_noise.py, trained on synthesised audio"
version = "{version}"
"""

EXPORTS = {"pt2": "torch.export", "onnx": "onnx", "pt": "torchscript"}
"""`--format` -> the runtime the server picks for that suffix."""


def export(model: nn.Module, folder: Path, name: str, format: str = "pt") -> Path:
    """Write `model.<format>` and `manifest.toml` into `folder`; returns the model file."""
    if format not in EXPORTS:
        raise ValueError(f"format {format!r}; accepted: {', '.join(EXPORTS)}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model.{format}"
    model = model.eval()
    example = LogMel(RATE, MEL)(torch.zeros(2, round(WINDOW_S * RATE)))
    if format == "pt":
        torch.jit.save(torch.jit.script(model), str(path))
    else:
        windows = torch.export.Dim("windows", min=1)
        program = torch.export.export(model, (example,), dynamic_shapes=({0: windows},))
        if format == "pt2":
            torch.export.save(program, str(path))
        else:
            torch.onnx.export(program, (example,), str(path), input_names=["features"])
    labels = "[" + ", ".join(f'"{label}"' for label in LABELS) + "]"
    (folder / "manifest.toml").write_text(
        MANIFEST.format(
            name=name,
            rate=RATE,
            labels=labels,
            mel=MEL,
            window_s=WINDOW_S,
            hop_s=HOP_S,
            weights=path.name,
            version=f"example, exported as {EXPORTS[format]}",
        )
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="output model folder, e.g. models/tones")
    parser.add_argument("--steps", type=int, default=400, help="training batches of 64 windows")
    parser.add_argument(
        "--format", choices=EXPORTS, default="pt2", help="pt2 (torch.export), onnx or pt"
    )
    args = parser.parse_args()
    path = export(train(args.steps), args.folder, args.folder.name, args.format)
    print(f"wrote {path} and {args.folder}/manifest.toml")


if __name__ == "__main__":
    main()

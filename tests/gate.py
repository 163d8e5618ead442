"""A test model that holds the engine until the test lets it go, on any machine speed.

Tests that must see a request still in the engine at some moment (a deadline, a disconnect, a
shutdown, a job killed mid-way, a stream's first tag) cannot count on the work being slow: a fast
machine ends it first. `gate` is a real `classifier` model (TorchScript, loaded by the real
runtime from a models folder) that tags loud windows `loud` and, while its gate file says
closed, does not return from a window as loud as the `MARK`: the request waits there, in the
engine, until the test opens the gate. A louder mark (`MARK2`) is a second stage: a gate that
lets the first stage through (`let_through(1)`) still holds it, so a test can stop a job at two
known places in turn.

    models, gate = gated_models(tmp_path)          # speech and gate; the gate open
    server = serve("--models-dir", str(models))
    with gate.held():                              # closed until the block ends
        ...  # post `marked(...)` audio with ?model=gate; it stays in the engine

The network reads the gate file (one byte: the highest stage let through, 0 when closed) with
`torch.from_file` at every turn of its wait; the path alternates between `folder/gate` and
`folder//gate` so that TorchScript cannot fold the read into a constant. The test writes the
byte by renaming a new file over the old one, so a read never sees the file empty. Warm-up
(zeros) is quiet: the gate never holds the server's start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from torch import nn

from arengine.models import DEFAULT_MODELS_DIR

LOUD = -5.0
"""A window whose mean log-mel is above this is tagged `loud` (noise of RMS 0.05 and more)."""

MARK = -1.5
"""A window whose mean log-mel is above this waits for the gate (noise of RMS 0.2 and more)."""

MARK2 = 0.7
"""Above this (full-scale noise; `mark` noise is about -0.2), a window waits for stage 2."""

OPEN = 255
"""The gate file's byte when every stage goes through."""

RATE = 16000


def loud_manifest(name: str) -> str:
    """The manifest of a test `classifier` named `name` that tags loud windows `loud` (TorchScript
    weights in `model.pt`): the gate's, and the faulty model's in tests/http."""
    return f"""name = "{name}"
kind = "classifier"
sample_rate = 16000
labels = ["loud"]

[features]
type = "log_mel"
n_fft = 512
hop = 160
n_mels = 32
fmin = 50.0
fmax = 8000.0
log_offset = 1e-6

[model]
window_s = 0.5
hop_s = 0.25

[weights]
file = "model.pt"
"""


MANIFEST = loud_manifest("gate")


class GateNetwork(nn.Module):
    """Logits for `loud` per window; waits for the gate file on a window above `MARK` (stage
    1) or `MARK2` (stage 2) until it lets that stage through."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder
        self.loud = LOUD
        self.mark = MARK
        self.mark2 = MARK2

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        level = features.mean(dim=(1, 2))
        stage = 2 if bool((level > self.mark2).any()) else int(bool((level > self.mark).any()))
        turn = 0
        while stage > 0 and int(self.read(turn)[0]) < stage:
            turn += 1
        # The turns are part of the answer (times zero), so no optimisation drops the wait.
        return ((level > self.loud).float() * 20.0 - 10.0 + 0.0 * turn).unsqueeze(1)

    def read(self, turn: int) -> torch.Tensor:
        path = self.folder + ("/" if turn % 2 == 0 else "//") + "gate"
        return torch.from_file(path, size=1, dtype=torch.uint8)


class Gate:
    """The gate file of a `gate` model: open, closed, or letting the first stage through."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "gate"
        self.open()

    def open(self) -> None:
        self._write(OPEN)

    def let_through(self, stage: int) -> None:
        """Marks up to `stage` pass; louder ones wait."""
        self._write(stage)

    def close(self) -> None:
        self._write(0)

    @contextmanager
    def held(self) -> Iterator[Gate]:
        """Closed for the block; open again after it, whatever happens in it."""
        self.close()
        try:
            yield self
        finally:
            self.open()

    def _write(self, value: int) -> None:
        new = self.path.with_name("gate.new")
        new.write_bytes(bytes([value]))
        os.replace(new, self.path)  # atomic: a read sees the old byte or the new one


def gated_models(folder: Path) -> tuple[Path, Gate]:
    """A models folder under `folder` with `speech` and `gate`, and the gate (open)."""
    models = folder / "models"
    models.mkdir(parents=True)
    shutil.copytree(DEFAULT_MODELS_DIR / "speech", models / "speech")
    (models / "gate").mkdir()
    gate = Gate(folder)
    network = torch.jit.script(GateNetwork(str(folder)))
    torch.jit.save(network, str(models / "gate" / "model.pt"))
    (models / "gate" / "manifest.toml").write_text(MANIFEST)
    return models, gate


LEVELS = {"quiet": 0.0, "loud": 0.1, "mark": 0.4, "mark2": 1.0}
"""Noise RMS of each kind of piece: silence, tagged `loud`, and tagged `loud` behind the gate's
first and second stages (`mark2` is full-scale: random signs)."""


def noise(kind: str, seconds: float, seed: int = 3) -> np.ndarray:
    """`seconds` of noise at 16 kHz at the level of `kind` (in `LEVELS`), float32."""
    rng = np.random.default_rng(seed)
    audio = rng.standard_normal(int(seconds * RATE))
    if kind == "mark2":
        return (0.99 * np.sign(audio)).astype(np.float32)
    return np.clip(LEVELS[kind] * audio, -1.0, 1.0).astype(np.float32)


def marked(path: Path, pieces: list[tuple[str, float]]) -> Path:
    """Noise at 16 kHz in `pieces` of (kind in `LEVELS`, seconds), as WAV or FLAC by suffix."""
    audio = np.concatenate([noise(kind, seconds, i) for i, (kind, seconds) in enumerate(pieces)])
    sf.write(path, audio, RATE, subtype="PCM_16")
    return path

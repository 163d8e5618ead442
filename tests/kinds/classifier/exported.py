"""The example classifier exported in every format the server reads, for a wrong input shape, and
as ONNX files made hostile."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import onnx
import torch

EXPORTS = {"pt": "torchscript", "pt2": "torch.export", "onnx": "onnx"}
"""Export suffix -> the runtime the server picks for it."""


def example() -> ModuleType:
    """`models/examples/tone_vs_noise.py`, imported once."""
    if "tone_vs_noise" in sys.modules:
        return sys.modules["tone_vs_noise"]
    path = Path(__file__).resolve().parents[3] / "models" / "examples" / "tone_vs_noise.py"
    spec = importlib.util.spec_from_file_location("tone_vs_noise", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tone_vs_noise"] = module
    spec.loader.exec_module(module)
    return module


def export_all(folder: Path, steps: int) -> None:
    """One network trained for `steps`, exported as `t<suffix>` into `folder/<suffix>`."""
    tones = example()
    network = tones.train(steps=steps)
    for suffix in EXPORTS:
        tones.export(network, folder / suffix, f"t{suffix}", suffix)


def export_frames(folder: Path, suffix: str, frames: int) -> Path:
    """The untrained example network with the example's manifest, exported for `frames` feature
    frames (a fixed axis, as a user who guesses the frame count exports it), windows dynamic."""
    tones = example()
    network = tones.TinyClassifier(tones.MEL.n_mels, len(tones.LABELS)).eval()
    path: Path = tones.export(network, folder, folder.name, suffix)
    features = torch.zeros(2, tones.MEL.n_mels, frames)
    windows = torch.export.Dim("windows", min=1)
    program = torch.export.export(network, (features,), dynamic_shapes=({0: windows},))
    if suffix == "pt2":
        torch.export.save(program, str(path))
    else:
        torch.onnx.export(program, (features,), str(path), input_names=["features"])
    return path


def with_location(source: Path, folder: Path, location: str) -> None:
    """A copy of the ONNX model in `source` whose external data is read from `location`."""
    folder.mkdir(exist_ok=True)
    model = onnx.load(str(source / "model.onnx"), load_external_data=False)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external, "the exporter is expected to write external data"
    for tensor in external:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    manifest = (source / "manifest.toml").read_text().replace('"tonnx"', f'"{folder.name}"')
    (folder / "manifest.toml").write_text(manifest)


def escaping_onnx(source: Path, models: Path) -> None:
    """External data outside the model's folder: named by `..`, absolute, through a symlink."""
    stolen = models / "stolen.data"
    stolen.write_bytes((source / "model.onnx.data").read_bytes())
    with_location(source, models / "escape", "../stolen.data")
    with_location(source, models / "escape-absolute", str(stolen))
    with_location(source, models / "escape-symlink", "link.data")
    (models / "escape-symlink" / "link.data").symlink_to(stolen)

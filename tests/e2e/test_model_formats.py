"""Bring your own model: one classifier as ONNX, torch.export and TorchScript, served end to end.

One trained example is exported in all three formats; a real server on loopback must give the
same tags from each. Broken files (garbage, an unknown suffix, ONNX external data outside the
model's folder) are unavailable models with their reason, and the other models still serve.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from arengine.models.registry import load_models
from tests.conftest import Server, ServerFactory
from tests.kinds.classifier.exported import EXPORTS, escaping_onnx, export_all

pytestmark = pytest.mark.slow

BROKEN = ["escape", "escape-absolute", "escape-symlink", "garbage-onnx", "garbage-pt2", "keras"]


def _broken(source: Path, folder: Path, name: str, weights: str, content: bytes) -> None:
    folder.mkdir()
    manifest = (source / "manifest.toml").read_text()
    manifest = manifest.replace('"tpt"', f'"{name}"').replace("model.pt", weights)
    (folder / "manifest.toml").write_text(manifest)
    (folder / weights).write_bytes(content)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tpt`, `tpt2` and `tonnx` (one trained network in three formats) and six broken ones."""
    folder = tmp_path_factory.mktemp("models")
    export_all(folder, steps=400)
    escaping_onnx(folder / "onnx", folder)
    garbage = np.random.default_rng(0).bytes(4096)
    _broken(folder / "pt", folder / "garbage-onnx", "g1", "model.onnx", garbage)
    _broken(folder / "pt", folder / "garbage-pt2", "g2", "model.pt2", garbage)
    _broken(folder / "pt", folder / "keras", "g3", "model.h5", garbage)
    return folder


@pytest.fixture(scope="module")
def server(models_dir: Path, serve: ServerFactory) -> Server:
    return serve("--models-dir", str(models_dir))


def test_every_format_loads_and_broken_files_are_reported(server: Server) -> None:
    listing = httpx.get(server.url + "/v1/models").json()
    formats = {m["name"]: m["weights_format"] for m in listing["models"]}
    assert formats == {f"t{suffix}": name for suffix, name in EXPORTS.items()}
    reasons = {Path(f["manifest"]).parent.name: f["reason"] for f in listing["unavailable"]}
    assert sorted(reasons) == BROKEN
    assert "escapes model directory" in reasons["escape"]
    assert "stolen.data" in reasons["escape"]
    assert "Absolute path" in reasons["escape-absolute"]
    assert "escapes model directory" in reasons["escape-symlink"]
    assert "INVALID_PROTOBUF" in reasons["garbage-onnx"]
    assert reasons["garbage-pt2"].startswith(("RuntimeError", "BadZipFile", "ValueError"))
    assert ".onnx (onnx), .pt2 (torch.export), .pt (torchscript)" in reasons["keras"]
    assert server.process.poll() is None


def _beeps(path: Path) -> Path:
    rate = 22050
    rng = np.random.default_rng(1)
    t = np.arange(2 * rate) / rate
    parts = [
        np.zeros(rate),
        0.3 * np.sin(2 * np.pi * 880 * t),
        np.zeros(rate),
        0.2 * rng.standard_normal(2 * rate),
        np.zeros(rate),
    ]
    sf.write(path, np.concatenate(parts).astype(np.float32), rate)
    return path


def test_the_three_formats_give_the_same_tags(server: Server, tmp_path: Path) -> None:
    audio = _beeps(tmp_path / "beeps.flac").read_bytes()
    answers = {}
    with server.client() as client:
        for suffix in EXPORTS:
            response = client.post(
                "/v1/recognize", params={"model": f"t{suffix}"}, files={"file": audio}
            )
            assert response.status_code == 200, response.text
            answers[suffix] = response.json()["tags"]
    reference = answers["pt"]
    assert [tag["label"] for tag in reference] == ["tone", "noise"]
    for tag, (start, end) in zip(reference, [(1.0, 3.0), (4.0, 6.0)], strict=True):
        assert tag["start"] == pytest.approx(start, abs=0.3)
        assert tag["end"] == pytest.approx(end, abs=0.35)
    for suffix in ("pt2", "onnx"):
        assert [(t["label"], t["start"], t["end"]) for t in answers[suffix]] == [
            (t["label"], t["start"], t["end"]) for t in reference
        ]
        for ours, theirs in zip(answers[suffix], reference, strict=True):
            assert ours["score"] == pytest.approx(theirs["score"], abs=2e-4)


def test_loading_the_folder_in_process_reports_the_same_failures(models_dir: Path) -> None:
    loaded, failures = load_models(models_dir)
    assert sorted(loaded) == ["tonnx", "tpt", "tpt2"]
    assert sorted(f.path.parent.name for f in failures) == BROKEN

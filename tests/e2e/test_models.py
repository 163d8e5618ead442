"""The model registry end to end: a trained classifier served beside speech; bad models reported."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import httpx
import numpy as np
import pytest
import soundfile as sf

from arengine.kinds.manifest import ManifestError, read_manifest
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from tests.conftest import Server, ServerFactory


def _example() -> ModuleType:
    path = DEFAULT_MODELS_DIR / "examples" / "tone_vs_noise.py"
    spec = importlib.util.spec_from_file_location("tone_vs_noise", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tone_vs_noise"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """speech, a freshly trained `tones` classifier, and five broken models."""
    folder = tmp_path_factory.mktemp("models")
    shutil.copytree(DEFAULT_MODELS_DIR / "speech", folder / "speech")
    example = _example()
    example.export(example.train(), folder / "tones", "tones")
    broken = {
        "bad-toml": "name = 'x\n",
        "missing-weights": (folder / "tones" / "manifest.toml")
        .read_text()
        .replace('name = "tones"', 'name = "ghost"')
        .replace("model.pt", "nowhere.pt"),
        "escape": (folder / "tones" / "manifest.toml")
        .read_text()
        .replace('name = "tones"', 'name = "escape"')
        .replace('"model.pt"', '"../tones/model.pt"'),
        "wrong-shape": (folder / "tones" / "manifest.toml")
        .read_text()
        .replace('name = "tones"', 'name = "shape"')
        .replace('["tone", "noise"]', '["a", "b", "c"]'),
        "bad-kind": 'name = "odd"\nkind = "teleport"\n',
    }
    for name, text in broken.items():
        (folder / name).mkdir()
        (folder / name / "manifest.toml").write_text(text)
    # A pitch model whose weights are a Git LFS pointer, not a checkpoint: torch.load's
    # UnpicklingError must not stop the models sorted after it (speech, tones) from loading.
    (folder / "bad-weights").mkdir()
    (folder / "bad-weights" / "manifest.toml").write_text(
        (DEFAULT_MODELS_DIR / "pitch" / "manifest.toml").read_text().replace('"pitch"', '"lfs"', 1)
    )
    (folder / "bad-weights" / "tiny.pth").write_text("version https://git-lfs.github.com/spec/v1\n")
    shutil.copy(folder / "tones" / "model.pt", folder / "wrong-shape" / "model.pt")
    return folder


@pytest.fixture(scope="module")
def server(models_dir: Path, serve: ServerFactory) -> Server:
    return serve("--models-dir", str(models_dir))


def test_every_model_loads_or_is_reported_with_its_reason(server: Server) -> None:
    listing = httpx.get(server.url + "/v1/models").json()
    assert [m["name"] for m in listing["models"]] == ["speech", "tones"]
    tones = listing["models"][1]
    assert tones["kind"] == "classifier" and tones["labels"] == ["tone", "noise"]
    assert len(tones["weights_sha256"]) == 64
    assert tones["parameters"]["min_duration_ms"] == 250
    reasons = {Path(f["manifest"]).parent.name: f["reason"] for f in listing["unavailable"]}
    assert set(reasons) == {
        "bad-toml",
        "missing-weights",
        "escape",
        "wrong-shape",
        "bad-kind",
        "bad-weights",
    }
    assert "Unpickling" in reasons["bad-weights"]
    assert "cannot read TOML" in reasons["bad-toml"]
    assert "does not exist" in reasons["missing-weights"]
    assert "outside" in reasons["escape"]
    assert "expected (2, 3)" in reasons["wrong-shape"]
    assert "teleport" in reasons["bad-kind"]
    log = server.log.read_text()
    assert "missing-weights/manifest.toml" in log


def test_the_trained_classifier_tags_tones_and_noise_at_the_right_times(
    server: Server, tmp_path: Path
) -> None:
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
    sf.write(tmp_path / "beeps.flac", np.concatenate(parts).astype(np.float32), rate)
    with (tmp_path / "beeps.flac").open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"model": "tones"},
            files={"file": body},
            timeout=60,
        )
    assert response.status_code == 200, response.text
    tags = response.json()["tags"]
    assert [tag["label"] for tag in tags] == ["tone", "noise"]
    with (tmp_path / "beeps.flac").open("rb") as body:
        strict = httpx.post(
            server.url + "/v1/recognize",
            files={"file": body},
            timeout=60,
            params={"model": "tones", "min_duration_ms": 4000},
        )
    assert strict.json()["tags"] == []  # both runs last 2 to 3 s
    for tag, (start, end) in zip(tags, [(1.0, 3.0), (4.0, 6.0)], strict=True):
        assert tag["start"] == pytest.approx(start, abs=0.3)
        assert tag["end"] == pytest.approx(end, abs=0.35)
        assert tag["score"] > 0.5


def test_speech_still_served_and_model_choice_checked(server: Server, tmp_path: Path) -> None:
    sf.write(tmp_path / "s.wav", np.zeros(16000, np.float32), 16000)
    with httpx.Client(base_url=server.url) as client:
        ok = client.post("/v1/recognize", files={"file": (tmp_path / "s.wav").read_bytes()})
        unknown = client.post(
            "/v1/recognize",
            params={"model": "ghost"},
            files={"file": (tmp_path / "s.wav").read_bytes()},
        )
        wrong = client.post(
            "/v1/recognize",
            params={"model": "tones", "speech_pad_ms": 10},
            files={"file": (tmp_path / "s.wav").read_bytes()},
        )
    assert ok.status_code == 200 and ok.json()["tags"] == []
    assert unknown.status_code == 404
    assert "speech, tones" in unknown.json()["error"]["message"]
    assert wrong.status_code == 422
    assert "speech_pad_ms does not apply" in wrong.json()["error"]["message"]


def test_names_select_models(models_dir: Path) -> None:
    loaded, failures = load_models(models_dir, ["tones", "nope"])
    assert list(loaded) == ["tones"]
    assert [f.reason for f in failures if f.path.name == "nope"] == ["no manifest with this name"]


def test_package_weights_must_stay_inside_the_package(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    manifest = tmp_path / "m" / "manifest.toml"
    text = (DEFAULT_MODELS_DIR / "speech" / "manifest.toml").read_text()
    manifest.write_text(text.replace('"data/silero_vad.jit"', '"../torch/__init__.py"'))
    with pytest.raises(ManifestError, match="outside its package"):
        read_manifest(manifest)
    manifest.write_text(text.replace('package = "silero_vad"', 'package = "not_a_package_xyz"'))
    with pytest.raises(ManifestError, match="not installed"):
        read_manifest(manifest)


def test_the_default_speech_manifest() -> None:
    manifest = read_manifest(DEFAULT_MODELS_DIR / "speech" / "manifest.toml")
    assert (manifest.name, manifest.kind, manifest.sample_rate) == ("speech", "speech", 16000)
    assert manifest.weights.name == "silero_vad.jit"

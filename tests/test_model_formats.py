"""Bring your own model: one classifier as ONNX, torch.export and TorchScript, served end to end.

One trained example is exported in all three formats; a real server on loopback must give the
same tags from each. Broken files (garbage, an unknown suffix, ONNX external data outside the
model's folder) are unavailable models with their reason, and the other models still serve.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import httpx
import numpy as np
import onnx
import pytest
import soundfile as sf
import torch

from arengine.mel import LogMel
from arengine.models.registry import DEFAULT_MODELS_DIR, load_models
from arengine.models.runtimes import OnnxNetwork, load_network, weights_format
from tests.conftest import Server, start_server, stop_server

FORMATS = {"pt": "torchscript", "pt2": "torch.export", "onnx": "onnx"}


def _example() -> ModuleType:
    path = DEFAULT_MODELS_DIR / "examples" / "tone_vs_noise.py"
    spec = importlib.util.spec_from_file_location("tone_vs_noise", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tone_vs_noise"] = module
    spec.loader.exec_module(module)
    return module


def _with_location(source: Path, folder: Path, location: str) -> None:
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


def _escaping_onnx(source: Path, models: Path) -> None:
    """External data outside the model's folder: named by `..`, absolute, through a symlink."""
    stolen = models / "stolen.data"
    stolen.write_bytes((source / "model.onnx.data").read_bytes())
    _with_location(source, models / "escape", "../stolen.data")
    _with_location(source, models / "escape-absolute", str(stolen))
    _with_location(source, models / "escape-symlink", "link.data")
    (models / "escape-symlink" / "link.data").symlink_to(stolen)


def _broken(source: Path, folder: Path, name: str, weights: str, content: bytes) -> None:
    folder.mkdir()
    manifest = (source / "manifest.toml").read_text()
    manifest = manifest.replace('"tpt"', f'"{name}"').replace("model.pt", weights)
    (folder / "manifest.toml").write_text(manifest)
    (folder / weights).write_bytes(content)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tpt`, `tpt2` and `tonnx` (one trained network in three formats) and four broken ones."""
    folder = tmp_path_factory.mktemp("models")
    example = _example()
    network = example.train(steps=100)  # steps, not seconds: the same model on a busy machine
    for suffix in FORMATS:
        example.export(network, folder / suffix, f"t{suffix}", suffix)
    _escaping_onnx(folder / "onnx", folder)
    garbage = np.random.default_rng(0).bytes(4096)
    _broken(folder / "pt", folder / "garbage-onnx", "g1", "model.onnx", garbage)
    _broken(folder / "pt", folder / "garbage-pt2", "g2", "model.pt2", garbage)
    _broken(folder / "pt", folder / "keras", "g3", "model.h5", garbage)
    return folder


@pytest.fixture(scope="module")
def server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("srv"), "--models-dir", str(models_dir))
    yield running
    stop_server(running)


def test_every_format_loads_and_broken_files_are_reported(server: Server) -> None:
    listing = httpx.get(server.url + "/v1/models").json()
    formats = {m["name"]: m["weights_format"] for m in listing["models"]}
    assert formats == {f"t{suffix}": name for suffix, name in FORMATS.items()}
    reasons = {Path(f["manifest"]).parent.name: f["reason"] for f in listing["unavailable"]}
    assert set(reasons) == {
        "escape",
        "escape-absolute",
        "escape-symlink",
        "garbage-onnx",
        "garbage-pt2",
        "keras",
    }
    assert "escapes model directory" in reasons["escape"]
    assert "stolen.data" in reasons["escape"]
    assert "Absolute path" in reasons["escape-absolute"]
    assert "escapes model directory" in reasons["escape-symlink"]
    assert "INVALID_PROTOBUF" in reasons["garbage-onnx"] or "protobuf" in reasons["garbage-onnx"]
    assert reasons["garbage-pt2"]  # torch.export's own message, whatever it says
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
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for suffix in FORMATS:
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


def _features(count: int, seed: int) -> torch.Tensor:
    example = sys.modules.get("tone_vs_noise") or _example()
    windows = np.random.default_rng(seed).normal(0, 0.2, (count, 8000)).astype(np.float32)
    features: torch.Tensor = LogMel(16000, example.MEL)(torch.from_numpy(windows))
    return features


@pytest.mark.parametrize("suffix", ["onnx", "pt2"])
def test_one_network_shared_by_many_threads_equals_serial(models_dir: Path, suffix: str) -> None:
    """STYLE.md 4: many threads calling one session/module at once get what serial calls get."""
    network = load_network(models_dir / suffix / f"model.{suffix}")
    if suffix == "onnx":
        assert isinstance(network, OnnxNetwork)
    inputs = [_features(1 + i % 7, seed=i) for i in range(64)]

    def run(x: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():  # thread-local, as in the engine's `infer`
            return network(x).numpy().copy()

    serial = [run(x) for x in inputs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(run, inputs))
    for one, other, x in zip(serial, threaded, inputs, strict=True):
        assert one.shape == (x.shape[0], 2)
        np.testing.assert_array_equal(one, other)
    # The inputs differ, so equal results are not an accident of identical calls.
    assert not np.allclose(serial[0][0], serial[1][0])


def test_onnx_session_pools_are_pinned_to_one_thread(models_dir: Path) -> None:
    network = OnnxNetwork(models_dir / "onnx" / "model.onnx")
    options = network._session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.execution_mode.name == "ORT_SEQUENTIAL"


def test_escaping_external_data_is_refused_when_loading_directly(models_dir: Path) -> None:
    with pytest.raises(Exception, match="escapes model directory"):
        OnnxNetwork(models_dir / "escape" / "model.onnx")
    # The same data inside the folder loads: the refusal is about the location only.
    folder = models_dir.parent / f"inside-{os.getpid()}"
    _with_location(models_dir / "onnx", folder, "stolen.data")
    (folder / "stolen.data").write_bytes((models_dir / "stolen.data").read_bytes())
    assert OnnxNetwork(folder / "model.onnx")(_features(2, seed=0)).shape == (2, 2)


def test_the_suffix_picks_the_runtime() -> None:
    assert [weights_format(Path(f"m.{s}")) for s in FORMATS] == list(FORMATS.values())
    assert weights_format(Path("M.ONNX")) == "onnx"
    with pytest.raises(ValueError, match=r"'model\.tflite' has no known suffix; accepted: \.onnx"):
        weights_format(Path("model.tflite"))


def test_loading_the_folder_directly_reports_the_same_failures(models_dir: Path) -> None:
    loaded, failures = load_models(models_dir)
    assert sorted(loaded) == ["tonnx", "tpt", "tpt2"]
    assert sorted(f.path.parent.name for f in failures) == [
        "escape",
        "escape-absolute",
        "escape-symlink",
        "garbage-onnx",
        "garbage-pt2",
        "keras",
    ]

"""ONNX, torch.export and TorchScript: picked by suffix, shared by threads, loaded safely."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from arengine.kinds.classifier.runtimes import OnnxNetwork, load_network, weights_format
from arengine.kinds.mel import LogMel
from tests.kinds.classifier.exported import EXPORTS, example, export_all, with_location


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("exported")
    export_all(folder, steps=20)  # any weights will do: these tests compare runtimes
    return folder


def _features(count: int, seed: int) -> torch.Tensor:
    windows = np.random.default_rng(seed).normal(0, 0.2, (count, 8000)).astype(np.float32)
    features: torch.Tensor = LogMel(16000, example().MEL)(torch.from_numpy(windows))
    return features


@pytest.mark.parametrize("suffix", ["onnx", "pt2", "pt"])
def test_one_network_shared_by_many_threads_equals_serial(exported: Path, suffix: str) -> None:
    """Many threads calling one session/module at once get what serial calls get."""
    network = load_network(exported / suffix / f"model.{suffix}")
    inputs = [_features(1 + i % 7, seed=i) for i in range(64)]

    def run(x: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():  # thread-local, as in the engine's `infer`
            scores: np.ndarray = network(x).numpy().copy()
        return scores

    serial = [run(x) for x in inputs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(run, inputs))
    for one, other, x in zip(serial, threaded, inputs, strict=True):
        assert one.shape == (x.shape[0], 2)
        np.testing.assert_array_equal(one, other)
    # The inputs differ, so equal results are not an accident of identical calls.
    assert not np.allclose(serial[0][0], serial[1][0])


def test_the_three_formats_compute_the_same_scores(exported: Path) -> None:
    x = _features(5, seed=9)
    with torch.inference_mode():
        scores = {s: load_network(exported / s / f"model.{s}")(x).numpy() for s in EXPORTS}
    np.testing.assert_allclose(scores["pt2"], scores["pt"], atol=1e-5)
    np.testing.assert_allclose(scores["onnx"], scores["pt"], atol=1e-5)


def test_onnx_session_pools_are_pinned_to_one_thread(exported: Path) -> None:
    network = load_network(exported / "onnx" / "model.onnx")
    assert isinstance(network, OnnxNetwork)
    options = network._session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.execution_mode.name == "ORT_SEQUENTIAL"


def test_external_data_only_from_inside_the_models_folder(exported: Path) -> None:
    stolen = exported / "stolen.data"
    stolen.write_bytes((exported / "onnx" / "model.onnx.data").read_bytes())
    with_location(exported / "onnx", exported / "out", "../stolen.data")
    with pytest.raises(Exception, match="escapes model directory"):
        OnnxNetwork(exported / "out" / "model.onnx")
    # The same bytes inside the folder load: the refusal is about the location only.
    with_location(exported / "onnx", exported / "in", "stolen.data")
    (exported / "in" / "stolen.data").write_bytes(stolen.read_bytes())
    assert OnnxNetwork(exported / "in" / "model.onnx")(_features(2, seed=0)).shape == (2, 2)


def test_the_suffix_picks_the_runtime() -> None:
    assert [weights_format(Path(f"m.{s}")) for s in EXPORTS] == list(EXPORTS.values())
    assert weights_format(Path("M.ONNX")) == "onnx"
    with pytest.raises(ValueError, match=r"'model\.tflite' has no known suffix; accepted: \.onnx"):
        weights_format(Path("model.tflite"))


def test_an_onnx_model_that_does_not_take_float32_is_refused(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "int_identity",
        [helper.make_tensor_value_info("x", TensorProto.INT64, ["n", 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["n", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "int.onnx"))
    with pytest.raises(ValueError, match=r"takes one float32 tensor; this one takes \[\('x', "):
        load_network(tmp_path / "int.onnx")

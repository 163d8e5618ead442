"""A user's classifier: its input shape stated; a model exported for another refused with the fix.

The frame count of a window is the contract users get wrong: 0.5-s windows at 16 kHz with hop 160
have 47 frames (not centred), not the 50 that 0.5 s / 10 ms suggests. A model exported with its
frame axis fixed at 50 used to be listed as unavailable with only the runtime's words ("Guard
failed: x.size()[2] == 50", "Got: 47 Expected: 50").
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from arengine.cli.cards import row
from arengine.models.registry import load_models
from tests.kinds.classifier.exported import export_frames

SENT = "float32 (windows, 32, 47)"
RULE = "47 frames = 1 + (8000-sample window - n_fft 512) // hop 160"


@pytest.mark.parametrize("suffix", ["onnx", "pt2"])
def test_a_model_exported_for_the_right_frames_loads_and_states_its_input(
    tmp_path: Path, suffix: str
) -> None:
    export_frames(tmp_path / "right", suffix, frames=47)
    loaded, failures = load_models(tmp_path)
    assert failures == []
    assert loaded["right"].recognizer.input_shape == (None, 32, 47)
    assert "16000 Hz mono, network input (windows, 32, 47) log-mel" in row(loaded["right"])


@pytest.mark.parametrize("suffix", ["onnx", "pt2"])
def test_a_model_exported_for_other_frames_is_refused_with_the_shape_and_the_fix(
    tmp_path: Path, suffix: str
) -> None:
    export_frames(tmp_path / "guessed", suffix, frames=50)
    loaded, failures = load_models(tmp_path)
    assert not loaded
    reason = failures[0].reason
    assert reason.startswith("ValueError: the model does not take the input")
    assert SENT in reason and RULE in reason
    assert "The model declares (windows, 32, 50)" in reason
    fix = re.search(r"set \[model\] window_s = ([\d.]+) \(8352 samples, 50 frames\)", reason)
    assert fix is not None, reason
    # The fix as given: the same file loads with the window it names.
    manifest = tmp_path / "guessed" / "manifest.toml"
    manifest.write_text(
        manifest.read_text().replace("window_s = 0.5", f"window_s = {fix.group(1)}")
    )
    loaded, failures = load_models(tmp_path)
    assert failures == []
    assert loaded["guessed"].recognizer.input_shape == (None, 32, 50)


def test_a_model_with_a_fixed_window_count_is_refused_before_it_is_called(tmp_path: Path) -> None:
    """Two windows at load time would pass a model fixed at two; segments send any number."""
    path = export_frames(tmp_path / "two", "onnx", frames=47)
    _fix_first_axis(path, 2)
    loaded, failures = load_models(tmp_path)
    assert not loaded
    assert (
        "The model declares (2, 32, 47): export it with a dynamic first axis" in failures[0].reason
    )


def test_an_onnx_model_that_declares_no_shape_is_called_to_see(tmp_path: Path) -> None:
    path = export_frames(tmp_path / "shapeless", "onnx", frames=47)
    model = onnx.load(str(path), load_external_data=False)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    onnx.save(model, str(path))
    loaded, failures = load_models(tmp_path)
    assert failures == []
    assert loaded["shapeless"].recognizer.input_shape == (None, 32, 47)


def test_a_wrong_mel_count_names_the_setting(tmp_path: Path) -> None:
    export_frames(tmp_path / "mels", "pt2", frames=47)
    manifest = tmp_path / "mels" / "manifest.toml"
    manifest.write_text(manifest.read_text().replace("n_mels = 32", "n_mels = 40"))
    _, failures = load_models(tmp_path)
    assert "The model declares (windows, 32, 47): set [features] n_mels = 32" in failures[0].reason


def test_a_torchscript_model_that_fails_on_the_input_gets_the_shape_and_the_runtime_words(
    tmp_path: Path,
) -> None:
    """TorchScript declares no shape: the runtime's own error follows what the server sends."""
    path = export_frames(tmp_path / "flat", "pt", frames=47)
    torch.jit.save(torch.jit.script(_Flat(frames=50)), str(path))
    _, failures = load_models(tmp_path)
    reason = failures[0].reason
    assert SENT in reason and RULE in reason, reason
    assert "Export it for (windows, 32, 47), windows dynamic; the runtime said: " in reason


class _Flat(nn.Module):
    """A network that flattens a fixed number of frames into its first layer."""

    def __init__(self, frames: int) -> None:
        super().__init__()
        self.out = nn.Linear(32 * frames, 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(features.flatten(1))  # type: ignore[no-any-return]


def _fix_first_axis(path: Path, size: int) -> None:
    model = onnx.load(str(path), load_external_data=False)
    axis = model.graph.input[0].type.tensor_type.shape.dim[0]
    axis.ClearField("dim_param")
    axis.dim_value = size
    onnx.save(model, str(path))

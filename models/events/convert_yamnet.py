"""Convert Google's YAMNet TFLite model into `yamnet.pt`, the state dict of
`arengine/kinds/events/network.py`.

    python models/events/convert_yamnet.py yamnet.tflite   # the 4,126,810-byte file: README.md

It also writes `reference.npz`: the TFLite runtime's scores (ai-edge-litert, its default XNNPACK
kernels, one thread) on every window of Debian's freedesktop and alsa-utils sounds, which
`tests/kinds/events/test_recognizer.py` compares the torch port with.

Reads every constant of the graph with ai-edge-litert's interpreter (the test extra): the framing
window, the mel matrix and its log offset, each convolution's int8 weights with their per-channel
scales and int32 biases (stored dequantized: `int32 * scale` is what the runtime adds), and the
quantisation (scale, zero point) of every activation the graph rounds to int8. The weights stay
int8 in the file (4 MB, not 15); the model dequantises them once at load time.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

SOURCE_SHA256 = "10c95ea3eb9a7bb4cb8bddf6feb023250381008177ac162ce169694d05c317de"
OUTPUT = Path(__file__).with_name("yamnet.pt")
REFERENCE = Path(__file__).with_name("reference.npz")
REPOSITORY = Path(__file__).resolve().parents[2]


def _quant(detail: dict[str, Any]) -> tuple[float, int]:
    params = detail["quantization_parameters"]
    return float(params["scales"][0]), int(params["zero_points"][0])


def convert(tflite: Path) -> dict[str, torch.Tensor]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=str(tflite),
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    interpreter.allocate_tensors()
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    ops = interpreter._get_ops_details()  # the only way to the graph's wiring in this API
    by_name = {d["name"]: d["index"] for d in details.values()}

    def tensor(index: int) -> np.ndarray:
        return np.array(interpreter.get_tensor(index))

    state: dict[str, torch.Tensor] = {
        "window": torch.from_numpy(tensor(by_name["stft/hann_window/sub_2"])),
        "mel": torch.from_numpy(tensor(by_name["mel_spectrogram"])),
        "mel_offset": torch.from_numpy(tensor(by_name["add"])),
    }
    scale, zero = _quant(details[by_name["tfl.quantize"]])
    state["input.quant"] = torch.tensor([scale, zero], dtype=torch.float64)
    layer = 0
    for op in ops:
        name = op["op_name"]
        if name not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            continue
        source, weights, bias = (int(i) for i in op["inputs"])
        out = int(op["outputs"][0])
        w = tensor(weights)  # CONV_2D: (out, h, w, in); DEPTHWISE: (1, h, w, channels)
        w = w.transpose(3, 0, 1, 2) if name == "DEPTHWISE_CONV_2D" else w.transpose(0, 3, 1, 2)
        w_scales = details[weights]["quantization_parameters"]["scales"]
        b_scales = details[bias]["quantization_parameters"]["scales"]
        stride = details[source]["shape"][1] // details[out]["shape"][1]
        prefix = f"layers.{layer}"
        state[f"{prefix}.weight"] = torch.from_numpy(np.ascontiguousarray(w))
        state[f"{prefix}.weight_scale"] = torch.from_numpy(w_scales.astype(np.float32))
        state[f"{prefix}.bias"] = torch.from_numpy((tensor(bias) * b_scales).astype(np.float32))
        state[f"{prefix}.quant"] = torch.tensor(_quant(details[out]), dtype=torch.float64)
        state[f"{prefix}.stride"] = torch.tensor(int(stride))
        state[f"{prefix}.depthwise"] = torch.tensor(name == "DEPTHWISE_CONV_2D")
        layer += 1
    fc = next(op for op in ops if op["op_name"] == "FULLY_CONNECTED" and op["index"] > 16)
    mean = next(op for op in ops if op["op_name"] == "MEAN")
    logistic = next(op for op in ops if op["op_name"] == "LOGISTIC")
    _, weights, bias = (int(i) for i in fc["inputs"])
    state["pool.quant"] = torch.tensor(
        _quant(details[int(mean["outputs"][0])]), dtype=torch.float64
    )
    state["fc.weight"] = torch.from_numpy(tensor(weights))
    state["fc.weight_scale"] = torch.tensor(_quant(details[weights])[0], dtype=torch.float32)
    b_scale = _quant(details[bias])[0]
    state["fc.bias"] = torch.from_numpy((tensor(bias) * b_scale).astype(np.float32))
    state["fc.quant"] = torch.tensor(_quant(details[int(fc["outputs"][0])]), dtype=torch.float64)
    state["score.quant"] = torch.tensor(
        _quant(details[int(logistic["outputs"][0])]), dtype=torch.float64
    )
    return state


def reference(tflite: Path) -> dict[str, np.ndarray]:
    """The runtime's scores per window of each Debian recording, keyed by file name."""
    from ai_edge_litert.interpreter import Interpreter

    sys.path.insert(0, str(REPOSITORY))
    from tests.recordings import debian_sounds, event_windows, mono_16k

    interpreter = Interpreter(model_path=str(tflite), num_threads=1)
    interpreter.allocate_tensors()
    (source,), (output,) = interpreter.get_input_details(), interpreter.get_output_details()
    scores = {}
    for path in debian_sounds():
        rows = []
        for window in event_windows(mono_16k(path)):
            interpreter.set_tensor(source["index"], window)
            interpreter.invoke()
            rows.append(interpreter.get_tensor(output["index"])[0].copy())
        scores[path.name] = np.stack(rows)
    return scores


def main() -> None:
    source = Path(sys.argv[1])
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        sys.exit(f"{source}: sha256 {digest}, expected {SOURCE_SHA256}")
    torch.save(convert(source), OUTPUT)
    print(OUTPUT, hashlib.sha256(OUTPUT.read_bytes()).hexdigest())
    savez: Any = np.savez_compressed  # its stubs take the arrays' names for its own keywords
    savez(REFERENCE, **reference(source))
    print(REFERENCE)


if __name__ == "__main__":
    main()

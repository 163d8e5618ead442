"""The `events` kind's recognizer: 0.975-s windows every `hop_s` through YAMNet (`network.py`),
521 AudioSet scores each, tagged by the shared label tagger."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from arengine.audio.segments import Segment, SegmentPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.events.fields import LABEL_ID
from arengine.kinds.events.network import (
    CHUNK_WINDOWS,
    FRAME,
    FRAME_HOP,
    HOP_S,
    N_CLASSES,
    SAMPLE_RATE,
    WINDOW,
    Yamnet,
)
from arengine.kinds.events.params import EventParams
from arengine.postprocess.labels import LabelTagger
from arengine.postprocess.vocabulary import Vocabulary


def read_class_map(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """AudioSet's names and ids in the network's output order, from `yamnet_class_map.csv`."""
    with path.open(newline="", encoding="utf-8") as table:
        rows = list(csv.DictReader(table))
    if [int(row["index"]) for row in rows] != list(range(N_CLASSES)):
        raise ValueError(f"{path}: expected {N_CLASSES} classes indexed 0 to {N_CLASSES - 1}")
    return tuple(row["display_name"] for row in rows), tuple(row["mid"] for row in rows)


class EventsRecognizer(Recognizer):
    """0.975-s windows every `hop_s` -> YAMNet -> 521 independent scores -> runs per class."""

    kind = "events"
    _params: EventParams
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        weights: Path,
        labels: tuple[str, ...],
        ids: tuple[str, ...],
        segment_s: float,
        hop_s: float = HOP_S,
        name: str = "events",
        params: EventParams | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        if len(labels) != N_CLASSES or len(ids) != N_CLASSES:
            raise ValueError(f"an events model has {N_CLASSES} labels and ids")
        self.name = name
        self.labels, self.ids = labels, ids
        hop = round(hop_s * SAMPLE_RATE)
        if not 0 < hop <= WINDOW:
            raise ValueError(f"hop_s must be above 0 and at most {WINDOW / SAMPLE_RATE} s")
        self.plan = SegmentPlan(
            hop=hop,
            context=0,
            segment_frames=max(1, round(segment_s / hop_s)),
            preroll_frames=0,
            lookahead=WINDOW - hop,
        )
        self._model = Yamnet.load(weights)
        self._params = params or EventParams()
        self.vocabulary = vocabulary or Vocabulary(labels, ids)

    def features(self, segment: Segment) -> Tensor:
        """The segment's patches, `(windows, 1, 96, 64)`. The hop is a whole number of 10-ms
        frames (0.48 s: 48), so the log-mel is computed once per frame and each window's patch
        is a slice: the same numbers as per window, without computing overlaps twice."""
        samples = torch.from_numpy(segment.samples)
        windows = segment.skip_frames + segment.frames
        if self.plan.hop % FRAME_HOP:
            return self._model.patches(samples.unfold(0, WINDOW, self.plan.hop)[:windows])
        with torch.inference_mode():
            frames = self._model.log_mel(samples)
        step, size = self.plan.hop // FRAME_HOP, (WINDOW - FRAME) // FRAME_HOP + 1
        return frames.unfold(0, size, step)[:windows].transpose(1, 2).unsqueeze(1)

    def infer(self, features: Tensor, segment: Segment) -> np.ndarray:
        patches = features[segment.skip_frames :]
        with torch.inference_mode():
            scores = [
                self._model.body(patches[i : i + CHUNK_WINDOWS])
                for i in range(0, len(patches), CHUNK_WINDOWS)
            ]
        out: np.ndarray = torch.cat(scores).numpy() if scores else np.zeros((0, N_CLASSES))
        return out

    def tagger(self, overrides: Overrides) -> LabelTagger:
        return LabelTagger(
            self.labels,
            self._params.for_request(overrides, self.vocabulary),
            SAMPLE_RATE,
            self.plan.hop,
            WINDOW,
            ids=self.ids,
            peak=True,
            vocabulary=self.vocabulary,
            centred=True,
            id_field=LABEL_ID.name,
        )

    def warm_up(self) -> None:
        samples = np.zeros(WINDOW, dtype=np.float32)
        segment = Segment(0, 0, 0, 1, samples)
        self.infer(self.features(segment), segment)

"""Bird detections from BirdNET's logits: confidence, location filter, thresholds, merged runs.

A window's species is detected where its confidence (a sigmoid of the logit, its slope set by
`sensitivity`) reaches `min_conf` (or the species' own threshold) and, with `lat` and `lon`, the
location model lists the species there (`sf_thresh`). Like BirdNET, a window with less than 1.5 s
of audio (the recording's last) is not reported. With `merge_consecutive`, one species' detections
in consecutive windows become one tag (its best confidence).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from arengine.errors import ErrorCode, InvalidInput
from arengine.kinds.birds.fields import SCIENTIFIC_NAME
from arengine.kinds.fields import extra_of
from arengine.postprocess.params import Bounds, Params, param
from arengine.postprocess.vocabulary import split_list, split_values
from arengine.types import Tag

if TYPE_CHECKING:
    from torch import Tensor

_TEXTS = {
    "species": "Birds: only these species, scientific or common names separated by ';' "
    "(a custom species list).",
    "thresholds": "Per-label thresholds, label:value separated by ';' (Glass:0.2;Siren:0.4; "
    "birds: scientific or common names, Turdus migratorius:0.5).",
}
"""The text parameters of the birds kind, each with its one line of documentation."""

MIN_AUDIO_S = 1.5
"""A window with less audio than this (the recording's last) is not reported, as in BirdNET."""
LOGIT_CLIP = 15.0
"""BirdNET clips logits to +-15 before its sigmoid."""


def confidence(logits: Tensor, sensitivity: float) -> Tensor:
    """BirdNET's confidence for `sensitivity` as BirdNET-Analyzer's option (0.5-1.5, higher
    detects more): a sigmoid of slope `2 - sensitivity` of the clipped logits."""
    slope = max(0.5, min(2.0 - sensitivity, 1.5))
    return (slope * logits.clamp(-LOGIT_CLIP, LOGIT_CLIP)).sigmoid()


@dataclass(frozen=True, slots=True)
class BirdsParams(Params):
    """Post-processing of BirdNET; `thresholds` overrides `min_conf` per species."""

    kind: ClassVar[str] = "birds"

    min_conf: float = param(0.1, "A species is detected where its confidence reaches this.",
                            Bounds(0.01, 0.99))  # fmt: skip
    sensitivity: float = param(
        1.0, "BirdNET's detection sensitivity: higher gives more detections.", Bounds(0.5, 1.5)
    )
    lat: float | None = param(
        None, "Latitude of the recorder: keep only species the location model expects there.",
        Bounds(-90, 90),
    )  # fmt: skip
    lon: float | None = param(None, "Longitude of the recorder (with lat).", Bounds(-180, 180))
    week: int = param(
        -1, "Week of the year in BirdNET's 48-week calendar (1-48), -1 for all year.",
        Bounds(-1, 48, whole=True, excluded=(0,)),
    )  # fmt: skip
    sf_thresh: float = param(
        0.03, "The location model's score a species needs to be expected there.",
        Bounds(0.0001, 0.99),
    )  # fmt: skip
    merge_consecutive: int = param(
        0, "1: one species' detections in consecutive windows become one tag.",
        Bounds(0, 1, whole=True),
    )  # fmt: skip
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Per-species thresholds by scientific or common name: `thresholds=Turdus migratorius:0.5`
    (a table in a manifest)."""
    species: tuple[str, ...] = ()
    """A custom species list (scientific or common names): only these; empty is every class."""

    @classmethod
    def texts(cls) -> dict[str, str]:
        return dict(_TEXTS)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Self:
        """As `Params.with_overrides`, plus the species list and thresholds: text in a query
        (`species=Turdus migratorius;Northern Cardinal`), a TOML list and table in a manifest."""
        changed = Params.with_overrides(
            self, {k: v for k, v in overrides.items() if k not in _TEXTS}
        )
        lists: dict[str, Any] = {}
        if "thresholds" in overrides:
            value = overrides["thresholds"]
            values = split_values("thresholds", value) if isinstance(value, str) else dict(value)
            lists["thresholds"] = {**changed.thresholds, **values}
        if "species" in overrides:
            value = overrides["species"]
            lists["species"] = split_list(value) if isinstance(value, str) else tuple(value)
        return dataclasses.replace(changed, **lists) if lists else changed

    def check(self) -> None:
        if (self.lat is None) != (self.lon is None):
            raise InvalidInput(
                "lat and lon go together: give both or neither", code=ErrorCode.INVALID_PARAMETER
            )
        bounds = self.bounds()["min_conf"]
        for name, value in self.thresholds.items():
            if not isinstance(value, int | float) or not bounds.accepts(float(value)):
                raise InvalidInput(
                    f"the threshold of {name!r} must be {bounds.text()}, got {value!r}",
                    code=ErrorCode.INVALID_PARAMETER,
                )

    def defaults(self) -> dict[str, float]:
        """The parameters as `GET /v1/models` lists them; per-species ones as `threshold.<name>`."""
        return {
            **self.as_dict(),
            **{f"threshold.{name}": value for name, value in self.thresholds.items()},
        }


@dataclass(slots=True)
class _Run:
    first: int
    scores: list[float]

    @property
    def last(self) -> int:
        return self.first + len(self.scores) - 1


class BirdsTagger:
    """Feed `(windows, classes)` logits with `push`, then `finish`.

    Window `i` covers `[i * hop, i * hop + window)` samples; `allowed` marks the classes that may
    be reported (the custom list and the location filter), `thresholds` each class's threshold.
    """

    def __init__(
        self,
        labels: tuple[tuple[str, str], ...],
        params: BirdsParams,
        allowed: np.ndarray,
        thresholds: np.ndarray,
        sample_rate: int,
        hop: int,
        window: int,
    ) -> None:
        self.labels = labels
        self.params = params
        self.allowed = allowed
        self.thresholds = thresholds
        self.rate = sample_rate
        self.hop = hop
        self.window = window
        self.min_samples = round(MIN_AUDIO_S * sample_rate)
        self.hold = math.ceil(self.min_samples / hop)
        """Windows this close to the newest may turn out to be the short last one."""
        self.open: dict[int, _Run] = {}
        self.closed: list[tuple[int, _Run]] = []
        self.frame = 0

    def push(self, scores: np.ndarray) -> list[Tag]:
        import torch  # with the model that gives the scores, not with the kind's declaration

        logits = torch.from_numpy(
            np.asarray(scores, dtype=np.float32).reshape(-1, len(self.labels))
        )
        conf = confidence(logits, self.params.sensitivity).numpy().astype(np.float64)
        for row in conf:
            hits = np.flatnonzero((row >= self.thresholds) & self.allowed).tolist()
            for label in list(self.open):
                if label not in hits or not self.params.merge_consecutive:
                    self.closed.append((label, self.open.pop(label)))
            for label in hits:
                run = self.open.get(label)
                if run is None:
                    self.open[label] = _Run(self.frame, [float(row[label])])
                else:
                    run.scores.append(float(row[label]))
            self.frame += 1
        limit = min([run.first for run in self.open.values()] + [self.frame - self.hold])
        return self._release(lambda run: run.first < limit and run.last < self.frame - self.hold)

    def finish(self, audio_samples: int) -> list[Tag]:
        self.closed += list(self.open.items())
        self.open.clear()
        # The last windows: only those with at least MIN_AUDIO_S of audio.
        usable = (audio_samples - self.min_samples) // self.hop
        for _, run in self.closed:
            del run.scores[max(0, usable - run.first + 1) :]
        self.closed = [(label, run) for label, run in self.closed if run.scores]
        return self._release(lambda run: True)

    def _release(self, ready: Callable[[_Run], bool]) -> list[Tag]:
        self.closed.sort(key=lambda item: (item[1].first, -max(item[1].scores)))
        out = [item for item in self.closed if ready(item[1])]
        self.closed = [item for item in self.closed if not ready(item[1])]
        return [self._tag(label, run) for label, run in out]

    def _tag(self, label: int, run: _Run) -> Tag:
        # The window's end even past the recording's, as BirdNET reports it (start + 3 s).
        start = run.first * self.hop
        end = run.last * self.hop + self.window
        scientific, common = self.labels[label]
        return Tag(
            start=round(start / self.rate, 3),
            end=round(end / self.rate, 3),
            label=common,
            score=round(max(run.scores), 4),
            extra=extra_of((SCIENTIFIC_NAME, scientific)),
        )

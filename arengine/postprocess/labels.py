"""Label tags from per-window classifier scores: thresholds, merged runs, minimum durations.

Runs of windows over a label's threshold become one tag; runs separated by at most `merge_gap_s`
merge. Tags of all labels come out ordered by start, as soon as no open run can precede them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from arengine.errors import ErrorCode, InvalidInput
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag


@dataclass(frozen=True, slots=True)
class LabelParams(Params):
    """Post-processing of a classifier; `thresholds` overrides `threshold` per label."""

    kind: ClassVar[str] = "classifier"

    threshold: float = param(
        0.5, "A label's tag starts where its score reaches this.", Bounds(0, 1, high_open=True)
    )
    min_duration_ms: int = param(0, "Shorter tags are dropped.", Bounds(0, 3_600_000, whole=True))
    merge_gap_ms: int = param(
        0, "Runs of the same label this close merge.", Bounds(0, 3_600_000, whole=True)
    )
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Per-label thresholds (manifests only)."""

    def check(self) -> None:
        bounds = self.bounds()["threshold"]
        for label, value in self.thresholds.items():
            if not isinstance(value, int | float) or not bounds.accepts(float(value)):
                raise InvalidInput(
                    f"the threshold of {label!r} must be {bounds.text()}, got {value!r}",
                    code=ErrorCode.INVALID_PARAMETER,
                )

    def with_overrides(self, overrides: Mapping[str, Any]) -> Self:
        """As `Params.with_overrides`; a client's threshold applies to every label."""
        changed = Params.with_overrides(self, overrides)
        return dataclasses.replace(changed, thresholds={}) if "threshold" in overrides else changed

    def defaults(self) -> dict[str, float]:
        """The parameters as `GET /v1/models` lists them; per-label ones as `threshold.<label>`."""
        return {
            "threshold": self.threshold,
            "min_duration_ms": self.min_duration_ms,
            "merge_gap_ms": self.merge_gap_ms,
            **{f"threshold.{label}": value for label, value in self.thresholds.items()},
        }

    def threshold_of(self, label: str) -> float:
        return self.thresholds.get(label, self.threshold)


@dataclass(frozen=True, slots=True)
class MusicParams(LabelParams):
    """Post-processing of the music tagger: a classifier's, over 3-s patches."""

    kind: ClassVar[str] = "music"


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    total: float
    count: int = 1


class LabelTagger:
    """Feed `(frames, labels)` scores with `push`, then `finish`.

    A window `i` covers `[i * hop, i * hop + window)` samples.
    """

    def __init__(
        self, labels: tuple[str, ...], params: LabelParams, sample_rate: int, hop: int, window: int
    ) -> None:
        self.labels = labels
        self.params = params
        self.rate = sample_rate
        self.hop = hop
        self.window = window
        self.thresholds = np.array([params.threshold_of(label) for label in labels])
        self.gap_frames = params.merge_gap_ms * sample_rate / 1000 / hop
        self.open: dict[int, _Run] = {}
        self.closed: list[tuple[int, int, _Run]] = []
        self.frame = 0
        self.end_sample: int | None = None

    def push(self, scores: np.ndarray) -> list[Tag]:
        for row in np.asarray(scores, dtype=np.float64).reshape(-1, len(self.labels)):
            for label in np.flatnonzero(row >= self.thresholds).tolist():
                run = self.open.get(label)
                if run is None:
                    self.open[label] = _Run(self.frame, self.frame, float(row[label]))
                else:
                    run.total += float(row[label])
                    run.count += 1
                    run.last = self.frame
            for label, run in list(self.open.items()):
                if self.frame - run.last > self.gap_frames:
                    self._close(label)
            self.frame += 1
        return self._release(
            limit=min((run.first for run in self.open.values()), default=self.frame)
        )

    def finish(self, audio_samples: int) -> list[Tag]:
        self.end_sample = audio_samples
        for label in list(self.open):
            self._close(label)
        return self._release(limit=None)

    def _close(self, label: int) -> None:
        run = self.open.pop(label)
        self.closed.append((run.first, label, run))

    def _release(self, limit: int | None) -> list[Tag]:
        self.closed.sort(key=lambda item: (item[0], item[1]))
        ready = [item for item in self.closed if limit is None or item[0] < limit]
        self.closed = self.closed[len(ready) :]
        tags = (self._tag(label, run) for _, label, run in ready)
        return [tag for tag in tags if tag is not None]

    def _tag(self, label: int, run: _Run) -> Tag | None:
        start = run.first * self.hop
        end = run.last * self.hop + self.window
        if self.end_sample is not None:
            end = min(end, self.end_sample)
        if (end - start) * 1000 < self.params.min_duration_ms * self.rate:
            return None
        return Tag(
            start=round(start / self.rate, 3),
            end=round(end / self.rate, 3),
            label=self.labels[label],
            score=round(run.total / run.count, 4),
        )

"""Label tags from per-window classifier scores: thresholds, merged runs, minimum durations.

Runs of windows over a label's threshold become one tag; runs separated by at most `merge_gap_s`
merge. With `hysteresis`, a run that has started lasts while its score stays above a lower
threshold, so a score hovering at the threshold does not chop one event into many. Tags of all
labels come out ordered by start, as soon as no open run can precede them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from arengine.errors import ErrorCode, InvalidInput
from arengine.postprocess.palette import Palette
from arengine.postprocess.params import Bounds, Params, param
from arengine.postprocess.vocabulary import Vocabulary, split_list, split_values
from arengine.types import Extra, Tag


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
    hysteresis: float = param(
        0.0,
        "A started tag lasts while its score stays above threshold x (1 - hysteresis).",
        Bounds(0, 1, high_open=True),
    )
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Per-label thresholds: `thresholds=Glass:0.2;Siren:0.4` (a table in a manifest)."""
    min_durations_ms: Mapping[str, float] = field(default_factory=dict)
    """Per-label minimum durations: `min_durations_ms=Speech:1000`."""
    merge_gaps_ms: Mapping[str, float] = field(default_factory=dict)
    """Per-label merge gaps: `merge_gaps_ms=Siren:3000`."""
    labels: tuple[str, ...] | None = None
    """Only these labels (groups, ontology classes); `None` is every label."""
    exclude: tuple[str, ...] = ()
    """Never these labels."""
    group: tuple[str, ...] = ()
    """Groups reported as one label, scored by their best member."""
    profile: str | None = None
    """A named set of these values, declared in the manifest."""

    def check(self) -> None:
        bounds = self.bounds()
        for name, key in _VALUES.items():
            for label, value in getattr(self, name).items():
                if not isinstance(value, int | float) or not bounds[key].accepts(float(value)):
                    raise InvalidInput(
                        f"{name}: the value of {label!r} must be {bounds[key].text()}, "
                        f"got {value!r}",
                        code=ErrorCode.INVALID_PARAMETER,
                    )

    @classmethod
    def texts(cls) -> dict[str, str]:
        return dict(_TEXTS)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Self:
        """As `Params.with_overrides`, plus the label lists; a client's threshold applies to
        every label. A query's lists are text (`labels=Glass;Shatter`), a manifest's TOML."""
        numbers = {k: v for k, v in overrides.items() if k not in _TEXTS}
        changed = Params.with_overrides(self, numbers)
        if "threshold" in numbers:
            changed = dataclasses.replace(changed, thresholds={})
        lists: dict[str, Any] = {}
        for name, value in overrides.items():
            if name in _VALUES:
                values = split_values(name, value) if isinstance(value, str) else dict(value)
                lists[name] = {**getattr(changed, name), **values}
            elif name == "profile":
                lists[name] = str(value)
            elif name in _TEXTS:
                lists[name] = split_list(value) if isinstance(value, str) else tuple(value)
        return dataclasses.replace(changed, **lists) if lists else changed

    def for_request(self, overrides: Mapping[str, Any], vocabulary: Vocabulary) -> Self:
        """The values a request gets: the manifest's, then its profile's, then the query's."""
        profile = overrides.get("profile", self.profile)
        base = self if profile is None else self.with_overrides(vocabulary.profile(str(profile)))
        return base.with_overrides({k: v for k, v in overrides.items() if k != "profile"})

    def defaults(self) -> dict[str, float]:
        """The parameters as `GET /v1/models` lists them; per-label ones as `threshold.<label>`."""
        return {
            "threshold": self.threshold,
            "min_duration_ms": self.min_duration_ms,
            "merge_gap_ms": self.merge_gap_ms,
            "hysteresis": self.hysteresis,
            **{f"threshold.{label}": value for label, value in self.thresholds.items()},
        }

    def threshold_of(self, label: str) -> float:
        return self.thresholds.get(label, self.threshold)


def understands(vocabulary: Vocabulary, name: str, value: Any, refuse: bool = False) -> bool:
    """Whether a model with this vocabulary knows every name of one label list (`refuse`: raise
    the reason instead of answering False)."""
    try:
        params = LabelParams(threshold=0.5)
        LabelView.of(vocabulary, params.for_request({name: value}, vocabulary))
    except InvalidInput:
        if refuse:
            raise
        return False
    return True


_TEXTS = {
    "labels": "Only these labels: names, AudioSet ids (/m/09x0r), groups or ontology classes, "
    "separated by ';' (AudioSet names contain commas).",
    "exclude": "Never these labels (same syntax as labels): exclude=Speech leaves speech to the "
    "speech model.",
    "group": "Report each of these groups (a manifest group or an ontology class: group=Dog) "
    "as one label, scored by its best member.",
    "profile": "A named set of these parameters declared by the model's manifest "
    "(events: safety, wildlife, ambient).",
    "thresholds": "Per-label thresholds, label:value separated by ';' (Glass:0.2;Siren:0.4).",
    "min_durations_ms": "Per-label minimum durations in ms, label:value separated by ';'.",
    "merge_gaps_ms": "Per-label merge gaps in ms, label:value separated by ';'.",
}
"""The text parameters of label models, each with its one line of documentation."""
_VALUES = {
    "thresholds": "threshold",
    "min_durations_ms": "min_duration_ms",
    "merge_gaps_ms": "merge_gap_ms",
}
"""Per-label maps and the parameter whose bounds their values take."""


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    total: float
    count: int = 1
    peak: float = 0.0

    def add(self, frame: int, score: float) -> None:
        self.total += score
        self.count += 1
        self.last = frame
        self.peak = max(self.peak, score)


@dataclass(frozen=True, slots=True)
class LabelView:
    """The labels a request reports: groups merged, filters applied, per-label values resolved.

    `columns[k]` are the model's outputs whose best score is reported label `k`'s.
    """

    names: tuple[str, ...]
    ids: tuple[str | None, ...]
    columns: tuple[tuple[int, ...], ...]
    thresholds: np.ndarray
    min_durations_ms: np.ndarray
    merge_gaps_ms: np.ndarray

    @classmethod
    def of(cls, vocabulary: Vocabulary, params: LabelParams) -> LabelView:
        outputs: list[tuple[tuple[int, ...], str, str | None]] = []
        grouped: set[int] = set()
        for item in params.group:
            members = vocabulary.members(item)
            outputs.append(members)
            grouped.update(members[0])
        ids = vocabulary.ids
        outputs += [
            ((i,), label, ids[i] if ids else None)
            for i, label in enumerate(vocabulary.labels)
            if i not in grouped
        ]
        if params.labels is not None:
            wanted = vocabulary.indices(params.labels)
            outputs = [o for o in outputs if wanted.intersection(o[0])]
        unwanted = vocabulary.indices(params.exclude)
        outputs = [o for o in outputs if not unwanted.issuperset(o[0])]

        def per_label(name: str, default: float) -> np.ndarray:
            values = np.full(len(outputs), float(default))
            # Broader items first, so that a label's own value wins over its group's.
            items = sorted(
                ((vocabulary.members(k), v) for k, v in getattr(params, name).items()),
                key=lambda item: -len(item[0][0]),
            )
            for (members, label, _), value in items:
                for k, (columns, own, _) in enumerate(outputs):
                    if own == label or set(columns) <= set(members):
                        values[k] = value
            return values

        return cls(
            names=tuple(o[1] for o in outputs),
            ids=tuple(o[2] for o in outputs),
            columns=tuple(o[0] for o in outputs),
            thresholds=per_label("thresholds", params.threshold),
            min_durations_ms=per_label("min_durations_ms", params.min_duration_ms),
            merge_gaps_ms=per_label("merge_gaps_ms", params.merge_gap_ms),
        )

    def scores(self, scores: np.ndarray) -> np.ndarray:
        """`(frames, model outputs)` -> `(frames, reported labels)` (`scores` itself when every
        output is reported as it is)."""
        if self.columns == tuple((i,) for i in range(scores.shape[1])):
            return scores
        if all(len(columns) == 1 for columns in self.columns):
            return scores[:, [columns[0] for columns in self.columns]]
        return np.stack([scores[:, list(c)].max(axis=1) for c in self.columns], axis=1)


def _pieces(weak: np.ndarray, strong: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stretches a run adds, from `(labels, frames)` masks: a run starts at a strong frame
    and goes on over the weak frames that follow it, so each stretch of weak frames holding a
    strong one gives a piece from its first strong frame to its end. Returns each piece's
    label, first and last frame, by label then frame."""
    width = weak.shape[1] + 2
    padded = np.zeros((weak.shape[0], width), bool)
    padded[:, 1:-1] = weak
    flat = padded.ravel()
    edges = np.flatnonzero(flat[1:] != flat[:-1])
    begins, ends = edges[0::2] + 1, edges[1::2]
    padded[:, 1:-1] = strong
    strongest = np.flatnonzero(padded.ravel())
    at = np.searchsorted(strongest, begins)
    first = np.append(strongest, flat.size)[at]
    held = first <= ends
    first, ends = first[held], ends[held]
    label = first // width
    return label, first - label * width - 1, ends - label * width - 1


def _at_least(scores: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """`scores >= limits` (broadcast); palette codes (bytes) are compared as bytes, a limit past
    the last code (256) holding none."""
    if scores.dtype != np.uint8:
        over: np.ndarray = scores >= limits
        return over
    codes: np.ndarray = scores >= np.minimum(limits, 255).astype(np.uint8)
    if (limits > 255).any():
        codes &= limits <= 255
    return codes


_SPARSE = 16
"""Under one score in this many at or above its release threshold (events: 1 in 370), pieces
are found from those scores alone instead of from every label's whole row."""


def _sparse_pieces(
    matrix: np.ndarray, weak: np.ndarray, thresholds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`_pieces` and `_piece_values` from the few true entries of the `(frames, labels)` mask
    `weak`: each piece's label, first and last frame (by label then frame), the scores of
    their frames piece after piece, and where each piece begins."""
    labels = matrix.shape[1]
    entries = _true_entries(weak)
    frame, label = np.divmod(entries, labels)
    order = np.argsort(label.astype(np.int32), kind="stable")
    frame, label, scores = frame[order], label[order], matrix.ravel()[entries[order]]
    count = len(scores)
    if not count:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, scores, empty
    # Stretches of weak frames: a new one where the label changes or a frame is skipped.
    new = np.ones(count, bool)
    new[1:] = (label[1:] != label[:-1]) | (frame[1:] != frame[:-1] + 1)
    stretch = np.cumsum(new) - 1
    stretch_end = np.append(np.flatnonzero(new)[1:], count) - 1
    strong = np.flatnonzero(_at_least(scores, thresholds[label]))
    owner = stretch[strong]
    firsts = np.ones(len(strong), bool)
    firsts[1:] = owner[1:] != owner[:-1]
    begin = strong[firsts]  # each stretch's first strong frame
    end = stretch_end[owner[firsts]]
    inside = np.zeros(count + 1, np.int64)
    inside[begin] += 1
    inside[end + 1] -= 1
    values = scores[np.cumsum(inside[:-1]) > 0]
    lengths = end - begin + 1
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return label[begin], frame[begin], frame[end], values, offsets


def _true_entries(mask: np.ndarray) -> np.ndarray:
    """Flat indices of a mostly false mask's true entries, in order: its bytes are scanned 8 at
    a time."""
    flat = mask.ravel()
    padded = np.zeros(-(-len(flat) // 8) * 8, bool)
    padded[: len(flat)] = flat
    words = np.flatnonzero(padded.view(np.uint64))
    candidates = (words[:, None] * 8 + np.arange(8)).ravel()
    entries: np.ndarray = candidates[padded[candidates]]
    return entries


def _piece_values(
    matrix: np.ndarray, label: np.ndarray, first: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The scores of every piece's frames, piece after piece, and where each piece begins."""
    lengths = last - first + 1
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else lengths
    piece = np.repeat(np.arange(len(lengths)), lengths)
    frames = first[piece] + np.arange(len(piece)) - offsets[piece]
    values: np.ndarray = matrix[frames, label[piece]]
    return values, offsets


class LabelTagger:
    """Feed `(frames, labels)` scores with `push`, then `finish`.

    A window `i` covers `[i * hop, i * hop + window)` samples. A tag's score is its run's mean,
    or with `peak` its highest window (an event's strength, not diluted by its fading tail);
    `ids` (one per label) go into each tag's field `id_field`, which the calling kind declares
    (events: `label_id`). `vocabulary` resolves the label lists of
    `params` (groups, filters, per-label values); without one, the labels are plain names.
    With `centred`, a run ends at the end of its last window's middle `hop` samples, and starts
    at its first window's centre: a window fires once a sound fills its later part, so a sharp
    onset lies after the window's start, near its centre, not half a hop before it (measured on
    inserted phone rings and voices: starts up to 0.66 s early before, within 0.42 s now).
    """

    def __init__(
        self,
        labels: tuple[str, ...],
        params: LabelParams,
        sample_rate: int,
        hop: int,
        window: int,
        ids: tuple[str, ...] | None = None,
        peak: bool = False,
        vocabulary: Vocabulary | None = None,
        centred: bool = False,
        id_field: str | None = None,
    ) -> None:
        self.inputs = len(labels)
        self.margin = (window - hop) // 2 if centred else 0
        self.lead = window // 2 if centred else 0
        self.view = LabelView.of(vocabulary or Vocabulary(labels, ids), params)
        # Each label's tag fields, made once: the shared tagger names no kind's field.
        self.extras = tuple(
            Extra({id_field: ident}) if id_field else Extra() for ident in self.view.ids
        )
        self.peak = peak
        self.params = params
        self.rate = sample_rate
        self.hop = hop
        self.window = window
        self.thresholds = self.view.thresholds
        self.releases = self.thresholds * (1.0 - params.hysteresis)
        self.gap_frames = self.view.merge_gaps_ms * sample_rate / 1000 / hop
        self.open: dict[int, _Run] = {}
        self.closed: list[tuple[int, int, _Run]] = []
        self.frame = 0
        self.end_sample: int | None = None
        self.in_start_order = True
        """Tags come in start order: a finished run waits while an earlier-starting one is
        open. False (a live stream, `arengine/live/plans.py`): each run's tag comes as soon as
        it is final, so one label's tags are in order but a long run of another label does not
        hold them back."""
        self.on_open: Callable[[str, float], None] | None = None
        """Hears `(label, start_s)` once an open run has lasted its label's minimum duration:
        its tag is sure to come, but only once the run ends (a live stream's MQTT state goes ON
        at a sound's start, not at its end: `arengine/notify/`)."""
        self._announced: set[int] = set()

    def push(self, scores: np.ndarray) -> list[Tag]:
        matrix = np.asarray(scores, dtype=np.float64).reshape(-1, self.inputs)
        for row in self.view.scores(matrix):
            for label in np.flatnonzero(row >= self.releases).tolist():
                run = self.open.get(label)
                score = float(row[label])
                if run is not None and self.frame - run.last == 1:
                    run.add(self.frame, score)  # a run continues down to the release threshold
                elif score >= self.thresholds[label]:
                    if run is None:
                        self.open[label] = _Run(self.frame, self.frame, score, peak=score)
                    else:
                        run.add(self.frame, score)  # within the merge gap
            for label, run in list(self.open.items()):
                if self.frame - run.last > self.gap_frames[label]:
                    self._close(label)
            if self.on_open is not None:
                self._announce_open(self.on_open)
            self.frame += 1
        if not self.in_start_order:
            return self._release(limit=None)
        return self._release(
            limit=min((run.first for run in self.open.values()), default=self.frame)
        )

    def finish(self, audio_samples: int) -> list[Tag]:
        self.end_sample = audio_samples
        for label in list(self.open):
            self._close(label)
        return self._release(limit=None)

    def whole(self, scores: np.ndarray | Palette, audio_samples: int) -> list[Tag]:
        """`push(scores)` then `finish(audio_samples)` on a fresh tagger: the same tags, with
        numpy over whole arrays instead of a Python step per frame (a finished job's kept
        scores under new parameters, `arengine/jobs/retag.py`). Palette-coded scores are
        compared as codes."""
        if isinstance(scores, Palette):
            matrix = self.view.scores(scores.codes.reshape(-1, self.inputs))
            releases, thresholds = scores.at_least(self.releases), scores.at_least(self.thresholds)
            table = scores.values.astype(np.float64)
        else:
            matrix = self.view.scores(np.asarray(scores).reshape(-1, self.inputs))
            releases, thresholds, table = self.releases, self.thresholds, None
        self.end_sample = audio_samples
        weak = _at_least(matrix, releases[None, :])
        if np.count_nonzero(weak) * _SPARSE < weak.size:
            label, first, last, values, offsets = _sparse_pieces(matrix, weak, thresholds)
        else:
            by_label = np.ascontiguousarray(matrix.T)
            label, first, last = _pieces(
                _at_least(by_label, releases[:, None]), _at_least(by_label, thresholds[:, None])
            )
            values, offsets = _piece_values(matrix, label, first, last)
        if not len(label):
            return []
        # Pieces of one label join while the next starts within the merge gap of the last.
        gaps = first[1:] - 1 - last[:-1]
        joins = (label[1:] == label[:-1]) & (gaps <= self.gap_frames[label[1:]])
        starts = np.flatnonzero(np.concatenate(([True], ~joins)))
        ends = np.append(starts[1:], len(label)) - 1
        if table is not None:
            values = table[values]
        values = values.astype(np.float64)
        peaks = np.maximum.reduceat(values, offsets[starts])
        order = np.lexsort((label[starts], first[starts]))  # as `push` releases them
        starts, ends = starts[order], ends[order]
        runs = (label[starts], first[starts], last[ends])
        return self._tags(*runs, values, offsets, starts, ends, peaks[order], audio_samples)

    def _tags(
        self,
        labels: np.ndarray,
        firsts: np.ndarray,
        lasts: np.ndarray,
        values: np.ndarray,
        offsets: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        peaks: np.ndarray,
        audio_samples: int,
    ) -> list[Tag]:
        """`_tag` for each run of pieces `starts[k]..ends[k]`: its frames' values are
        `values[offsets[starts[k]]:offsets[ends[k] + 1]]`, added in order as `push` adds them,
        the highest `peaks[k]`. Times and the minimum duration in numpy (whole samples,
        exact), the rest per tag."""
        bounds = np.append(offsets, len(values))
        since, until = bounds[starts], bounds[ends + 1]
        begin = firsts * self.hop + np.where(firsts > 0, self.lead, 0)
        end = np.minimum(lasts * self.hop + self.window - self.margin, audio_samples)
        long = (end - begin) * 1000 >= self.view.min_durations_ms[labels] * self.rate
        tags = []
        for k in np.flatnonzero(long).tolist():
            if self.peak:
                score = float(peaks[k])
            else:  # the mean: a sequential sum, as `push` adds
                score = float(np.cumsum(values[since[k] : until[k]])[-1]) / int(until[k] - since[k])
            label = int(labels[k])
            tags.append(
                Tag(
                    start=round(int(begin[k]) / self.rate, 3),
                    end=round(int(end[k]) / self.rate, 3),
                    label=self.view.names[label],
                    score=round(score, 4),
                    extra=self.extras[label],
                )
            )
        return tags

    def _announce_open(self, hear: Callable[[str, float], None]) -> None:
        for label, run in self.open.items():
            if label in self._announced:
                continue
            start = run.first * self.hop + (self.lead if run.first else 0)
            end = run.last * self.hop + self.window - self.margin
            if (end - start) * 1000 >= self.view.min_durations_ms[label] * self.rate:
                self._announced.add(label)
                hear(self.view.names[label], round(start / self.rate, 3))

    def _close(self, label: int) -> None:
        self._announced.discard(label)
        run = self.open.pop(label)
        self.closed.append((run.first, label, run))

    def _release(self, limit: int | None) -> list[Tag]:
        self.closed.sort(key=lambda item: (item[0], item[1]))
        ready = [item for item in self.closed if limit is None or item[0] < limit]
        self.closed = self.closed[len(ready) :]
        tags = (self._tag(label, run) for _, label, run in ready)
        return [tag for tag in tags if tag is not None]

    def _tag(self, label: int, run: _Run) -> Tag | None:
        # The first window's lead is kept: nothing before it says where the event began.
        start = run.first * self.hop + (self.lead if run.first else 0)
        end = run.last * self.hop + self.window - self.margin
        if self.end_sample is not None:
            end = min(end, self.end_sample)
        if (end - start) * 1000 < self.view.min_durations_ms[label] * self.rate:
            return None
        return Tag(
            start=round(start / self.rate, 3),
            end=round(end / self.rate, 3),
            label=self.view.names[label],
            score=round(run.peak if self.peak else run.total / run.count, 4),
            extra=self.extras[label],
        )

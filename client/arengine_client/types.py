"""The values that pass between the stages and out of the engine, their one serialisation and
its one reader.

Declared here, in the client distribution, because the client reads the same values from the
server's answers; the server's modules import them through `arengine.types`, never from engine
internals.
`result_dict` is the JSON shape of a result everywhere: the HTTP body, the `json` format, the NDJSON
summary and the access log all derive from it. `result_of` reads it back (`POST /v1/render`, the
`json` and `csv` formats' parsers, the client and `arengine recognize --server`):
`result_of(result_dict(result)) == result`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Stage(StrEnum):
    """The four stages of the pipeline: timings, metrics' `stage` label and logs use these."""

    VALIDATION = "validation"
    FEATURES = "features"
    INFERENCE = "inference"
    POSTPROCESS = "postprocess"


@dataclass(frozen=True, slots=True)
class AudioInfo:
    """What an accepted upload holds: from its header at validation, from decoding in a result.

    `format` and `subtype` are the container and codec as a user knows them ("MP4/MOV", "AAC";
    libsndfile's names such as "PCM_16" for WAV); `frames` is the header's claim (0 if none) until
    decoding ends, then the frames decoded.
    """

    format: str
    subtype: str
    sample_rate: int
    channels: int
    frames: int
    decoder: str = "libsndfile"
    """Which library decodes it: `libsndfile` or `ffmpeg`."""
    stream: int = 0
    """The container's index of the decoded stream."""
    length_trusted: bool = True
    """The header's length is exact (WAV, FLAC, MP4), so a claim over the cap refuses early."""
    truncated: bool = False
    """The file ends before its header says it does: the result covers what was there."""
    warnings: tuple[str, ...] = ()
    """What decoding found and how it was handled (never audio dropped silently)."""
    recorded_at: str | None = None
    """When the first sample was recorded (ISO 8601, with an offset where the file gives one),
    as the file says (`arengine/audio/recorded.py`); None where it says nothing."""

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate


class Extra(Mapping[str, Any]):
    """A tag's kind fields (a note's `midi`, a fingerprint's `reference`): an immutable mapping.

    The client knows no kinds, so a tag carries whatever fields its kind declares
    (`arengine/kinds/<kind>/fields.py` on the server) under their JSON names, in the order they
    were given; an unset field is absent, never None. Two are equal when they hold the same
    fields whatever their order (a CSV reads them in its columns' order), and hashable, as the
    frozen `Tag` holding them is. A list becomes a tuple, so nothing inside can change.

    >>> extra = Extra(midi=69, pitch_bend=[0.0, 1.5], reference=None)
    >>> extra
    Extra(midi=69, pitch_bend=(0.0, 1.5))
    >>> extra["midi"], extra.get("reference"), extra == Extra(pitch_bend=(0.0, 1.5), midi=69)
    (69, None, True)
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        pairs = {**(items or {}), **fields}.items()
        self._items = {
            name: tuple(value) if isinstance(value, list) else value
            for name, value in pairs
            if value is not None
        }

    def __getitem__(self, name: str) -> Any:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __reduce__(self) -> tuple[type[Extra], tuple[dict[str, Any]]]:
        return Extra, (self._items,)

    def __repr__(self) -> str:
        return f"Extra({', '.join(f'{name}={value!r}' for name, value in self._items.items())})"


_NO_EXTRA = Extra()


@dataclass(frozen=True, slots=True)
class Tag:
    """One result: `label` between `start` and `end` seconds, with a confidence `score`.

    The fields every kind shares are attributes; those of one kind (a note's `midi`, a bird's
    `scientific_name`) are in `extra`, declared by the kind on the server and read there through
    its declaration (`MIDI.of(tag)`), so that a misspelt name is an error where it matters;
    a client reads them by name: `tag.extra.get("midi")`.

    >>> Tag(0.5, 0.75, "A4", 0.9, extra=Extra(midi=69)).extra["midi"]
    69
    """

    start: float
    end: float
    label: str
    score: float
    model: str | None = None
    """The model that gave the tag, in a request for several models."""
    extra: Extra = _NO_EXTRA
    """The fields of the tag's kind, by their JSON names (`Extra`)."""


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds spent per stage, summed over engine threads, and the request's wall time."""

    validation_s: float
    features_s: float
    inference_s: float
    postprocess_s: float
    total_s: float

    @classmethod
    def of(cls, seconds: dict[Stage, float], total_s: float) -> Timings:
        """Timings from per-stage sums and the wall time."""
        return cls(**{f"{stage}_s": seconds.get(stage, 0.0) for stage in Stage}, total_s=total_s)


@dataclass(frozen=True, slots=True)
class Result:
    """Everything a request gets back."""

    model: str
    audio: AudioInfo
    tags: tuple[Tag, ...]
    timings: Timings
    model_timings: tuple[tuple[str, Timings], ...] = ()
    """For a request of several models, each one's stage times (decoding counts for the model
    whose segment needed it; validation, shared, for none) and its wall time to its last tag."""
    skipped: tuple[tuple[str, float], ...] = ()
    """For a request with a gate, the audio seconds each model skipped: post-processed as the
    silence it was taken for, not inferred."""


def tag_dict(tag: Tag) -> dict[str, Any]:
    """One tag as JSON: every field, the optional ones only when set.

    >>> tag_dict(Tag(0.5, 1.25, "speech", 0.9))
    {'start': 0.5, 'end': 1.25, 'label': 'speech', 'score': 0.9}
    """
    out: dict[str, Any] = {
        "start": tag.start,
        "end": tag.end,
        "label": tag.label,
        "score": tag.score,
    }
    if tag.model is not None:
        out["model"] = tag.model
    for name, value in tag.extra.items():
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def audio_dict(info: AudioInfo) -> dict[str, Any]:
    """What the upload was, as JSON."""
    return {
        "duration_s": round(info.duration_s, 6),
        "sample_rate": info.sample_rate,
        "channels": info.channels,
        "format": info.format,
        "subtype": info.subtype,
        "decoder": info.decoder,
        "stream": info.stream,
        "truncated": info.truncated,
        "warnings": list(info.warnings),
        **({"recorded_at": info.recorded_at} if info.recorded_at is not None else {}),
    }


def timings_dict(timings: Timings) -> dict[str, float]:
    """Stage and wall times as JSON, to the microsecond."""
    return {
        field.name: round(getattr(timings, field.name), 6) for field in dataclasses.fields(timings)
    }


def result_dict(result: Result) -> dict[str, Any]:
    """A result as JSON: `model`, `audio`, `tags` (in order) and `timings`, plus
    `model_timings` (by model name) for several models, and `skipped_s` (by model name) for a
    request with a gate."""
    out = {
        "model": result.model,
        "audio": audio_dict(result.audio),
        "tags": [tag_dict(tag) for tag in result.tags],
        "timings": timings_dict(result.timings),
    }
    if result.model_timings:
        out["model_timings"] = {name: timings_dict(t) for name, t in result.model_timings}
    if result.skipped:
        out["skipped_s"] = {name: round(seconds, 6) for name, seconds in result.skipped}
    return out


def result_of(data: Mapping[str, Any]) -> Result:
    """A result from its JSON: `result_dict`'s inverse, every field included (`length_trusted`,
    a fact for validation only, is not in the JSON and reads back as its default)."""
    return Result(
        model=str(data["model"]),
        audio=audio_of(data["audio"]),
        tags=tuple(tag_of(item) for item in data["tags"]),
        timings=timings_of(data["timings"]),
        model_timings=tuple(
            (str(name), timings_of(seconds))
            for name, seconds in (data.get("model_timings") or {}).items()
        ),
        skipped=tuple(
            (str(name), float(seconds)) for name, seconds in (data.get("skipped_s") or {}).items()
        ),
    )


def audio_of(item: Mapping[str, Any]) -> AudioInfo:
    """What the upload was, from its JSON; `frames` from the duration (to the microsecond, so
    exact at any sample rate up to 500 kHz)."""
    sample_rate = int(item["sample_rate"])
    return AudioInfo(
        format=str(item["format"]),
        subtype=str(item["subtype"]),
        sample_rate=sample_rate,
        channels=int(item["channels"]),
        frames=round(float(item["duration_s"]) * sample_rate),
        decoder=str(item["decoder"]),
        stream=int(item["stream"]),
        truncated=bool(item["truncated"]),
        warnings=tuple(str(warning) for warning in item["warnings"]),
        recorded_at=None if item.get("recorded_at") is None else str(item["recorded_at"]),
    )


def tag_of(item: Mapping[str, Any]) -> Tag:
    """A tag from its JSON, or from a CSV row (text cells; an empty cell is an unset field).

    Every key but the shared ones goes into `extra` as it is: the JSON's values are already
    typed, and a CSV's cells of a kind's fields are typed by the csv format's parser, which
    reads the kinds' declarations (this module knows no kinds).

    >>> row = {"start": "0.5", "end": "1.25", "label": "A4", "score": "0.9", "midi": ""}
    >>> tag_of(row) == Tag(0.5, 1.25, "A4", 0.9)
    True
    >>> tag_of({"start": 0.5, "end": 1.0, "label": "A4", "score": 0.9, "midi": 69}).extra
    Extra(midi=69)
    """
    extra = {name: value for name, value in item.items() if name not in _SHARED_KEYS}
    return Tag(
        start=float(item["start"]),
        end=float(item["end"]),
        label=str(item["label"]),
        score=float(item["score"]),
        model=str(item["model"]) if item.get("model") else None,
        extra=Extra({name: value for name, value in extra.items() if value != ""}),
    )


_SHARED_KEYS = frozenset({"start", "end", "label", "score", "model"})
"""A tag's keys that are `Tag`'s own attributes; every other is a field of its kind."""


def timings_of(item: Mapping[str, Any]) -> Timings:
    """Stage and wall times from their JSON."""
    return Timings(**{field.name: float(item[field.name]) for field in dataclasses.fields(Timings)})

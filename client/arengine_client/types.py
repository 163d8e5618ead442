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
from collections.abc import Mapping
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


@dataclass(frozen=True, slots=True)
class Tag:
    """One result: `label` between `start` and `end` seconds, with a confidence `score`."""

    start: float
    end: float
    label: str
    score: float
    frequency_hz: float | None = None
    """Mean fundamental frequency, for pitch (note) tags only."""
    midi: int | None = None
    """MIDI note number (69 is A4), for note tags only."""
    pitch_bend: tuple[float, ...] | None = None
    """Per-frame pitch offsets from `midi` in thirds of a semitone, for `notes` tags when asked."""
    model: str | None = None
    """The model that gave the tag, in a request for several models."""
    label_id: str | None = None
    """The label's identifier in its ontology, for event tags: AudioSet's `/m/09x0r` (Speech)."""
    scientific_name: str | None = None
    """The species' scientific name, for `birds` tags (whose label is the common name)."""
    reference: str | None = None
    """The library reference's id, for `fingerprint` tags (whose label is its title)."""
    reference_start: float | None = None
    """Seconds into the reference where the matched stretch begins, for `fingerprint` tags."""
    reference_end: float | None = None
    """Seconds into the reference where the matched stretch ends, for `fingerprint` tags."""
    speed: float | None = None
    """How many times as fast as the reference the recording plays it (1.05: 5% fast), for
    `fingerprint` tags."""
    pitch: float | None = None
    """How many times as high as the reference the recording plays it (1.05 when played 5%
    fast by resampling, 1.0 when only the tempo changed), for `fingerprint` tags."""


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
    for name in _OPTIONAL_TAG_FIELDS:
        if (value := getattr(tag, name)) is not None:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


_OPTIONAL_TAG_FIELDS = tuple(field.name for field in dataclasses.fields(Tag))[4:]
"""Looked up once: `dataclasses.fields` per tag was a tenth of answering a job's 3,431 tags."""


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

    >>> row = {"start": "0.5", "end": "1.25", "label": "A4", "score": "0.9", "midi": ""}
    >>> tag_of(row) == Tag(0.5, 1.25, "A4", 0.9)
    True
    """
    frequency, midi, bend = item.get("frequency_hz"), item.get("midi"), item.get("pitch_bend")
    return Tag(
        start=float(item["start"]),
        end=float(item["end"]),
        label=str(item["label"]),
        score=float(item["score"]),
        frequency_hz=None if frequency in (None, "") else float(frequency),
        midi=None if midi in (None, "") else int(midi),
        pitch_bend=None if bend in (None, "") else tuple(float(value) for value in bend),
        model=str(item["model"]) if item.get("model") else None,
        label_id=str(item["label_id"]) if item.get("label_id") else None,
        scientific_name=str(item["scientific_name"]) if item.get("scientific_name") else None,
        reference=str(item["reference"]) if item.get("reference") else None,
        reference_start=_number(item.get("reference_start")),
        reference_end=_number(item.get("reference_end")),
        speed=_number(item.get("speed")),
        pitch=_number(item.get("pitch")),
    )


def _number(value: Any) -> float | None:
    """An optional number: None when absent or an empty CSV cell."""
    return None if value in (None, "") else float(value)


def timings_of(item: Mapping[str, Any]) -> Timings:
    """Stage and wall times from their JSON."""
    return Timings(**{field.name: float(item[field.name]) for field in dataclasses.fields(Timings)})

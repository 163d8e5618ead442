"""The values that pass between the stages and out of the engine, and their one serialisation.

Formats, the HTTP API, the CLI and the logs import these from here, never from engine internals.
`result_dict` is the JSON shape of a result everywhere: the HTTP body, the `json` format, the NDJSON
summary and the access log all derive from it.
"""

from __future__ import annotations

import dataclasses
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
    scientific_name: str | None = None
    """The species' scientific name, for `birds` tags (whose label is the common name)."""


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


def tag_dict(tag: Tag) -> dict[str, Any]:
    """One tag as JSON: every field, the optional ones only when set.

    >>> tag_dict(Tag(0.5, 1.25, "speech", 0.9))
    {'start': 0.5, 'end': 1.25, 'label': 'speech', 'score': 0.9}
    """
    return {
        field.name: list(value) if isinstance(value, tuple) else value
        for field in dataclasses.fields(tag)
        if (value := getattr(tag, field.name)) is not None
    }


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
    }


def timings_dict(timings: Timings) -> dict[str, float]:
    """Stage and wall times as JSON, to the microsecond."""
    return {
        field.name: round(getattr(timings, field.name), 6) for field in dataclasses.fields(timings)
    }


def result_dict(result: Result) -> dict[str, Any]:
    """A result as JSON: `model`, `audio`, `tags` (in order) and `timings`, plus
    `model_timings` (by model name) for several models."""
    out = {
        "model": result.model,
        "audio": audio_dict(result.audio),
        "tags": [tag_dict(tag) for tag in result.tags],
        "timings": timings_dict(result.timings),
    }
    if result.model_timings:
        out["model_timings"] = {name: timings_dict(t) for name, t in result.model_timings}
    return out

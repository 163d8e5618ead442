"""Pydantic models of the HTTP API: the only place pydantic meets the pipeline's dataclasses."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from arengine.formats import STREAM, get_format
from arengine.models.registry import LoadedModel
from arengine.types import Result, result_dict


class RecognizeQuery(BaseModel):
    """Query parameters of `POST /v1/recognize`; unset thresholds keep silero-vad's defaults."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        "speech",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Name of a loaded model (see GET /v1/models).",
    )
    timeout_s: float | None = Field(
        None,
        ge=0.5,
        le=86_400,
        description="Deadline for this request in seconds; capped by the server's request_timeout_s.",
    )
    format: str | None = Field(
        None,
        max_length=16,
        description="Response format: json (default), csv, txt (Audacity labels), raven, rttm, "
        "vtt, srt, or ndjson (tags streamed as they are final). Default: from the Accept header.",
    )
    threshold: float | None = Field(
        None, gt=0, lt=1, description="A tag starts at or above this score (speech default 0.5)."
    )
    neg_threshold: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Speech ends below this probability (default threshold - 0.15).",
    )
    min_speech_duration_ms: int | None = Field(
        None, ge=0, le=60_000, description="Shorter speech is dropped (default 250)."
    )
    max_speech_duration_s: float | None = Field(
        None, gt=0, description="Longer speech is split at its longest pause (default: no limit)."
    )
    min_silence_duration_ms: int | None = Field(
        None, ge=0, le=60_000, description="Shorter pauses do not end speech (default 100)."
    )
    speech_pad_ms: int | None = Field(
        None,
        ge=0,
        le=10_000,
        description="Padding added to each side of a speech tag (default 30).",
    )

    min_duration_ms: int | None = Field(
        None,
        ge=0,
        le=3_600_000,
        description="Classifier and pitch models: shorter tags are dropped.",
    )
    merge_gap_ms: int | None = Field(
        None,
        ge=0,
        le=3_600_000,
        description="Classifier models: runs of the same label this close merge.",
    )

    median_frames: int | None = Field(
        None,
        ge=1,
        le=101,
        description="Pitch models: odd width of the median filter over 10 ms frames.",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str | None) -> str | None:
        if name is not None and name != STREAM:
            get_format(name)  # ValueError listing the formats: a 422
        return name

    def overrides(self) -> dict[str, float]:
        """The post-processing parameters the client set; the model's defaults fill the rest."""
        return self.model_dump(exclude_none=True, exclude={"model", "timeout_s", "format"})


class AudioOut(BaseModel):
    duration_s: float
    sample_rate: int
    channels: int
    format: str
    subtype: str


class TagOut(BaseModel):
    start: float = Field(description="Seconds from the start of the recording.")
    end: float
    label: str
    score: float = Field(description="Mean model probability over the tag, 0 to 1.")
    frequency_hz: float | None = Field(
        None, description="Pitch models: mean frequency of the note."
    )


class TimingsOut(BaseModel):
    validation_s: float
    features_s: float
    inference_s: float
    postprocess_s: float
    total_s: float


class RecognizeResponse(BaseModel):
    model: str
    audio: AudioOut
    tags: list[TagOut]
    timings: TimingsOut

    @classmethod
    def of(cls, result: Result) -> RecognizeResponse:
        return cls.model_validate(result_dict(result))


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable identifier.")
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ModelOut(BaseModel):
    name: str
    kind: str
    labels: list[str]
    sample_rate: int
    segment_s: float
    preroll_s: float
    weights_sha256: str
    load_s: float
    warm_up_s: float
    parameters: dict[str, float] = Field(
        description="Post-processing defaults; override them in the query."
    )

    @classmethod
    def of(cls, loaded: LoadedModel) -> ModelOut:
        recognizer, plan = loaded.recognizer, loaded.recognizer.plan
        return cls(
            name=recognizer.name,
            kind=recognizer.kind,
            labels=list(recognizer.labels),
            sample_rate=recognizer.sample_rate,
            segment_s=plan.segment_samples / recognizer.sample_rate,
            preroll_s=plan.preroll_frames * plan.hop / recognizer.sample_rate,
            weights_sha256=loaded.manifest.weights_sha256,
            load_s=round(loaded.load_s, 4),
            warm_up_s=round(loaded.warm_up_s, 4),
            parameters=recognizer.defaults(),
        )


class FailureOut(BaseModel):
    manifest: str
    reason: str


class ModelsResponse(BaseModel):
    models: list[ModelOut]
    unavailable: list[FailureOut] = Field(description="Models that failed to load, and why.")


class InfoResponse(BaseModel):
    version: str
    torch_version: str
    allocator: str
    engine_threads: int
    cpus_available: int
    intra_op_threads: int
    inter_op_threads: int
    ready: bool
    pending_requests: int = Field(description="Recognition requests admitted and not yet answered.")
    active_jobs: int = Field(
        description="Requests inside the engine (validated, decoding or inferring)."
    )
    limits: dict[str, float | int]

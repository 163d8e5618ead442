"""Pydantic models of the HTTP API: the only place pydantic meets the pipeline's dataclasses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from arengine.formats import FORMATS, STREAM, get_format
from arengine.models.registry import PARAMETERS, LoadedModel
from arengine.types import Result, result_dict


class _QueryBase(BaseModel):
    """Query parameters of `POST /v1/recognize` other than post-processing overrides."""

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
        description=f"Response format: {', '.join(FORMATS)}, or {STREAM} (tags streamed as they "
        "are final). Default: from the Accept header, else json.",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str | None) -> str | None:
        if name is not None and name != STREAM:
            get_format(name)  # ValueError listing the formats: a 422
        return name

    def overrides(self) -> dict[str, float]:
        """The post-processing parameters the client set; the model's defaults fill the rest."""
        return self.model_dump(exclude_none=True, exclude=set(_QueryBase.model_fields))


def _override_fields() -> dict[str, Any]:
    """One optional query field per post-processing parameter of any kind, documented per kind.

    The ranges are checked by the kind's parameters (a 422 naming the range); here only that the
    value is a finite number (or a whole one, where every kind wants that).
    """
    uses: dict[str, list[str]] = {}
    whole: dict[str, bool] = {}
    for kind, params in sorted(PARAMETERS.items()):
        defaults = params()
        for name, bounds in params.bounds().items():
            value = getattr(defaults, name)
            default = "no default: see above" if value is None else f"default {value}"
            uses.setdefault(name, []).append(
                f"{kind}: {params.docs()[name]} ({bounds.text()}; {default})"
            )
            whole[name] = whole.get(name, True) and bounds.whole
    return {
        name: (
            (int if whole[name] else float) | None,
            Field(None, allow_inf_nan=False, description=" ".join(texts)),
        )
        for name, texts in uses.items()
    }


if TYPE_CHECKING:
    RecognizeQuery = _QueryBase
else:
    RecognizeQuery = create_model(
        "RecognizeQuery",
        __base__=_QueryBase,
        __doc__="Query parameters of `POST /v1/recognize`, overrides of every kind included.",
        **_override_fields(),
    )


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

"""Pydantic models of the HTTP API: the only place pydantic meets the pipeline's dataclasses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from arengine.kinds.catalog import KINDS, TAG_FIELDS
from arengine.kinds.fields import MAX_TIME_S, TagField
from arengine.models.registry import LoadedModel, weights_format_of
from arengine.outputs.formats import FORMAT_NAMES, STREAM, Format, get_format, known_formats
from arengine.postprocess.vocabulary import Vocabulary
from arengine.types import Result, result_dict, result_of

MAX_LABEL_CHARS = 1024

DEFAULT_MODEL = "speech"
"""The model a request without `model` gets; `GET /v1/models` names it, the page opens on it."""


GATE_DESCRIPTION = (
    "A loaded loudness model (see GET /v1/models) to gate the models of `model` with: they skip "
    "the segments in which it hears nothing loud (no window at its lowest trigger level, "
    "min(absolute_dbfs, background_floor_dbfs + rise_db) of its manifest), which are taken as "
    "silence and not inferred; the answer's `skipped_s` says how much each model skipped. "
    "Not one of the models of `model` (else 422 invalid_gate)."
)


class _UploadBase(BaseModel):
    """Query parameters of an upload to tag (`POST /v1/recognize`, `POST /v1/jobs`) other than
    post-processing overrides."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$",
        description="Name of a loaded model (see GET /v1/models), or several separated by "
        "commas (`speech,notes`): the upload is decoded once, every tag carries its `model`, "
        "and the tags of all of them come in one timestamp order.",
    )
    gate: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description=GATE_DESCRIPTION,
    )
    audio_stream: int | None = Field(
        None,
        ge=0,
        le=63,
        description="Which audio stream to decode, 0-based among the file's audio streams "
        "(default: the first; video streams are never decoded).",
    )
    stream: int | None = Field(
        None,
        ge=0,
        le=63,
        description="Deprecated: the former name of `audio_stream`, which reads as streaming the "
        "answer (that is `format=ndjson`); the same value, still accepted.",
        json_schema_extra={"deprecated": True},
    )

    @model_validator(mode="after")
    def _one_audio_stream(self) -> Any:
        """`stream` is `audio_stream`'s former name: either gives the index, both must agree."""
        if self.stream is not None and self.audio_stream not in (None, self.stream):
            raise ValueError(
                f"audio_stream={self.audio_stream} and stream={self.stream} (its former name) "
                "disagree: give audio_stream alone"
            )
        if self.audio_stream is None:
            self.audio_stream = self.stream
        return self

    def overrides(self) -> dict[str, float | str]:
        """The post-processing parameters the client set; the model's defaults fill the rest."""
        return self.model_dump(exclude_none=True, exclude=set(_QueryBase.model_fields))


def format_enum(*, ndjson: bool) -> dict[str, Any]:
    """The OpenAPI `enum` of a `format` parameter: every name it takes (`ndjson` where it
    streams). The check itself is `get_format`'s, whose message lists them."""
    return {"enum": [*FORMAT_NAMES, *([STREAM] if ndjson else [])]}


class _QueryBase(_UploadBase):
    """Query parameters of `POST /v1/recognize` other than post-processing overrides."""

    timeout_s: float | None = Field(
        None,
        ge=0.5,
        le=86_400,
        description="Deadline for this request in seconds; capped by the server's request_timeout_s.",
    )
    format: (
        Annotated[str, Field(max_length=16, json_schema_extra=format_enum(ndjson=True))] | None
    ) = Field(
        None,
        description=f"Response format (see GET /v1/formats): {known_formats()}; {STREAM} "
        "streams the tags as they are final. Default: from the Accept header, else json.",
    )
    progress: bool = Field(
        False,
        description=f"{STREAM} only: also send a `progress` line (`audio_s` post-processed, "
        "`duration_s`) first, about once a second, and with all the audio done before the summary.",
    )

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str | None) -> str | None:
        if name is not None and name != STREAM:
            get_format(name)  # ValueError listing the formats: a 422
        return name


_NOT_FOR_JOBS = ("format", "progress", "timeout_s")
"""`POST /v1/recognize`'s options that a job has no use for (its result is fetched later)."""


class _JobBase(_UploadBase):
    """Query parameters of `POST /v1/jobs` other than post-processing overrides: the upload's,
    without what only a waiting client uses (so the schema does not offer them), and the
    job's callback."""

    callback_url: str | None = Field(
        None,
        max_length=2048,
        description="http(s) URL the server POSTs to when the job ends (done, failed or "
        "cancelled), signed by the Standard Webhooks scheme and retried for hours; its host "
        "must pass webhook_allowed_hosts and resolve to a public address (else 422 "
        "callback_url_refused). Default: the server's webhook_url, if set.",
    )

    def overrides(self) -> dict[str, float | str]:
        """The post-processing parameters the client set (the callback is none of them)."""
        return {k: v for k, v in super().overrides().items() if k != "callback_url"}

    @model_validator(mode="before")
    @classmethod
    def _refuse_waiting_options(cls, values: Any) -> Any:
        if isinstance(values, dict) and any(name in values for name in _NOT_FOR_JOBS):
            raise ValueError(
                f"{', '.join(_NOT_FOR_JOBS)} do not apply to a job: ask "
                "GET /v1/jobs/{id}/result for a format"
            )
        return values


def _override_fields() -> dict[str, Any]:
    """One optional query field per post-processing parameter of any kind, documented per kind.

    The ranges are checked by the kind's parameters (a 422 naming the range); here only that the
    value is a finite number (or a whole one, where every kind wants that).
    """
    uses: dict[str, list[str]] = {}
    whole: dict[str, bool] = {}
    for kind in sorted(KINDS):
        params = KINDS[kind].parameters
        defaults = params()
        for name, bounds in params.bounds().items():
            value = getattr(defaults, name)
            default = "no default: see above" if value is None else f"default {value}"
            uses.setdefault(name, []).append(
                f"{kind}: {params.docs()[name]} ({bounds.text()}; {default})"
            )
            whole[name] = whole.get(name, True) and bounds.whole
    fields: dict[str, Any] = {
        name: (
            (int if whole[name] else float) | None,
            Field(None, allow_inf_nan=False, description=" ".join(texts)),
        )
        for name, texts in uses.items()
    }
    lists: dict[str, list[str]] = {}
    for kind in sorted(KINDS):
        for name, doc in KINDS[kind].parameters.texts().items():
            lists.setdefault(name, []).append(kind)
            fields[name] = (str | None, Field(None, max_length=4096, description=doc))
    for name, kinds in lists.items():
        fields[name][1].description += f" ({', '.join(kinds)} models)"
    return fields


class _ListenBase(BaseModel):
    """Query parameters of `WS /v1/listen` other than post-processing overrides."""

    model_config = ConfigDict(extra="forbid")

    model: str = _QueryBase.model_fields["model"]  # type: ignore[assignment]
    gate: str | None = _QueryBase.model_fields["gate"]  # type: ignore[assignment]
    source: str | None = Field(
        None,
        description="The name of the microphone or camera the stream comes from: a slug of 1 to "
        "64 characters (a-z, 0-9, _, -; default `default`), carried by the tags, the MQTT topics, "
        "the log and the arengine_live_* metrics (`arengine/live/sources.py`).",
    )

    def overrides(self) -> dict[str, float | str]:
        """The post-processing parameters the client set; the model's defaults fill the rest."""
        return self.model_dump(exclude_none=True, exclude={"model", "gate", "source"})


if TYPE_CHECKING:
    RecognizeQuery = _QueryBase
    JobQuery = _JobBase
    ListenQuery = _ListenBase
else:
    RecognizeQuery = create_model(
        "RecognizeQuery",
        __base__=_QueryBase,
        __doc__="Query parameters of `POST /v1/recognize`, overrides of every kind included.",
        **_override_fields(),
    )
    JobQuery = create_model(
        "JobQuery",
        __base__=_JobBase,
        __doc__="Query parameters of `POST /v1/jobs`, overrides of every kind included.",
        **_override_fields(),
    )
    ListenQuery = create_model(
        "ListenQuery",
        __base__=_ListenBase,
        __doc__="Query parameters of `WS /v1/listen`: the models and their overrides.",
        **_override_fields(),
    )


class _JobResultBase(BaseModel):
    """Query parameters of `GET /v1/jobs/{id}/result` other than post-processing overrides."""

    model_config = ConfigDict(extra="forbid")

    format: (
        Annotated[str, Field(max_length=16, json_schema_extra=format_enum(ndjson=False))] | None
    ) = Field(
        None,
        description=f"One of: {known_formats()} but {STREAM}. Default: from the Accept "
        "header, else json.",
    )

    def overrides(self) -> dict[str, float | str]:
        """New post-processing parameters: the job's tags derived again from its kept scores."""
        return self.model_dump(exclude_none=True, exclude=set(_JobResultBase.model_fields))


if TYPE_CHECKING:
    JobResultQuery = _JobResultBase
else:
    JobResultQuery = create_model(
        "JobResultQuery",
        __base__=_JobResultBase,
        __doc__="Query parameters of `GET /v1/jobs/{id}/result`, overrides of every kind included.",
        **_override_fields(),
    )


class AudioOut(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    duration_s: float = Field(ge=0, le=MAX_TIME_S)
    sample_rate: int = Field(ge=1, le=10_000_000)
    channels: int = Field(ge=1, le=1024)
    format: str = Field(description="Container as a user knows it: WAV, FLAC, MP3, MP4/MOV, Ogg...")
    subtype: str = Field(
        description="Codec: AAC, Opus, MP3, FLAC... (libsndfile's for WAV: PCM_16)."
    )
    decoder: str = Field(description="libsndfile or ffmpeg.")
    stream: int = Field(description="Index in the container of the decoded audio stream.")
    truncated: bool = Field(
        description="The file ends before its header says: the tags cover what was there."
    )
    warnings: list[str] = Field(
        description="What decoding found and how it was handled (damaged packets skipped, a "
        "header's length that was wrong)."
    )
    recorded_at: str | None = Field(
        None,
        description="When the first sample was recorded, ISO 8601, as the file says: a BWF "
        "bext chunk, GUANO, AudioMoth's comment or a YYYYMMDD_HHMMSS file name (absent if none).",
    )


class _TagShared(BaseModel):
    """A tag's fields every kind shares; `TagOut` adds each kind's own (`_tag_out`)."""

    model_config = ConfigDict(allow_inf_nan=False)

    start: float = Field(
        ge=0, le=MAX_TIME_S, description="Seconds from the start of the recording."
    )
    end: float = Field(ge=0, le=MAX_TIME_S, description="At or after `start`.")
    label: str = Field(max_length=MAX_LABEL_CHARS)
    score: float = Field(description="Mean model probability over the tag, 0 to 1.")
    model: str | None = Field(
        None,
        max_length=256,
        description="The model that gave the tag, when the request named several.",
    )

    @model_validator(mode="after")
    def _in_order(self) -> _TagShared:
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        for declared in TAG_FIELDS.values():
            value = getattr(self, declared.name, None)
            if value is not None and declared.check is not None:
                problem = declared.check(value, self.start, self.end)
                if problem is not None:
                    raise ValueError(problem)
        return self


def _kind_field(declared: TagField[Any]) -> tuple[Any, Any]:
    """A kind's tag field as a pydantic field: optional, its bounds on the value or its items.
    Built at run time from the declaration, so typed `Any` here (the annotations are values)."""
    bounds: dict[str, Any] = dict(declared.bounds)
    annotated: Any = Annotated
    if declared.sequence:
        items: Any = list
        value = items[annotated[declared.type, Field(**bounds)]]
        return value | None, Field(None, description=declared.description)
    return declared.type | None, Field(None, description=declared.description, **bounds)


def _tag_out() -> type[_TagShared]:
    """`TagOut`: the shared fields, then every kind's own in `KINDS` order (`TAG_FIELDS`), each
    with its declared bounds and description, so the OpenAPI schema describes them all and
    `POST /v1/render` refuses what the kind's declaration refuses. A key no kind declares is
    dropped, as any unknown key is."""
    fields: dict[str, Any] = {name: _kind_field(f) for name, f in TAG_FIELDS.items()}
    return create_model("TagOut", __base__=_TagShared, **fields)


if TYPE_CHECKING:
    TagOut = _TagShared
else:
    TagOut = _tag_out()


class TimingsOut(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    validation_s: float
    features_s: float
    inference_s: float
    postprocess_s: float
    total_s: float


class RecognizeResponse(BaseModel):
    model: str = Field(description="The model, or the models as the request named them.")
    audio: AudioOut
    tags: list[TagOut]
    timings: TimingsOut = Field(description="Seconds per stage, summed over threads and models.")
    model_timings: dict[str, TimingsOut] | None = Field(
        None,
        description="For several models: each one's stage times (decoding counts for the model "
        "that needed it) and its wall time to its last tag.",
    )
    skipped_s: dict[str, float] | None = Field(
        None,
        description="With a `gate`: the audio seconds each model skipped, where the gate heard "
        "nothing loud (not inferred; post-processed as the silence they were taken for).",
    )

    @classmethod
    def of(cls, result: Result) -> RecognizeResponse:
        return cls.model_validate(result_dict(result))

    def to_result(self) -> Result:
        """Back to the engine's `Result` (what `POST /v1/render` writes in a format)."""
        return result_of(self.model_dump(exclude_none=True))


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable identifier.")
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class SegmentPlanOut(BaseModel):
    """How the model cuts a recording (seconds at the model's rate)."""

    segment_s: float = Field(description="Audio per segment; segments run concurrently.")
    preroll_s: float = Field(description="Audio before each segment that warms recurrent state.")
    hop_s: float = Field(description="Audio per output frame (one score vector).")
    context_s: float = Field(description="Audio before a frame that its window also covers.")
    lookahead_s: float = Field(description="Audio after a frame's hop that its window also covers.")


class ModelOut(BaseModel):
    name: str
    kind: str
    task: str | None = Field(description="What the model recognises (manifest [card]).")
    labels: list[str]
    licence: str | None = Field(description="Licence of the weights (manifest [card]).")
    source: str | None = Field(description="Where the weights come from (manifest [card]).")
    version: str | None = Field(
        description="Release or checkpoint of the weights (manifest [card])."
    )
    training_data: str | None = Field(description="Training data and its terms (manifest [card]).")
    weights_format: str = Field(description="Runtime of the weights file: its suffix decides.")
    input_shape: list[int | None] | None = Field(
        description="A classifier's model input, float32 `(windows, n_mels, frames)`: windows "
        "(null) varies from call to call, frames = 1 + (window samples - n_fft) // hop (not "
        "centred; models/README.md). Null for kinds whose network is built in."
    )
    sample_rate: int = Field(description="Input rate: uploads are resampled to it.")
    segment_s: float
    preroll_s: float
    segment_plan: SegmentPlanOut
    real_time_factor: float = Field(
        description="Compute seconds per audio second on one engine thread, measured at warm-up (below 1 is faster than real time)."
    )
    weights_sha256: str
    load_s: float
    warm_up_s: float
    parameters: dict[str, float] = Field(
        description="Post-processing defaults; override them in the query."
    )
    profiles: list[str] = Field(
        [],
        description="Label models: the named profiles of the manifest (`profile=safety`).",
    )

    @classmethod
    def of(cls, loaded: LoadedModel) -> ModelOut:
        recognizer, plan, card = loaded.recognizer, loaded.recognizer.plan, loaded.manifest.card
        rate = recognizer.sample_rate
        return cls(
            name=recognizer.name,
            kind=recognizer.kind,
            task=card.task,
            labels=list(recognizer.labels),
            licence=card.licence,
            source=card.source,
            version=card.version,
            training_data=card.training_data,
            weights_format=weights_format_of(loaded.manifest.weights),
            input_shape=None if recognizer.input_shape is None else list(recognizer.input_shape),
            sample_rate=rate,
            segment_s=plan.segment_samples / rate,
            preroll_s=plan.preroll_frames * plan.hop / rate,
            segment_plan=SegmentPlanOut(
                segment_s=plan.segment_samples / rate,
                preroll_s=plan.preroll_frames * plan.hop / rate,
                hop_s=plan.hop / rate,
                context_s=plan.context / rate,
                lookahead_s=plan.lookahead / rate,
            ),
            real_time_factor=round(loaded.real_time_factor, 5),
            weights_sha256=loaded.manifest.weights_sha256,
            load_s=round(loaded.load_s, 4),
            warm_up_s=round(loaded.warm_up_s, 4),
            parameters=recognizer.defaults(),
            profiles=_profiles(recognizer),
        )


def _profiles(recognizer: object) -> list[str]:
    """A label model's profile names; other kinds have none."""
    vocabulary = getattr(recognizer, "vocabulary", None)
    return list(vocabulary.profiles) if isinstance(vocabulary, Vocabulary) else []


class FailureOut(BaseModel):
    manifest: str
    reason: str


class ModelsResponse(BaseModel):
    models: list[ModelOut]
    default: str | None = Field(
        description="The model a request without `model` gets (null when it is not loaded)."
    )
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
    uploading_requests: int = Field(description="Recognition requests receiving their upload.")
    pending_requests: int = Field(
        description="Recognition requests uploaded and not yet answered (queued or processing)."
    )
    active_jobs: int = Field(
        description="Requests inside the engine (validated, decoding or inferring)."
    )
    limits: dict[str, float | int]


class FormatOut(BaseModel):
    name: str = Field(description="The value of `format`.")
    aliases: list[str] = Field(description="Other names `format` takes for it.")
    media_type: str = Field(description="Its Content-Type (and the `Accept` value that picks it).")
    extension: str = Field(description="The downloaded file's extension, without the dot.")
    description: str
    notes_only: bool = Field(description="Only for models whose labels are note names.")
    binary: bool

    @classmethod
    def of(cls, fmt: Format) -> FormatOut:
        return cls(
            name=fmt.name,
            aliases=list(fmt.aliases),
            media_type=fmt.media_type,
            extension=fmt.extension,
            description=fmt.description,
            notes_only=fmt.notes_only,
            binary=fmt.binary,
        )


class FormatsResponse(BaseModel):
    formats: list[FormatOut]
    stream: str = Field(description="The `format` (or Accept media type) of the NDJSON stream.")

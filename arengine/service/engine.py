"""The engine a process serves with: one pool and the loaded models, shared by every request.

The pool and the request state machine (`arengine/engine/`) only schedule; this is where a
request's strategies are chosen from what it is: an upload or a job, or a live stream.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from arengine.audio import child
from arengine.audio.arrival import Arrival
from arengine.audio.validation import AudioLimits
from arengine.engine.admission import Admission
from arengine.engine.hooks import Gate
from arengine.engine.observer import ScoreKeeper, StageObserver
from arengine.engine.pool import EnginePool
from arengine.engine.request import EngineRequest, RequestSpec, TagListener
from arengine.errors import ErrorCode, InvalidInput, NotReady, UnknownModel
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.catalog import KINDS
from arengine.live.plans import AsFinal, LiveTagging, OpenListener, live_plan
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import (
    NO_SUCH_MODEL,
    LoadedModel,
    LoadFailure,
    load_models,
    overrides_by_model,
)
from arengine.models.tagging import ModelTagging
from arengine.settings import Settings
from arengine.system.threads import available_cpus

log = logging.getLogger(__name__)


class Engine:
    """Admits requests, runs them on the shared pool, holds the models.

    Example::

        engine = Engine(Settings())
        engine.load_models()
        models = engine.check("speech,notes", {"threshold": 0.6})
        recognition = engine.recognize(Path("talk.flac"), models, {"threshold": 0.6}, "r1")
        result = recognition.future.result()  # both models' tags, in timestamp order
    """

    def __init__(self, settings: Settings, observer: StageObserver | None = None) -> None:
        self.settings = settings
        self.pool = EnginePool(
            settings.engine.engine_threads or available_cpus(),
            observer,
            settings.jobs.job_threads or None,
        )
        self.limits = AudioLimits(
            max_duration_s=settings.limits.max_duration_s,
            max_channels=settings.limits.max_channels,
            min_sample_rate=settings.limits.min_sample_rate,
            max_sample_rate=settings.limits.max_sample_rate,
        )
        self.models: dict[str, LoadedModel] = {}
        self.failures: list[LoadFailure] = []
        self._loaded = threading.Event()
        self._stopping = False
        self.admission = Admission(
            settings.limits.max_uploading_requests,
            settings.limits.max_pending_requests,
            settings.live.max_listen_streams,
        )

    not_ready_reason = "the models are still loading; retry shortly"
    """What a request gets before the models are ready: once loading has found none, why."""

    @property
    def ready(self) -> bool:
        """Models loaded and not shutting down."""
        return self._loaded.is_set() and not self._stopping

    @property
    def stopping(self) -> bool:
        """A shutdown has begun."""
        return self._stopping

    def stop_accepting(self) -> None:
        """Shutting down: not ready, no new requests; admitted ones finish."""
        self._stopping = True

    def cut_off(self) -> None:
        """The drain is over: every request still in the engine ends now with 503
        `shutting_down` (a stream gets it as its last line)."""
        self._stopping = True
        self.pool.abort_all(
            NotReady(
                "the server is shutting down: the request was cut off", code=ErrorCode.SHUTTING_DOWN
            )
        )

    def load_models(self, database: sa.Engine | None = None) -> None:
        """Load and warm up the models; ready when this returns with at least one loaded.
        `database`: the server database every replica shares (PostgreSQL), where fingerprint
        models keep their references; None keeps them in each model's folder."""
        settings = self.settings
        if settings.engine.decode_in_child:
            child.start()
        names = settings.engine.models.split(",") if settings.engine.models else None
        folder = settings.engine.models_dir or DEFAULT_MODELS_DIR
        self.models, self.failures = load_models(folder, names, settings.engine.segment_s, database)
        if self.models:
            self._loaded.set()
        else:
            self.not_ready_reason = _nothing_loaded(folder, names, self.failures)
            log.error("%s: the server stays not ready", self.not_ready_reason)

    def check(
        self, model: str, overrides: Overrides, gate: str | None = None
    ) -> tuple[Recognizer, ...]:
        """The recognizers of `model` (one name, or several separated by commas) if the request
        can be admitted (with `gate`, a model of a kind that gates, as their gate); raises the
        reason if not."""
        if self._stopping:
            raise NotReady("the server is shutting down", code=ErrorCode.SHUTTING_DOWN)
        if not self.ready:
            raise NotReady(self.not_ready_reason)
        names = model.split(",")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidInput(
                f"model names {', '.join(repeated)} more than once; name each model once",
                code=ErrorCode.INVALID_PARAMETER,
            )
        recognizers = tuple(self._recognizer(name) for name in names)
        shares = overrides_by_model(recognizers, overrides)
        for recognizer, own in zip(recognizers, shares, strict=True):
            recognizer.tagger(own)  # validates the overrides before any upload is read
        self.gate(gate, recognizers)
        return recognizers

    def gate(self, name: str | None, recognizers: Sequence[Recognizer]) -> Gate | None:
        """The gate of a request for `recognizers`: model `name`, of a kind that gates
        (`Kind.gate`: loudness), a model the request does not name itself (None: no gate);
        raises why not (`InvalidInput` `invalid_gate`, `UnknownModel`)."""
        if name is None:
            return None
        gating = " or ".join(kind.name for kind in KINDS.values() if kind.gate is not None)
        can = sorted(n for n, m in self.models.items() if KINDS[m.recognizer.kind].gate)
        known = f"{gating} models loaded: {', '.join(can) or 'none'}"
        loaded = self.models.get(name)
        if loaded is None:
            raise UnknownModel(f"unknown gate model {name!r}; {known}")
        gate = loaded.recognizer
        make = KINDS[gate.kind].gate
        if make is None:
            raise InvalidInput(
                f"gate {name!r} is a {gate.kind} model: a gate is a {gating} model ({known})",
                code=ErrorCode.INVALID_GATE,
            )
        if any(recognizer.name == name for recognizer in recognizers):
            raise InvalidInput(
                f"gate {name!r} is also in model: a model cannot gate itself; name it in model "
                "alone to have its tags, or as the gate alone",
                code=ErrorCode.INVALID_GATE,
            )
        gated: Gate = make(gate, recognizers)
        return gated

    def _recognizer(self, name: str) -> Recognizer:
        loaded = self.models.get(name)
        if loaded is None:
            known = ", ".join(sorted(self.models))
            raise UnknownModel(f"unknown model {name!r}; loaded models: {known}")
        return loaded.recognizer

    def recognize(
        self,
        path: Path,
        recognizers: tuple[Recognizer, ...],
        overrides: Overrides,
        request_id: str,
        on_tags: TagListener | None = None,
        audio_stream: int | None = None,
        arrival: Arrival | None = None,
        name: str | None = None,
        keeper: ScoreKeeper | None = None,
        gate: str | None = None,
    ) -> EngineRequest:
        """Run one file admitted by `check`; the result (or the error) arrives on the
        recognition's future.

        Not checked again: a request admitted before a shutdown began is allowed to finish.
        `on_tags`, if given, hears the tags in order as soon as each is final; `audio_stream`
        picks an audio stream of a file that has several; `arrival`: a WAV still being uploaded;
        `name`: the file's name as the user gave it (for its recording time); `keeper`: a
        job's checkpoint (`engine/observer.py`); `gate`: a loudness model whose quiet segments
        the models skip.
        """
        spec = RequestSpec(
            request_id=request_id,
            path=path,
            recognizers=recognizers,
            tagging=ModelTagging(recognizers, overrides),
            limits=self.limits,
            segments_ahead=self.settings.engine.segments_ahead,
            parallel_decoding=self.settings.engine.parallel_decoding,
            decode_in_child=self.settings.engine.decode_in_child,
            on_tags=on_tags,
            audio_stream=audio_stream,
            arrival=arrival,
            name=name,
            keeper=keeper,
            gate=self.gate(gate, recognizers),
        )
        return self.pool.submit(spec)

    def listen(
        self,
        arrival: Arrival,
        recognizers: tuple[Recognizer, ...],
        overrides: Overrides,
        request_id: str,
        on_tags: TagListener,
        on_open: OpenListener | None = None,
        gate: str | None = None,
    ) -> EngineRequest:
        """Run a live stream admitted by `check`, spooled where `arrival` says
        (`arengine/live/spool.py`): each model cut into `listen_segment_s` segments, each read
        as soon as its audio has arrived; `on_tags` hears each tag once it is final, `on_open`
        each label run that will be a tag while it is still open; `gate`: a loudness model
        whose quiet segments the models skip."""
        assert arrival.path is not None  # the spool opened it
        settings = self.settings
        spec = RequestSpec(
            request_id=request_id,
            path=arrival.path,
            recognizers=recognizers,
            tagging=LiveTagging(ModelTagging(recognizers, overrides), recognizers, on_open),
            limits=dataclasses.replace(
                self.limits, max_duration_s=settings.live.listen_max_duration_s
            ),
            segments_ahead=settings.engine.segments_ahead,
            on_tags=on_tags,
            arrival=arrival,
            plans=tuple(live_plan(r, settings.live.listen_segment_s) for r in recognizers),
            order=AsFinal(),
            gate=self.gate(gate, recognizers),
        )
        return self.pool.submit(spec)

    def close(self) -> None:
        self._loaded.clear()
        self.pool.close()


def _nothing_loaded(
    folder: Path, names: Sequence[str] | None, failures: Sequence[LoadFailure]
) -> str:
    """Why no model loaded (from `folder`, only `names` if given), and the fix."""
    if not folder.is_dir():
        return (
            f"no models: the models folder {folder} does not exist (pass --models-dir, or "
            "ARENGINE_MODELS_DIR, naming a folder of model folders; without either, the "
            "package's built-in models are served)"
        )
    unknown = [failure.path.name for failure in failures if failure.reason == NO_SUCH_MODEL]
    if names and unknown and len(unknown) == len(failures):
        found = ", ".join(sorted(path.parent.name for path in folder.glob("*/manifest.toml")))
        return f"unknown model {', '.join(unknown)}: the models in {folder} are {found or 'none'}"
    if not failures:
        return f"no models: {folder} has no model folder with a manifest.toml"
    return f"no model could be loaded from {folder}: each one's reason is in GET /v1/models"

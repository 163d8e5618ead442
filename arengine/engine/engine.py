"""The engine: one pool and the loaded models, shared by every request of the process."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from arengine.engine.job import Job, JobSpec
from arengine.engine.pool import EnginePool
from arengine.errors import NotReady, UnknownModel
from arengine.models.recognizer import Overrides, Recognizer
from arengine.models.speech import SpeechModel, SpeechRecognizer
from arengine.settings import Settings
from arengine.threads import available_cpus
from arengine.validation import AudioLimits

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to serve, and what loading it cost."""

    recognizer: Recognizer
    load_s: float
    warm_up_s: float


class Engine:
    """Admits requests, runs them on the shared pool, holds the models.

    >>> engine = Engine(Settings()); engine.load_models()
    >>> engine.recognize(Path("talk.flac"), "speech", {"threshold": 0.6}, "r1").future.result()
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pool = EnginePool(settings.engine_threads or available_cpus())
        self.limits = AudioLimits(
            max_duration_s=settings.max_duration_s,
            max_channels=settings.max_channels,
            min_sample_rate=settings.min_sample_rate,
            max_sample_rate=settings.max_sample_rate,
        )
        self.models: dict[str, LoadedModel] = {}
        self._ready = threading.Event()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def load_models(self) -> None:
        """Load and warm up every model; the engine is ready when this returns."""
        started = time.perf_counter()
        model = SpeechModel.from_silero_package()
        recognizer = SpeechRecognizer(model, self.settings.segment_s, self.settings.preroll_s)
        loaded = time.perf_counter()
        recognizer.warm_up()
        self.models[recognizer.name] = LoadedModel(
            recognizer, loaded - started, time.perf_counter() - loaded
        )
        log.info(
            "model %s loaded in %.2f s, warmed up in %.2f s",
            recognizer.name,
            loaded - started,
            time.perf_counter() - loaded,
        )
        self._ready.set()

    def check(self, model: str, overrides: Overrides) -> Recognizer:
        """The recognizer for `model` if the request can be admitted; raises the reason if not."""
        if not self.ready:
            raise NotReady("the models are still loading; retry shortly")
        loaded = self.models.get(model)
        if loaded is None:
            known = ", ".join(sorted(self.models))
            raise UnknownModel(f"unknown model {model!r}; loaded models: {known}")
        loaded.recognizer.tagger(overrides)  # validates the overrides before any upload is read
        return loaded.recognizer

    def recognize(self, path: Path, model: str, overrides: Overrides, request_id: str) -> Job:
        """Admit one file; the result (or the error) arrives on the returned job's future."""
        recognizer = self.check(model, overrides)
        spec = JobSpec(
            request_id=request_id,
            path=path,
            recognizer=recognizer,
            overrides=overrides,
            limits=self.limits,
            segments_ahead=self.settings.segments_ahead,
        )
        return self.pool.submit(spec)

    def close(self) -> None:
        self._ready.clear()
        self.pool.close()

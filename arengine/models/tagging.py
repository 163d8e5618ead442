"""A request's tagging strategy for the engine (`arengine.engine.hooks.Tagging`): each model's
tagger with its share of the request's parameters, and again with the defaults the recording's
time implies once it is known (birds: its week), the request's own values winning.

It lives beside the registry, not in the engine, because it is what the models and their kinds
know: which parameters a kind takes (`overrides_by_model`) and what a recording's time implies
(`arengine/kinds/catalog.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.catalog import implied_by_recording_time
from arengine.models.registry import overrides_by_model
from arengine.postprocess import Tagger


class ModelTagging:
    """Taggers for `recognizers` with `overrides` shared out among them (`InvalidInput` for an
    override no model takes).

    >>> from torch import nn
    >>> from arengine.kinds.speech.recognizer import SpeechRecognizer
    >>> tagging = ModelTagging([SpeechRecognizer(nn.Identity(), 30, 2)], {"threshold": 0.6})
    >>> tagging.dated(0, datetime(2026, 5, 1)) is None  # speech: nothing follows from a date
    True
    """

    def __init__(self, recognizers: Sequence[Recognizer], overrides: Overrides) -> None:
        self._recognizers = tuple(recognizers)
        self._shares = overrides_by_model(recognizers, overrides)

    def tagger(self, model: int) -> Tagger:
        return self._recognizers[model].tagger(self._shares[model])

    def dated(self, model: int, when: datetime) -> Tagger | None:
        own = self._shares[model]
        recognizer = self._recognizers[model]
        fresh = implied_by_recording_time(recognizer.kind, own, when)
        return recognizer.tagger({**own, **fresh}) if fresh else None

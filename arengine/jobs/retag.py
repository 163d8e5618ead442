"""New post-processing parameters for a finished job, without its models' inference: each
model's kept scores (`arengine/jobs/scores.py`) go through a fresh tagger of the model's own
kind, and the models' tags are merged as the engine merges them.

The taggers are the ones a recognition uses (`Recognizer.tagger`), so the tags equal a fresh
recognition's with those parameters. A `WholeTagger` (`arengine/postprocess/__init__.py`)
gets every segment's scores as one array, which gives the tags of pushing them segment by
segment (its tests compare the two); the others are fed segment by segment, as the engine feeds
them, and a tagger that `ReadsColumns` only the columns it reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from arengine.engine.merge import TagMerge
from arengine.errors import ArengineError, ErrorCode
from arengine.jobs.scores import KeptModel, ModelPlan
from arengine.kinds.base import Overrides, Recognizer
from arengine.kinds.catalog import implied_by_recording_time
from arengine.models.registry import overrides_by_model
from arengine.postprocess import ReadsColumns, Tagger, WholeTagger
from arengine.types import Result, Tag


def retag(
    result: Result,
    recognizers: Sequence[Recognizer],
    overrides: Overrides,
    plan: Sequence[ModelPlan],
    kept: Sequence[KeptModel] | None,
) -> Result:
    """`result` (a finished job's) with its tags derived again from `kept` under `overrides`.

    `recognizers` are the job's models as loaded now: each must still be the model (name and
    kind) that gave its scores, or `scores_not_kept` is raised.
    """
    kept = _check(recognizers, plan, kept)
    when = _recorded_at(result)
    shares = overrides_by_model(recognizers, overrides)
    merge = TagMerge(len(recognizers))
    tags: list[Tag] = []
    for index, (recognizer, own, model) in enumerate(zip(recognizers, shares, kept, strict=True)):
        if when is not None:
            own = {**own, **implied_by_recording_time(recognizer.kind, own, when)}
        found = _tags(recognizer.tagger(own), model)
        if len(recognizers) > 1:
            found = [dataclasses.replace(tag, model=recognizer.name) for tag in found]
        tags.extend(merge.add(index, found, done=True))
    return dataclasses.replace(result, tags=tuple(tags))


def _tags(tagger: Tagger, model: KeptModel) -> list[Tag]:
    if isinstance(tagger, WholeTagger):
        return tagger.whole(model.joined(), model.total_samples)
    found: list[Tag] = []
    segments = model.scores
    if isinstance(tagger, ReadsColumns):
        segments = model.first_columns(tagger.columns_read)
    for scores in segments:
        found.extend(tagger.push(scores))
    found.extend(tagger.finish(model.total_samples))
    return found


def _check(
    recognizers: Sequence[Recognizer], plan: Sequence[ModelPlan], kept: Sequence[KeptModel] | None
) -> Sequence[KeptModel]:
    now = [(recognizer.name, recognizer.kind) for recognizer in recognizers]
    then = [(model.name, model.kind) for model in plan]
    if now == then and kept is not None:
        return kept
    raise ArengineError(
        "this job's scores do not fit the models loaded now: ask for its result without "
        "new parameters, or run it again",
        code=ErrorCode.SCORES_NOT_KEPT,
    )


def _recorded_at(result: Result) -> datetime | None:
    when = result.audio.recorded_at
    return None if when is None else datetime.fromisoformat(when)

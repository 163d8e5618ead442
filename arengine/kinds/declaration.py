"""`Kind`: the declaration that ties a kind's manifest section, recognizer, builder,
parameters, tagger and tag fields together (`catalog.py` holds one per kind).

A declaration loads no torch: the table is read by the command line's parser, the output
formats and the HTTP schemas, none of which runs a network. The recognizer class is named by its
path and the builders import their networks when they build, so `arengine recognize --help`, a
usage error or a remote command never waits for torch to import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from arengine.kinds.fields import TagField
from arengine.kinds.manifest import Manifest
from arengine.postprocess import Tagger
from arengine.postprocess.params import Params

if TYPE_CHECKING:
    import sqlalchemy as sa

    from arengine.kinds.base import Recognizer


def _nothing(when: datetime) -> dict[str, float | str]:
    return {}


@dataclass(frozen=True, slots=True)
class Kind:
    """One model kind: its manifest section, recognizer, builder, parameters, tagger and tag
    fields."""

    name: str
    """What a manifest's `kind` says; the recognizer's and the parameters' `kind` are the same."""
    features: str
    """The `[features] type` the kind computes (a manifest may leave it out; another is refused)."""
    model_keys: tuple[str, ...]
    """The keys the kind reads from `[model]`; any other is refused (a typo would be ignored)."""
    fixed_labels: bool
    """The kind fixes its labels (note names): the manifest lists none. Otherwise it must."""
    recognizer_path: str
    """Where its `Recognizer` subclass is, `arengine.kinds.<kind>.recognizer.<Class>`: imported
    when first asked for (`recognizer`), as the builders import their networks, so that the
    table loads without torch."""
    build: Callable[[Manifest, float], Recognizer]
    """Manifest and segment length in seconds -> a loaded recognizer (`ManifestError` or
    `ValueError` when the manifest and the weights do not fit)."""
    parameters: type[Params]
    """The post-processing parameters: manifest defaults, query overrides, docs."""
    tagger: type[Tagger]
    """The post-processor class the recognizer's `tagger()` returns (its module is the kind's
    post-processing module)."""
    from_recording_time: Callable[[datetime], dict[str, float | str]] = _nothing
    """Parameter defaults that follow from when the recording was made (`audio.recorded_at`;
    birds: BirdNET's `week`); a request's own value wins."""
    build_shared: Callable[[Manifest, float, sa.Engine], Recognizer] | None = None
    """For a kind whose models keep what they learn while serving (fingerprint: references),
    its builder when `database_url` names a server database every replica shares (PostgreSQL):
    there the model's state lives, keyed by the model's name. `build` otherwise."""
    tag_fields: tuple[TagField[Any], ...] = ()
    """The fields its tags carry besides the shared ones (`Tag.extra`), each declared once in
    the kind's `fields.py` with its bounds and output columns (`fields.py` here)."""
    gate: Callable[[Recognizer, Sequence[Recognizer]], Any] | None = None
    """For a kind whose models can gate a request's other models (loudness), the `Gate`
    (`arengine/engine/hooks.py`) one of its models makes for a request's recognizers."""

    @property
    def recognizer(self) -> type[Recognizer]:
        """The kind's `Recognizer` subclass (importing it loads torch)."""
        module, _, name = self.recognizer_path.rpartition(".")
        found: type[Recognizer] = getattr(importlib.import_module(module), name)
        return found

"""What the label kinds (classifier, music, events) share: a manifest's label groups and
profiles read into the kind's parameters and the vocabulary its labels mean."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from arengine.errors import InvalidInput
from arengine.kinds.manifest import Manifest, ManifestError
from arengine.postprocess.labels import LabelParams, LabelView
from arengine.postprocess.vocabulary import Vocabulary

_Labels = TypeVar("_Labels", bound=LabelParams)


def label_params(
    manifest: Manifest, kind: type[_Labels], vocabulary: Vocabulary | None = None
) -> tuple[_Labels, Vocabulary]:
    """A label model's post-processing and what its label lists mean: the manifest's groups
    (`[postprocess.groups]`) and profiles (`[postprocess.profiles.<name>]`), every name in them
    checked against the labels."""
    post = dict(manifest.postprocess)
    vocabulary = dataclasses.replace(
        vocabulary or Vocabulary(manifest.labels),
        groups={k: tuple(v) for k, v in post.pop("groups", {}).items()},
        profiles=post.pop("profiles", {}),
    )
    try:
        params = kind().with_overrides(post)
        LabelView.of(vocabulary, params)  # every name resolves
        for profile in vocabulary.profiles:
            LabelView.of(vocabulary, params.for_request({"profile": profile}, vocabulary))
    except InvalidInput as error:
        raise ManifestError(manifest.path, f"[postprocess]: {error}") from None
    return params, vocabulary

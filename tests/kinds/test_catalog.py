"""The kind table: every kind whole, none declared outside it, manifests checked against it."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing
from pathlib import Path
from typing import Any

import pytest

import arengine.kinds
import arengine.postprocess
from arengine.kinds.base import Recognizer
from arengine.kinds.catalog import KINDS, kind_of
from arengine.kinds.declaration import Kind
from arengine.kinds.manifest import Manifest, ManifestError, read_manifest
from arengine.models import DEFAULT_MODELS_DIR
from arengine.models.registry import load_models
from arengine.postprocess.params import Params

SHIPPED = sorted(DEFAULT_MODELS_DIR.glob("*/manifest.toml"))


def _classes(package: object) -> list[Any]:
    """Every class defined in the modules of `package` and of its sub-packages."""
    found = []
    prefix = f"{package.__name__}."  # type: ignore[attr-defined]
    for info in pkgutil.walk_packages(package.__path__, prefix):  # type: ignore[attr-defined]
        module = importlib.import_module(info.name)
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value) and value.__module__ == module.__name__
        ]
    return found


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_every_kind_is_declared_whole(kind: Kind) -> None:
    assert kind.recognizer.kind == kind.name
    assert kind.parameters.kind == kind.name
    assert kind.recognizer.__module__ == f"arengine.kinds.{kind.name}.recognizer"
    # A kind lives in its folder: its declaration beside its recognizer, on the one base.
    assert kind.build.__module__ == f"arengine.kinds.{kind.name}.kind"
    assert issubclass(kind.recognizer, Recognizer)
    # The recognizer hands out the table's tagger, configured by the table's parameters.
    assert typing.get_type_hints(kind.recognizer.tagger)["return"] is kind.tagger
    params = typing.get_type_hints(kind.recognizer.__init__)["params"]
    assert kind.parameters in (params, *typing.get_args(params))
    # A kind's post-processing is its folder's tagger, or the shared label tagger.
    assert kind.tagger.__module__ in (
        f"arengine.kinds.{kind.name}.tagger",
        "arengine.postprocess.labels",
    )
    if kind.tagger.__module__ == "arengine.postprocess.labels":  # its own parameters, or the base
        assert kind.parameters.__module__ in (
            f"arengine.kinds.{kind.name}.params",
            "arengine.postprocess.labels",
        )
    else:
        assert kind.parameters.__module__ == kind.tagger.__module__
    if kind.tagger.__module__ == f"arengine.kinds.{kind.name}.tagger":
        title = kind.name.capitalize()
        assert kind.parameters.__name__ == f"{title}Params"
        assert kind.tagger.__name__ == f"{title}Tagger"
    assert kind.parameters.bounds(), "a kind's clients can override at least one parameter"


def test_no_kind_is_declared_outside_the_table() -> None:
    """A recognizer or a parameters class with a `kind` that the table does not hold fails here."""
    recognizers = {
        cls: cls.kind
        for cls in _classes(arengine.kinds)
        if isinstance(getattr(cls, "kind", None), str) and hasattr(cls, "tagger")
    }
    assert recognizers == {kind.recognizer: name for name, kind in KINDS.items()}
    parameters = {
        cls: cls.kind
        for cls in _classes(arengine.postprocess) + _classes(arengine.kinds)
        if issubclass(cls, Params) and cls is not Params
    }
    assert parameters == {kind.parameters: name for name, kind in KINDS.items()}


def test_every_shipped_manifest_fits_its_kind() -> None:
    kinds = {kind_of(read_manifest(path)).name for path in SHIPPED}
    # The classifier is the user's (see examples/); a fingerprint library is the user's recordings.
    assert kinds == set(KINDS) - {"classifier", "fingerprint"}


def test_the_models_readme_lists_every_kind() -> None:
    readme = (DEFAULT_MODELS_DIR / "README.md").read_text(encoding="utf-8")
    line = re.search(r'^kind = "\w+" +# (.+)$', readme, flags=re.MULTILINE)
    assert line is not None
    assert line.group(1) == " | ".join(KINDS)


def _speech(**changes: object) -> Manifest:
    manifest = read_manifest(DEFAULT_MODELS_DIR / "speech" / "manifest.toml")
    return dataclasses.replace(manifest, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"kind": "teleport"}, "kind 'teleport' is not one of speech, pitch, notes, classifier"),
        ({"labels": ()}, "a speech model needs its labels"),
        ({"kind": "pitch", "features": {}}, "a pitch model's labels are fixed by its kind"),
        ({"features": {"type": "log_mel"}}, "a speech model computes 'waveform'"),
        ({"model": {"bach": 4}}, "[model] has unknown keys ['bach']; a speech model reads: batch"),
        (
            {"kind": "classifier", "features": {}, "model": {"windows_s": 1}},
            "a classifier model reads: activation, window_s, hop_s",
        ),
    ],
)
def test_a_manifest_that_does_not_fit_its_kind_is_refused(
    changes: dict[str, object], reason: str
) -> None:
    with pytest.raises(ManifestError) as refused:
        kind_of(_speech(**changes))
    assert reason in refused.value.reason


def test_a_misspelt_model_key_makes_the_model_unavailable(tmp_path: Path) -> None:
    """It used to be ignored: `windows_s` left a classifier on the default 1-s windows."""
    text = (DEFAULT_MODELS_DIR / "speech" / "manifest.toml").read_text()
    (tmp_path / "speech").mkdir()
    (tmp_path / "speech" / "manifest.toml").write_text(text.replace("batch = 4", "bach = 4"))
    loaded, failures = load_models(tmp_path)
    assert not loaded
    assert [failure.reason for failure in failures] == [
        "[model] has unknown keys ['bach']; a speech model reads: batch"
    ]


def test_an_unknown_kind_is_reported_before_the_fields_it_would_give_meaning(
    tmp_path: Path,
) -> None:
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "manifest.toml").write_text('name = "odd"\nkind = "teleport"\n')
    _, failures = load_models(tmp_path)
    assert [failure.reason for failure in failures] == [
        f"kind 'teleport' is not one of {', '.join(KINDS)}"
    ]


@pytest.mark.parametrize("path", SHIPPED, ids=[path.parent.name for path in SHIPPED])
def test_a_built_in_model_takes_its_kinds_defaults(path: Path) -> None:
    """A parameter's default is declared once, by the kind, and the README's table shows it.
    The built-in manifests restated them: speech, pitch and notes the same values, music and
    events others (0.3, 3000 ms, per-label thresholds), so GET /v1/models and the README's
    table disagreed."""
    manifest = read_manifest(path, KINDS)
    params = KINDS[manifest.kind].parameters
    restated = sorted(set(manifest.postprocess) & (set(params.bounds()) | set(params.texts())))
    assert restated == [], f"{path} restates its kind's defaults: {restated}"


KIND_OWN_MODULES = {
    "arengine/http/references.py": "the fingerprint library's endpoints",
    "arengine/cli/references.py": "`arengine references`, the fingerprint library's CLI",
    "arengine/cli/database.py": "`arengine db copy` copies the fingerprint libraries",
    "arengine/models/registry.py": "a user classifier's weights suffix names its runtime",
}
"""Modules outside `arengine/kinds/` that serve one kind, and so may import its package."""


def _imports(path: Path) -> set[str]:
    """The modules `path` imports (docstrings' doctests are prose, not imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_only_a_kind_imports_its_package() -> None:
    """The rooms every kind goes through reach a kind by its declaration (`KINDS`), never by its
    package: adding a kind touches its folder and the catalog, nothing shared."""
    root = Path(arengine.kinds.__file__).parents[2]
    packages = tuple(f"arengine.kinds.{name}" for name in KINDS)
    importing = {}
    for path in sorted([*(root / "arengine").rglob("*.py"), *(root / "client").rglob("*.py")]):
        where = path.relative_to(root).as_posix()
        if where.startswith("arengine/kinds/"):
            continue
        named = sorted(m for m in _imports(path) if m.startswith(packages))
        if named:
            importing[where] = named
    assert set(importing) == set(KIND_OWN_MODULES), importing

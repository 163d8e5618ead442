"""A server with no models says exactly what is missing and how to fix it (a plain `pip install`
answered "the models are still loading; retry shortly" for ever)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from arengine.errors import NotReady
from arengine.models import DEFAULT_MODELS_DIR
from arengine.service.engine import Engine
from arengine.settings import Settings


def _speech(folder: Path) -> Path:
    shutil.copytree(DEFAULT_MODELS_DIR / "speech", folder / "speech")
    return folder


@pytest.mark.parametrize(
    ("make", "names", "expected"),
    [
        (lambda folder: folder / "absent", None, r"does not exist .*--models-dir"),
        (lambda folder: folder, None, r"has no model folder with a manifest\.toml"),
        (_speech, "nope,nada", r"unknown model nada, nope: the models in .* are speech$"),
    ],
    ids=["no folder", "empty folder", "unknown names"],
)
def test_no_models_says_why_and_the_fix(
    tmp_path: Path, make: object, names: str | None, expected: str
) -> None:
    folder = make(tmp_path)  # type: ignore[operator]
    engine = Engine(Settings(models_dir=folder, models=names, engine_threads=1))
    try:
        with pytest.raises(NotReady, match="still loading"):
            engine.check("speech", {})
        engine.load_models()
        assert not engine.ready
        with pytest.raises(NotReady, match=expected):
            engine.check("speech", {})
    finally:
        engine.close()

"""A server with no models says exactly what is missing and how to fix it (a plain `pip install`
answered "the models are still loading; retry shortly" for ever)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arengine.engine.engine import Engine
from arengine.errors import NotReady
from arengine.settings import Settings


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda folder: folder / "absent", r"does not exist .*--models-dir"),
        (lambda folder: folder, r"has no model folder with a manifest\.toml"),
    ],
    ids=["no folder", "empty folder"],
)
def test_no_models_says_why_and_the_fix(tmp_path: Path, make: object, expected: str) -> None:
    folder = make(tmp_path)  # type: ignore[operator]
    engine = Engine(Settings(models_dir=folder, engine_threads=1))
    try:
        with pytest.raises(NotReady, match="still loading"):
            engine.check("speech", {})
        engine.load_models()
        assert not engine.ready
        with pytest.raises(NotReady, match=expected):
            engine.check("speech", {})
    finally:
        engine.close()

"""`arengine recognize` names its models once: `--model` (the models to run, the only ones
loaded) and `--models-dir` (their folder). It also took `--models` (the models to load), so
`--model notes --models speech` was two answers to one question."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from arengine.cli.commands import build_parser, main
from arengine.models import DEFAULT_MODELS_DIR
from tests.recordings import write


def test_models_is_a_usage_error_that_says_what_to_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["recognize", "a.wav", "--models", "speech"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--models is gone: --model names the models to run (only those load)" in error
    assert "--models-dir the folder" in error


def test_the_help_names_each_flag_once() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert isinstance(commands, dict)
    text = " ".join(commands["recognize"].format_help().split())
    assert "--models " not in text and "--models-dir" in text
    assert "only these load" in text


def test_recognize_loads_only_the_models_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model that is not run is not loaded, so its faults do not concern the run."""
    folder = tmp_path / "models"
    shutil.copytree(DEFAULT_MODELS_DIR / "speech", folder / "speech")
    (folder / "broken").mkdir()
    manifest = (DEFAULT_MODELS_DIR / "pitch" / "manifest.toml").read_text()
    (folder / "broken" / "manifest.toml").write_text(manifest.replace('"pitch"', '"broken"', 1))
    (folder / "broken" / "tiny.pth").write_bytes(b"not a state dict")
    rate = 16000
    tone = 0.3 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)
    clip = write(tone.astype(np.float32), rate, tmp_path / "tone.wav")
    argv = ["recognize", str(clip), "--models-dir", str(folder), "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--model", "speech", "--engine-threads", "1"])
    assert exited.value.code == 0
    assert "broken" not in capsys.readouterr().err
    assert json.loads((tmp_path / "tone.json").read_text())["tags"] == []

    with pytest.raises(SystemExit) as exited:
        main([*argv, "--model", "broken", "--engine-threads", "1"])
    assert exited.value.code == 2
    assert "broken/manifest.toml unavailable: UnpicklingError" in capsys.readouterr().err

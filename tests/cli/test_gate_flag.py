"""`arengine recognize --gate MODEL`: the loudness model gating the others loads beside them, and
the output says what they skipped; a gate they cannot have stops the run before it starts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from arengine.cli.commands import build_parser, main
from arengine.models import DEFAULT_MODELS_DIR
from tests.recordings import write


@pytest.fixture
def argv(tmp_path: Path) -> list[str]:
    folder = tmp_path / "models"
    for name in ("speech", "loudness"):
        shutil.copytree(DEFAULT_MODELS_DIR / name, folder / name)
    rate = 16000
    audio = np.zeros(6 * rate, np.float32)  # silence, a tone at 2 to 3 s, silence
    audio[2 * rate : 3 * rate] = 0.3 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)
    clip = write(audio, rate, tmp_path / "room.wav")
    flags = ["--models-dir", str(folder), "--out", str(tmp_path), "--engine-threads", "1"]
    return ["recognize", str(clip), "--segment-s", "1", *flags]


def test_the_gate_loads_and_the_output_says_what_was_skipped(
    argv: list[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--model", "speech", "--gate", "loudness"])
    assert exited.value.code == 0
    result = json.loads((tmp_path / "room.json").read_text())
    assert result["skipped_s"]["speech"] >= 2.0, result
    assert result["model"] == "speech"


def test_a_gate_that_is_not_a_loudness_model_stops_the_run(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--model", "loudness", "--gate", "speech"])
    assert exited.value.code == 2
    assert "gate 'speech' is a speech model: a gate is a loudness model" in capsys.readouterr().err


def test_listen_sends_the_gate_in_the_query() -> None:
    args = build_parser().parse_args(["listen", "-", "--server", "http://x", "--gate", "loudness"])
    assert vars(args)["parameter:gate"] == "loudness"

"""The README's quick starts and the worked example of the own-model guide, run as they are
written (`tests/test_readme.py` checks that each guide opens with the README's commands).

Each block runs line by line in a folder of its own holding the files it names: an `arengine
serve` line starts a real server with its flags (relative paths made inside that folder) through
the shared `serve` factory, and the other lines run in bash with the server's address in place of
127.0.0.1:8000. The microphone of the alarm quick start is a recording played by an `arecord`
shell function.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE
from tests.conftest import RecordingFactory, Server, ServerFactory
from tests.fingerprints import Placed, mix, piece
from tests.recordings import DEBIAN_SOUNDS, mono_16k, write
from tests.test_readme import QUICK_STARTS, quick_starts

pytestmark = pytest.mark.slow

URL = "http://127.0.0.1:8000"
PATH_FLAGS = {"--models-dir", "--data-dir", "--upload-dir"}
ROOT = Path(__file__).resolve().parent.parent.parent


def _server_flags(words: list[str], folder: Path) -> list[str]:
    flags = list(words)
    for i, word in enumerate(flags[:-1]):
        if word in PATH_FLAGS:
            flags[i + 1] = str(folder / flags[i + 1])
    return flags


OWN_MODEL = quick_starts(ROOT / "docs" / "guides" / "own-model.md")["own-model"]
"""The own-model guide's worked example, run from a folder that looks like the repository's root."""


def run_quick_start(
    name: str, folder: Path, serve: ServerFactory, block: str | None = None
) -> list[str]:
    """Run quick start `name` (or the commands of `block`) in `folder`; the standard output of
    each command line."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    server: Server | None = None
    outputs = []
    for line in (block or QUICK_STARTS[name]).splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] in (["arengine", "serve"], [".venv/bin/arengine", "serve"]):
            server = serve(*_server_flags(words[2:], folder))
            continue
        command = line if server is None else line.replace(URL, server.url)
        done = subprocess.run(
            ["bash", "-c", "set -o pipefail; arecord() { cat microphone.raw; }\n" + command],
            cwd=folder, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        outputs.append(done.stdout)
    return outputs


def test_speech_in_a_meeting(
    tmp_path: Path, serve: ServerFactory, recording: RecordingFactory
) -> None:
    meeting = recording("meeting.flac")
    answer, _ = run_quick_start("speech", tmp_path, serve)
    tags = json.loads(answer)["tags"]
    assert len(tags) == len(meeting.speech) and {tag["label"] for tag in tags} == {"speech"}
    assert (tmp_path / "meeting.vtt").read_text().startswith("WEBVTT")


def test_birds_on_a_folder_of_field_recordings(tmp_path: Path, serve: ServerFactory) -> None:
    (tmp_path / "recordings" / "site1").mkdir(parents=True)
    birds = ROOT / "tests" / "kinds" / "birds" / "birds_10s.wav"
    shutil.copy(birds, tmp_path / "recordings" / "site1" / "dawn.wav")
    run_quick_start("birds", tmp_path, serve)
    results = tmp_path / "results" / "site1" / "dawn.BirdNET.results.csv"
    assert results.read_text().startswith("Start (s),End (s),Scientific name")
    assert (tmp_path / "results" / "all.csv").exists()
    run_quick_start("birds", tmp_path, serve)  # --resume: done already, nothing to redo


def test_an_alarm_on_a_live_microphone(tmp_path: Path, serve: ServerFactory) -> None:
    # freedesktop's alarm clock is a glassy chime: the safety profile reports it as glass.
    chime = mono_16k(DEBIAN_SOUNDS / "freedesktop/stereo/alarm-clock-elapsed.oga")
    audio = np.concatenate([np.zeros(16000, np.float32), chime, np.zeros(32000, np.float32)])
    (tmp_path / "microphone.raw").write_bytes((audio * 32767).astype("<i2").tobytes())
    (printed,) = run_quick_start("alarm", tmp_path, serve)
    lines = [json.loads(line) for line in printed.splitlines()]
    tags = [line for line in lines if "label" in line]
    assert "glass" in {tag["label"] for tag in tags}, lines
    assert {"start", "end", "score"} <= tags[0].keys()


def test_known_recordings_in_a_broadcast(tmp_path: Path, serve: ServerFactory) -> None:
    ident = piece(0, tmp_path)
    write(ident, SAMPLE_RATE, tmp_path / "ident.wav")
    on_air = mix(30.0, [ident], [Placed(0, 12.0, 0.0, 10.0)], snr_db=10.0)
    write(on_air, SAMPLE_RATE, tmp_path / "broadcast.wav")
    _, table = run_quick_start("broadcast", tmp_path, serve)
    rows = table.strip().splitlines()
    assert len(rows) == 2 and "Station ident" in rows[1]
    assert abs(float(rows[1].split(",")[0]) - 12.0) <= 0.5


def test_a_batch_of_long_files_as_jobs(
    tmp_path: Path, serve: ServerFactory, recording: RecordingFactory
) -> None:
    (tmp_path / "long").mkdir()
    pieces = [("silence", 30.0), ("speech", 0), ("silence", 35.0), ("speech", 0)]
    day = recording("long/day.flac", rate=8000, pieces=pieces)
    assert day.duration_s > 60  # over --job-over-s: sent as a job
    recording("long/clip.flac")  # under it: a plain request
    _, jobs = run_quick_start("jobs", tmp_path, serve)
    listed = json.loads(jobs)
    listed = listed["jobs"] if isinstance(listed, dict) else listed
    assert [job["state"] for job in listed] == ["done"]
    rows = (tmp_path / "tags" / "day.csv").read_text().strip().splitlines()
    assert rows[0].startswith("start,end,label,score") and len(rows) - 1 == len(day.speech)
    assert (tmp_path / "tags" / "clip.csv").exists()


def test_the_own_model_guide_exports_an_onnx_classifier_that_loads_and_tags(
    tmp_path: Path, serve: ServerFactory
) -> None:
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "models").symlink_to(ROOT / "models")
    rate = 16000
    t = np.arange(2 * rate) / rate
    noise = 0.2 * np.random.default_rng(1).standard_normal(2 * rate)
    silence = np.zeros(rate)
    beeps = [silence, 0.3 * np.sin(2 * np.pi * 880 * t), silence, noise, silence]
    write(np.concatenate(beeps).astype(np.float32), rate, tmp_path / "beeps.wav")
    _, answer, models = run_quick_start("own-model", tmp_path, serve, OWN_MODEL)
    assert (tmp_path / "my-models" / "tones" / "model.onnx").is_file()
    assert [tag["label"] for tag in json.loads(answer)["tags"]] == ["tone", "noise"]
    tones = next(model for model in json.loads(models)["models"] if model["name"] == "tones")
    assert tones["input_shape"] == [None, 32, 47]

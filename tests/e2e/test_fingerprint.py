"""`arengine references` builds a fingerprint model; a running server sees its changes live."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE
from tests.conftest import ServerFactory
from tests.conftest import run_cli as _arengine
from tests.fingerprints import Placed, mix, piece
from tests.recordings import write


def _tags(server_url: str, recording: Path) -> list[dict[str, Any]]:
    with httpx.Client(base_url=server_url, timeout=120) as client:
        response = client.post(
            "/v1/recognize?model=jingles", files={"file": recording.read_bytes()}
        )
    assert response.status_code == 200, response.text
    tags: list[dict[str, Any]] = response.json()["tags"]
    return tags


def test_references_added_and_removed_while_a_server_runs(
    tmp_path: Path, serve: ServerFactory
) -> None:
    pieces = [piece(seed, tmp_path) for seed in range(3)]
    files = [
        write(samples, SAMPLE_RATE, tmp_path / f"jingle{i}.flac")
        for i, samples in enumerate(pieces)
    ]
    models = tmp_path / "models"
    models.mkdir()
    added = _arengine(
        "references", "add", "jingles", str(files[0]), "--models-dir", str(models), cwd=tmp_path
    )
    assert added.returncode == 0, added.stderr
    manifest = tomllib.loads((models / "jingles" / "manifest.toml").read_text())
    assert (manifest["kind"], manifest["sample_rate"]) == ("fingerprint", SAMPLE_RATE)

    server = serve("--models-dir", str(models), "--segment-s", "10")
    recording = write(
        mix(30.0, pieces, [Placed(0, 2.0, 0.0, 10.0), Placed(2, 14.5, 0.0, 10.0)], snr_db=10.0),
        SAMPLE_RATE,
        tmp_path / "broadcast.wav",
    )
    assert [t["label"] for t in _tags(server.url, recording)] == ["jingle0"]

    titled = _arengine(
        "references", "add", "jingles", str(files[2]), "--title", "Station ident",
        "--models-dir", str(models), cwd=tmp_path,
    )  # fmt: skip
    assert titled.returncode == 0, titled.stderr
    ident = titled.stdout.split("\t")[0]
    tags = _tags(server.url, recording)
    assert [(t["label"], t["reference"]) for t in tags] == [
        ("jingle0", "1"),
        ("Station ident", ident),
    ]
    assert abs(tags[1]["start"] - 14.5) <= 0.5 and abs(tags[1]["end"] - 24.5) <= 0.5
    assert tags[1]["reference_start"] == 0.0 and abs(tags[1]["reference_end"] - 10.0) <= 0.5
    assert abs(tags[1]["speed"] - 1.0) <= 0.01 and abs(tags[1]["pitch"] - 1.0) <= 0.01

    listed = _arengine("references", "list", "jingles", "--models-dir", str(models), cwd=tmp_path)
    assert [line.split("\t")[2] for line in listed.stdout.splitlines()] == [
        "jingle0",
        "Station ident",
    ]
    removed = _arengine(
        "references", "remove", "jingles", "1", "--models-dir", str(models), cwd=tmp_path
    )
    assert removed.returncode == 0, removed.stderr
    assert [t["label"] for t in _tags(server.url, recording)] == ["Station ident"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("list", "nowhere"), "no reference library"),
        (("remove", "jingles", "7"), "no reference '7'"),
        (("add", "jingles", "missing.wav"), "missing.wav"),
    ],
)
def test_refusals_say_why(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "models").mkdir()
    if args[0] == "remove":
        noise = np.random.default_rng(0).standard_normal(SAMPLE_RATE).astype(np.float32) * 0.1
        write(noise, SAMPLE_RATE, tmp_path / "noise.wav")
        _arengine(
            "references", "add", "jingles", "noise.wav", "--models-dir", "models", cwd=tmp_path
        )
    done = _arengine("references", *args, "--models-dir", "models", cwd=tmp_path)
    assert done.returncode == 1
    assert message in done.stderr
    if args[0] == "add":  # nothing added: no model folder left behind to be served empty
        assert not (tmp_path / "models" / "jingles").exists()

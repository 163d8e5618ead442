"""The built-in pitch model over HTTP: a melody of known notes comes back as note tags."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server

pytestmark = pytest.mark.slow

MELODY = [("A4", 440.0), ("C5", 523.25), ("E5", 659.26), ("G3", 196.0), ("C#4", 277.18)]


def _melody(rate: int) -> tuple[np.ndarray, list[float]]:
    """0.6 s harmonic notes after 0.3 s silences; returns audio and the onsets."""
    parts, onsets, at = [], [], 0.0
    for _, frequency in MELODY:
        parts.append(np.zeros(int(0.3 * rate)))
        at += 0.3
        t = np.arange(int(0.6 * rate)) / rate
        note = sum(0.3 / k * np.sin(2 * np.pi * k * frequency * t) for k in (1, 2, 3))
        parts.append(note * np.minimum(1, np.minimum(t, 0.6 - t) / 0.01))
        onsets.append(at)
        at += 0.6
    parts.append(np.zeros(int(0.3 * rate)))
    return np.concatenate(parts).astype(np.float32), onsets


@pytest.mark.parametrize(("extension", "rate", "channels"), [("flac", 44100, 2), ("wav", 16000, 1)])
def test_a_melody_comes_back_as_notes(
    server: Server, tmp_path: Path, extension: str, rate: int, channels: int
) -> None:
    audio, onsets = _melody(rate)
    path = tmp_path / f"melody.{extension}"
    sf.write(path, np.repeat(audio[:, None], channels, axis=1), rate)
    with path.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"model": "pitch"},
            files={"file": body},
            timeout=60,
        )
    assert response.status_code == 200, response.text
    tags = response.json()["tags"]
    assert [tag["label"] for tag in tags] == [name for name, _ in MELODY]
    for tag, onset, (_, frequency) in zip(tags, onsets, MELODY, strict=True):
        assert tag["start"] == pytest.approx(onset, abs=0.05)
        assert tag["end"] == pytest.approx(onset + 0.6, abs=0.05)
        assert abs(1200 * math.log2(tag["frequency_hz"] / frequency)) < 20
        assert 0.65 <= tag["score"] <= 1


def test_pitch_overrides_are_checked(server: Server, tmp_path: Path) -> None:
    sf.write(tmp_path / "q.wav", np.zeros(16000, np.float32), 16000)
    with httpx.Client(base_url=server.url) as client:
        even = client.post(
            "/v1/recognize",
            params={"model": "pitch", "median_frames": 4},
            files={"file": (tmp_path / "q.wav").read_bytes()},
        )
        speechy = client.post(
            "/v1/recognize",
            params={"model": "pitch", "speech_pad_ms": 4},
            files={"file": (tmp_path / "q.wav").read_bytes()},
        )
        silent = client.post(
            "/v1/recognize",
            params={"model": "pitch"},
            files={"file": (tmp_path / "q.wav").read_bytes()},
        )
    assert even.status_code == 422 and speechy.status_code == 422
    assert silent.status_code == 200 and silent.json()["tags"] == []

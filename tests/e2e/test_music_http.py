"""The `music` model served end to end: timed tags from a real server on loopback."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from scipy.signal import resample_poly

from arengine.kinds.music.network import PATCH_HOP
from arengine.models import DEFAULT_MODELS_DIR
from tests.conftest import Server, ServerFactory
from tests.recordings import speak

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", "music")


def test_piano_then_speech_served_as_timed_tags(server: Server, tmp_path: Path) -> None:
    """Three patches of piano, then speech: the piano tag covers the piano and stops there."""
    clip, rate = sf.read(DEFAULT_MODELS_DIR / "music" / "reference.flac", dtype="float32")
    piano = clip[: 3 * PATCH_HOP]
    phrase, rate = speak("Music tags come in runs of three second patches. " * 3, tmp_path)
    assert rate == 22050
    # espeak-ng's 22,050 Hz to 16 kHz (320/441); librosa's first call would compile its numba
    # kernels, most of this test's time.
    voice = resample_poly(phrase, 320, 441).astype(np.float32)[: 3 * PATCH_HOP]
    voice = np.pad(voice, (0, 3 * PATCH_HOP - len(voice)))
    path = tmp_path / "piano-then-speech.flac"
    sf.write(path, np.concatenate([piano, voice]), 16000)
    with path.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"model": "music"},
            files={"file": body},
            timeout=120,
        )
    assert response.status_code == 200, response.text
    tags = response.json()["tags"]
    assert [tag["start"] for tag in tags] == sorted(tag["start"] for tag in tags)
    pianos = [tag for tag in tags if tag["label"] == "piano"]
    assert len(pianos) == 1
    assert pianos[0]["start"] == 0.0
    assert pianos[0]["end"] == pytest.approx(3 * PATCH_HOP / 16000, abs=1e-3)
    assert all(tag["end"] <= 6 * PATCH_HOP / 16000 + 1e-3 for tag in tags)
    # Stricter threshold: only the surest tags remain, and all of them are a subset.
    with path.open("rb") as body:
        strict = httpx.post(
            server.url + "/v1/recognize",
            params={"model": "music", "threshold": 0.9},
            files={"file": body},
            timeout=120,
        ).json()["tags"]
    assert len(strict) < len(tags)


def test_the_model_card_is_served(server: Server) -> None:
    (music,) = httpx.get(server.url + "/v1/models").json()["models"]
    assert music["name"] == music["kind"] == "music"
    assert music["task"].startswith("music tagging")
    assert len(music["labels"]) == 50 and music["labels"][9] == "piano"
    assert "ISC" in music["licence"] and "non-commercial" in music["licence"]
    assert "non-commercial use only" in music["training_data"]
    assert "musicnn 0.1.0" in music["source"] and music["version"]
    assert music["sample_rate"] == 16000
    assert music["segment_plan"] == {
        "segment_s": pytest.approx(10 * PATCH_HOP / 16000),
        "preroll_s": 0.0,
        "hop_s": pytest.approx(PATCH_HOP / 16000),
        "context_s": pytest.approx(256 / 16000),
        "lookahead_s": 0.0,
    }
    assert music["real_time_factor"] > 0
    assert music["parameters"]["threshold"] == 0.3
    assert music["parameters"]["threshold.guitar"] == 0.45

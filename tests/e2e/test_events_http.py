"""The `events` model served end to end, alone and beside `speech` on one timeline."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server, ServerFactory
from tests.recordings import DEBIAN_SOUNDS, mono_16k

pytestmark = pytest.mark.slow

RATE = 16000


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", "speech,events")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Quiet noise; a phone rings at 3 s; a voice at 8 s (alsa-utils' "Front center")."""
    rng = np.random.default_rng(0)
    audio = rng.normal(0, 0.002, 14 * RATE).astype(np.float32)
    for at, name in (
        (3, "freedesktop/stereo/phone-incoming-call.oga"),
        (8, "alsa/Front_Center.wav"),
    ):
        sound = mono_16k(DEBIAN_SOUNDS / name)
        audio[at * RATE : at * RATE + len(sound)] += sound
    path = tmp_path_factory.mktemp("events") / "ring-then-voice.flac"
    sf.write(path, audio, RATE)
    return path


def _post(server: Server, path: Path, **params: str | float) -> list[dict[str, object]]:
    with path.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize", params=params, files={"file": body}, timeout=120
        )
    assert response.status_code == 200, response.text
    tags: list[dict[str, object]] = response.json()["tags"]
    return tags


def test_events_and_speech_on_one_timeline_with_speech_left_to_speech(
    server: Server, recording: Path
) -> None:
    tags = _post(server, recording, model="speech,events", exclude="Speech")
    assert [t["start"] for t in tags] == sorted(t["start"] for t in tags)  # type: ignore[type-var]
    events = [t for t in tags if t["model"] == "events"]
    speech = [t for t in tags if t["model"] == "speech"]
    assert speech and all(7.5 <= t["start"] <= 10 for t in speech)  # type: ignore[operator]
    assert "Speech" not in {t["label"] for t in events}
    rings = [t for t in events if t["label"] == "Telephone bell ringing"]
    assert len(rings) == 1 and rings[0]["label_id"] == "/m/07pp8cl"
    assert abs(float(rings[0]["start"]) - 3.0) <= 0.5  # type: ignore[arg-type]


def test_a_profile_a_group_and_a_list_with_commas_in_the_query(
    server: Server, recording: Path
) -> None:
    tags = _post(
        server,
        recording,
        model="events",
        labels="Telephone;Child speech, kid speaking;/m/09x0r",
        group="Telephone",
    )
    assert {t["label"] for t in tags} == {"Telephone", "Speech"}
    assert _post(server, recording, model="events", profile="safety") == []
    refused = httpx.post(
        server.url + "/v1/recognize",
        params={"model": "events", "labels": "Glass,Shatter"},
        content=recording.read_bytes(),
        headers={"Content-Type": "audio/flac"},
        timeout=60,
    )
    assert refused.status_code == 422
    assert "separate several with ';'" in refused.json()["error"]["message"]


def test_the_model_card_is_served(server: Server) -> None:
    models = httpx.get(server.url + "/v1/models").json()["models"]
    (events,) = [m for m in models if m["name"] == "events"]
    assert events["kind"] == "events" and len(events["labels"]) == 521
    assert events["labels"][0] == "Speech" and "Apache-2.0" in events["licence"]
    assert events["segment_plan"]["hop_s"] == pytest.approx(0.48)

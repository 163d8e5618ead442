"""The `birds` model served end to end: a real recording of birdsong to species tags."""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, ServerFactory

pytestmark = pytest.mark.slow

RECORDING = Path(__file__).parents[1] / "kinds" / "birds" / "birds_10s.wav"


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", "birds")


def _recognize(server: Server, **params: float | str) -> list[dict[str, object]]:
    with RECORDING.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"model": "birds", **params},
            files={"file": body},
            timeout=120,
        )
    assert response.status_code == 200, response.text
    tags: list[dict[str, object]] = response.json()["tags"]
    return tags


def test_birdsong_gives_species_tags_with_scientific_names(server: Server) -> None:
    tags = _recognize(server, min_conf=0.25)
    assert len(tags) >= 2
    assert {tag["start"] for tag in tags} <= {0.0, 3.0, 6.0}  # the 1.1 s at 9 s is not a window
    assert all(tag["end"] == tag["start"] + 3.0 for tag in tags)  # type: ignore[operator]
    assert all(
        isinstance(tag["scientific_name"], str) and " " in tag["scientific_name"] for tag in tags
    )
    # Where and when the recording was made (Pennsylvania, spring) keeps what was heard; the
    # open ocean off Antarctica in July keeps less.
    here = _recognize(server, min_conf=0.25, lat=40.4, lon=-80.0, week=19)
    there = _recognize(server, min_conf=0.25, lat=-70.0, lon=0.0, week=26)
    assert here and all(tag in tags for tag in here)
    assert len(there) < len(here)
    # A custom species list in the query, by common name.
    first = str(tags[0]["label"])
    only = _recognize(server, min_conf=0.25, species=f"{first};Northern Cardinal")
    assert only and {tag["label"] for tag in only} <= {first, "Northern Cardinal"}


def test_parameters_are_checked(server: Server) -> None:
    with RECORDING.open("rb") as body:
        response = httpx.post(
            server.url + "/v1/recognize",
            params={"model": "birds", "lat": 40.4},
            files={"file": body},
            timeout=120,
        )
    assert response.status_code == 422
    assert "lat and lon go together" in response.text


def test_the_card_says_non_commercial(server: Server) -> None:
    (birds,) = httpx.get(server.url + "/v1/models").json()["models"]
    assert birds["kind"] == "birds" and len(birds["labels"]) == 6522
    assert "CC BY-NC-SA 4.0" in birds["licence"] and "non-commercial" in birds["licence"]
    assert birds["parameters"]["min_conf"] == 0.1


def test_the_recording_time_comes_from_the_file_or_its_name(server: Server, tmp_path: Path) -> None:
    """GUANO after the audio (as bat and bird recorders write it), then a plain file's name."""
    wav = RECORDING.read_bytes()
    guano = b"GUANO|Version: 1.0\nTimestamp: 2025-05-01T05:30:00-04:00\n"
    chunk = b"guan" + struct.pack("<I", len(guano)) + guano
    body = wav[8:] + chunk
    tagged = tmp_path / "upload.wav"
    tagged.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    for path, name, expected in (
        (tagged, "upload.wav", "2025-05-01T05:30:00-04:00"),
        (RECORDING, "PA01_20250501_053000.wav", "2025-05-01T05:30:00"),
        (RECORDING, "birds.wav", None),
    ):
        with path.open("rb") as file:
            response = httpx.post(
                server.url + "/v1/recognize",
                params={"model": "birds"},
                files={"file": (name, file, "audio/wav")},
                timeout=120,
            )
        assert response.status_code == 200, response.text
        assert response.json()["audio"].get("recorded_at") == expected, name


def test_the_cli_takes_the_location_and_writes_birdnets_csv(tmp_path: Path) -> None:
    """`arengine recognize ... --model birds --lat --lon --week --format birdnet`, in process."""
    from arengine.cli.commands import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(
            [
                "recognize", str(RECORDING), "--model", "birds", "--format", "birdnet",
                "--out", str(out), "--min-conf", "0.25", "--lat", "40.4", "--lon", "-80.0",
                "--week", "19", "--species", "Dodo",
            ]
        )  # fmt: skip
    assert done.value.code == 2  # refused before any file: the species list names no bird
    with pytest.raises(SystemExit) as done:
        main(
            [
                "recognize", str(RECORDING), "--model", "birds", "--format", "birdnet",
                "--out", str(out), "--min-conf", "0.25", "--lat", "40.4", "--lon", "-80.0",
                "--week", "19",
            ]
        )  # fmt: skip
    assert done.value.code == 0
    rows = (out / "birds_10s.BirdNET.results.csv").read_text().splitlines()
    assert rows[0] == "Start (s),End (s),Scientific name,Common name,Confidence,File"
    assert len(rows) >= 2 and all(row.endswith(",birds_10s") for row in rows[1:])


def test_the_week_follows_the_recording_time_unless_the_query_gives_one(server: Server) -> None:
    """Warblers in Pennsylvania: expected in May, not in January (BirdNET's location model)."""

    def tags(name: str, **params: float) -> list[tuple[float, str]]:
        with RECORDING.open("rb") as file:
            response = httpx.post(
                server.url + "/v1/recognize",
                params={"model": "birds", "min_conf": 0.25, "lat": 40.4, "lon": -80.0, **params},
                files={"file": (name, file, "audio/wav")},
                timeout=120,
            )
        assert response.status_code == 200, response.text
        return [(tag["start"], tag["label"]) for tag in response.json()["tags"]]

    may = tags("PA01_20250510_053000.wav")
    january = tags("PA01_20250115_053000.wav")
    assert may == tags("birds.wav", week=18)  # 10 May is BirdNET's week 18
    assert len(january) < len(may)
    assert tags("PA01_20250115_053000.wav", week=18) == may  # the query's week wins

"""The notes model over HTTP: a rendered melody over chords comes back as note tags, served
segment by segment (the test server cuts 4-s segments: 2 basic-pitch windows)."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server
from tests.music import PIANO, STRINGS, Note, f1, render

pytestmark = pytest.mark.slow

TUNE = [
    Note(0.5 + 0.5 * i, 0.95 + 0.5 * i, p, PIANO, 100)
    for i, p in enumerate([72, 76, 79, 84, 83, 79, 76, 72, 74, 77, 81, 86, 84, 81, 77, 74])
] + [Note(0.5 + 4 * i, 4.4 + 4 * i, p, STRINGS, 80) for i, p in enumerate([48, 53])]


def test_notes_come_back_with_midi_and_pitch_bends(server: Server, tmp_path: Path) -> None:
    audio = render(TUNE, tmp_path, 44100)
    path = tmp_path / "tune.flac"
    sf.write(path, np.stack([audio, audio], axis=1), 44100)
    with httpx.Client(base_url=server.url, timeout=120) as client:
        models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        assert models["notes"]["kind"] == "notes" and len(models["notes"]["labels"]) == 88
        with path.open("rb") as body:
            response = client.post(
                "/v1/recognize", params={"model": "notes", "pitch_bends": 1}, files={"file": body}
            )
        assert response.status_code == 200, response.text
        tags = response.json()["tags"]
        bad = client.post(
            "/v1/recognize",
            params={"model": "notes", "frame_threshold": 2},
            files={"file": path.read_bytes()},
        )
    assert bad.status_code == 422 and "frame_threshold" in bad.text
    _, recall, score = f1(TUNE, [(t["start"], t["end"], t["midi"]) for t in tags])
    assert score >= 0.8 and recall >= 0.8, tags
    assert [t["start"] for t in tags] == sorted(t["start"] for t in tags)
    for tag in tags:
        assert tag["label"].rstrip("0123456789") in {
            "C",
            "C#",
            "D",
            "D#",
            "E",
            "F",
            "F#",
            "G",
            "G#",
            "A",
            "A#",
            "B",
        }
        assert len(tag["pitch_bend"]) >= 10 and "frequency_hz" not in tag


def test_notes_as_midi_open_in_pretty_midi(server: Server, tmp_path: Path) -> None:
    import io
    import warnings

    audio = render(TUNE, tmp_path, 44100)
    path = tmp_path / "tune.flac"
    sf.write(path, audio, 44100)
    with httpx.Client(base_url=server.url, timeout=120) as client:
        tags = []
        midi = b""
        for fmt in ("json", "midi"):
            with path.open("rb") as body:
                response = client.post(
                    "/v1/recognize",
                    params={"model": "notes", "pitch_bends": 1, "format": fmt},
                    files={"file": body},
                )
            assert response.status_code == 200, response.text
            if fmt == "json":
                tags = response.json()["tags"]
            else:
                midi = response.content
    assert response.headers["content-disposition"] == 'attachment; filename="tune.mid"'
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pkg_resources, on import
        import pretty_midi

        song = pretty_midi.PrettyMIDI(io.BytesIO(midi))
    notes = sorted((n for i in song.instruments for n in i.notes), key=lambda n: (n.start, n.pitch))
    want = sorted(tags, key=lambda t: (round(t["start"], 3), t["midi"]))
    assert [n.pitch for n in notes] == [t["midi"] for t in want]
    for note, tag in zip(notes, want, strict=True):
        assert abs(note.start - tag["start"]) <= 5e-4 and abs(note.end - tag["end"]) <= 5e-4
        assert note.velocity == max(1, round(tag["score"] * 127))
    # Each bent note's contour is on its channel, in semitones (thirds of a semitone / 3).
    bends = [b for i in song.instruments for b in i.pitch_bends if b.pitch]
    if any(any(t["pitch_bend"]) for t in tags):
        assert bends
    assert all(abs(b.pitch) <= 8191 for b in bends)

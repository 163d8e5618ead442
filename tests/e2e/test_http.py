"""End to end against a real `arengine serve` on 127.0.0.1, with files the tests write."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import RecordingFactory, Server
from tests.recordings import REPORTED


def _post(server: Server, path: Path, **params: Any) -> httpx.Response:
    with server.client() as client, path.open("rb") as body:
        return client.post("/v1/recognize", params=params, files={"file": (path.name, body)})


def _assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    error: dict[str, Any] = body["error"]
    assert error["message"]
    return error


def _assert_finds_speech(tags: list[dict[str, Any]], speech: list[tuple[float, float]]) -> None:
    assert len(tags) == len(speech), (tags, speech)
    for tag, (start, end) in zip(tags, speech, strict=True):
        assert tag["label"] == "speech"
        assert "frequency_hz" not in tag
        assert tag["start"] == pytest.approx(start, abs=0.3)
        assert tag["end"] == pytest.approx(end, abs=0.4)
        assert 0.5 < tag["score"] <= 1.0


@pytest.mark.parametrize(
    ("extension", "rate", "channels"),
    [
        ("wav", 16000, 1),
        ("wav", 8000, 1),
        ("wav", 96000, 4),
        ("wav", 192000, 2),
        ("flac", 44100, 2),
        ("flac", 22050, 8),
        ("ogg", 22050, 1),
        ("ogg", 48000, 2),
        ("opus", 48000, 1),
        ("opus", 16000, 2),
        ("mp3", 44100, 2),
        ("mp3", 22050, 1),
    ],
)
def test_speech_is_found_in_every_container(
    server: Server, recording: RecordingFactory, extension: str, rate: int, channels: int
) -> None:
    clip = recording(f"talk.{extension}", rate=rate, channels=channels)
    response = _post(server, clip.path)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "speech"
    assert body["audio"] == {
        "duration_s": pytest.approx(clip.duration_s, abs=0.1),
        "sample_rate": 48000 if extension == "opus" else rate,  # Opus always decodes at 48 kHz
        "channels": channels,
        "format": REPORTED[extension][0],
        "subtype": REPORTED[extension][1],
        "decoder": "libsndfile" if extension == "wav" else "ffmpeg",
        "stream": 0,
        "truncated": False,
        "warnings": [],
    }
    _assert_finds_speech(body["tags"], clip.speech)
    assert set(body["timings"]) == {
        "validation_s",
        "features_s",
        "inference_s",
        "postprocess_s",
        "total_s",
    }
    assert all(value > 0 for value in body["timings"].values()), body["timings"]


def test_tags_are_ordered_and_not_split_across_segments(
    server: Server, recording: RecordingFactory
) -> None:
    # The server cuts 4 s segments; phrases of ~3 s at these offsets straddle the cuts.
    pieces = [p for i in range(6) for p in [("silence", 0.9 + 0.4 * i), ("speech", 0)]]
    clip = recording("many.flac", rate=44100, pieces=[*pieces, ("silence", 1.0)])
    body = _post(server, clip.path).json()
    _assert_finds_speech(body["tags"], clip.speech)
    starts = [tag["start"] for tag in body["tags"]]
    assert starts == sorted(starts)


def test_silence_and_a_tone_have_no_speech(server: Server, recording: RecordingFactory) -> None:
    for pieces in ([("silence", 5.0)], [("tone", 5.0)]):
        clip = recording("quiet.wav", pieces=pieces)
        response = _post(server, clip.path)
        assert response.status_code == 200
        assert response.json()["tags"] == []


def test_raw_body_with_an_audio_content_type(server: Server, recording: RecordingFactory) -> None:
    clip = recording("raw.flac", rate=44100, channels=2)
    with server.client() as client:
        response = client.post(
            "/v1/recognize", content=clip.path.read_bytes(), headers={"Content-Type": "audio/flac"}
        )
    assert response.status_code == 200, response.text
    _assert_finds_speech(response.json()["tags"], clip.speech)


def test_post_processing_overrides(server: Server, recording: RecordingFactory) -> None:
    clip = recording("pad.wav")
    plain = _post(server, clip.path).json()["tags"]
    padded = _post(server, clip.path, speech_pad_ms=200).json()["tags"]
    assert padded[0]["start"] == pytest.approx(plain[0]["start"] - 0.17, abs=0.01)
    dropped = _post(server, clip.path, min_speech_duration_ms=60000).json()["tags"]
    assert dropped == []


# Errors: each a clear status and the stable body.


@pytest.mark.parametrize(
    "content", [b"PK\x03\x04" + bytes(200), bytes(range(256)) * 40, b"just some text\n" * 100]
)
def test_not_audio(server: Server, tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.wav").write_bytes(content)
    _assert_error(_post(server, tmp_path / "x.wav"), 415, "unsupported_format")


def test_truncated_compressed_audio(
    server: Server, recording: RecordingFactory, tmp_path: Path
) -> None:
    clip = recording("cut.flac", rate=44100)
    data = clip.path.read_bytes()
    (tmp_path / "cut.flac").write_bytes(data[:60])
    response = _post(server, tmp_path / "cut.flac")
    assert response.status_code in (400, 415), response.text
    # Cut mid-stream: either decoded up to the cut or refused, never a server error.
    (tmp_path / "half.flac").write_bytes(data[: len(data) // 2])
    assert _post(server, tmp_path / "half.flac").status_code in (200, 400)


def test_nan_samples(server: Server, tmp_path: Path) -> None:
    audio = np.zeros(16000, np.float32)
    audio[100:200] = np.nan
    sf.write(tmp_path / "nan.wav", audio, 16000, subtype="FLOAT")
    _assert_error(_post(server, tmp_path / "nan.wav"), 422, "non_finite_audio")


def test_too_many_channels(server: Server, tmp_path: Path) -> None:
    sf.write(tmp_path / "nine.wav", np.zeros((1600, 9), np.float32), 16000)
    error = _assert_error(_post(server, tmp_path / "nine.wav"), 422, "unsupported_channels")
    assert "1 to 8" in error["message"]


def test_sample_rate_outside_the_range(server: Server, tmp_path: Path) -> None:
    sf.write(tmp_path / "low.wav", np.zeros(400, np.float32), 4000)
    _assert_error(_post(server, tmp_path / "low.wav"), 422, "unsupported_sample_rate")


def test_recording_over_the_duration_cap(server: Server, tmp_path: Path) -> None:
    sf.write(tmp_path / "long.flac", np.zeros(8000 * 130, np.float32), 8000)  # the cap is 120 s
    _assert_error(_post(server, tmp_path / "long.flac"), 413, "audio_too_long")


def test_a_flac_header_understating_its_length(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "liar.flac"
    sf.write(path, np.zeros(8000 * 130, np.float32), 8000)
    data = bytearray(path.read_bytes())
    (packed,) = struct.unpack(">Q", data[18:26])
    data[18:26] = struct.pack(">Q", packed & ~(2**36 - 1) | 8000 * 10)  # claims 10 s, holds 130
    path.write_bytes(bytes(data))
    # libsndfile alone stopped at the declared 10 s and answered 200, dropping 120 s. Now
    # the file is decoded as far as it goes, and the cap counted while decoding refuses it.
    _assert_error(_post(server, path), 413, "audio_too_long")


def test_no_upload_file_is_left_behind_by_errors_or_successes(
    server: Server, recording: RecordingFactory
) -> None:
    bad = recording("bad.wav", pieces=[("silence", 1.0)]).path
    bad.write_bytes(b"PK\x03\x04" + bytes(200))  # a ZIP named .wav: refused after spooling
    _assert_error(_post(server, bad), 415, "unsupported_format")
    _assert_error(_post(server, bad, threshold=2), 422, "invalid_parameter")
    clip = recording("after.ogg", rate=22050)
    response = _post(server, clip.path)
    assert response.status_code == 200
    _assert_finds_speech(response.json()["tags"], clip.speech)
    assert sorted(server.upload_dir.glob("*.upload")) == []


# Service endpoints.


def test_service_endpoints(server: Server) -> None:
    with server.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}
        info = client.get("/v1/info").json()
        models = client.get("/v1/models").json()["models"]
        docs = client.get("/docs")
        schema = client.get("/openapi.json").json()
        missing = client.get("/nope")
    assert info["intra_op_threads"] == 1 and info["inter_op_threads"] == 1
    assert info["engine_threads"] == info["cpus_available"] >= 1
    assert info["allocator"] in ("jemalloc", "glibc")
    assert info["ready"] is True
    assert [m["name"] for m in models] == [
        "birds",
        "events",
        "loudness",
        "music",
        "notes",
        "pitch",
        "speech",
    ]
    models = {m["name"]: m for m in models}
    assert models["speech"]["sample_rate"] == 16000 and models["speech"]["labels"] == ["speech"]
    assert models["pitch"]["labels"][0] == "C1" and len(models["pitch"]["labels"]) == 84
    assert models["speech"]["segment_s"] == pytest.approx(4.0, abs=0.02)
    assert models["speech"]["parameters"]["threshold"] == 0.5
    assert models["speech"]["parameters"]["min_silence_duration_ms"] == 100
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert "/v1/recognize" in schema["paths"]
    _assert_error(missing, 404, "not_found")

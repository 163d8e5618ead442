"""End to end over HTTP: recordings from phones, browsers and video files; hostile playlists."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import RecordingFactory, Server
from tests.recordings import ffmpeg

VIDEO = ["-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-shortest", "-c:v", "libx264"]
CONVERSIONS = {  # name: ffmpeg arguments after the input
    "memo.m4a": ["-c:a", "aac"],
    "browser.webm": ["-c:a", "libopus"],
    "call.wma": ["-c:a", "wmav2"],
    "meeting.mp4": [*VIDEO, "-c:a", "aac"],
}


def _post(server: Server, path: Path, **params: int | str) -> httpx.Response:
    with server.client() as client, path.open("rb") as body:
        return client.post("/v1/recognize", params=params, files={"file": (path.name, body)})


@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_speech_is_found_in_phone_browser_and_video_recordings(
    server: Server, recording: RecordingFactory, name: str
) -> None:
    clip = recording("talk.wav", rate=44100, channels=2)
    path = clip.path.with_name(name)
    ffmpeg("-i", str(clip.path), *CONVERSIONS[name], str(path))
    response = _post(server, path)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["audio"]["decoder"] == "ffmpeg"
    assert body["audio"]["stream"] == (1 if name == "meeting.mp4" else 0)
    assert body["audio"]["duration_s"] == pytest.approx(clip.duration_s, abs=0.1)
    tags = body["tags"]
    assert len(tags) == len(clip.speech), (tags, clip.speech)
    for tag, (start, end) in zip(tags, clip.speech, strict=True):
        assert tag["start"] == pytest.approx(start, abs=0.3)
        assert tag["end"] == pytest.approx(end, abs=0.4)


def test_a_raw_video_body_and_stream_choice(server: Server, recording: RecordingFactory) -> None:
    clip = recording("talk.wav")
    path = clip.path.with_name("two.mkv")
    ffmpeg("-i", str(clip.path), *VIDEO, "-map", "1:v", "-map", "0:a", "-map", "0:a", str(path))
    with server.client() as client:
        response = client.post(
            "/v1/recognize",
            params={"stream": 1},
            content=path.read_bytes(),
            headers={"Content-Type": "video/x-matroska"},
        )
        assert response.status_code == 200, response.text
        assert response.json()["audio"]["stream"] == 2  # the second audio stream
        response = client.post(
            "/v1/recognize",
            params={"stream": 2},
            content=path.read_bytes(),
            headers={"Content-Type": "video/x-matroska"},
        )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unknown_stream"


def test_a_truncated_recording_is_answered_and_flagged(
    server: Server, recording: RecordingFactory
) -> None:
    clip = recording("talk.wav")
    path = clip.path.with_name("memo.m4a")
    ffmpeg("-i", str(clip.path), "-c:a", "aac", "-movflags", "+faststart", str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 3 // 4])
    response = _post(server, path)
    assert response.status_code == 200, response.text
    audio = response.json()["audio"]
    assert audio["truncated"] is True
    assert audio["duration_s"] < clip.duration_s - 1
    assert any("the file ends at" in warning for warning in audio["warnings"])


@pytest.fixture
def listener() -> Iterator[list[bytes]]:
    """A TCP listener on 127.0.0.1:PORT recording every connection; yields (and exposes) port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[bytes] = [str(server.getsockname()[1]).encode()]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                seen.append(connection.recv(1024))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join()
    server.close()


def test_playlists_posted_as_audio_open_nothing(
    server: Server, listener: list[bytes], tmp_path: Path
) -> None:
    port = int(listener[0])
    hls = "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{}\n#EXT-X-ENDLIST\n"
    bodies = {
        "net.mp3": hls.format(f"http://127.0.0.1:{port}/segment.ts"),
        "passwd.m4a": hls.format("file:///etc/passwd"),
        "script.wav": "ffconcat version 1.0\nfile /etc/passwd\n",
    }
    for name, text in bodies.items():
        path = tmp_path / name
        path.write_text(text)
        response = _post(server, path)
        assert response.status_code == 415, response.text
        assert "not audio; accepted containers" in response.json()["error"]["message"]
    assert listener[1:] == []


def test_the_page_file_picker_accepts_every_format(server: Server) -> None:
    page = httpx.get(server.url + "/").text
    accept = page.split('id="file" type="file" accept="', 1)[1].split('"', 1)[0].split(",")
    assert {"audio/*", "video/*"} <= set(accept)
    # Media types are not enough: browsers map .wma, .amr or .mkv to none on some systems.
    for extension in (".m4a", ".mp4", ".mov", ".mkv", ".webm", ".wma", ".amr", ".opus", ".aac"):
        assert extension in accept

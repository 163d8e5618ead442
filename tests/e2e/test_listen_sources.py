"""`arengine listen --sources` against real stream servers (FFmpeg serving Ogg/Opus over HTTP and
GStreamer's RTSP server serving Opus over RTP, as a camera does, on loopback;
`tests/stream_server.py`) and a real arengine server: two sources at once, each tagged with its
name; a camera over RTSP, on TCP (the default) and on UDP; a source that drops and comes back is
reconnected; a server that goes away and comes back too; a source the server refuses for good
stops alone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import Server, ServerFactory, start_server, stop_server, wait_until
from tests.kinds.loudness.room import RATE, SLAM, quiet_room
from tests.stream_server import (
    Listener,
    RtspServer,
    StreamServer,
    needs_ffmpeg,
    needs_rtsp_server,
)

pytestmark = [pytest.mark.slow, needs_ffmpeg()]  # a server started for the module

ROOM_S = 7.0
"""The room up to after its door slam (5.0 to 5.2 s) and its hold."""


@pytest.fixture(scope="module")
def server(serve: ServerFactory) -> Server:
    return serve("--models", "loudness")


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quiet room with a door slam: the loudness model tags it `loud` from 5.0 to 5.2 s."""
    path = tmp_path_factory.mktemp("room") / "room.wav"
    sf.write(path, quiet_room()[: int(ROOM_S * RATE)], RATE, subtype="PCM_16")
    return path


@pytest.fixture
def streams(room: Path) -> Iterator[list[StreamServer]]:
    started = [StreamServer(room), StreamServer(room)]
    for stream in started:
        stream.start()
    yield started
    for stream in started:
        stream.stop()


def _sources(folder: Path, urls: dict[str, str], **extra: str) -> Path:
    path = folder / "sources.toml"
    lines = ["[defaults]", 'models = "loudness"', "reconnect_min_s = 0.2", "reconnect_max_s = 1"]
    for name, url in urls.items():
        lines += [f"[sources.{name}]", f'url = "{url}"']
        lines += [f"{key} = {value}" for key, value in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _slams(listener: Listener, source: str) -> list[tuple[float, float]]:
    return [(t["start"], t["end"]) for t in listener.tags(source) if t["label"] == "loud"]


def _metric(server: Server, name: str, source: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    found = re.findall(rf'^{name}\{{[^}}]*source="{source}"[^}}]*\}} (\S+)$', text, re.M)
    return sum(float(value) for value in found)


def test_two_sources_at_once_each_tagged_with_its_name(
    server: Server, streams: list[StreamServer], tmp_path: Path
) -> None:
    hall, yard = streams
    listener = Listener(
        server.url, _sources(tmp_path, {"hall": hall.url, "yard": yard.url}), tmp_path
    )
    try:
        assert wait_until(
            lambda: bool(_slams(listener, "hall") and _slams(listener, "yard")), 60
        ), listener.status()
        for source in ("hall", "yard"):
            ((start, end),) = _slams(listener, source)
            assert start == pytest.approx(SLAM[0], abs=0.06) and end >= SLAM[1]
            assert _metric(server, "arengine_live_tags_total", source) >= 1
        assert re.search(r"hall: connected", listener.status())
        assert re.search(r"yard: connected", listener.status())
    finally:
        assert listener.stop() == 0  # SIGTERM ends it cleanly


@pytest.fixture
def camera(room: Path) -> Iterator[RtspServer]:
    started = RtspServer(room)
    started.start()
    yield started
    started.stop()


@needs_rtsp_server()
@pytest.mark.parametrize("transport", ["tcp", "udp"])
def test_a_camera_over_rtsp_is_tagged_at_the_sounds_time(
    server: Server, camera: RtspServer, tmp_path: Path, transport: str
) -> None:
    # TCP is what the client asks a camera for unless the source says otherwise; UDP is what a
    # source's `options` can choose.
    options = {} if transport == "tcp" else {"options": '{ rtsp_transport = "udp" }'}
    listener = Listener(server.url, _sources(tmp_path, {"door": camera.url}, **options), tmp_path)
    try:
        assert wait_until(lambda: bool(_slams(listener, "door")), 60), listener.status()
        ((start, end),) = _slams(listener, "door")
        # The stream's own time: Opus at 48 kHz over RTP, resampled by the client, keeps the
        # slam where the recording has it.
        assert start == pytest.approx(SLAM[0], abs=0.06) and end >= SLAM[1]
        assert "door: connected" in listener.status()
        assert _metric(server, "arengine_live_tags_total", "door") >= 1
    finally:
        assert listener.stop() == 0


@needs_rtsp_server()
def test_a_camera_that_restarts_is_reconnected(
    server: Server, camera: RtspServer, tmp_path: Path
) -> None:
    listener = Listener(server.url, _sources(tmp_path, {"door": camera.url}), tmp_path)
    try:
        assert wait_until(lambda: "door: connected" in listener.status(), 60)
        camera.stop()  # mid-stream, before the slam: the RTSP session ends with it
        assert wait_until(lambda: "door: reconnecting" in listener.status(), 60)
        assert not _slams(listener, "door")
        camera.start()  # back on the same port, from the start of the room
        assert wait_until(lambda: len(_slams(listener, "door")) == 1, 60), listener.status()
        assert listener.status().count("door: connected") == 2
        assert _slams(listener, "door")[0][0] == pytest.approx(SLAM[0], abs=0.06)
    finally:
        assert listener.stop() == 0


def test_a_source_that_drops_and_comes_back_is_reconnected(
    server: Server, streams: list[StreamServer], tmp_path: Path
) -> None:
    hall = streams[0]
    streams[1].stop()
    listener = Listener(server.url, _sources(tmp_path, {"hall": hall.url}), tmp_path)
    try:
        assert wait_until(lambda: "hall: connected" in listener.status(), 60)
        hall.stop()  # mid-stream: before the slam
        assert wait_until(lambda: "hall: reconnecting" in listener.status(), 60)
        assert not _slams(listener, "hall")
        hall.start()  # back, from the start of the room
        assert wait_until(lambda: len(_slams(listener, "hall")) == 1, 60), listener.status()
        assert listener.status().count("hall: connected") == 2
        # The stream's times are its own: the slam is at 5.0 s of the second connection.
        assert _slams(listener, "hall")[0][0] == pytest.approx(SLAM[0], abs=0.06)
    finally:
        assert listener.stop() == 0


def test_a_server_that_goes_away_and_comes_back_is_reconnected(
    room: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    own = start_server(tmp_path_factory.mktemp("server"), "--models", "loudness")
    port = int(own.url.rsplit(":", 1)[1])
    path = _sources(tmp_path, {"desk": str(room)})  # a recording: sent again from its start
    listener = Listener(own.url, path, tmp_path)
    try:
        assert wait_until(lambda: "desk: connected" in listener.status(), 60)
        stop_server(own)
        assert wait_until(lambda: "desk: reconnecting" in listener.status(), 60)
        assert "cannot reach the server" in listener.status() or "ended" in listener.status()
        own = start_server(tmp_path_factory.mktemp("server"), "--models", "loudness", port=port)
        assert wait_until(lambda: bool(_slams(listener, "desk")), 60), listener.status()
        assert wait_until(lambda: listener.process.poll() is not None, 60)  # sent whole: done
        assert listener.process.returncode == 0
        assert "desk: finished" in listener.status()
    finally:
        listener.stop()
        stop_server(own)


def test_a_source_the_server_refuses_stops_alone(
    server: Server, room: Path, tmp_path: Path
) -> None:
    path = tmp_path / "sources.toml"
    path.write_text(
        f'[sources.ok]\nurl = "{room}"\nmodels = "loudness"\n'
        f'[sources.wrong]\nurl = "{room}"\nmodels = "no-such-model"\n'
    )
    listener = Listener(server.url, path, tmp_path)
    try:
        assert wait_until(lambda: listener.process.poll() is not None, 60), listener.status()
        assert listener.process.returncode == 1  # a source failed for good
        status = listener.status()
        assert re.search(r"wrong: failed \(the server refused it: \w+", status), status
        assert "ok: finished" in status
        assert _slams(listener, "ok")
        summaries = [line for line in listener.lines() if "summary" in line]
        assert [line["source"] for line in summaries] == ["ok"]
        # Not retried. Its first chunk may be read (and "connected" said) before the refusal
        # comes back, so the count is of failures and reconnections, not of its lines.
        assert status.count("wrong: failed") == 1
        assert "wrong: reconnecting" not in status
    finally:
        listener.stop()


def test_a_source_that_cannot_be_read_is_retried_until_it_is_there(
    server: Server, room: Path, tmp_path: Path
) -> None:
    late = StreamServer(room)
    listener = Listener(server.url, _sources(tmp_path, {"late": late.url}), tmp_path)
    try:
        assert wait_until(lambda: listener.status().count("late: reconnecting") >= 2, 60)
        assert "cannot read the source" in listener.status()
        late.start()
        assert wait_until(lambda: bool(_slams(listener, "late")), 60), listener.status()
        assert np.isfinite(_metric(server, "arengine_live_tags_total", "late"))
    finally:
        late.stop()
        assert listener.stop() == 0

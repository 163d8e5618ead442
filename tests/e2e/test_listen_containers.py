"""`WS /v1/listen` with a container stream (`{"format": "webm"}`, `"ogg"`): real WebM/Opus
written by ffmpeg from espeak-ng's speech, sent in small chunks as a browser's MediaRecorder
sends them, gives the tags of the same audio sent as PCM; garbage ends the stream with its
error; and no decoder process outlives its stream."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from arengine.client import AsyncClient
from tests.conftest import ROOT, RecordingFactory, Server, ServerFactory, wait_until
from tests.recordings import Recording, ffmpeg

TIGHT = (
    "--models", "speech", "--segment-s", "1.024", "--listen-segment-s", "1.024",
    "--max-listen-streams", "2",
)  # fmt: skip
"""Segments of 32 windows for files and streams alike, so a stream's tags and a file's are
computed alike. The idle timeout stays the default (30 s): a test that waits for a tag while the
stream is open and silent must not race a short one on a slow machine (3 s closed it there
before the first tag came)."""

TIMESLICE_BYTES = 1000
"""About what MediaRecorder hands over every 250 ms at Opus's 32 kbit/s: pieces that cut the
WebM anywhere, mid-cluster and mid-packet."""


@pytest.fixture(scope="module")
def tight(serve: ServerFactory) -> Server:
    return serve(*TIGHT)


@pytest.fixture
def talk(recording: RecordingFactory) -> Recording:
    return recording("talk.wav")


def _encoded(source: Path, suffix: str, *codec: str) -> Path:
    path = source.with_suffix(suffix)
    ffmpeg("-i", str(source), *codec, str(path))
    return path


def _webm(source: Path) -> Path:
    """What Chrome's MediaRecorder records: Opus at 48 kHz in WebM."""
    return _encoded(source, ".webm", "-c:a", "libopus", "-b:a", "32k", "-f", "webm")


@contextmanager
def _ws(server: Server, query: str = "model=speech") -> Iterator[ClientConnection]:
    url = server.url.replace("http://", "ws://") + "/v1/listen?" + query
    with suppress(ConnectionClosed), connect(url, open_timeout=30) as connection:
        yield connection


def _lines(ws: ClientConnection) -> list[dict[str, Any]]:
    lines = []
    with suppress(ConnectionClosed):
        for message in ws:
            lines.append(json.loads(message))
    return lines


def _stream(
    server: Server, data: bytes, opening: dict[str, Any], size: int = TIMESLICE_BYTES
) -> tuple[list[dict[str, Any]], int | None, str | None]:
    with _ws(server) as ws:
        ws.send(json.dumps(opening))
        for start in range(0, len(data), size):
            ws.send(data[start : start + size])
        ws.send(json.dumps({"end": True}))
        lines = _lines(ws)
    return lines, ws.close_code, ws.close_reason


def _tags(lines: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    return [(line["start"], line["end"], line["label"]) for line in lines if "label" in line]


def _pcm_tags(server: Server, path: Path) -> list[tuple[float, float, str]]:
    audio, rate = sf.read(str(path), dtype="int16")
    opening = {"format": "s16le", "sample_rate": rate, "channels": 1}
    lines, code, _ = _stream(server, audio.tobytes(), opening, size=rate // 25)
    assert code == 1000, lines[-1]
    return _tags(lines)


def _decoders(server: Server) -> list[int]:
    """The server's stream decoders: its child processes but the fork server that posted
    compressed files are decoded by (`arengine/audio/child.py`, one for the server's life)."""
    children: list[int] = []
    for task in Path(f"/proc/{server.process.pid}/task").iterdir():
        with suppress(OSError):
            children += [int(pid) for pid in (task / "children").read_text().split()]
    return [pid for pid in children if not _is_fork_server(pid)]


def _is_fork_server(pid: int) -> bool:
    with suppress(OSError):
        return b"arengine.audio.child" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


@pytest.mark.parametrize(
    ("suffix", "codec"),
    [
        (".webm", ("-c:a", "libopus", "-b:a", "32k", "-f", "webm")),
        (".ogg", ("-c:a", "libvorbis", "-ar", "22050")),
    ],
)
def test_a_container_stream_gives_the_tags_of_its_audio_sent_as_pcm(
    tight: Server, talk: Recording, suffix: str, codec: tuple[str, ...]
) -> None:
    """Opus at 32 kbit/s (48 kHz) and Vorbis at 22.05 kHz (resampled to 48 kHz by the decoder)
    against the original 16-kHz PCM: the same two phrases, each bound within two of the speech
    model's 32-ms windows, which is what a lossy codec and a resampler move an edge by."""
    encoded = _encoded(talk.path, suffix, *codec)
    lines, code, reason = _stream(tight, encoded.read_bytes(), {"format": suffix[1:]})
    assert (code, reason) == (1000, ""), lines[-1]
    expected = _pcm_tags(tight, talk.path)
    streamed = _tags(lines)
    assert len(streamed) == len(expected) == len(talk.speech) == 2
    for (start, end, label), (pcm_start, pcm_end, pcm_label) in zip(
        streamed, expected, strict=True
    ):
        assert label == pcm_label
        assert start == pytest.approx(pcm_start, abs=0.065)
        assert end == pytest.approx(pcm_end, abs=0.065)
    audio = lines[-1]["summary"]["audio"]
    assert (audio["sample_rate"], audio["channels"]) == (48000, 1)
    assert audio["duration_s"] == pytest.approx(talk.duration_s, abs=0.05)


def test_a_webm_stream_gives_the_tags_of_the_same_webm_posted(
    tight: Server, talk: Recording
) -> None:
    """The stream's decoder is the file path's (the same libraries, mixdown and resampler):
    only the 16-bit spool differs, which moves no tag."""
    webm = _webm(talk.path)
    lines, code, _ = _stream(tight, webm.read_bytes(), {"format": "webm"})
    with tight.client() as client:
        posted = client.post("/v1/recognize", files={"file": webm.read_bytes()}).json()
    assert code == 1000
    assert _tags(lines) == [(t["start"], t["end"], t["label"]) for t in posted["tags"]]
    scores = [line["score"] for line in lines if "label" in line]
    assert scores == pytest.approx([t["score"] for t in posted["tags"]], abs=1e-3)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x00garbage that is not a WebM file" * 200, "corrupt_audio"),
        (b"", "corrupt_audio"),
    ],
)
def test_a_stream_that_is_not_webm_ends_with_its_error(
    tight: Server, data: bytes, code: str
) -> None:
    lines, close, reason = _stream(tight, data, {"format": "webm"})
    assert lines[-1]["error"]["code"] == code, lines
    assert "webm stream cannot be read" in lines[-1]["error"]["message"]
    assert (close, reason) == (4400, code)
    assert wait_until(lambda: not _decoders(tight))


def test_a_webm_stream_of_another_codec_is_refused(tight: Server, talk: Recording) -> None:
    flac = _encoded(talk.path, ".mka", "-c:a", "flac", "-f", "matroska")
    lines, close, reason = _stream(tight, flac.read_bytes(), {"format": "webm"})
    assert lines[-1]["error"]["code"] == "unsupported_codec", lines
    assert (close, reason) == (4415, "unsupported_codec")


def test_garbage_after_good_audio_is_skipped_and_the_good_audio_tagged(
    tight: Server, talk: Recording
) -> None:
    """A WebM whose second half is overwritten: FFmpeg's Matroska demuxer looks for the next
    cluster through the garbage (a stream cut and resumed mid-cluster is one of those), so the
    stream ends with its summary, the first phrase tagged as in the PCM, and no audio made up
    for the garbage."""
    data = bytearray(_webm(talk.path).read_bytes())
    half = len(data) // 2
    data[half:] = (bytes(range(256)) * len(data))[: len(data) - half]
    lines, close, _ = _stream(tight, bytes(data), {"format": "webm"})
    assert close == 1000, lines[-1]
    (start, end, _), *_ = _tags(lines)
    (pcm_start, pcm_end, _), *_ = _pcm_tags(tight, talk.path)
    assert (start, end) == pytest.approx((pcm_start, pcm_end), abs=0.065)
    assert lines[-1]["summary"]["audio"]["duration_s"] < 0.6 * talk.duration_s


CODECS = {
    "webm": ("-c:a", "libopus", "-b:a", "32k", "-f", "webm"),
    "ogg": ("-c:a", "libvorbis", "-ar", "22050"),
}
"""A browser's WebM/Opus, and Ogg/Vorbis at a rate the decoder resamples."""


@pytest.fixture(scope="module")
def capped(serve: ServerFactory) -> Server:
    """Streams of at most 4 s."""
    return serve(*TIGHT, "--listen-max-duration-s", "4")


@pytest.fixture
def long_talk(recording: RecordingFactory) -> Recording:
    """A phrase, then two minutes of noise: far more bytes of Opus or Vorbis past a 4-s cap
    than the decoder's pipes hold (Opus at 32 kbit/s: 480 KB)."""
    return recording("long.wav", pieces=[("silence", 1.0), ("speech", 0), ("noise", 120.0)])


def _lines_within(ws: ClientConnection, seconds: float) -> list[dict[str, Any]]:
    """Every message until the server closes, which must be within `seconds`."""
    lines = []
    deadline = time.monotonic() + seconds
    with suppress(ConnectionClosed):
        while True:
            lines.append(json.loads(ws.recv(timeout=max(0.0, deadline - time.monotonic()))))
    return lines


@pytest.mark.parametrize("container", ["webm", "ogg"])
def test_a_container_stream_ends_at_its_longest_duration_with_its_summary(
    capped: Server, long_talk: Recording, container: str
) -> None:
    """As a PCM stream does (`test_listen.py`): the summary at the cap, then 4413, and nothing
    left behind. Before: the decoder's output stopped being read at the cap, the child stopped
    reading its input, and the stream sent progress lines until its job's deadline, then
    `deadline_exceeded`, and never closed."""
    data = _encoded(long_talk.path, f".{container}", *CODECS[container]).read_bytes()
    with _ws(capped) as ws:
        ws.send(json.dumps({"format": container}))
        for start in range(0, len(data), TIMESLICE_BYTES):
            ws.send(data[start : start + TIMESLICE_BYTES])
        ws.send(json.dumps({"end": True}))
        lines = _lines_within(ws, 60)
    assert "summary" in lines[-1], lines[-1]
    assert lines[-1]["summary"]["audio"]["duration_s"] == 4.0
    assert len(_tags(lines)) == 1
    assert (ws.close_code, ws.close_reason) == (4413, "listen_too_long")
    assert wait_until(lambda: not _decoders(capped))
    assert wait_until(lambda: _gauge(capped, "arengine_live_streams") == 0)
    assert wait_until(lambda: not list(capped.upload_dir.iterdir()))


@pytest.mark.parametrize("container", ["webm", "ogg"])
def test_a_client_that_leaves_past_the_cap_leaves_nothing_behind(
    capped: Server, long_talk: Recording, container: str
) -> None:
    """Before: the slot, the spool file and the decoder were held until a restart, which then
    waited the whole shutdown timeout."""
    data = _encoded(long_talk.path, f".{container}", *CODECS[container]).read_bytes()
    with _ws(capped) as ws:
        ws.send(json.dumps({"format": container}))
        for start in range(0, len(data), TIMESLICE_BYTES):
            ws.send(data[start : start + TIMESLICE_BYTES])
    assert wait_until(lambda: _gauge(capped, "arengine_live_streams") == 0)
    assert wait_until(lambda: not _decoders(capped))
    assert wait_until(lambda: not list(capped.upload_dir.iterdir()))


def _gauge(server: Server, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, flags=re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("container", ["webm", "ogg"])
def test_a_codec_change_midway_is_refused_live_and_posted(
    tight: Server, talk: Recording, container: str
) -> None:
    """Opus, then another file of Vorbis, sent as one stream and posted as one file. Before:
    the WebM decoded to about twice its length (Vorbis packets fed to the Opus decoder), the
    Ogg ended with `corrupt_audio` live and `truncated` posted."""
    opus = _encoded(talk.path, f".{container}", *CODECS["webm"][:2])
    vorbis = _encoded(talk.path, f".vorbis.{container}", "-c:a", "libvorbis")
    data = opus.read_bytes() + vorbis.read_bytes()
    lines, close, reason = _stream(tight, data, {"format": container})
    assert lines[-1]["error"]["code"] == "audio_format_changed", lines[-1]
    assert "Opus to Vorbis" in lines[-1]["error"]["message"]
    assert (close, reason) == (4422, "audio_format_changed")
    with tight.client() as client:
        posted = client.post("/v1/recognize", files={"file": data})
    assert posted.status_code == 422, posted.text
    assert posted.json()["error"]["code"] == "audio_format_changed"
    assert wait_until(lambda: not _decoders(tight))


def test_a_container_opening_with_a_rate_is_refused(tight: Server) -> None:
    with _ws(tight) as ws:
        ws.send(json.dumps({"format": "webm", "sample_rate": 48000}))
        lines = _lines(ws)
    assert lines[-1]["error"]["code"] == "invalid_stream_message"
    assert "states its own sample_rate" in lines[-1]["error"]["message"]


def test_a_client_that_leaves_mid_stream_leaves_no_decoder_behind(
    tight: Server, talk: Recording
) -> None:
    data = _webm(talk.path).read_bytes()
    with _ws(tight) as ws:
        ws.send(json.dumps({"format": "webm"}))
        ws.send(data[: len(data) // 2])
        assert wait_until(lambda: len(_decoders(tight)) == 1)
    assert wait_until(lambda: not _decoders(tight))
    assert wait_until(lambda: not list(tight.upload_dir.iterdir()))


def test_a_webm_tag_comes_while_the_stream_is_still_open(tight: Server, talk: Recording) -> None:
    """The decoder hands over each packet as it comes (it never waits for a full read buffer,
    seconds of Opus): with three quarters of the WebM sent (well past the first phrase, whose
    bytes come early) and no end, the first tag arrives."""
    data = _webm(talk.path).read_bytes()
    cut = len(data) * 3 // 4
    with _ws(tight) as ws:
        ws.send(json.dumps({"format": "webm"}))
        for start in range(0, cut, TIMESLICE_BYTES):
            ws.send(data[start : min(start + TIMESLICE_BYTES, cut)])
        early: list[dict[str, Any]] = []
        while not any("label" in line for line in early):
            early.append(json.loads(ws.recv(timeout=60)))
        for start in range(cut, len(data), TIMESLICE_BYTES):
            ws.send(data[start : start + TIMESLICE_BYTES])
        ws.send(json.dumps({"end": True}))
        lines = early + _lines(ws)
    assert _tags(early) == _tags(lines)[:1]
    assert len(_tags(lines)) == 2 and "summary" in lines[-1]


def test_the_client_and_the_command_send_a_webm_stream(tight: Server, talk: Recording) -> None:
    data = _webm(talk.path).read_bytes()
    lines, _, _ = _stream(tight, data, {"format": "webm"})

    async def listen() -> list[tuple[float, float, str]]:
        chunks = [data[i : i + TIMESLICE_BYTES] for i in range(0, len(data), TIMESLICE_BYTES)]
        async with AsyncClient(tight.url) as client:
            return [
                (tag.start, tag.end, tag.label)
                async for tag in client.listen(chunks, format="webm", model="speech")
            ]

    assert asyncio.run(listen()) == _tags(lines)
    command = [sys.executable, "-m", "arengine", "listen", "--server", tight.url]
    done = subprocess.run(
        [*command, "--format", "webm", "-"], input=data, capture_output=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert _tags([json.loads(line) for line in done.stdout.decode().splitlines()]) == _tags(lines)


def test_a_server_stopping_mid_stream_leaves_no_decoder_behind(
    serve: ServerFactory, talk: Recording
) -> None:
    """SIGTERM with a WebM stream open: once the shutdown timeout has passed the stream ends,
    and its decoder does not outlive the server."""
    server = serve(*TIGHT, "--shutdown-timeout-s", "1", "--shutdown-delay-s", "0")
    data = _webm(talk.path).read_bytes()
    with _ws(server) as ws:
        ws.send(json.dumps({"format": "webm"}))
        ws.send(data[: len(data) // 2])
        assert wait_until(lambda: len(_decoders(server)) == 1)
        (child,) = _decoders(server)
        server.process.terminate()
        assert server.process.wait(timeout=60) is not None
    assert wait_until(lambda: not Path(f"/proc/{child}").exists())

"""A real network audio stream for the tests: FFmpeg's own HTTP server (`-listen 1`) sending a
recording as Ogg/Opus at real speed, as an Icecast mount or a camera's HTTP audio does.

Why FFmpeg and not Icecast: FFmpeg is already installed (the server decodes through it), needs
no daemon, configuration or source client, and serves one listener per process, so stopping the
process is a stream that drops and starting it again on the same port is one that comes back.

Cameras serve RTSP, which FFmpeg cannot (its RTSP muxer only pushes to a server): `RtspServer`
runs GStreamer's RTSP server (`tests/rtsp_server.py`, Debian's `gir1.2-gst-rtsp-server-1.0`)
under Debian's Python, which has the GObject bindings the project's venv lacks.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port

FFMPEG = shutil.which("ffmpeg") or "/usr/bin/ffmpeg"
SYSTEM_PYTHON = "/usr/bin/python3"
"""Debian's Python: `python3-gi` and the GStreamer bindings are installed for it, not the venv."""


def needs_ffmpeg() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not Path(FFMPEG).exists(), reason="needs ffmpeg")


class StreamServer:
    """`recording` served at `url` to the next listener that connects, at real speed; the
    port stays the same across `stop` and `start`. Ogg pages of 20 ms, as a low-latency
    Icecast source sends them (FFmpeg's default, 1 s, holds each second back)."""

    def __init__(self, recording: Path, port: int | None = None) -> None:
        self.recording = recording
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/live.ogg"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Serve once: FFmpeg listens, sends the recording to whoever connects, then exits."""
        self._process = subprocess.Popen(
            [
                FFMPEG, "-hide_banner", "-loglevel", "error", "-re", "-i", str(self.recording),
                "-c:a", "libopus", "-b:a", "64k", "-page_duration", "20000", "-f", "ogg",
                "-listen", "1", self.url,
            ],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Drop the stream now (the listener sees its connection end)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)


@functools.cache
def _has_rtsp_server() -> bool:
    check = "import gi; gi.require_version('GstRtspServer', '1.0')"
    try:
        return subprocess.run([SYSTEM_PYTHON, "-c", check], capture_output=True).returncode == 0
    except OSError:
        return False


def needs_rtsp_server() -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not _has_rtsp_server(),
        reason="needs Debian's python3-gi and gir1.2-gst-rtsp-server-1.0 (deploy/setup.sh --test)",
    )


class RtspServer:
    """`recording` (a WAV) served as Opus over RTP at `url`, from its start, at real speed, to
    every client that connects, as a camera serves its microphone; the port stays the same
    across `stop` and `start`."""

    def __init__(self, recording: Path, port: int | None = None) -> None:
        self.recording = recording
        self.port = port or free_port()
        self.url = f"rtsp://127.0.0.1:{self.port}/live"
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Listen; returns once the server accepts connections."""
        script = Path(__file__).with_name("rtsp_server.py")
        self._process = subprocess.Popen(
            [SYSTEM_PYTHON, str(script), str(self.port), str(self.recording)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError(f"the RTSP server did not start (exit {self._process.poll()})")

    def stop(self) -> None:
        """Drop every client now (each sees its connection end)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()


class Listener:
    """`arengine listen --server URL --sources FILE` running as its own process; its tag lines
    and status lines read back from the files they go to."""

    def __init__(self, server_url: str, sources: Path, folder: Path) -> None:
        self.out, self.err = folder / "tags.ndjson", folder / "status.log"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "arengine", "listen", "--server", server_url,
                    "--sources", str(sources), "--status-s", "0",
                ],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def tags(self, source: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if "label" in line and line["source"] == source]

    def status(self) -> str:
        return self.err.read_text()

    def stop(self) -> int:
        """SIGTERM (what a service manager sends), then the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

"""Shared fixtures: espeak-ng speech, audio recordings, the speech model, a real server."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from arengine.models.speech import SpeechModel
from tests.audio import Recording, compose, speak, write

torch.set_num_threads(1)

PHRASES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese.",
    "We also need a small plastic snake and a big toy frog for the kids.",
]


@pytest.fixture(scope="session")
def phrases(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[np.ndarray], int]:
    folder = tmp_path_factory.mktemp("espeak")
    spoken = [
        speak(text, folder, voice)
        for text, voice in zip(PHRASES, ["en", "en-us", "en+f3", "en-gb"], strict=True)
    ]
    return [audio for audio, _ in spoken], spoken[0][1]


@pytest.fixture(scope="session")
def speech_model() -> SpeechModel:
    return SpeechModel.from_silero_package()


RecordingFactory = Callable[..., Recording]


@pytest.fixture
def recording(tmp_path: Path, phrases: tuple[list[np.ndarray], int]) -> RecordingFactory:
    """Write a recording: `recording("talk.flac", rate=44100, channels=2, pieces=[...])`."""
    default = [
        ("silence", 1.0),
        ("speech", 0),
        ("silence", 1.5),
        ("tone", 1.0),
        ("silence", 1.0),
        ("speech", 0),
        ("noise", 1.0),
        ("silence", 1.0),
    ]

    def make(
        name: str,
        rate: int = 16000,
        channels: int = 1,
        pieces: list[tuple[str, float]] | None = None,
    ) -> Recording:
        audio, speech = compose(pieces or default, rate, tmp_path, *phrases)
        path = write(audio, rate, tmp_path / name, channels)
        return Recording(path=path, speech=speech, duration_s=len(audio) / rate)

    return make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real `arengine serve` process on 127.0.0.1."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120)


def start_server(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    open_files: int | None = None,
) -> Server:
    """`arengine serve` on a free port; `open_files` sets its RLIMIT_NOFILE (soft and hard)."""
    port = free_port()
    log = tmp_path / f"server-{port}.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "arengine", "serve", "--port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=None if open_files is None else limit,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 60
    path = "/readyz" if wait_ready else "/healthz"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        try:
            if httpx.get(server.url + path, timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server not ready within 60 s: {log.read_text()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per test module, with small caps so the limits can be tested cheaply."""
    tmp = tmp_path_factory.mktemp("server")
    running = start_server(
        tmp,
        "--max-upload-bytes",
        str(32 * 1024 * 1024),
        "--max-duration-s",
        "120",
        "--segment-s",
        "4",
        "--upload-dir",
        str(tmp),
    )
    yield running
    stop_server(running)

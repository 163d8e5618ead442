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
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
import torch

from arengine.kinds.speech.network import SpeechModel
from tests.forkserver import Forked, forkable, spawn
from tests.recordings import Recording, compose, speak, write

if TYPE_CHECKING:
    from tests.postgres import PostgreSQL

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
"""The repository."""

PHRASES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese.",
    "We also need a small plastic snake and a big toy frog for the kids.",
]


Phrases = tuple[list[np.ndarray], int]
"""The espeak-ng phrases and their sample rate."""


@pytest.fixture(scope="session")
def phrases(tmp_path_factory: pytest.TempPathFactory) -> Phrases:
    folder = tmp_path_factory.mktemp("espeak")
    spoken = [
        speak(text, folder, voice)
        for text, voice in zip(PHRASES, ["en", "en-us", "en+f3", "en-gb"], strict=True)
    ]
    return [audio for audio, _ in spoken], spoken[0][1]


@pytest.fixture(scope="session")
def speech_model() -> SpeechModel:
    return SpeechModel.from_silero_package()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (`make test` runs a worker more than the cores), each test module goes
    to one worker as a unit, so its module-scoped fixtures (a server from `serve`, a model, a
    recording) are set up once, not once per worker. The container modules go last, so that the
    image is built by then (once: the first worker builds it, the others find it), each a unit
    of its own, so two workers can run them side by side. pytest-xdist's own `loadgroup` cannot
    be used here: it renames the tests through `item._nodeid`, which pytest 9.2 no longer
    reads."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0]

    return ByModule(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the pytest-xdist workers, the modules holding `slow` tests are handed out first, so the
    quick ones fill the end of the run; the container tests stay last (pyproject's
    `--no-loadscope-reorder` keeps this order; the sort is stable, the same on every worker)."""
    if hasattr(config, "workerinput"):
        items.sort(
            key=lambda item: (
                item.get_closest_marker("container") is not None,
                item.get_closest_marker("slow") is None,
            )
        )


RecordingFactory = Callable[..., Recording]


@pytest.fixture
def recording(tmp_path: Path, phrases: Phrases) -> RecordingFactory:
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


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m arengine ARGS` in `cwd`: its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "arengine", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def wait_until(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Poll `condition` until it holds (True) or `seconds` pass (False): tests wait for events,
    never assert how long something took."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real `arengine serve` process on 127.0.0.1, spooling uploads to `upload_dir`."""

    def __init__(
        self, url: str, process: subprocess.Popen[bytes] | Forked, log: Path, upload_dir: Path
    ) -> None:
        self.url = url
        self.process = process
        self.log = log
        self.upload_dir = upload_dir

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120)


QUICK_STOP = {"ARENGINE_SHUTDOWN_DELAY_S": "0"}
"""A test's server closes its listener at once on SIGTERM: no load balancer drains it, and the
default 2 s of 503 on `/readyz` was paid by every server the suite stops. The tests of that
window give `--shutdown-delay-s` (a flag wins over the environment)."""


def start_server(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    open_files: int | None = None,
    port: int | None = None,
) -> Server:
    """Start `arengine serve` with `args` (uploads go to `tmp_path/uploads` unless `args` say);
    `open_files` sets its RLIMIT_NOFILE (soft and hard); `port`: a given one (a server started
    again where its clients know it), else a free one. The server is forked from this worker's
    fork server (`tests/forkserver.py`: the imports paid once), unless its flags or environment
    change how the process starts (the allocator, preloads, torch's threads and ISA): those
    start as `python -m arengine serve`."""
    port = port or free_port()
    log = tmp_path / f"server-{port}.log"
    upload_dir = tmp_path / "uploads"
    upload_dir.mkdir(exist_ok=True)
    if "--upload-dir" in args:
        upload_dir = Path(args[args.index("--upload-dir") + 1])
    else:
        args = (*args, "--upload-dir", str(upload_dir))

    def limit(files: int = open_files or 0) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    command = ["serve", "--port", str(port), *args]
    environment = {**os.environ, **QUICK_STOP, **(env or {})}
    process: subprocess.Popen[bytes] | Forked
    with log.open("wb") as out:
        if forkable(args, env or {}):
            process = spawn(command, environment, Path.cwd(), log, open_files)
        else:
            process = subprocess.Popen(
                [sys.executable, "-m", "arengine", *command],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment,
                preexec_fn=None if open_files is None else limit,
            )
    server = Server(f"http://127.0.0.1:{port}", process, log, upload_dir)
    # Loading and warming up the models takes a server most of its start; under coverage, beside
    # another pytest-xdist worker's server and the image build, that is minutes on 2 cores.
    deadline = time.monotonic() + 300
    path = "/readyz" if wait_ready else "/healthz"
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(server.url + path, timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_server(server)
    raise RuntimeError(f"server not ready: {log.read_text()}")


def stop_server(server: Server) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 30 s; always reaped."""
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


ServerFactory = Callable[..., Server]
"""`serve(*flags, env=None, wait_ready=True)`: a running server with those settings."""

SMALL_CAPS = ("--max-upload-bytes", str(32 * 1024 * 1024), "--max-duration-s", "120")
"""Caps small enough for the limit tests to be cheap."""


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """The one server factory: the same arguments give the same running server within a test
    module; every server it started is stopped at the module's end."""
    running: dict[tuple[object, ...], Server] = {}

    def start(*args: str, env: dict[str, str] | None = None, wait_ready: bool = True) -> Server:
        key = (args, tuple(sorted((env or {}).items())), wait_ready)
        if key not in running or running[key].process.poll() is not None:
            folder = tmp_path_factory.mktemp("server")
            running[key] = start_server(folder, *args, env=env, wait_ready=wait_ready)
        return running[key]

    yield start
    for server in running.values():
        stop_server(server)


COMMON = (*SMALL_CAPS, "--segment-s", "4")
"""The common server's flags: small caps and 4-s segments, so limits and cuts are cheap to test."""


@pytest.fixture(scope="session")
def common_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    """The common server, started once for the whole session (every model loads and warms up,
    which is most of a server's start): its tests leave it idle and assert on differences."""
    running: list[Server] = []
    yield running
    for started in running:
        stop_server(started)


@pytest.fixture(scope="module")
def server(common_server: list[Server], tmp_path_factory: pytest.TempPathFactory) -> Server:
    """The common server (`COMMON`), shared by every module that does not declare its own;
    started again if a test stopped it."""
    if not common_server or common_server[-1].process.poll() is not None:
        common_server.append(start_server(tmp_path_factory.mktemp("server"), *COMMON))
    return common_server[-1]


@pytest.fixture(scope="session")
def twenty_minutes(tmp_path_factory: pytest.TempPathFactory, phrases: Phrases) -> Path:
    """About 20 minutes at 8 kHz as FLAC, a phrase every 25 s: written once per session."""
    pieces = [p for _ in range(44) for p in [("silence", 24.0), ("speech", 0)]]
    folder = tmp_path_factory.mktemp("twenty")
    audio, _ = compose(pieces, 8000, folder, *phrases)
    assert len(audio) / 8000 > 1150
    return write(audio, 8000, folder / "long.flac")


@pytest.fixture(scope="session")
def postgresql() -> Iterator[PostgreSQL]:
    """A real PostgreSQL for the session (Debian's, started by `tests/postgres.py`); skipped,
    with the reason, where its programs are not installed."""
    from tests.postgres import MISSING, available, running_postgresql

    if not available():
        pytest.skip(MISSING)
    with running_postgresql() as server:
        yield server

"""A Docker engine for the container tests: found or started, the image built once, containers."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("ARENGINE_IMAGE", "arengine:latest")
NAME_PREFIX = "arengine-test-"
"""Every container the tests start is named so; the fixtures remove them by these names."""


def docker(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=check, timeout=timeout
    )


_DAEMONS: list[subprocess.Popen[bytes]] = []
"""The dockerd this module started, if any."""

BUILD_LOCK = Path(tempfile.gettempdir()) / "arengine-image-build.lock"
"""Held while deploy/image.sh runs (util-linux `flock`)."""

PID_FILE = Path("/var/run/docker.pid")
"""dockerd refuses to start while this names a process, live or not."""


def remove_stale_pid_file(path: Path = PID_FILE) -> bool:
    """Remove `path` when the process it names is gone (a dockerd killed with the machine's
    session leaves it behind, and the next dockerd refuses to start); True when removed."""
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    if Path(f"/proc/{pid}").exists():
        return False
    path.unlink(missing_ok=True)
    return True


def engine_unavailable() -> str | None:
    """None when a Docker engine answers (started here if it can be); else why not."""
    if shutil.which("docker") is None:
        return "no docker client (deploy/setup.sh --test installs Debian's docker.io as root)"
    if docker("info", check=False, timeout=30).returncode == 0:
        return None
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        return "no Docker engine reachable, and dockerd cannot be started here (needs root)"
    remove_stale_pid_file()
    # dockerd outlives the tests on purpose. The child keeps its own copy of the log descriptor,
    # and the handle stays referenced, so neither is reclaimed (with a warning) mid-run.
    log = os.open("/tmp/arengine-dockerd.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _DAEMONS.append(subprocess.Popen([dockerd], stdout=log, stderr=log, start_new_session=True))
    finally:
        os.close(log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if docker("info", check=False, timeout=30).returncode == 0:
            return None
        time.sleep(1)
    return "dockerd did not answer within 60 s (see /tmp/arengine-dockerd.log)"


def build_image() -> None:
    """`make image`, reusing the image when its inputs are unchanged."""
    # Under a lock, held by the script itself: two pytest-xdist workers never build at once, and
    # the second finds the image the first built (--reuse).
    done = subprocess.run(
        ["flock", str(BUILD_LOCK), str(ROOT / "deploy" / "image.sh"), "--reuse"],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env={**os.environ, "ARENGINE_IMAGE": IMAGE},
    )
    if done.returncode != 0:
        raise RuntimeError(f"make image failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


class ImageBuild:
    """The engine found (or started) and the image built on a thread of its own, begun when the
    session has collected a container test: the build (minutes on a fresh machine, mostly
    downloads and disk) runs while the other tests do, and the container tests wait for it."""

    def __init__(self) -> None:
        self._skip: str | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="image-build", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._skip = engine_unavailable()
            if self._skip is None:
                build_image()
        except BaseException as failure:  # handed to the test that waits for the image
            self._failure = failure

    def wait(self) -> str | None:
        """None once the image is built; the reason to skip when no engine is reachable;
        raises what the build raised."""
        self._thread.join()
        if self._failure is not None:
            raise self._failure
        return self._skip


@dataclass
class Container:
    name: str
    url: str

    def inspect(self, template: str) -> str:
        return docker("inspect", "-f", template, self.name).stdout.strip()

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return docker("exec", self.name, *command, check=False)

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def cgroup_memory(self, name: str) -> Path:
        """A cgroup v1 memory file of the container, read on the host."""
        full_id = self.inspect("{{.Id}}")
        return Path("/sys/fs/cgroup/memory/docker") / full_id / name

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)


_STARTED: set[str] = set()
"""The containers this process started (`run_container`), which `remove_test_containers`
removes: another pytest-xdist worker may be running a container module of its own."""


def run_container(name: str, *options: str, ready_within_s: float = 120) -> Container:
    """`docker run -d` the image on a free loopback port, waiting for /readyz."""
    NAME = NAME_PREFIX + name
    docker("rm", "-f", NAME, check=False)
    _STARTED.add(NAME)
    docker("run", "-d", "--name", NAME, "-p", "127.0.0.1::8000", *options, IMAGE)
    port = docker("port", NAME, "8000/tcp").stdout.split()[0].rsplit(":", 1)[1]
    container = Container(NAME, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + ready_within_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(container.url + "/readyz", timeout=2).status_code == 200:
                return container
        except httpx.TransportError:
            pass
        if container.inspect("{{.State.Running}}") != "true":
            break
        time.sleep(0.2)
    logs = container.logs()
    container.remove()
    raise RuntimeError(f"container {NAME} not ready:\n{logs[-4000:]}")


def remove_test_containers() -> None:
    """Remove the containers this process started, running or not (the Compose stack has its
    own fixture)."""
    if _STARTED:
        docker("rm", "-f", *sorted(_STARTED), check=False)
        _STARTED.clear()

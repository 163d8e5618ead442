"""What every benchmark needs: a real `arengine serve` on 127.0.0.1, and its memory from /proc."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx


def start_server(
    port: int, *flags: str, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `arengine serve --port PORT FLAGS...`, wait until ready; return the process, URL."""
    command = [
        sys.executable,
        "-m",
        "arengine",
        "serve",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen([*command, *flags], env=None if env is None else dict(env))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _ready(url):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the server on port {port} did not become ready")
        time.sleep(0.1)
    return process, url


@contextmanager
def running_server(
    port: int, *flags: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`start_server` for a `with` block; the server is stopped at its end."""
    process, url = start_server(port, *flags, env=env)
    try:
        yield process, url
    finally:
        process.terminate()
        process.wait()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz").status_code == 200
    except httpx.TransportError:
        return False


def memory_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory field of /proc/PID/status in MiB: VmRSS (resident now) or VmHWM (peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def sample_memory(pid: int, minutes: float) -> tuple[list[tuple[float, float]], float]:
    """RSS of `pid` every second for `minutes`: (seconds, MiB) samples and the peak RSS."""
    samples = []
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < minutes * 60:
        samples.append((elapsed, memory_mib(pid)))
        time.sleep(1.0)
    return samples, memory_mib(pid, "VmHWM")

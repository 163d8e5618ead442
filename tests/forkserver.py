"""A fork server for the tests' `arengine serve` processes: the interpreter start and the imports
(torch, FastAPI, SQLAlchemy, arengine; two thirds of a server's start-up CPU) are paid once per
pytest-xdist worker, not once per server.

`python -m tests.forkserver SOCKET` starts under jemalloc the way `arengine serve` re-executes
itself (`LD_PRELOAD`, `MALLOC_CONF`, the re-execution mark), imports what a server imports, and
listens on the Unix socket SOCKET. Each connection sends one request (a JSON line: the command's
arguments, its environment, working directory, log file and open-files limit); the server forks,
answers the child's pid, and when the child exits sends its exit status and closes. The child
runs `arengine serve` from its `main`, as `python -m arengine` does, under the environment sent
(coverage, when the environment asks for it, starts there), and leaves the interpreter the usual
way (threads joined, exit handlers run). The fork server ends when its standard input closes.

`spawn` is the tests' side; `Forked` stands for the child as `subprocess.Popen` does.
`start_server` forks only what the fork server can start as the command line would: a server
whose allocator settings, preloads or thread environment differ starts with `subprocess.Popen`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib
import json
import os
import pkgutil
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FALLBACK_FLAGS = ("--jemalloc", "--no-jemalloc", "--malloc-conf")
"""Flags whose effect is on how the process starts: such a server starts with Popen."""

FALLBACK_PREFIXES = ("LD_", "MALLOC", "PYTHON", "OMP_", "MKL_", "ONEDNN", "DNNL", "COVERAGE")
"""Environment read when the interpreter or torch starts: a server given one of these (beyond
what the tests' own process has) starts with Popen."""


@functools.cache  # a constant of this machine: asked at every fork
def _allocator_environment() -> dict[str, str]:
    """What `reexec_with_jemalloc` adds to a server's environment, or nothing without jemalloc."""
    from arengine.settings import ServerSettings
    from arengine.system.allocator import _REEXEC_MARK, find_jemalloc

    library = find_jemalloc()
    if library is None:
        return {}
    conf = ServerSettings.model_fields["malloc_conf"].default
    return {"LD_PRELOAD": library, "MALLOC_CONF": conf, _REEXEC_MARK: "1"}


# ---- the fork server's side ------------------------------------------------------------------


PRELOAD = (
    "arengine.cli.serve",
    "arengine.http.app",
    "arengine.http.server",
    "arengine.system.logs",
    "arengine.system.threads",
    "anyio._backends._asyncio",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
)
"""What `arengine serve` imports before it is ready, with every kind's modules (below)."""


def _preload() -> None:
    import arengine.kinds

    for name in PRELOAD:
        importlib.import_module(name)
    for module in pkgutil.walk_packages(arengine.kinds.__path__, "arengine.kinds."):
        importlib.import_module(module.name)


class _Forks:
    """The fork server's loop: a child per request, each reaped and its status sent back."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(path)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "stdin")

    def serve(self) -> dict[str, Any] | None:
        """Returns the request in a child, None here when stdin closes."""
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while True:
            for key, _ in self.selector.select():
                if key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return None
                elif key.data == "accept":
                    request = self._fork()
                    if request is not None:
                        return request
                else:
                    self._reap(key)

    def _fork(self) -> dict[str, Any] | None:
        connection, _ = self.listener.accept()
        request: dict[str, Any] = json.loads(connection.makefile("rb").readline())
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            connection.close()
            self._close()
            return request
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        self.selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, connection))
        return None

    def _reap(self, key: selectors.SelectorKey) -> None:
        pid, connection = key.data
        self.selector.unregister(key.fileobj)
        os.close(key.fd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):  # the test that asked has gone
            connection.sendall(json.dumps({"returncode": code}).encode() + b"\n")
        connection.close()

    def _close(self) -> None:
        """In a child: close what belongs to the fork server (the other children's too)."""
        for key in list(self.selector.get_map().values()):
            if isinstance(key.fileobj, int):
                os.close(key.fileobj)
            if isinstance(key.data, tuple):
                key.data[1].close()
        self.selector.close()
        self.listener.close()


def _restart_jemalloc_threads() -> None:
    """jemalloc stops its background threads in a forked child; a server started from the
    command line has them (the re-execution's `MALLOC_CONF` asks for them): start them again."""
    mallctl = getattr(ctypes.CDLL(None), "mallctl", None)
    if mallctl is not None and "background_thread:true" in os.environ.get("MALLOC_CONF", ""):
        enabled = ctypes.c_bool(True)
        mallctl(b"background_thread", None, None, ctypes.byref(enabled), ctypes.c_size_t(1))


def _run(request: dict[str, Any]) -> None:
    """In the child: become `python -m arengine ARGS` under the request's environment."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    _restart_jemalloc_threads()
    if request["open_files"] is not None:
        files = request["open_files"]
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    if os.environ.get("COVERAGE_PROCESS_CONFIG") or os.environ.get("COVERAGE_PROCESS_START"):
        import coverage

        coverage.process_startup()
    import arengine.__main__
    from arengine.cli import main

    sys.argv = [arengine.__main__.__file__, *request["args"]]
    main(request["args"])


def main() -> None:
    _preload()
    request = _Forks(sys.argv[1]).serve()
    if request is not None:
        _run(request)


# ---- the tests' side -------------------------------------------------------------------------


class Forked:
    """A child of the fork server, with the part of `subprocess.Popen` the tests use."""

    def __init__(self, connection: socket.socket, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._connection = connection
        self._received = b""

    def poll(self) -> int | None:
        if self.returncode is None:
            self._receive(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._receive(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _receive(self, timeout: float | None) -> None:
        self._connection.settimeout(timeout)
        try:
            chunk = self._connection.recv(4096)
        except (TimeoutError, BlockingIOError):
            return
        if not chunk:
            raise RuntimeError(f"the fork server went away while {self.pid} ran")
        self._received += chunk
        if self._received.endswith(b"\n"):
            self.returncode = int(json.loads(self._received)["returncode"])
            self._connection.close()


class _ForkServer:
    """This test process's fork server, started at the first fork."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="arengine-forkserver-")  # removed at the end
        self.path = os.path.join(self.folder, "socket")
        self.log = Path(self.folder) / "forkserver.log"
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith("COVERAGE_")  # started in each child, not here
        }
        env.update(_allocator_environment())
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver", self.path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                env=env,
                cwd=Path(__file__).resolve().parent.parent,
            )
        assert self.process.stdout is not None
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the fork server did not start: {self.log.read_text()}")
        atexit.register(self.close)

    def spawn(self, request: dict[str, Any]) -> Forked:
        connection = socket.socket(socket.AF_UNIX)
        connection.connect(self.path)
        connection.sendall(json.dumps(request).encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = connection.recv(4096)
            if not chunk:
                raise RuntimeError(f"the fork server did not fork: {self.log.read_text()}")
            reply += chunk
        first, _, rest = reply.partition(b"\n")
        forked = Forked(connection, int(json.loads(first)["pid"]), request["args"])
        forked._received = rest
        return forked

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


_SERVER: _ForkServer | None = None


def forkable(args: tuple[str, ...], env: dict[str, str]) -> bool:
    """Whether a server with these flags and extra environment starts in the fork server as it
    would from the command line."""
    if any(arg.split("=", 1)[0] in FALLBACK_FLAGS for arg in args):
        return False
    return not any(
        name.startswith(FALLBACK_PREFIXES) or "JEMALLOC" in name or "MALLOC_CONF" in name
        for name in env
    )


def spawn(
    args: list[str], env: dict[str, str], cwd: Path, log: Path, open_files: int | None
) -> Forked:
    """`python -m arengine ARGS`, forked from this process's fork server."""
    global _SERVER
    if _SERVER is None or _SERVER.process.poll() is not None:
        _SERVER = _ForkServer()
    request = {
        "args": args,
        "env": {**env, **_allocator_environment()},
        "cwd": str(cwd),
        "log": str(log),
        "open_files": open_files,
    }
    return _SERVER.spawn(request)


if __name__ == "__main__":
    main()

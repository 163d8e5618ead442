"""A compressed upload decoded in a child process forked per request, off the server's GIL.

Decoding through PyAV costs Python objects per packet (a `Packet`, a `Frame`, a generator step:
~80,000 for a 35-minute MP3) under the GIL, which the engine's other threads then wait for. Here
the same chain (`decode.read_blocks` and `decode.to_mono`: FFmpeg's libraries, the allowlists,
the frame cap, the packet-size cap, the damaged-packet policy, a change of rate refused) runs in
a child, which writes the mono float32 blocks at the file's own rate to a pipe; the server reads
them (the read releases the GIL) and resamples them once per model rate as before (`tee`), so
the samples are the in-process chain's to the bit. At the end the child writes one JSON line:
what decoding found (`DecodeReport`), or the error the chain raised, which the server raises in
turn. A child that dies without one (a crash on hostile input) costs its request alone: 400.

Children are forked from one fork server per server process (`python -m arengine.audio.child`,
started on first use, single-threaded, with the decoding modules imported once), so a request
pays a `fork`, not an interpreter's start. The pipe holds `PIPE_BYTES` (6 s at 44.1 kHz): the
child decodes that far ahead of the engine and then waits, so memory does not grow with the
recording. Where the fork server cannot be started the upload is decoded in process.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from arengine.audio import sniff
from arengine.audio.decode import DecodeReport, read_blocks, to_mono
from arengine.audio.spans import Span, SpanReport, read_span
from arengine.errors import (
    ArengineError,
    CorruptAudio,
    ErrorCode,
    InvalidInput,
    TooLarge,
    UnsupportedFormat,
)
from arengine.types import AudioInfo

PIPE_BYTES = 1 << 20
"""The pipe's capacity asked for (Linux's default ceiling for an unprivileged process)."""

POLL_S = 0.005
"""A spool file's reader, caught up with its child, waits this long before reading again."""

_ERRORS: dict[str, type[ArengineError]] = {
    error.__name__: error
    for error in (ArengineError, CorruptAudio, InvalidInput, TooLarge, UnsupportedFormat)
}
_CODES = {code.value: code for code in ErrorCode}


def usable(info: AudioInfo) -> bool:
    """Whether `info`'s file is decoded by FFmpeg, the decoding a child takes off the GIL
    (libsndfile's reads release it already)."""
    return info.decoder == sniff.FFMPEG


class ChildDecoding:
    """The mono float32 blocks `decode.to_mono` would give for the file at `path`, decoded in a
    child; `report` is filled in as `read_blocks` fills it. Iterate once, then `close` (also
    early: the child is stopped). Example: `blocks = ChildDecoding(path, info, cap, report,
    65536)`; `np.concatenate(list(blocks))` equals `to_mono(read_blocks(...))` concatenated.
    With `span`, the child decodes that part of the file (`spans.read_span`); once read,
    `found` says what the part found. With `spool`, it writes to a nameless temporary file
    instead of the pipe, so that it decodes to the end however far behind the engine reads (a
    later part of `parts.py`, read once the parts before it are)."""

    def __init__(
        self,
        path: Path,
        info: AudioInfo,
        max_frames: int,
        report: DecodeReport,
        block_frames: int,
        span: Span | None = None,
        spool: bool = False,
    ) -> None:
        self._report = report
        self._block = block_frames
        self.found = SpanReport()
        self._spool, self._at, self._written = spool, 0, False
        data_r, data_w = _spool() if spool else os.pipe()
        status_r, status_w = os.pipe()
        with contextlib.suppress(OSError):  # a smaller pipe only means less read-ahead
            if not spool:
                fcntl.fcntl(data_w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        try:
            job = pickle.dumps((str(path), info, max_frames, block_frames, span))
            self._pid = _server().fork(job, data_w, status_w)
        except BaseException:
            for fd in (data_r, status_r):
                os.close(fd)
            raise
        finally:
            os.close(data_w)
            os.close(status_w)
        self._data, self._status = data_r, status_r
        self._ended = False

    @property
    def report(self) -> DecodeReport:
        """What decoding found, once read."""
        return self._report

    def __iter__(self) -> Iterator[np.ndarray]:
        try:
            while (block := self._read()) is not None:
                self._report.frames += len(block)
                yield block
            self._finish()
        finally:
            self.close()

    def _read(self) -> np.ndarray | None:
        """The next block (`block_frames` samples, the last shorter); None at the end."""
        block = np.empty(self._block, np.float32)
        view = block.data.cast("B")
        got = 0
        while got < len(view):
            count = self._spooled(view[got:]) if self._spool else os.readv(self._data, [view[got:]])
            if count == 0:
                break
            got += count
        if got % 4:
            raise CorruptAudio("the audio's decoder stopped mid-sample")
        return block[: got // 4] if got else None

    def _spooled(self, view: memoryview) -> int:
        """Bytes read from the spool file into `view`; 0 once the child has written all. Where
        the engine has caught up with the child, it waits on the status pipe (the child's last
        word comes after its last sample), `POLL_S` a time, not holding the GIL."""
        while True:
            written = self._written  # before the read: then 0 bytes is the end
            count = os.preadv(self._data, [view], self._at)  # our own offset: the child moves its
            self._at += count
            if count or written:
                return count
            self._written = bool(select.select([self._status], [], [], POLL_S)[0])

    def _finish(self) -> None:
        raw = b""
        while chunk := os.read(self._status, 1 << 16):
            raw += chunk
        self._ended = True
        try:
            found = json.loads(raw)
        except ValueError:
            raise CorruptAudio("the audio's decoder stopped before the end of the file") from None
        if "error" in found:
            kind = _ERRORS.get(found["error"], ArengineError)
            raise kind(str(found["message"]), code=_CODES[found["code"]])
        self._report.frames = int(found["frames"])
        self._report.truncated = bool(found["truncated"])
        self._report.warnings.extend(str(warning) for warning in found["warnings"])
        self.found.reached_end = bool(found["reached_end"])
        self.found.broken = bool(found["broken"])
        damage = self.found.damage
        damage.bad, damage.total = int(found["bad"]), int(found["total"])
        damage.worst = [None if worst is None else int(worst) for worst in found["worst"]]

    def close(self) -> None:
        """Stop the child if it still decodes, and close the pipes."""
        if self._data < 0:
            return
        alive = not self._ended and not select.select([self._status], [], [], 0)[0]
        if alive:  # its status pipe is open, so it has not exited: the pid is still its own
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
        os.close(self._data)
        os.close(self._status)
        self._data = self._status = -1


def _spool() -> tuple[int, int]:
    """A nameless temporary file, as descriptors to read and to write (`ChildDecoding`'s
    `spool`): unlinked as it is made, so nothing is left behind if the server is killed."""
    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno()), os.dup(file.fileno())


class _ForkServer:
    """The server's side of the fork server: one request at a time over a socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": package if not path else package + os.pathsep + path}
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "arengine.audio.child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._socket = ours
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self._process.poll() is None

    def fork(self, job: bytes, data_w: int, status_w: int) -> int:
        """A child decoding `job` to `data_w`, its last word to `status_w`: its pid."""
        with self._lock:
            socket.send_fds(self._socket, [job], [data_w, status_w])
            reply = self._socket.recv(64)
        if not reply:
            raise RuntimeError("the decoders' fork server has ended")
        return int(reply)

    def stop(self) -> None:
        self._socket.close()
        self._process.wait()


_SERVER: list[_ForkServer] = []
_SERVER_LOCK = threading.Lock()


def _server() -> _ForkServer:
    """The fork server, started (again, if it has ended) on first use."""
    with _SERVER_LOCK:
        if not _SERVER or not _SERVER[0].alive():
            if _SERVER:
                _SERVER.pop().stop()
            else:
                atexit.register(_stop)
            _SERVER.append(_ForkServer())
        return _SERVER[0]


def start() -> None:
    """Start the fork server now (it imports the decoders while the server loads its models),
    so the first compressed upload does not wait for it. Where it cannot be started, uploads
    are decoded in process (each request tries again)."""
    with contextlib.suppress(OSError):
        _server()


def _stop() -> None:
    """At exit: the fork server ends once its socket closes (children decoding finish alone)."""
    with _SERVER_LOCK:
        while _SERVER:
            _SERVER.pop().stop()


def _serve(sock: socket.socket) -> None:
    """The fork server's loop: a child per job until the server closes its end."""
    # Children are reaped as they end, and waited for, so that their CPU time counts in this
    # process's (`/proc/PID/stat`'s cutime and cstime, what the benchmarks read).
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        job, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        if not job:
            return
        pid = os.fork()
        if pid == 0:
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os._exit(_decode(job, *fds))
        for fd in fds:
            os.close(fd)
        sock.send(str(pid).encode())


def _reap(signum: int, frame: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _decode(job: bytes, data_w: int, status_w: int) -> int:
    """In the child: the chain's blocks to `data_w`, then its report or error to `status_w`."""
    path, info, max_frames, block_frames, span = pickle.loads(job)
    report, part = DecodeReport(), SpanReport()
    if span is None:
        blocks = read_blocks(Path(path), info, max_frames, report, block_frames)
    else:
        blocks = read_span(Path(path), info, max_frames, report, part, block_frames, span)
    try:
        with open(data_w, "wb", buffering=0) as out:
            for block in to_mono(blocks):
                if not _written(out, block):
                    # A spool file that cannot grow (the temporary directory full): the
                    # samples so far stand, and the server decodes the rest whole, by pipe.
                    part.broken = True
                    break
        found: dict[str, object] = {
            "frames": report.frames,
            "truncated": report.truncated,
            "warnings": report.warnings,
            "reached_end": part.reached_end,
            "broken": part.broken,
            "bad": part.damage.bad,
            "total": part.damage.total,
            "worst": part.damage.worst,
        }
    except BrokenPipeError:
        return 1  # the server stopped reading: nobody is left to tell
    except ArengineError as error:
        found = {"error": type(error).__name__, "code": error.code.value, "message": error.message}
    except Exception as error:  # a fault of the chain on this file: the request's, as a 400
        found = {
            "error": "CorruptAudio",
            "code": ErrorCode.CORRUPT_AUDIO.value,
            "message": f"the audio cannot be decoded: {type(error).__name__}",
        }
    with open(status_w, "wb", buffering=0) as status:
        status.write(json.dumps(found).encode())
    return 0


def _written(out: BinaryIO, block: np.ndarray) -> bool:
    """Write `block` as float32; False where a spool file cannot take it. `BrokenPipeError`
    where the server has stopped reading the pipe."""
    try:
        out.write(np.ascontiguousarray(block, np.float32).tobytes())
    except BrokenPipeError:
        raise
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        return False
    return True


def main(argv: list[str]) -> int:
    """`python -m arengine.audio.child FD`: serve forks on the socket at descriptor FD."""
    _serve(socket.socket(fileno=int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

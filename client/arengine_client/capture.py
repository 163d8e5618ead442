"""A source read through PyAV (FFmpeg): a camera's RTSP, an HTTP or Icecast stream, a sound
device or a recording, decoded and resampled here to what `WS /v1/listen` takes (mono `s16le`
at the source's `sample_rate`): the server never opens an address itself, and 16-bit mono is a
tenth of what a camera's stereo 48-kHz float would be.

PyAV is heavy (FFmpeg's libraries), so it is the optional extra `arengine-client[sources]`,
imported only when a sources file is read (arengine itself depends on it). Reading blocks: each
source's capture runs on its own thread (`listen_sources.py`), and PyAV's read timeout turns a
source that stalls without closing (a camera unplugged) into an error, so that it is reconnected.
"""

from __future__ import annotations

from collections.abc import Generator
from types import ModuleType
from typing import Any

from arengine_client.sources import Source

CHUNK_S = 0.1
"""Audio per message to the server: short, so that a tag is not held back by the client."""

OPTIONS = {
    # A camera over TCP: UDP loses packets (and audio with them) on a busy network.
    "rtsp": {"rtsp_transport": "tcp"},
    "rtsps": {"rtsp_transport": "tcp"},
}
"""FFmpeg options by address scheme; a source's own `options` come over them."""

INSTALL = "pip install 'arengine-client[sources]'"


class CaptureError(Exception):
    """A source that could not be opened or read; `lasting` when trying again cannot help (a
    recording that is not there)."""

    def __init__(self, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


def require_av() -> ModuleType:
    """PyAV, or an error saying how to install it."""
    try:
        import av
    except ImportError:
        raise CaptureError(
            f"reading sources needs PyAV (FFmpeg's libraries): {INSTALL}", lasting=True
        ) from None
    return av


class Capture:
    """One opened source, read as chunks of about `CHUNK_S` of mono s16le (blocking).

    Example (reads a recording that is there)::

        capture = Capture(Source("hall", "hall.flac"))
        while chunk := capture.read():
            ...
        capture.close()
    """

    def __init__(self, source: Source) -> None:
        av = require_av()
        url, forced = source.target
        options = {**OPTIONS.get(url.partition(":")[0].lower(), {}), **source.options}
        try:
            self._container: Any = av.open(
                url, format=forced, options=options, timeout=(source.timeout_s, source.timeout_s)
            )
        except (av.FFmpegError, OSError, ValueError) as error:
            raise CaptureError(_why(error), lasting=source.kind == "file") from None
        if not self._container.streams.audio:
            self._container.close()
            raise CaptureError("it has no audio stream", lasting=source.kind == "file")
        self._av = av
        self._pcm = _pcm(av, self._container, source.sample_rate)
        self._chunk = 2 * max(1, round(source.sample_rate * CHUNK_S))
        self._held = b""

    def read(self) -> bytes:
        """The next chunk, b"" at the end of the source; `CaptureError` when reading fails."""
        try:
            while len(self._held) < self._chunk:
                self._held += next(self._pcm)
        except StopIteration:
            pass
        except (self._av.FFmpegError, OSError, ValueError) as error:
            raise CaptureError(_why(error)) from None
        chunk, self._held = self._held[: self._chunk], self._held[self._chunk :]
        return chunk

    def close(self) -> None:
        self._pcm.close()
        self._container.close()


def _pcm(av: ModuleType, container: Any, rate: int) -> Generator[bytes]:
    """The audio stream's samples as mono s16le at `rate`, frame by frame."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    for frame in container.decode(audio=0):
        for out in resampler.resample(frame):
            yield _samples(out)
    for out in resampler.resample(None):
        yield _samples(out)


def _samples(frame: Any) -> bytes:
    # A plane may be padded past its samples (FFmpeg aligns buffers); mono s16: 2 bytes each.
    return bytes(frame.planes[0])[: 2 * frame.samples]


def _why(error: Exception) -> str:
    """FFmpeg's reason, without the address PyAV repeats (it may hold a password)."""
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(reason)

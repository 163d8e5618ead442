"""`arengine listen --server URL INPUT`: a live stream sent to a server, its tags printed as each
becomes final.

The server never fetches a source itself (pointing it at a URL would let a client make it
connect anywhere): this command reads one and sends it over `WS /v1/listen`. `-` reads raw PCM
from standard input, as `--format`, `--sample-rate` and `--channels` describe it (for a
camera: `ffmpeg -i rtsp://... -f s16le -ac 1 -ar 16000 - | arengine listen --server URL -`), or
a WebM/Ogg stream with `--format webm` (`ffmpeg -i rtsp://... -c:a libopus -f webm - |
arengine listen --server URL --format webm -`: a tenth of the bytes over the network); a
file is decoded by libsndfile (WAV, FLAC, OGG, MP3...) and sent as `f32le` at its own rate,
at real speed with `--realtime`. Each tag is printed as one JSON line to standard output (the
lines of `POST /v1/recognize?format=ndjson`), the summary last; progress lines go to standard
error with `--progress`. Without soundfile (the client alone, not `arengine-client[audio]`) a
file must be a 16-bit PCM WAV, sent as it is (`s16le`); other files go through standard input.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import wave
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from arengine_client._async import AsyncClient
from arengine_client.errors import ArengineError
from arengine_client.live import CONTAINER_FORMATS
from arengine_client.remote import Remote

CHUNK_S = 0.1
"""Audio per message: short, so that a stream read at real speed is sent as it comes."""

CONTAINER_CHUNK = 4096
"""Bytes per message of a container stream: at most what its producer has written (`read1`)."""


def listen(
    remote: Remote,
    source: str,
    model: str,
    opening: dict[str, Any],
    realtime: bool = False,
    progress: bool = False,
    overrides: Mapping[str, float | str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Stream `source` (`-` or a file) to the server; 0 when it ended with a summary, 1 when
    the server ended it with an error, 2 when it could not start."""
    out = out or sys.stdout
    try:
        if source == "-":
            read = _stdin_reader()
        else:
            read, opening = _file_reader(Path(source))
    except (OSError, RuntimeError, wave.Error) as error:  # soundfile's errors are RuntimeErrors
        print(f"arengine: cannot read {source}: {error}", file=sys.stderr)
        return 2
    if opening["format"] in CONTAINER_FORMATS:
        if realtime:
            print(
                "arengine: --realtime paces raw PCM; a container stream comes at its own pace",
                file=sys.stderr,
            )
            return 2
        chunks = _chunks(read, CONTAINER_CHUNK, None)
    else:
        rate = opening["sample_rate"] * opening["channels"] * _width(opening["format"])
        chunks = _chunks(read, max(1, int(rate * CHUNK_S)), rate if realtime else None)
    try:
        asyncio.run(_print_lines(remote, chunks, opening, model, overrides or {}, out, progress))
    except ArengineError as error:
        print(f"arengine: the stream ended: {error.code}: {error.message}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"arengine: cannot reach {remote.url}: {error}", file=sys.stderr)
        return 2
    return 0


async def _print_lines(
    remote: Remote,
    chunks: AsyncIterator[bytes],
    opening: dict[str, Any],
    model: str,
    overrides: Mapping[str, float | str],
    out: TextIO,
    progress: bool,
) -> None:
    async with AsyncClient(remote.url, remote.api_key) as client:
        params: dict[str, Any] = dict(overrides)
        async for item in client.listen_lines(chunks, opening, model=model, **params):
            if "progress" in item:
                if progress:
                    print(json.dumps(item), file=sys.stderr, flush=True)
                continue
            print(json.dumps(item), file=out, flush=True)


def _width(fmt: str) -> int:
    return 4 if fmt == "f32le" else 2


Reader = Callable[[int], bytes]
"""Returns up to n bytes, fewer when less is there yet, b"" at the end (blocking)."""


def _stdin_reader() -> Reader:
    """Standard input's bytes as they come (`read1`: what is there, without waiting for more)."""
    stdin: Any = sys.stdin.buffer
    read: Reader = stdin.read1
    return read


def _file_reader(path: Path) -> tuple[Reader, dict[str, Any]]:
    """A reader of the file's audio as interleaved f32le, and the opening that describes it
    (a 16-bit WAV's own samples, s16le, where soundfile is not installed)."""
    try:
        import soundfile
    except ImportError:
        return _wav_reader(path)
    audio = soundfile.SoundFile(str(path))
    frame_bytes = 4 * audio.channels

    def read(size: int) -> bytes:
        block = audio.read(max(1, size // frame_bytes), dtype="float32")
        if not len(block):
            audio.close()
        return bytes(block.astype("<f4").tobytes())

    opening = {"format": "f32le", "sample_rate": audio.samplerate, "channels": audio.channels}
    return read, opening


def _wav_reader(path: Path) -> tuple[Reader, dict[str, Any]]:
    """A 16-bit PCM WAV's frames as they are (s16le), by the standard library."""
    audio = wave.open(str(path), "rb")  # noqa: SIM115 (closed by the reader at the end)
    if audio.getsampwidth() != 2:
        audio.close()
        raise wave.Error(
            f"{audio.getsampwidth() * 8}-bit samples: without soundfile (pip install "
            "arengine-client[audio]) a file must be a 16-bit PCM WAV; or pipe raw PCM to `-`"
        )
    frame_bytes = 2 * audio.getnchannels()

    def read(size: int) -> bytes:
        block = audio.readframes(max(1, size // frame_bytes))
        if not block:
            audio.close()
        return block

    opening = {"format": "s16le", "sample_rate": audio.getframerate(), "channels": frame_bytes // 2}
    return read, opening


async def _chunks(read: Reader, size: int, bytes_per_s: int | None) -> AsyncIterator[bytes]:
    """The source's bytes in messages of about `size`, at `bytes_per_s` when it is given (a file
    sent at real speed), as fast as they come otherwise."""
    started, sent = time.monotonic(), 0
    while data := await asyncio.to_thread(read, size):
        yield data
        sent += len(data)
        if bytes_per_s is not None:
            await asyncio.sleep(max(0.0, started + sent / bytes_per_s - time.monotonic()))

"""`arengine recognize --server URL`: a batch of files (`files.plan`) sent to a server or a cluster.

Same inputs, output names, formats, progress lines and failure report as the in-process mode; the
recognitions run on the server (`concurrency` uploads at a time, each retried on 503 by the
client; a recording over `job_over_s` goes as a job, whose result is fetched once done, across
dropped connections and server restarts). The output format is the server's `Format` where
arengine is installed (written here, as the in-process mode writes it), or a `RenderedFormat` that
has the server write it (`POST /v1/render`) where only the client is.

Example (with a server at that address)::

    remote = Remote("http://lb:8080", api_key=None)
    work = plan([Path("talk.flac")], FORMATS["csv"], Path("out"))
    failures = recognize_remote(remote, work, "speech", FORMATS["csv"])
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import wave
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

from arengine_client._shared import Recognition, RetryPolicy
from arengine_client._sync import Client
from arengine_client.files import Failure, OutputFormat, Planned, settle
from arengine_client.progress import make_progress
from arengine_client.types import Result

API_KEY_ENV = "ARENGINE_API_KEY"
"""The key `--server` sends (environment only: a flag would show it in every user's `ps`)."""


@dataclass(frozen=True, slots=True)
class Remote:
    url: str
    api_key: str | None
    retries: int = 30
    """Per file: a batch outlasts a busy cluster (503 with `Retry-After`) rather than fail."""
    job_over_s: float | None = None
    """A recording longer than this goes as a job (`Client.recognize_job`); None: never."""

    @classmethod
    def from_env(cls, url: str) -> Remote:
        return cls(url, os.environ.get(API_KEY_ENV) or None)


def recognize_remote(
    remote: Remote,
    work: Sequence[Planned],
    model: str,
    fmt: OutputFormat,
    concurrency: int = 4,
    stream: TextIO | None = None,
    overrides: Mapping[str, float | str] | None = None,
) -> list[Failure]:
    """Write each file's output (`runner.plan`), `concurrency` uploads at a time; returns the failed
    ones; `overrides`: post-processing parameters for every file."""
    stream = stream or sys.stderr
    durations = {item.path: _duration(item.path) for item in work}
    progress = make_progress(len(work), sum(durations.values()), stream)
    failures: list[Failure] = []
    retry = RetryPolicy(retries=remote.retries)
    stream.write(
        f"sending {len(work)} files to {remote.url}, {concurrency} at a time; each is retried up "
        f"to {retry.retries} times on 503 or 502, a refused connection {retry.refused_retries} "
        "times\n"
    )
    try:
        with (
            Client(remote.url, remote.api_key, retry=retry) as client,
            ThreadPoolExecutor(max(concurrency, 1), thread_name_prefix="upload") as pool,
        ):
            pending = iter(work)
            running: dict[Future[Recognition], Planned] = {}
            while True:
                # At most `concurrency` files in flight: a bar (or a line) starts with its upload.
                for item in itertools.islice(pending, max(concurrency, 1) - len(running)):
                    over = remote.job_over_s
                    long = over is not None and durations[item.path] > over
                    upload = pool.submit(
                        _recognize_one, client, item.path, model, overrides or {}, long
                    )
                    running[upload] = item
                    progress.started(item.path, durations[item.path])
                if not running:
                    break
                done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    item = running.pop(future)
                    outcome = functools.partial(_answer, future)
                    settle(outcome, item, fmt, progress, failures, _reason)
    finally:
        progress.close()
    return failures


def _recognize_one(
    client: Client, path: Path, model: str, overrides: Mapping[str, float | str], as_job: bool
) -> Recognition:
    if not path.is_file():  # the in-process mode's wording, so both reports read the same
        raise FileNotFoundError(f"no such file: {path}")
    params: dict[str, Any] = dict(overrides)  # post-processing only: no `timeout_s` among them
    if as_job:
        return client.recognize_job(path, model=model, **params)
    return client.recognize(path, model=model, **params)


def _reason(error: Exception) -> str | None:
    """What a failed upload's report says; None for an error no upload should cause (an error
    answer is `settle`'s own: `ArengineError`)."""
    if isinstance(error, httpx.HTTPError):
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return None


def _answer(future: Future[Recognition]) -> Result:
    return future.result()  # the client reads the answer into the engine's `Result`


def _duration(path: Path) -> float:
    """The recording's length from its header, 0 when unreadable (the ETA and `job_over_s` need
    it): by soundfile where it is installed (with arengine, or `arengine-client[audio]`), else a
    WAV's by the standard library."""
    try:
        import soundfile
    except ImportError:
        return _wav_duration(path)
    try:
        return float(soundfile.info(str(path)).duration)
    except Exception:  # any unreadable header; the server will report the real error
        return 0.0


def _wav_duration(path: Path) -> float:
    try:
        with wave.open(str(path), "rb") as audio:
            return audio.getnframes() / audio.getframerate()
    except (OSError, EOFError, wave.Error, ZeroDivisionError):
        return 0.0


@dataclass(frozen=True, slots=True)
class RenderedFormat:
    """An output format the server writes (`POST /v1/render`): what `recognize --server` uses
    where arengine's own writers are not installed."""

    name: str
    extension: str
    client: Client

    def encode(self, result: Result, source: str) -> bytes:
        return self.client.render(result, self.name, name=f"{source}.{self.extension}")


def server_format(client: Client, name: str) -> RenderedFormat:
    """The server's format called `name` (or one of its aliases); ValueError naming the
    server's formats when it has none of that name."""
    known = client.formats()
    for entry in known:
        if name == entry["name"] or name in entry["aliases"]:
            return RenderedFormat(str(entry["name"]), str(entry["extension"]), client)
    names = ", ".join(str(entry["name"]) for entry in known)
    raise ValueError(f"unknown format {name!r}; the server writes {names}")

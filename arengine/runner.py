"""`arengine recognize`: many files through one in-process engine, one output file per input.

Example::

    failures = recognize_files(engine, [Path("calls/")], "speech", FORMATS["csv"], Path("out"))
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from arengine.engine.engine import Engine
from arengine.errors import ArengineError
from arengine.formats import Format
from arengine.types import Result
from arengine.validation import probe

AUDIO_SUFFIXES = frozenset(
    [
        ".wav",
        ".wave",
        ".flac",
        ".ogg",
        ".oga",
        ".opus",
        ".mp3",
        ".aif",
        ".aiff",
        ".aifc",
        ".rf64",
        ".w64",
        ".caf",
    ]
)
"""What a folder given on the command line is searched for (files named directly always count)."""


@dataclass(frozen=True, slots=True)
class Failure:
    path: Path
    reason: str


def expand(inputs: Iterable[Path]) -> list[Path]:
    """Files as given, and the audio files under each folder (recursively, sorted)."""
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            files += sorted(
                p for p in item.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES
            )
        else:
            files.append(item)
    return files


def output_names(files: list[Path], fmt: Format) -> list[str]:
    """`<stem>.<ext>` per input; a repeated stem gets `-2`, `-3`... so no output overwrites one."""
    seen: dict[str, int] = {}
    names = []
    for path in files:
        stem = path.stem or "recording"
        seen[stem] = seen.get(stem, 0) + 1
        suffix = "" if seen[stem] == 1 else f"-{seen[stem]}"
        names.append(f"{stem}{suffix}.{fmt.extension}")
    return names


@dataclass
class Progress:
    """Per-file lines and an overall line (redrawn in place on a terminal) on `stream`."""

    files: int
    total_audio_s: float
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    started: float = field(default_factory=time.monotonic)
    done_files: int = 0
    done_audio_s: float = 0.0
    failed: int = 0

    @property
    def tty(self) -> bool:
        return self.stream.isatty()

    def finished(self, path: Path, result: Result, out: Path) -> None:
        self.done_files += 1
        self.done_audio_s += result.audio.duration_s
        audio, total = result.audio.duration_s, result.timings.total_s
        self._line(
            f"[{self.done_files + self.failed}/{self.files}] {path}: {len(result.tags)} tags, "
            f"{audio:.1f} s of audio in {total:.2f} s (RTF {total / max(audio, 1e-9):.3f}) -> {out}"
        )

    def failed_file(self, path: Path, reason: str) -> None:
        self.failed += 1
        self._line(f"[{self.done_files + self.failed}/{self.files}] {path}: FAILED: {reason}")

    def overall(self) -> str:
        elapsed = time.monotonic() - self.started
        line = (
            f"overall: {self.done_files + self.failed}/{self.files} files, "
            f"{self.done_audio_s:.1f}/{self.total_audio_s:.1f} s of audio, {elapsed:.1f} s"
        )
        if self.done_audio_s > 0:
            speed = self.done_audio_s / max(elapsed, 1e-9)
            eta = max(self.total_audio_s - self.done_audio_s, 0.0) / speed
            line += f", RTF {elapsed / self.done_audio_s:.3f} ({speed:.1f}x real time)"
            line += f", ETA {eta:.0f} s"
        return line

    def tick(self) -> None:
        """Redraw the overall line; on a pipe or file it is printed after each file instead."""
        if self.tty:
            self.stream.write("\r\033[K" + self.overall())
            self.stream.flush()

    def _line(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        if not self.tty:
            self.stream.write(self.overall() + "\n")
        self.stream.flush()


def recognize_files(
    engine: Engine,
    files: list[Path],
    model: str,
    fmt: Format,
    out: Path,
    jobs: int = 4,
    stream: TextIO | None = None,
) -> list[Failure]:
    """Write `<out>/<stem>.<ext>` per file, `jobs` files at a time; returns the failed ones."""
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress(len(files), sum(_duration(engine, p) for p in files))
    if stream is not None:
        progress.stream = stream
    failures: list[Failure] = []
    pending = iter(enumerate(zip(files, output_names(files, fmt), strict=True)))
    running: dict[Future[Result], tuple[Path, Path]] = {}
    while True:
        for index, (path, name) in _take(pending, jobs - len(running)):
            running[_submit(engine, path, model, index)] = (path, out / name)
        if not running:
            break
        done, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
        for future in done:
            path, target = running.pop(future)
            try:
                result = future.result()
                _write(target, fmt.render(result, path.stem))
            except (ArengineError, OSError) as error:
                reason = error.message if isinstance(error, ArengineError) else str(error)
                failures.append(Failure(path, reason))
                progress.failed_file(path, reason)
            else:
                progress.finished(path, result, target)
        progress.tick()
    if progress.tty:
        progress.stream.write("\r\033[K" + progress.overall() + "\n")
    return failures


def _take(
    items: Iterator[tuple[int, tuple[Path, str]]], count: int
) -> list[tuple[int, tuple[Path, str]]]:
    return [item for _, item in zip(range(max(count, 0)), items, strict=False)]


def _submit(engine: Engine, path: Path, model: str, index: int) -> Future[Result]:
    try:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        return engine.recognize(path, engine.check(model, {}), {}, f"cli-{index}").future
    except (ArengineError, OSError) as error:
        failed: Future[Result] = Future()
        failed.set_exception(error)
        return failed


def _duration(engine: Engine, path: Path) -> float:
    """The recording's length from its header, 0 when it cannot be read (it will fail later)."""
    try:
        return probe(path, engine.limits).duration_s
    except Exception:  # any unreadable header: only the ETA needs this
        return 0.0


def _write(target: Path, text: str) -> None:
    """Write through a temporary name so a half-written file never has the final name."""
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, target)

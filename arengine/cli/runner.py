"""`arengine recognize`: many files through one in-process engine, one output file per input.

Example::

    failures = recognize_files(engine, [Path("calls/")], "speech", FORMATS["csv"], Path("out"))
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from arengine.audio.validation import AudioLimits, probe
from arengine.cli.progress import Progress, make_progress
from arengine.engine.engine import Engine
from arengine.engine.job import Job
from arengine.errors import ArengineError, ErrorCode, InvalidInput, UnsupportedFormat
from arengine.models.recognizer import Overrides
from arengine.outputs.formats import Format
from arengine.types import Result

_ANY_SHAPE = AudioLimits(
    max_duration_s=float("inf"), max_channels=2**31, min_sample_rate=0, max_sample_rate=2**31
)
"""Limits that refuse nothing: sorting a folder only asks whether a file holds audio at all."""


@dataclass(frozen=True, slots=True)
class Failure:
    path: Path
    reason: str


def expand(inputs: Iterable[Path]) -> tuple[list[Path], list[Failure]]:
    """Files as given, and the files under each folder whose content is audio (recursively,
    sorted; extensions are not trusted), with the folder files skipped and why."""
    files: list[Path] = []
    skipped: list[Failure] = []
    for item in inputs:
        if not item.is_dir():
            files.append(item)
            continue
        for path in sorted(p for p in item.rglob("*") if p.is_file()):
            reason = not_audio(path)
            if reason is None:
                files.append(path)
            else:
                skipped.append(Failure(path, reason))
    return files, skipped


def not_audio(path: Path) -> str | None:
    """Why `path` holds no audio, or None if it does (or seems to: a damaged recording counts as
    audio, so that it is reported as a failure rather than skipped)."""
    try:
        probe(path, _ANY_SHAPE)
    except UnsupportedFormat as error:
        # A container whose codec is refused holds audio: reported as a failure, not skipped.
        return None if error.code == ErrorCode.UNSUPPORTED_CODEC else error.message
    except InvalidInput as error:
        codes = (ErrorCode.EMPTY_FILE, ErrorCode.NO_AUDIO_STREAM)
        return error.message if error.code in codes else None
    except (ArengineError, OSError):
        return None
    return None


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


def recognize_files(
    engine: Engine,
    files: list[Path],
    model: str,
    fmt: Format,
    out: Path,
    jobs: int = 4,
    stream: TextIO | None = None,
    every_s: float = 10.0,
    overrides: Overrides | None = None,
) -> list[Failure]:
    """Write `<out>/<stem>.<ext>` per file, `jobs` files at a time; returns the failed ones;
    `overrides`: post-processing parameters for every file.

    Progress goes to `stream` (stderr): bars on a terminal, lines otherwise (see `progress`).
    """
    out.mkdir(parents=True, exist_ok=True)
    durations = [_duration(engine, path) for path in files]
    progress = make_progress(len(files), sum(durations), stream or sys.stderr, every_s)
    failures: list[Failure] = []
    pending = iter(enumerate(zip(files, output_names(files, fmt), strict=True)))
    running: dict[Future[Result], tuple[Path, Path, Job | None]] = {}
    try:
        while True:
            for index, (path, name) in _take(pending, jobs - len(running)):
                future, job = _submit(engine, path, model, index, overrides or {})
                running[future] = (path, out / name, job)
                progress.started(path, durations[index])
            if not running:
                break
            done, _ = wait(running, timeout=0.25, return_when=FIRST_COMPLETED)
            for future in done:
                path, target, _ = running.pop(future)
                settle(future.result, path, target, fmt, progress, failures)
            for path, _, job in running.values():
                if job is not None:
                    progress.advanced(path, job.progress[0])
    finally:
        progress.close()
    return failures


def settle(
    outcome: Callable[[], Result],
    path: Path,
    target: Path,
    fmt: Format,
    progress: Progress,
    failures: list[Failure],
    reason_of: Callable[[Exception], str | None] = lambda error: None,
) -> None:
    """Write one finished file's output, or record its failure; `reason_of` names the errors of
    the caller's transport (None for an error it does not expect, which is raised)."""
    try:
        result = outcome()
        _write(target, fmt.encode(result, path.stem))
    except Exception as error:
        reason = _reason(error) or reason_of(error)
        if reason is None:
            raise
        failures.append(Failure(path, reason))
        progress.failed(path, reason)
    else:
        progress.finished(path, result, target)


def _reason(error: Exception) -> str | None:
    if isinstance(error, ArengineError):
        return error.message
    return str(error) if isinstance(error, OSError) else None


def _take(
    items: Iterator[tuple[int, tuple[Path, str]]], count: int
) -> list[tuple[int, tuple[Path, str]]]:
    return [item for _, item in zip(range(max(count, 0)), items, strict=False)]


def _submit(
    engine: Engine, path: Path, model: str, index: int, overrides: Overrides
) -> tuple[Future[Result], Job | None]:
    try:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        recognizers = engine.check(model, overrides)
        job = engine.recognize(path, recognizers, overrides, f"cli-{index}")
        return job.future, job
    except (ArengineError, OSError) as error:
        failed: Future[Result] = Future()
        failed.set_exception(error)
        return failed, None


def _duration(engine: Engine, path: Path) -> float:
    """The recording's length from its header, 0 when it cannot be read (it will fail later)."""
    try:
        return probe(path, engine.limits).duration_s
    except Exception:  # any unreadable header: only the ETA needs this
        return 0.0


def _write(target: Path, data: bytes) -> None:
    """Write through a temporary name so a half-written file never has the final name."""
    partial = target.with_name(f".{target.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, target)

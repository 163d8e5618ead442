"""`arengine recognize`: many files through one in-process engine, one output file per input
(the names, `--resume` and each file's end are `arengine_client.files`, shared with `--server`).

Example::

    files, skipped = expand([Path("calls/")])
    work = plan(files, FORMATS["csv"], Path("out"), folders=[Path("calls/")])
    failures = recognize_files(engine, work, "speech", FORMATS["csv"])
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from arengine.audio.validation import AudioLimits, probe
from arengine.engine.request import EngineRequest
from arengine.errors import ArengineError, ErrorCode, InvalidInput, UnsupportedFormat
from arengine.outputs.combined import TABLES, Part, combine
from arengine.outputs.formats import Format
from arengine.types import Result
from arengine_client.files import Failure, Planned, plan, remaining, settle, write_file
from arengine_client.progress import make_progress

if TYPE_CHECKING:  # the engine is handed in; `--server` runs use the rest without torch
    from arengine.kinds.base import Overrides
    from arengine.service.engine import Engine

__all__ = [
    "Failure",
    "Planned",
    "expand",
    "not_audio",
    "plan",
    "recognize_files",
    "remaining",
    "settle",
    "write_combined",
]

_ANY_SHAPE = AudioLimits(
    max_duration_s=float("inf"), max_channels=2**31, min_sample_rate=0, max_sample_rate=2**31
)
"""Limits that refuse nothing: sorting a folder only asks whether a file holds audio at all."""


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


def recognize_files(
    engine: Engine,
    work: Sequence[Planned],
    model: str,
    fmt: Format,
    concurrency: int = 4,
    stream: TextIO | None = None,
    every_s: float = 10.0,
    overrides: Overrides | None = None,
    gate: str | None = None,
) -> list[Failure]:
    """Write each file's output (`plan`), `concurrency` files at a time; returns the failed ones;
    `overrides`: post-processing parameters for every file; `gate`: a loudness model whose quiet
    segments the models skip.

    Progress goes to `stream` (stderr): bars on a terminal, lines otherwise (see `progress`).
    """
    durations = [_duration(engine, item.path) for item in work]
    progress = make_progress(len(work), sum(durations), stream or sys.stderr, every_s)
    failures: list[Failure] = []
    pending = iter(enumerate(work))
    running: dict[Future[Result], tuple[Planned, EngineRequest | None]] = {}
    try:
        while True:
            for index, item in itertools.islice(pending, max(concurrency - len(running), 0)):
                future, recognition = _submit(
                    engine, item.path, model, index, overrides or {}, gate
                )
                running[future] = (item, recognition)
                progress.started(item.path, durations[index])
            if not running:
                break
            done, _ = wait(running, timeout=0.25, return_when=FIRST_COMPLETED)
            for future in done:
                item, _ = running.pop(future)
                settle(future.result, item, fmt, progress, failures)
            for item, recognition in running.values():
                if recognition is not None:
                    progress.advanced(item.path, recognition.progress[0])
    finally:
        progress.close()
    return failures


def _submit(
    engine: Engine,
    path: Path,
    model: str,
    index: int,
    overrides: Overrides,
    gate: str | None = None,
) -> tuple[Future[Result], EngineRequest | None]:
    try:
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        recognizers = engine.check(model, overrides, gate)
        recognition = engine.recognize(path, recognizers, overrides, f"cli-{index}", gate=gate)
        return recognition.future, recognition
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


def write_combined(
    work: Sequence[Planned], fmt: Format, target: Path, failures: Sequence[Failure]
) -> int:
    """Write the combined table (`outputs.combined`) of every file of `work` whose output is
    there and did not fail in this run; the number of files in it."""
    failed = {failure.path for failure in failures}
    raven = TABLES[fmt.name].file_list  # Raven's timeline needs each file's length
    parts = [
        Part(item.path, item.target, _length(item.path) if raven else 0.0)
        for item in work
        if item.path not in failed and item.target.is_file()
    ]
    write_file(target, combine(fmt, parts).encode("utf-8"))
    return len(parts)


def _length(path: Path) -> float:
    try:
        return probe(path, _ANY_SHAPE).duration_s
    except (ArengineError, OSError):
        return 0.0

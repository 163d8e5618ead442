"""A batch's files: the output each input gets (`plan`), the ones left to do (`remaining`), and
each one's end, written or failed (`settle`); shared by `arengine recognize`'s two modes, in-process
and `--server`.

Example::

    work = plan([Path("calls/a.wav")], FORMATS["csv"], Path("out"), folders=[Path("calls/")])
    settle(lambda: result, work[0], FORMATS["csv"], progress, failures)
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Protocol

from arengine_client.errors import ArengineError
from arengine_client.progress import Progress
from arengine_client.types import Result


class OutputFormat(Protocol):
    """What a batch needs of an output format: the server's `Format`, or the client's stand-in
    that has the server write it (`remote.RenderedFormat`)."""

    @property
    def name(self) -> str: ...

    @property
    def extension(self) -> str: ...

    def encode(self, result: Result, source: str) -> bytes:
        """The file's bytes for `result` of the recording named `source` (its stem)."""
        ...


@dataclass(frozen=True, slots=True)
class Failure:
    path: Path
    reason: str


@dataclass(frozen=True, slots=True)
class Planned:
    """One input file and the output file it gets."""

    path: Path
    target: Path


def plan(
    files: Sequence[Path], fmt: OutputFormat, out: Path, folders: Sequence[Path] = ()
) -> list[Planned]:
    """Each file with its output under `out`, a name that depends only on the file and the inputs
    named (so `--resume` finds it again): a file under one of `folders` keeps its path under
    that folder (`x/a.wav` -> `<out>/x/a.<ext>`), one named directly goes in `out`; files that
    would share a name keep their extension (`a.wav.<ext>`, `a.mp3.<ext>`), and what still
    collides (one name in two folders named) gets `-2`, `-3`... in the order of the inputs.
    """
    places = [_place(path, folders) for path in files]
    stems = Counter(_key(place.with_suffix("")) for place in places)
    whole = Counter(_key(place) for place in places)
    names = [
        place
        if stems[_key(place.with_suffix(""))] > 1 and whole[_key(place)] == 1
        else place.with_suffix("")
        for place in places
    ]
    seen: Counter[str] = Counter()
    planned = []
    for path, name in zip(files, names, strict=True):
        seen[_key(name)] += 1
        count = seen[_key(name)]
        unique = name if count == 1 else name.with_name(f"{name.name}-{count}")
        planned.append(Planned(path, out / f"{unique}.{fmt.extension}"))
    return planned


def _place(path: Path, folders: Sequence[Path]) -> PurePath:
    """Where under the output folder a file's output goes, before its format's extension."""
    for folder in folders:
        if path.is_relative_to(folder):
            return path.relative_to(folder)
    return PurePath(path.name or "recording")


def _key(name: PurePath) -> str:
    """Names that are one file on a case-insensitive file system (macOS, Windows) are one."""
    return str(name).casefold()


def remaining(work: Sequence[Planned]) -> list[Planned]:
    """The files whose output is not there yet (`--resume`)."""
    return [item for item in work if not item.target.exists()]


def settle(
    outcome: Callable[[], Result],
    item: Planned,
    fmt: OutputFormat,
    progress: Progress,
    failures: list[Failure],
    reason_of: Callable[[Exception], str | None] = lambda error: None,
) -> None:
    """Write one finished file's output, or record its failure; `reason_of` names the errors of
    the caller's transport (None for an error it does not expect, which is raised)."""
    try:
        result = outcome()
        write_file(item.target, fmt.encode(result, item.path.stem))
    except Exception as error:
        reason = _reason(error) or reason_of(error)
        if reason is None:
            raise
        failures.append(Failure(item.path, reason))
        progress.failed(item.path, reason)
    else:
        progress.finished(item.path, result, item.target)


def _reason(error: Exception) -> str | None:
    if isinstance(error, ArengineError):
        return error.message
    return str(error) if isinstance(error, OSError) else None


def write_file(target: Path, data: bytes) -> None:
    """Write through a temporary name so a half-written file never has the final name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, target)


def report(failures: Sequence[Failure], work: Sequence[Planned]) -> int:
    """The failure report of both modes; the exit status."""
    if failures:
        print(f"arengine: {len(failures)} of {len(work)} files failed:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure.path}: {failure.reason}", file=sys.stderr)
        return 1
    return 0


def print_skipped(skipped: Sequence[Failure]) -> None:
    if skipped:
        print(f"arengine: skipped {len(skipped)} file(s) that hold no audio:", file=sys.stderr)
        for item in skipped:
            print(f"  {item.path}: {item.reason}", file=sys.stderr)

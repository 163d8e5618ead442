"""`arengine recognize`'s progress: bars on a terminal (tqdm), plain lines on a pipe or a file.

Both modes use it, in-process and `--server`; tqdm is optional here (`arengine-client[bars]`,
and a dependency of arengine): without it a terminal gets the lines too.

On a terminal: one bar per file being recognized, in audio seconds (it moves inside a long file,
with the real-time factor so far), and one overall bar in audio seconds with files done and ETA.
Elsewhere (a log, CI): one line per finished file, the overall line after it, and for a long file a
line every `every_s` seconds saying how far it is.

Example::

    progress = make_progress(files=3, total_audio_s=7300.0, stream=sys.stderr)
    progress.started(path, 7200.0)
    progress.advanced(path, 60.0)
    progress.finished(path, result, out)
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from arengine_client.types import Result


class Progress(Protocol):
    def started(self, path: Path, duration_s: float) -> None: ...
    def advanced(self, path: Path, done_s: float) -> None: ...
    def finished(self, path: Path, result: Result, out: Path) -> None: ...
    def failed(self, path: Path, reason: str) -> None: ...
    def close(self) -> None: ...


def make_progress(
    files: int, total_audio_s: float, stream: TextIO, every_s: float = 10.0
) -> Progress:
    """Bars when `stream` is a terminal (and tqdm is installed), lines otherwise."""
    if stream.isatty() and importlib.util.find_spec("tqdm") is not None:
        return Bars(files, total_audio_s, stream)
    return Lines(files, total_audio_s, stream, every_s=every_s)


def _rtf(wall_s: float, audio_s: float) -> str:
    return f"RTF {wall_s / audio_s:.3f}" if audio_s > 0 else "RTF -"


@dataclass
class _Counts:
    files: int
    total_audio_s: float
    began: float = field(default_factory=time.monotonic)
    done_files: int = 0
    failed_files: int = 0
    done_audio_s: float = 0.0
    file_began: dict[Path, float] = field(default_factory=dict)

    @property
    def settled(self) -> int:
        return self.done_files + self.failed_files

    def overall(self) -> str:
        elapsed = time.monotonic() - self.began
        # The total is what the headers said; a file may decode a little longer than its header.
        total = max(self.total_audio_s, self.done_audio_s)
        line = (
            f"overall: {self.settled}/{self.files} files, "
            f"{self.done_audio_s:.1f}/{total:.1f} s of audio, {elapsed:.1f} s"
        )
        if self.done_audio_s > 0:
            speed = self.done_audio_s / max(elapsed, 1e-9)
            eta = max(self.total_audio_s - self.done_audio_s, 0.0) / speed
            line += f", {_rtf(elapsed, self.done_audio_s)} ({speed:.1f}x real time)"
            line += f", ETA {eta:.0f} s"
        return line


class Lines:
    """Plain lines, for logs: nothing is redrawn."""

    def __init__(self, files: int, total_audio_s: float, stream: TextIO, every_s: float) -> None:
        self.counts = _Counts(files, total_audio_s)
        self.stream = stream
        self.every_s = every_s
        self._said: dict[Path, float] = {}

    def started(self, path: Path, duration_s: float) -> None:
        self.counts.file_began[path] = self._said[path] = time.monotonic()

    def advanced(self, path: Path, done_s: float) -> None:
        now = time.monotonic()
        if path not in self._said or now - self._said[path] < self.every_s or done_s <= 0:
            return
        self._said[path] = now
        wall = now - self.counts.file_began[path]
        self._write(f"{path}: {done_s:.1f} s of audio done, {_rtf(wall, done_s)}")

    def finished(self, path: Path, result: Result, out: Path) -> None:
        counts = self.counts
        counts.done_files += 1
        counts.done_audio_s += result.audio.duration_s
        audio, total = result.audio.duration_s, result.timings.total_s
        self._said.pop(path, None)
        self._write(
            f"[{counts.settled}/{counts.files}] {path}: {len(result.tags)} tags, "
            f"{audio:.1f} s of audio in {total:.2f} s ({_rtf(total, audio)}) -> {out}"
        )
        self._write(counts.overall())

    def failed(self, path: Path, reason: str) -> None:
        self.counts.failed_files += 1
        self._said.pop(path, None)
        self._write(f"[{self.counts.settled}/{self.counts.files}] {path}: FAILED: {reason}")
        self._write(self.counts.overall())

    def close(self) -> None:
        self.stream.flush()

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


class Bars:
    """tqdm bars: the overall one at the top, one per file being recognized below it."""

    def __init__(self, files: int, total_audio_s: float, stream: TextIO) -> None:
        from tqdm import tqdm

        self._tqdm = tqdm
        self.counts = _Counts(files, total_audio_s)
        self.stream = stream
        self.overall = self._bar("overall", total_audio_s, 0)
        self.overall.set_postfix_str(f"0/{files} files")
        self._bars: dict[Path, Any] = {}
        self._slots: dict[Path, int] = {}

    def _bar(self, name: str, total: float, position: int) -> Any:
        return self._tqdm(
            total=total,
            desc=name,
            unit="s",
            unit_scale=False,
            position=position,
            file=self.stream,
            dynamic_ncols=True,
            leave=position == 0,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s audio "
            "[{elapsed}<{remaining}{postfix}]",
        )

    def started(self, path: Path, duration_s: float) -> None:
        taken = set(self._slots.values())
        slot = next(i for i in range(1, len(taken) + 2) if i not in taken)
        self._slots[path] = slot
        name = path.name if len(path.name) <= 30 else path.name[:27] + "..."
        self._bars[path] = self._bar(name, duration_s, slot)
        self.counts.file_began[path] = time.monotonic()

    def advanced(self, path: Path, done_s: float) -> None:
        bar = self._bars.get(path)
        done_s = min(done_s, bar.total) if bar is not None else 0.0
        if bar is None or done_s <= bar.n:
            return
        bar.update(done_s - bar.n)
        wall = time.monotonic() - self.counts.file_began[path]
        bar.set_postfix_str(_rtf(wall, done_s), refresh=True)
        self._sync_overall()

    def _sync_overall(self) -> None:
        """The overall bar counts finished files and the part done of those running: its ETA
        moves inside a long file too."""
        done = self.counts.done_audio_s + sum(bar.n for bar in self._bars.values())
        done = min(done, self.overall.total)
        if done > self.overall.n:
            self.overall.update(done - self.overall.n)

    def finished(self, path: Path, result: Result, out: Path) -> None:
        self.counts.done_files += 1
        self.counts.done_audio_s += result.audio.duration_s
        self._end(path, f"{path}: {len(result.tags)} tags -> {out}")
        self._sync_overall()
        elapsed = time.monotonic() - self.counts.began
        self.overall.set_postfix_str(
            f"{self.counts.settled}/{self.counts.files} files, "
            f"{_rtf(elapsed, self.counts.done_audio_s)}"
        )

    def failed(self, path: Path, reason: str) -> None:
        self.counts.failed_files += 1
        self._end(path, f"{path}: FAILED: {reason}")
        self.overall.set_postfix_str(f"{self.counts.settled}/{self.counts.files} files")

    def _end(self, path: Path, message: str) -> None:
        bar = self._bars.pop(path, None)
        self._slots.pop(path, None)
        if bar is not None:
            bar.close()
        self._tqdm.write(message, file=self.stream)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self.overall.close()
        self.stream.write(self.counts.overall() + "\n")
        self.stream.flush()

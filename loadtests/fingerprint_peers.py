"""Other fingerprinters run through their own command lines, for side-by-side benchmarks.

Neither is a dependency: each is built from its public source in a throwaway folder and given
here by path. Both index WAV files of references named `r<id>.wav` and match query files, and
their answers become `Tag`s (reference id, query and reference times; neither reports a speed).

- Olaf (`JorenSix/Olaf`, its C core `bin/olaf_core` from `make compile_core`): reads raw 32-bit
  float mono at 16 kHz, so each file is resampled (soxr) to a `.raw` beside it first, not timed;
  its LMDB library lives under `$HOME/.olaf/db/`, so `HOME` is a folder of the benchmark's. It
  prints `count, query start, query stop, reference name, reference id, reference start,
  reference stop` per match; since no line names its query, each query is a command of its own.
- audfprint (`dpwe/audfprint`, its own interpreter with numpy, scipy, docopt, joblib, psutil):
  its defaults (density 20, fan-out 3), up to five matches per query with their time range.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf
import soxr

from arengine.types import Extra, Tag

OLAF_RATE = 16000
_OLAF_LINE = re.compile(
    r"^(\d+), (-?[\d.]+), (-?[\d.]+), \S*?r(\d+)\.wav, \d+, (-?[\d.]+), (-?[\d.]+)$",
    re.MULTILINE,
)
_OLAF_TIME = re.compile(r"^Matched \d+ fp's from .*? in ([\d.]+)s ", re.MULTILINE)
_AUDFPRINT_TIME = re.compile(r"^Processed \d+ files .*? in ([\d.]+) s sec", re.MULTILINE)
_AUDFPRINT_LINE = re.compile(
    r"^Matched +([\d.]+) s starting at +([\d.]+) s in (.+?) to time +(-?[\d.]+) s in "
    r"\S*?r(\d+)\.wav with +(\d+) of",
    re.MULTILINE,
)


def reference_name(reference: int) -> str:
    """The file name of the reference with library id `reference`: its id is read back from it."""
    return f"r{reference}.wav"


def olaf_tags(output: str) -> list[Tag]:
    """Olaf's result lines for one query (they name the reference, not the query)."""
    return [
        Tag(
            float(start),
            float(stop),
            f"r{reference}",
            float(count),
            extra=Extra(
                reference=reference, reference_start=float(ref_start), reference_end=float(ref_stop)
            ),
        )
        for count, start, stop, reference, ref_start, ref_stop in _OLAF_LINE.findall(output)
    ]


def audfprint_tags(output: str) -> dict[str, list[Tag]]:
    """audfprint's `--find-time-range` result lines per query file."""
    tags: dict[str, list[Tag]] = {}
    for length, start, query, ref_start, reference, count in _AUDFPRINT_LINE.findall(output):
        tags.setdefault(query, []).append(
            Tag(
                float(start),
                float(start) + float(length),
                f"r{reference}",
                float(count),
                extra=Extra(
                    reference=reference,
                    reference_start=float(ref_start),
                    reference_end=float(ref_start) + float(length),
                ),
            )
        )
    return tags


def own_seconds(output: str) -> float:
    """The time a peer reports for its work: Olaf's CPU seconds of each query's processing (its
    start and library opening not counted), audfprint's CPU seconds of its command after its
    imports (its library's loading counted)."""
    return sum(float(t) for t in _OLAF_TIME.findall(output) + _AUDFPRINT_TIME.findall(output))


@dataclass(frozen=True)
class Matched:
    tags: dict[str, list[Tag]]
    """Per query file's path (as given)."""
    seconds: float
    """The commands' wall time, their process start and library load included."""
    own_seconds: float
    """The time the commands report for their work (`own_seconds`)."""


class Olaf:
    name = "olaf"

    def __init__(self, binary: Path, folder: Path) -> None:
        self.binary, self.home = binary, folder / "olaf-home"
        shutil.rmtree(self.home, ignore_errors=True)  # a new library, as audfprint's `new`
        (self.home / ".olaf" / "db").mkdir(parents=True, exist_ok=True)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "HOME": str(self.home)}
        command = [str(self.binary), *args]
        return subprocess.run(command, check=True, capture_output=True, text=True,
                              env=environment)  # fmt: skip

    def _pairs(self, files: list[Path]) -> list[str]:
        """`raw, name` per file, each raw written beside its WAV."""
        pairs = []
        for path in files:
            samples, rate = sf.read(path, dtype="float32")
            raw = path.with_suffix(".raw")
            soxr.resample(samples, rate, OLAF_RATE).astype("<f4").tofile(raw)
            pairs += [str(raw), str(path)]
        return pairs

    def index(self, files: list[Path]) -> float:
        """Stores `files` (named by `reference_name`); the seconds it took."""
        pairs = self._pairs(files)
        started = time.perf_counter()
        self._run("store", *pairs)
        return time.perf_counter() - started

    def size(self) -> int:
        return (self.home / ".olaf" / "db" / "data.mdb").stat().st_size

    def match(self, files: list[Path]) -> Matched:
        pairs = self._pairs(files)
        tags, seconds, own = {}, 0.0, 0.0
        for raw, path in zip(pairs[::2], pairs[1::2], strict=True):
            started = time.perf_counter()
            done = self._run("query", raw, path)
            seconds += time.perf_counter() - started
            tags[path], own = olaf_tags(done.stdout), own + own_seconds(done.stderr)
        return Matched(tags, seconds, own)


class Audfprint:
    name = "audfprint"

    def __init__(self, checkout: Path, python: Path, folder: Path) -> None:
        self.tool = [str(python), str(checkout / "audfprint.py")]
        self.database = folder / "audfprint.pklz"

    def index(self, files: list[Path]) -> float:
        started = time.perf_counter()
        command = [*self.tool, "new", "--dbase", str(self.database), *map(str, files)]
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - started

    def size(self) -> int:
        return self.database.stat().st_size

    def match(self, files: list[Path], matches: int = 5) -> Matched:
        started = time.perf_counter()
        output = subprocess.run(
            [*self.tool, "match", "--dbase", str(self.database), "--max-matches", str(matches),
             "--find-time-range", *map(str, files)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        seconds = time.perf_counter() - started
        return Matched(audfprint_tags(output), seconds, own_seconds(output))


Peer = Olaf | Audfprint

"""`outputs.combined`: a folder run's tables as one, each row naming its recording."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from arengine.outputs.combined import TABLES, Part, combine
from arengine.outputs.formats import FORMATS
from arengine.types import AudioInfo, Extra, Result, Tag, Timings

BIRDS = (
    Tag(0.0, 3.0, "American Robin", 0.8123, extra=Extra(scientific_name="Turdus migratorius")),
    Tag(6.0, 9.0, "=Northern Cardinal", 0.41, extra=Extra(scientific_name="Cardinalis cardinalis")),
)
SPEECH = (Tag(1.5, 2.0, "speech", 0.9),)


def _parts(tmp_path: Path, name: str, results: list[tuple[str, tuple[Tag, ...]]]) -> list[Part]:
    fmt = FORMATS[name]
    parts = []
    for recording, tags in results:
        result = Result("m", AudioInfo("WAV", "PCM_16", 48000, 1, 48000 * 10), tags, _TIMINGS)
        output = tmp_path / "out" / f"{Path(recording).with_suffix('')}.{fmt.extension}"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(fmt.encode(result, Path(recording).stem))
        parts.append(Part(tmp_path / recording, output, 10.0))
    return parts


_TIMINGS = Timings(0.0, 0.0, 0.0, 0.0, 0.0)


def test_csv_rows_of_every_file_with_the_union_of_columns(tmp_path: Path) -> None:
    parts = _parts(tmp_path, "csv", [("a.wav", SPEECH), ("b.wav", BIRDS), ("c.wav", ())])
    text = combine(FORMATS["csv"], parts)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["start", "end", "label", "score", "scientific_name", "file"]
    assert [(row["label"], row["scientific_name"], row["file"]) for row in rows] == [
        ("speech", "", str(tmp_path / "a.wav")),
        ("American Robin", "Turdus migratorius", str(tmp_path / "b.wav")),
        ("'=Northern Cardinal", "Cardinalis cardinalis", str(tmp_path / "b.wav")),
    ]
    assert FORMATS["csv"].parse(text) == [*SPEECH, *BIRDS]  # the combined table reads as one


def test_birdnet_file_column_holds_the_full_path(tmp_path: Path) -> None:
    parts = _parts(tmp_path, "birdnet", [("x/a.wav", BIRDS), ("y/a.wav", BIRDS[:1])])
    rows = list(csv.DictReader(io.StringIO(combine(FORMATS["birdnet"], parts))))
    assert [row["File"] for row in rows] == [str(tmp_path / "x/a.wav")] * 2 + [
        str(tmp_path / "y/a.wav")
    ]
    assert list(rows[0])[:6] == [
        "Start (s)", "End (s)", "Scientific name", "Common name", "Confidence", "File",
    ]  # fmt: skip


def test_kaleidoscope_names_the_folder_and_the_file(tmp_path: Path) -> None:
    parts = _parts(tmp_path, "kaleidoscope", [("site1/=a.wav", BIRDS[:1])])
    (row,) = csv.DictReader(io.StringIO(combine(FORMATS["kaleidoscope"], parts)))
    assert (row["INDIR"], row["IN FILE"]) == (str(tmp_path / "site1"), "'=a.wav")


def test_raven_is_one_timeline_over_the_files_in_turn(tmp_path: Path) -> None:
    parts = _parts(tmp_path, "raven", [("a.wav", BIRDS), ("b.wav", BIRDS)])
    text = combine(FORMATS["raven"], parts)
    rows = list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
    assert [row["Selection"] for row in rows] == ["1", "2", "3", "4"]
    assert [float(row["Begin Time (s)"]) for row in rows] == [0.0, 6.0, 10.0, 16.0]
    assert [float(row["End Time (s)"]) for row in rows] == [3.0, 9.0, 13.0, 19.0]
    assert [float(row["File Offset (s)"]) for row in rows] == [0.0, 6.0, 0.0, 6.0]
    assert [row["Begin Path"] for row in rows] == [str(tmp_path / f"{n}.wav") for n in "aabb"]
    assert len(FORMATS["raven"].parse(text)) == 4


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_files_is_a_header(tmp_path: Path, name: str) -> None:
    assert combine(FORMATS[name], []).count("\n") == 1

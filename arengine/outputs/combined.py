"""One table for a folder run: every file's rows with the recording they came from, as
BirdNET-Analyzer's combined results (`--combine_results`).

It is built from the output files written, so a resumed run's earlier outputs count too, for the
formats that are tables with a header: `csv`, `birdnet`, `kaleidoscope` and `raven`. Files whose
tables have different columns (one with bird tags, one without) share the union of them.

Example::

    part = Part(Path("site1/a.wav"), Path("out/site1/a.BirdNET.results.csv"), 3600.0)
    text = combine(FORMATS["birdnet"], [part])  # the rows, `File` the recording's full path
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from arengine.outputs.formats import Format, csv_text, text_cell


@dataclass(frozen=True, slots=True)
class Table:
    """How a format's table names the recording its rows came from."""

    delimiter: str
    file_column: str
    """The recording's full path, or its name where `folder_column` holds the folder; added
    after the format's own columns when the format has none."""
    folder_column: str | None = None
    file_list: bool = False
    """Raven's combined table is one timeline over the files in turn: begin and end times count
    from the first file's start, `File Offset (s)` from the row's own file's (as
    BirdNET-Analyzer's combined selection table)."""


TABLES = {
    "csv": Table(",", "file"),
    "birdnet": Table(",", "File"),
    "kaleidoscope": Table(",", "IN FILE", folder_column="INDIR"),
    "raven": Table("\t", "Begin Path", file_list=True),
}
"""The formats a folder run can combine."""


@dataclass(frozen=True, slots=True)
class Part:
    """One recording's table in the combined one."""

    recording: Path
    output: Path
    duration_s: float
    """Where the next file starts on Raven's timeline."""


def combine(fmt: Format, parts: Sequence[Part]) -> str:
    """The combined table of `parts` (in order) in `fmt`; `KeyError` for a format not in TABLES."""
    table = TABLES[fmt.name]
    columns: list[str] = []
    rows: list[dict[str, str]] = []
    offset = 0.0
    for part in parts:
        reader = _reader(part.output.read_text(encoding="utf-8"), table)
        columns += [name for name in reader.fieldnames or () if name not in columns]
        for row in reader:
            rows.append(_placed(row, part, table, offset))
        offset += part.duration_s
    columns += [name for name in _added(table) if name not in columns]
    if table.file_list:
        for number, row in enumerate(rows, 1):
            row["Selection"] = str(number)
    cells = [[row.get(name, "") for name in columns] for row in rows]
    if table.delimiter == "\t":
        return "".join("\t".join(line) + "\n" for line in [columns, *cells])
    return csv_text([columns, *cells])


def _reader(text: str, table: Table) -> csv.DictReader[str]:
    if table.delimiter == "\t":  # Raven's cells are never quoted
        return csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    return csv.DictReader(io.StringIO(text))


def _added(table: Table) -> list[str]:
    extra = [table.file_column] + ([table.folder_column] if table.folder_column else [])
    return extra + (["File Offset (s)"] if table.file_list else [])


def _cell(text: str, table: Table) -> str:
    if table.delimiter == "\t":
        return re.sub(r"[\t\r\n]+", " ", text)
    return text_cell(text)


def _placed(row: dict[str, str], part: Part, table: Table, offset: float) -> dict[str, str]:
    """`row` naming its recording (and, on Raven's timeline, moved by `offset`)."""
    path = part.recording.resolve()
    if table.folder_column is None:
        row[table.file_column] = _cell(str(path), table)
    else:
        row[table.file_column] = _cell(path.name, table)
        row[table.folder_column] = _cell(str(path.parent), table)
    if table.file_list:
        begin, end = float(row["Begin Time (s)"]), float(row["End Time (s)"])
        row["File Offset (s)"] = f"{begin:.6f}"
        row["Begin Time (s)"] = f"{begin + offset:.6f}"
        row["End Time (s)"] = f"{end + offset:.6f}"
    return row

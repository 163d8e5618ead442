"""Output formats of a result, shared by the CLI, the HTTP API and the page, and their parsers.

Each `Format` is declared once below (name, aliases, media type, extension, what it holds); it
renders a `Result` to text (or bytes, for MIDI) and parses that back to tags (for round-trips and
for tools that read what arengine wrote). Times keep the precision the format allows.

Example::

    data = FORMATS["csv"].encode(result, "talk")  # bytes; `render` gives text (bytes for MIDI)
    tags = FORMATS["csv"].parse(data)  # the result's tags, to the format's precision
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from arengine.kinds.fields import Role, TagField
from arengine.outputs.annotations import (
    parse_eaf,
    parse_jams,
    parse_textgrid,
    render_eaf,
    render_jams,
    render_textgrid,
)
from arengine.outputs.columns import (
    CSV_FIELDS,
    CSV_TEXT,
    RAVEN_FIELDS,
    RAVEN_TEXT,
    role_extra,
    role_of,
    used,
)
from arengine.outputs.midi import midi_number, parse_midi, render_midi
from arengine.types import Extra, Result, Tag, result_dict, result_of, tag_of

Content = str | bytes


@dataclass(frozen=True, slots=True)
class Format:
    """One output format: its name, media type, file extension, writer and parser."""

    name: str
    media_type: str
    extension: str
    render: Callable[[Result, str], Content]
    """`render(result, source_name)`: the source name is used where a format names its file."""
    parse: Callable[[Content], list[Tag]]
    precision_s: float
    """How close a parsed time is to the written one."""
    description: str
    """What the file holds, for the README, `--help` and the page."""
    aliases: tuple[str, ...] = ()
    """Other names users type for it (`audacity` for `txt`)."""
    notes_only: bool = False
    """It holds only pitched notes: refused for models whose labels are not note names."""
    binary: bool = False
    """`render` returns bytes."""

    def text(self, result: Result, source: str) -> str:
        """The file's text; `TypeError` for a binary format (use `encode`)."""
        content = self.render(result, source)
        if isinstance(content, bytes):
            raise TypeError(f"format {self.name} is binary: use encode()")
        return content

    def encode(self, result: Result, source: str) -> bytes:
        """The file's bytes (text formats in UTF-8)."""
        content = self.render(result, source)
        return content if isinstance(content, bytes) else content.encode("utf-8")

    def accepts(self, labels: tuple[str, ...] | list[str]) -> bool:
        """Whether a model with these labels has anything this format can hold."""
        return not self.notes_only or all(midi_number(label) is not None for label in labels)


def _text(parse: Callable[[str], list[Tag]]) -> Callable[[Content], list[Tag]]:
    def read(content: Content) -> list[Tag]:
        return parse(content.decode("utf-8") if isinstance(content, bytes) else content)

    return read


def _binary(parse: Callable[[bytes], list[Tag]]) -> Callable[[Content], list[Tag]]:
    def read(content: Content) -> list[Tag]:
        if isinstance(content, str):
            raise TypeError("a binary format is parsed from bytes")
        return parse(content)

    return read


def _render_json(result: Result, source: str) -> str:
    return json.dumps(result_dict(result))


def _parse_json(text: str) -> list[Tag]:
    return list(result_of(json.loads(text)).tags)


def _wall_clock(result: Result) -> Callable[[float], str] | None:
    """The wall-clock time `seconds` into the recording, ISO 8601 to the millisecond (with the
    file's UTC offset where it gives one), when the result knows `audio.recorded_at`."""
    if result.audio.recorded_at is None:
        return None
    latest = max([result.audio.duration_s, *(tag.end for tag in result.tags)])
    try:
        start = datetime.fromisoformat(result.audio.recorded_at)
        start + timedelta(seconds=latest)
    except (ValueError, OverflowError):
        # A time whose tags run past the last date (9999-12-31), or not a time: the engine
        # refuses such a file's time with a warning, but a result sent to `/v1/render` may
        # hold one. No wall clock then, as for a file that states no time.
        return None
    return lambda seconds: (start + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


class _Rows:
    """A CSV writer whose lines end in `\n` and which quotes a cell holding `\r` too (the csv
    module quotes only the characters of its own line terminator)."""

    def __init__(self, out: io.StringIO) -> None:
        self._out, self._line = out, io.StringIO()
        self._writer = csv.writer(self._line, lineterminator="\r\n")

    def writerow(self, row: Sequence[object]) -> None:
        self._line.seek(0)
        self._line.truncate()
        self._writer.writerow(row)
        self._out.write(self._line.getvalue()[:-2] + "\n")


_MODEL = "model"
"""The CSV's column of `Tag.model`, after the kinds' own (`columns.CSV_FIELDS`)."""


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """`rows` as the CSV formats write them (lines end in `\n`, a cell holding `\r` quoted)."""
    out = io.StringIO()
    writer = _Rows(out)
    for row in rows:
        writer.writerow(row)
    return out.getvalue()


def _render_csv(result: Result, source: str) -> str:
    out = io.StringIO()
    writer = _Rows(out)
    fields = used(CSV_FIELDS, result.tags)
    model = any(tag.model is not None for tag in result.tags)
    clock = _wall_clock(result)
    writer.writerow(
        ["start", "end", "label", "score", *(f.name for f in fields)]
        + ([_MODEL] if model else [])
        + (["start_at", "end_at"] if clock else [])
    )
    for tag in result.tags:
        row: list[object] = [tag.start, tag.end, _inert(tag.label), tag.score]
        for declared in fields:
            value = declared.of(tag)
            row.append("" if value is None else _inert(value) if declared.text else value)
        if model:
            row.append("" if tag.model is None else _inert(tag.model))
        if clock:
            row += [clock(tag.start), clock(tag.end)]
        writer.writerow(row)
    return out.getvalue()


_FORMULA_START = tuple("=+-@\t\r'")
"""What makes a spreadsheet run a cell as a formula (OWASP's list), and the quote that marks a
cell as text."""


def _inert(cell: str) -> str:
    """A text cell a spreadsheet shows as text: a leading `'` where it would start a formula
    (also before a leading `'`, so that reading drops exactly one)."""
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def text_cell(cell: str) -> str:
    """A text cell as the CSV formats write it: a spreadsheet shows it as text, never runs it."""
    return _inert(cell)


def _read_inert(cell: str) -> str:
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(_FORMULA_START) else cell


def _parse_csv(text: str) -> list[Tag]:
    tags = []
    for row in csv.DictReader(io.StringIO(text)):
        item: dict[str, object] = {name: row.get(name) for name in ("start", "end", "score")}
        item["label"] = _read_inert(row.get("label") or "")
        item[_MODEL] = _read_inert(row.get(_MODEL) or "")
        for declared in CSV_FIELDS:
            cell = row.get(declared.name) or ""
            item[declared.name] = declared.cell(_read_inert(cell) if declared.text else cell)
        tags.append(tag_of(item))  # the other columns (`start_at`) are not the tag's
    return tags


def _clean(label: str) -> str:
    """A label safe inside a tab- or space-separated line."""
    return re.sub(r"\s+", "_", label.strip()) or "_"


_LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every character `str.splitlines` ends a line at."""


def _render_audacity(result: Result, source: str) -> str:
    return "".join(f"{t.start:.6f}\t{t.end:.6f}\t{_audacity_label(t.label)}\n" for t in result.tags)


def _audacity_label(label: str) -> str:
    """One cell: a tab would start another column where a spreadsheet opens the file (and there
    a formula, from `x\t=1+1`), a line break another label."""
    return _inert(_LINE_BREAKS.sub(" ", label).replace("\t", " "))


def _parse_audacity(text: str) -> list[Tag]:
    tags = []
    for line in text.splitlines():
        # Audacity writes a `\t<low>\t<high>` line under a spectral label: skip it.
        if not line.strip() or line.startswith("\\"):
            continue
        start, end, label = [*line.split("\t", 2), ""][:3]
        tags.append(Tag(float(start), float(end), _read_inert(label), 0.0))
    return tags


_RAVEN_COLUMNS = [
    "Selection",
    "View",
    "Channel",
    "Begin Time (s)",
    "End Time (s)",
    "Low Freq (Hz)",
    "High Freq (Hz)",
    "Annotation",
    "Score",
]
_QUARTER_TONE = 2 ** (1 / 24)


def _render_raven(result: Result, source: str) -> str:
    nyquist = result.audio.sample_rate / 2
    fields = used(RAVEN_FIELDS, result.tags)
    # BirdNET's tables put the species beside the annotation; the other kinds' columns follow
    # the date columns, as they did before the kinds declared them.
    species = [f for f in fields if f.role is Role.SPECIES]
    later = [f for f in fields if f.role is not Role.SPECIES]
    clock = _wall_clock(result)
    lines = [
        "\t".join(
            _RAVEN_COLUMNS
            + [str(f.raven) for f in species]
            + (["Begin Date Time", "End Date Time"] if clock else [])
            + [str(f.raven) for f in later]
        )
    ]
    for index, tag in enumerate(result.tags, 1):
        low, high = 0.0, nyquist
        hz = role_of(tag, Role.PITCH_HZ)
        if hz is not None:  # a note: the band a quarter-tone around its pitch
            low, high = hz / _QUARTER_TONE, hz * _QUARTER_TONE
        cells = [index, "Spectrogram 1", 1, f"{tag.start:.6f}", f"{tag.end:.6f}"]
        # Tab-separated: a label keeps its spaces ("American Robin", as BirdNET writes it).
        # Made inert after the trimming: trimmed, an inert " =1+1" would be a formula again.
        label = _inert(_raven_text(tag.label) or "_")
        cells += [f"{low:.3f}", f"{high:.3f}", label, f"{tag.score:.6f}"]
        cells += [_raven_cell(f, f.of(tag)) for f in species]
        cells += [clock(tag.start), clock(tag.end)] if clock else []
        cells += [_raven_cell(f, f.of(tag)) for f in later]
        lines.append("\t".join(str(cell) for cell in cells))
    return "\n".join(lines) + "\n"


def _raven_cell(declared: TagField[Any], value: Any) -> str:
    """A kind field's Raven cell: text trimmed to one cell and inert, a number to the µs."""
    if value is None:
        return ""
    if declared.text:
        return _inert(_raven_text(value))
    return f"{value:.6f}" if declared.type is float else str(value)


def _parse_raven(text: str) -> list[Tag]:
    rows = csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    return [
        Tag(
            float(row["Begin Time (s)"]),
            float(row["End Time (s)"]),
            _read_inert(row.get("Annotation") or ""),
            float(row.get("Score") or 0.0),
            extra=Extra({f.name: _raven_value(f, row.get(str(f.raven))) for f in RAVEN_FIELDS}),
        )
        for row in rows
    ]


def _raven_value(declared: TagField[Any], cell: str | None) -> Any:
    text = cell or ""
    return declared.cell(_read_inert(text) if declared.text else text)


def _raven_text(text: str) -> str:
    """A text cell of a tab-separated line: tabs and line breaks as spaces."""
    return re.sub(r"[\t\r\n]+", " ", text).strip()


_BIRDNET_COLUMNS = ["Start (s)", "End (s)", "Scientific name", "Common name", "Confidence", "File"]
"""BirdNET-Analyzer's CSV (`--rtype csv`), column for column."""


def _render_birdnet(result: Result, source: str) -> str:
    out = io.StringIO()
    writer = _Rows(out)
    clock = _wall_clock(result)
    writer.writerow(_BIRDNET_COLUMNS + (["Start Date Time", "End Date Time"] if clock else []))
    for tag in result.tags:
        names = [_inert(role_of(tag, Role.SPECIES) or ""), _inert(tag.label)]
        times = [clock(tag.start), clock(tag.end)] if clock else []
        writer.writerow([tag.start, tag.end, *names, tag.score, _inert(source), *times])
    return out.getvalue()


def _parse_birdnet(text: str) -> list[Tag]:
    return [
        Tag(
            float(row["Start (s)"]),
            float(row["End (s)"]),
            _read_inert(row["Common name"]),
            float(row["Confidence"]),
            extra=role_extra((Role.SPECIES, _read_inert(row["Scientific name"]) or None)),
        )
        for row in csv.DictReader(io.StringIO(text))
    ]


_KALEIDOSCOPE_COLUMNS = ["INDIR", "FOLDER", "IN FILE", "OFFSET", "DURATION", "scientific_name",
                         "common_name", "confidence"]  # fmt: skip
"""Kaleidoscope's columns as BirdNET-Analyzer writes them (`--rtype kaleidoscope`)."""


def _render_kaleidoscope(result: Result, source: str) -> str:
    folder, _, name = source.rpartition("/")
    out = io.StringIO()
    writer = _Rows(out)
    # Kaleidoscope's DATE, TIME and HOUR are the recording's start (OFFSET counts from it).
    begun = _wall_clock(result)
    date = begun(0.0) if begun else None
    writer.writerow(_KALEIDOSCOPE_COLUMNS + (["DATE", "TIME", "HOUR"] if date else []))
    for tag in result.tags:
        duration = round(tag.end - tag.start, 6)
        names = [_inert(role_of(tag, Role.SPECIES) or ""), _inert(tag.label)]
        row = [_inert(folder), "", _inert(name), tag.start, duration, *names, tag.score]
        if date:
            row += [date[:10], date[11:19], int(date[11:13])]
        writer.writerow(row)
    return out.getvalue()


def _parse_kaleidoscope(text: str) -> list[Tag]:
    return [
        Tag(
            float(row["OFFSET"]),
            float(row["OFFSET"]) + float(row["DURATION"]),
            _read_inert(row["common_name"]),
            float(row["confidence"]),
            extra=role_extra((Role.SPECIES, _read_inert(row["scientific_name"]) or None)),
        )
        for row in csv.DictReader(io.StringIO(text))
    ]


def _render_rttm(result: Result, source: str) -> str:
    name = _clean(source)
    return "".join(
        f"SPEAKER {name} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> {_clean(t.label)} "
        "<NA> <NA>\n"
        for t in result.tags
    )


def _parse_rttm(text: str) -> list[Tag]:
    tags = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[0] != "SPEAKER":
            continue
        start, duration = float(fields[3]), float(fields[4])
        tags.append(Tag(start, round(start + duration, 3), fields[7], 0.0))
    return tags


def _clock(seconds: float, separator: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    return f"{hours:02d}:{minutes:02d}:{millis // 1000:02d}{separator}{millis % 1000:03d}"


def _cues(result: Result, separator: str) -> list[str]:
    return [
        f"{index}\n{_clock(t.start, separator)} --> {_clock(t.end, separator)}\n{_cue_text(t)}\n"
        for index, t in enumerate(result.tags, 1)
    ]


def _cue_text(tag: Tag) -> str:
    """One line; `<`, `>` and `&` as entities, so no tag, entity or `-->` comes from a label."""
    label = html.escape(" ".join(tag.label.split()) or "_", quote=False)
    return f"{label} ({tag.score:.2f})"


def _render_vtt(result: Result, source: str) -> str:
    return "\n".join(["WEBVTT\n", *_cues(result, ".")])


def _render_srt(result: Result, source: str) -> str:
    return "\n".join(_cues(result, ","))


_TIMING = re.compile(r"(\d+):(\d\d):(\d\d)[.,](\d{3})\s+-->\s+(\d+):(\d\d):(\d\d)[.,](\d{3})")
_CUE_TEXT = re.compile(r"^(.*) \((\d+(?:\.\d+)?)\)$")


def _seconds(hours: str, minutes: str, seconds: str, millis: str) -> float:
    return int(hours) * 3600 + int(minutes) * 60 + int(seconds) + int(millis) / 1000


def _parse_cues(text: str) -> list[Tag]:
    tags = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines = block.strip().splitlines()
        for at, line in enumerate(lines):
            timing = _TIMING.match(line)
            if timing is None:
                continue
            parts = timing.groups()
            body = " ".join(lines[at + 1 :])
            match = _CUE_TEXT.match(body)
            label, score = (match.group(1), float(match.group(2))) if match else (body, 0.0)
            label = html.unescape(label)
            tags.append(Tag(_seconds(*parts[:4]), _seconds(*parts[4:]), label, score))
            break
    return tags


_DECLARED = (
    Format("json", "application/json", "json", _render_json, _text(_parse_json), 1e-9,
           "the JSON body of the API"),
    Format("csv", "text/csv", "csv", _render_csv, _text(_parse_csv), 1e-9,
           f"`start,end,label,score`, plus {CSV_TEXT}, `model` for several models and "
           "`start_at,end_at` (wall clock, ISO 8601) when the recording's time is known"),
    Format("txt", "text/plain", "txt", _render_audacity, _text(_parse_audacity), 1e-6,
           "Audacity label track: `start<TAB>end<TAB>label`", aliases=("audacity",)),
    Format("raven", "text/tab-separated-values", "selections.txt", _render_raven,
           _text(_parse_raven), 1e-6,
           "Raven selection table (a note's band is a quarter-tone around its pitch; other tags "
           f"span 0 to Nyquist; {RAVEN_TEXT}; a known recording time adds `Begin Date Time`, "
           "`End Date Time` before the columns of all but the species)",
           aliases=("selections",)),
    Format("birdnet", "text/csv", "BirdNET.results.csv", _render_birdnet,
           _text(_parse_birdnet), 1e-9,
           "BirdNET-Analyzer's CSV: `Start (s),End (s),Scientific name,Common name,Confidence,"
           "File`, plus `Start Date Time,End Date Time` when the recording's time is known"),
    Format("kaleidoscope", "text/csv", "kaleidoscope.csv", _render_kaleidoscope,
           _text(_parse_kaleidoscope), 1e-6,
           "Kaleidoscope CSV as BirdNET-Analyzer writes it: `INDIR,FOLDER,IN FILE,OFFSET,"
           "DURATION,scientific_name,common_name,confidence`, plus `DATE,TIME,HOUR` (the "
           "recording's start) when known"),
    Format("rttm", "text/x-rttm", "rttm", _render_rttm, _text(_parse_rttm), 2e-3,
           "RTTM: `SPEAKER <file> 1 <start> <duration> <NA> <NA> <label> <NA> <NA>`"),
    Format("vtt", "text/vtt", "vtt", _render_vtt, _text(_parse_cues), 1e-3,
           "WebVTT, one cue per tag: `label (score)`", aliases=("webvtt",)),
    Format("srt", "application/x-subrip", "srt", _render_srt, _text(_parse_cues), 1e-3,
           "SubRip, likewise", aliases=("subrip",)),
    Format("textgrid", "text/x-praat-textgrid", "TextGrid", render_textgrid,
           _text(parse_textgrid), 1e-9,
           "Praat TextGrid (long form): one interval tier per label", aliases=("praat",)),
    Format("eaf", "text/x-eaf+xml", "eaf", render_eaf, _text(parse_eaf), 5e-4,
           "ELAN annotation document: one tier per label, milliseconds", aliases=("elan",)),
    Format("jams", "application/vnd.jams+json", "jams", render_jams, _text(parse_jams), 1e-9,
           "JAMS: one `note_midi` annotation for notes, else `tag_open`"),
    Format("midi", "audio/midi", "mid", render_midi, _binary(parse_midi), 5e-4,
           "Standard MIDI file, one track: velocity from the score, pitch bends where the pitch "
           "is off the note (note models only)", aliases=("mid",), notes_only=True,
           binary=True),
)  # fmt: skip
FORMATS: dict[str, Format] = {f.name: f for f in _DECLARED}
"""Every format by name; `json` is the default everywhere."""
ALIASES: dict[str, str] = {alias: f.name for f in _DECLARED for alias in f.aliases}
"""Other names users type, each to its format's name."""
FORMAT_NAMES = (*FORMATS, *ALIASES)
"""Every name `format` takes (besides `ndjson`)."""


STREAM = "ndjson"
"""Not a file format: the HTTP API's tag stream, one JSON object per line."""
STREAM_MEDIA_TYPE = "application/x-ndjson"


def get_format(name: str) -> Format:
    """The format called `name`; `ValueError` listing the known ones otherwise."""
    try:
        return FORMATS[ALIASES.get(name, name)]
    except KeyError:
        raise ValueError(f"unknown format {name!r}; known formats: {known_formats()}") from None


def known_formats() -> str:
    """The format names for messages and help: `txt (audacity), ..., ndjson`."""
    names = [f"{f.name} ({', '.join(f.aliases)})" if f.aliases else f.name for f in _DECLARED]
    return ", ".join([*names, STREAM])


def negotiate(accept: str | None) -> str | None:
    """The name of the first format (or `ndjson`) an `Accept` header names, or None."""
    by_type: dict[str, str] = {}
    for f in FORMATS.values():  # several CSVs: `text/csv` is the first declared, arengine's own
        by_type.setdefault(f.media_type, f.name)
    by_type["text/x-audacity-labels"] = "txt"
    by_type[STREAM_MEDIA_TYPE] = STREAM
    for item in (accept or "").split(","):
        media_type = item.split(";", 1)[0].strip().lower()
        if media_type in by_type:
            return by_type[media_type]
    return None

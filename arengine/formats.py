"""Output formats of a result, shared by the CLI and the HTTP API, and their parsers.

Each `Format` renders a `Result` to text and parses that text back to tags (for round-trips and
for tools that read what arengine wrote). Times keep the precision the format allows.

Example::

    text = FORMATS["csv"].render(result, "talk")
    tags = FORMATS["csv"].parse(text)  # the result's tags, to the format's precision
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arengine.types import Result, Tag, result_dict


@dataclass(frozen=True, slots=True)
class Format:
    """One output format: its name, media type, file extension, writer and parser."""

    name: str
    media_type: str
    extension: str
    render: Callable[[Result, str], str]
    """`render(result, source_name)`: the source name is used where a format names its file."""
    parse: Callable[[str], list[Tag]]
    precision_s: float
    """How close a parsed time is to the written one."""


def _tag_of(item: dict[str, Any]) -> Tag:
    frequency = item.get("frequency_hz")
    return Tag(
        start=float(item["start"]),
        end=float(item["end"]),
        label=str(item["label"]),
        score=float(item.get("score", 0.0)),
        frequency_hz=None if frequency in (None, "") else float(frequency),
    )


def _render_json(result: Result, source: str) -> str:
    return json.dumps(result_dict(result))


def _parse_json(text: str) -> list[Tag]:
    return [_tag_of(item) for item in json.loads(text)["tags"]]


def _has_pitch(result: Result) -> bool:
    return any(tag.frequency_hz is not None for tag in result.tags)


def _render_csv(result: Result, source: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    pitch = _has_pitch(result)
    writer.writerow(["start", "end", "label", "score", *(["frequency_hz"] if pitch else [])])
    for tag in result.tags:
        row: list[object] = [tag.start, tag.end, tag.label, tag.score]
        if pitch:
            row.append("" if tag.frequency_hz is None else tag.frequency_hz)
        writer.writerow(row)
    return out.getvalue()


def _parse_csv(text: str) -> list[Tag]:
    return [_tag_of(row) for row in csv.DictReader(io.StringIO(text))]


def _clean(label: str) -> str:
    """A label safe inside a tab- or space-separated line."""
    return re.sub(r"\s+", "_", label.strip()) or "_"


def _render_audacity(result: Result, source: str) -> str:
    return "".join(f"{t.start:.6f}\t{t.end:.6f}\t{t.label}\n" for t in result.tags)


def _parse_audacity(text: str) -> list[Tag]:
    tags = []
    for line in text.splitlines():
        # Audacity writes a `\t<low>\t<high>` line under a spectral label: skip it.
        if not line.strip() or line.startswith("\\"):
            continue
        start, end, label = [*line.split("\t", 2), ""][:3]
        tags.append(Tag(float(start), float(end), label, 0.0))
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
    lines = ["\t".join(_RAVEN_COLUMNS)]
    for index, tag in enumerate(result.tags, 1):
        low, high = 0.0, nyquist
        if tag.frequency_hz is not None:  # a note: the band a quarter-tone around its pitch
            low, high = tag.frequency_hz / _QUARTER_TONE, tag.frequency_hz * _QUARTER_TONE
        cells = [index, "Spectrogram 1", 1, f"{tag.start:.6f}", f"{tag.end:.6f}"]
        cells += [f"{low:.3f}", f"{high:.3f}", _clean(tag.label), f"{tag.score:.6f}"]
        lines.append("\t".join(str(cell) for cell in cells))
    return "\n".join(lines) + "\n"


def _parse_raven(text: str) -> list[Tag]:
    rows = csv.DictReader(io.StringIO(text), delimiter="\t")
    return [
        Tag(
            float(row["Begin Time (s)"]),
            float(row["End Time (s)"]),
            row.get("Annotation") or "",
            float(row.get("Score") or 0.0),
        )
        for row in rows
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
    label = " ".join(tag.label.split()) or "_"
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
            tags.append(Tag(_seconds(*parts[:4]), _seconds(*parts[4:]), label, score))
            break
    return tags


FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        Format("json", "application/json", "json", _render_json, _parse_json, 1e-9),
        Format("csv", "text/csv", "csv", _render_csv, _parse_csv, 1e-9),
        Format("txt", "text/plain", "txt", _render_audacity, _parse_audacity, 1e-6),
        Format(
            "raven",
            "text/tab-separated-values",
            "selections.txt",
            _render_raven,
            _parse_raven,
            1e-6,
        ),
        Format("rttm", "text/x-rttm", "rttm", _render_rttm, _parse_rttm, 2e-3),
        Format("vtt", "text/vtt", "vtt", _render_vtt, _parse_cues, 1e-3),
        Format("srt", "application/x-subrip", "srt", _render_srt, _parse_cues, 1e-3),
    ]
}
"""Every format by name; `json` is the default everywhere."""


STREAM = "ndjson"
"""Not a file format: the HTTP API's tag stream, one JSON object per line."""
STREAM_MEDIA_TYPE = "application/x-ndjson"


def get_format(name: str) -> Format:
    """The format called `name`; `ValueError` listing the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        known = ", ".join([*FORMATS, STREAM])
        raise ValueError(f"unknown format {name!r}; known formats: {known}") from None


def negotiate(accept: str | None) -> str | None:
    """The name of the first format (or `ndjson`) an `Accept` header names, or None."""
    by_type = {f.media_type: f.name for f in FORMATS.values()}
    by_type["text/x-audacity-labels"] = "txt"
    by_type[STREAM_MEDIA_TYPE] = STREAM
    for item in (accept or "").split(","):
        media_type = item.split(";", 1)[0].strip().lower()
        if media_type in by_type:
            return by_type[media_type]
    return None

"""Tags in the annotation formats of speech research, linguistics and music information retrieval:
Praat TextGrid (written and read by `praatio`), ELAN EAF (`pympi-ling`) and JAMS.

TextGrid and EAF tiers cannot hold overlapping intervals, so each label gets its own tier and a
tag that overlaps an earlier one of its label goes to a further tier (`A4 (2)`); every tier's name
is its own, even where a label reads like a further tier's.

JAMS is written as plain JSON in its schema: the `jams` package pulls pandas, scipy and mir_eval
into the server only to serialise a dict, and it warns under the current jsonschema; the tests
load and validate what is written here with `jams` itself.

Example, with a `Result` of two speech tags::

    text = render_textgrid(result, "talk")
    labels = [t.label for t in parse_textgrid(text)]  # ['speech', 'speech']
"""

from __future__ import annotations

import heapq
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from praatio import textgrid
from praatio.utilities.constants import Interval
from pympi import Elan

from arengine.kinds.fields import Role
from arengine.kinds.notation import note_name
from arengine.outputs.columns import role_extra, role_of
from arengine.outputs.midi import fractional_midi, midi_number
from arengine.types import Result, Tag

JAMS_VERSION = "0.3.5"


def _tiers(tags: tuple[Tag, ...]) -> dict[str, list[Tag]]:
    """Tags grouped into tiers with no overlap inside a tier: each tag (in start order) goes to
    the first of its label's tiers free at its start. Per label, a heap of the busy tiers by
    end and one of the free tiers by number: n log n, where trying every tier was quadratic."""
    tiers: dict[tuple[str, int], list[Tag]] = {}
    busy: dict[str, list[tuple[float, int]]] = {}
    free: dict[str, list[int]] = {}
    for tag in sorted(tags, key=lambda t: t.start):
        label = " ".join(_xml_text(tag.label).split()) or "_"  # a name is one line
        ends, available = busy.setdefault(label, []), free.setdefault(label, [])
        while ends and ends[0][0] <= tag.start:
            heapq.heappush(available, heapq.heappop(ends)[1])
        count = heapq.heappop(available) if available else len(ends) + 1
        heapq.heappush(ends, (tag.end, count))
        tiers.setdefault((label, count), []).append(tag)
    return _named(tiers)


def _named(tiers: dict[tuple[str, int], list[Tag]]) -> dict[str, list[Tag]]:
    """Each tier by a name of its own: its label, then `label (2)`, `label (3)`... for the
    further ones. A label may itself read `A (2)`: the names of real labels are taken first and
    a further tier that would reuse one gets `A (2.2)` instead (Praat refused the file, ELAN
    merged the two tiers)."""
    used = {label for label, count in tiers if count == 1}
    named: dict[str, list[Tag]] = {}
    for (label, count), tags in tiers.items():
        name, again = (label, 1) if count == 1 else (f"{label} ({count})", 1)
        while count > 1 and name in used:
            again += 1
            name = f"{label} ({count}.{again})"
        used.add(name)
        named[name] = tags
    return named


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """`text` with the characters XML 1.0 cannot hold (control characters, lone surrogates)
    replaced by U+FFFD, so ELAN and Praat can open the file."""
    return _NOT_XML.sub("\ufffd", text)


def _end(result: Result) -> float:
    return max([result.audio.duration_s, *(tag.end for tag in result.tags)])


def render_textgrid(result: Result, source: str) -> str:
    """A long-form TextGrid: one interval tier per label, the gaps as empty intervals."""
    grid = textgrid.Textgrid(minTimestamp=0.0, maxTimestamp=_end(result))
    for name, tags in _tiers(result.tags).items():
        entries = [Interval(t.start, t.end, _xml_text(t.label)) for t in tags if t.end > t.start]
        grid.addTier(textgrid.IntervalTier(name, entries, 0.0, _end(result)))
    with tempfile.TemporaryDirectory() as folder:  # praatio writes files only
        path = Path(folder) / "out.TextGrid"
        grid.save(str(path), format="long_textgrid", includeBlankSpaces=True)
        return path.read_text(encoding="utf-8")


def parse_textgrid(text: str) -> list[Tag]:
    """The labelled intervals of every interval tier, in time order (TextGrid keeps no score)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "in.TextGrid"
        path.write_text(text, encoding="utf-8")
        grid = textgrid.openTextgrid(str(path), includeEmptyIntervals=False)
    tags = [
        Tag(entry.start, entry.end, entry.label, 0.0)
        for tier in grid.tiers
        if isinstance(tier, textgrid.IntervalTier)
        for entry in tier.entries
        if entry.label
    ]
    return sorted(tags, key=lambda t: (t.start, t.end))


def render_eaf(result: Result, source: str) -> str:
    """An ELAN annotation document: one tier per label, times in milliseconds."""
    eaf = Elan.Eaf(author="arengine")
    eaf.remove_tier("default")
    for name, tags in _tiers(result.tags).items():
        eaf.add_tier(name)
        for tag in tags:
            start = round(tag.start * 1000)
            end = max(round(tag.end * 1000), start + 1)
            eaf.add_annotation(name, start, end, _xml_text(tag.label))
    text: str = Elan.to_string(eaf)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + text


def parse_eaf(text: str) -> list[Tag]:
    """The annotations of every aligned tier, in time order (EAF keeps no score)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "in.eaf"
        path.write_text(text, encoding="utf-8")
        eaf = Elan.Eaf(str(path))
    tags = [
        Tag(start / 1000, end / 1000, value, 0.0)
        for tier in eaf.get_tier_names()
        for start, end, value, *_ in eaf.get_annotation_data_for_tier(tier)
    ]
    return sorted(tags, key=lambda t: (t.start, t.end))


def _note_number(tag: Tag) -> float | None:
    """Fractional MIDI number: from the measured frequency (`Role.PITCH_HZ`), else the model's
    MIDI number (`Role.MIDI_NOTE`), else the label's note name; None for a tag with no pitch."""
    frequency, number = role_of(tag, Role.PITCH_HZ), role_of(tag, Role.MIDI_NOTE)
    if frequency:
        return fractional_midi(frequency)
    return float(number) if number is not None else midi_number(tag.label)


def _is_note(tag: Tag) -> bool:
    return _note_number(tag) is not None


def _observation(tag: Tag, note: bool) -> dict[str, Any]:
    value: Any = _note_number(tag) if note else tag.label
    return {
        "time": tag.start,
        "duration": round(tag.end - tag.start, 9),
        "value": value,
        "confidence": tag.score,
    }


def render_jams(result: Result, source: str) -> str:
    """One annotation: `note_midi` (fractional MIDI numbers) for notes, else `tag_open`."""
    note = bool(result.tags) and all(_is_note(tag) for tag in result.tags)
    duration = _end(result)
    annotation = {
        "annotation_metadata": {
            "curator": {"name": "", "email": ""},
            "annotator": {"name": "arengine", "model": result.model},
            "version": "",
            "corpus": "",
            "annotation_tools": "arengine",
            "annotation_rules": "",
            "validation": "",
            "data_source": "automatic",
        },
        "namespace": "note_midi" if note else "tag_open",
        "data": [_observation(tag, note) for tag in result.tags],
        "sandbox": {},
        "time": 0,
        "duration": duration,
    }
    metadata = {"title": source, "artist": "", "release": "", "duration": duration}
    metadata |= {"identifiers": {}, "jams_version": JAMS_VERSION}
    return json.dumps({"annotations": [annotation], "file_metadata": metadata, "sandbox": {}})


def parse_jams(text: str) -> list[Tag]:
    """The observations of `note_midi` and `tag_*` annotations, in time order."""
    tags = []
    for annotation in json.loads(text)["annotations"]:
        note = annotation["namespace"] in ("note_midi", "pitch_midi")
        for item in annotation["data"]:
            start, end = item["time"], item["time"] + item["duration"]
            score = float(item.get("confidence") or 0.0)
            if note:
                value = float(item["value"])
                frequency = round(440 * 2 ** ((value - 69) / 12), 2)
                extra = role_extra((Role.PITCH_HZ, frequency))
                tags.append(Tag(start, end, note_name(round(value)), score, extra=extra))
            else:
                tags.append(Tag(start, end, str(item["value"]), score))
    return sorted(tags, key=lambda t: (t.start, t.end))

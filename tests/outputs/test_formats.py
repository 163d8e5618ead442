"""Output formats: each writes a result and parses it back to the same tags."""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import re
from xml.etree import ElementTree

import mido
import pytest

from arengine.http.schemas import RecognizeResponse
from arengine.kinds.birds.fields import SCIENTIFIC_NAME
from arengine.kinds.events.fields import LABEL_ID
from arengine.kinds.fingerprint.fields import (
    PITCH,
    REFERENCE,
    REFERENCE_END,
    REFERENCE_START,
    SPEED,
)
from arengine.kinds.notes.fields import MIDI, PITCH_BEND
from arengine.kinds.pitch.fields import FREQUENCY_HZ
from arengine.outputs.annotations import _tiers
from arengine.outputs.formats import FORMATS, get_format, negotiate
from arengine.types import AudioInfo, Extra, Result, Tag, Timings, result_dict

SPEECH = (
    Tag(0.034, 2.59, "speech", 0.9683),
    Tag(3.3333337, 7.25, "speech", 0.71234),
    Tag(3599.9994, 3723.5, "speech", 0.5),
)
NOTES = (
    Tag(0.5, 0.75, "A4", 0.9, extra=Extra(frequency_hz=440.0)),
    Tag(1.0, 1.5, "C#5", 0.8, extra=Extra(frequency_hz=554.37)),
)
BIRDS = (
    Tag(0.0, 3.0, "American Robin", 0.8123, extra=Extra(scientific_name="Turdus migratorius")),
    Tag(3.0, 9.0, "Northern Cardinal", 0.41, extra=Extra(scientific_name="Cardinalis cardinalis")),
)
KNOWN = (
    Tag(2.0, 12.0, "Station ident", 0.41,
        extra=Extra(reference="3", reference_start=0.0, reference_end=10.0)),
    Tag(14.5, 20.25, "=Promo, spring", 0.2,
        extra=Extra(reference="12", reference_start=1.5, reference_end=7.25)),
)  # fmt: skip
EVENTS = (
    Tag(0.0, 0.96, "Speech", 0.8, extra=Extra(label_id="/m/09x0r")),
    Tag(1.0, 2.0, "Dog", 0.5),
)
POLYPHONIC = (
    Tag(0.5, 0.6, "C4", 0.7, extra=Extra(midi=60, pitch_bend=(0.0, 1.0, -1.0))),
    Tag(0.5, 1.2, "E4", 0.6, extra=Extra(midi=64)),
)


def _result(tags: tuple[Tag, ...], model: str = "speech") -> Result:
    timings = Timings(0.0011111111, 0.02, 0.03, 0.004, 0.05)
    return Result(model, AudioInfo("FLAC", "PCM_16", 44100, 2, 44100 * 3724), tags, timings)


def _midi_of(tag: Tag) -> int | None:
    if MIDI.of(tag) is not None or FREQUENCY_HZ.of(tag) is None:
        return MIDI.of(tag)
    return round(69 + 12 * math.log2(FREQUENCY_HZ.at(tag) / 440))


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize(
    "tags",
    [SPEECH, NOTES, POLYPHONIC, BIRDS, KNOWN, EVENTS, ()],
    ids=["speech", "pitch", "notes", "birds", "fingerprint", "events", "empty"],
)
def test_round_trip(name: str, tags: tuple[Tag, ...]) -> None:
    fmt = FORMATS[name]
    if fmt.notes_only and tags in (SPEECH, BIRDS, KNOWN, EVENTS):
        assert fmt.parse(fmt.encode(_result(tags), "talk")) == []  # nothing it can hold
        return
    parsed = fmt.parse(fmt.encode(_result(tags), "my talk.flac"))
    assert len(parsed) == len(tags)
    for got, want in zip(parsed, tags, strict=True):
        assert got.start == pytest.approx(want.start, abs=fmt.precision_s)
        assert got.end == pytest.approx(want.end, abs=fmt.precision_s)
        # RTTM is space-separated: a label's spaces become underscores.
        assert got.label == (want.label.replace(" ", "_") if name == "rttm" else want.label)
        if name in ("json", "csv", "raven", "jams", "birdnet", "kaleidoscope"):
            assert got.score == pytest.approx(want.score, abs=1e-6)
        if name in ("json", "csv", "raven", "birdnet", "kaleidoscope"):
            assert SCIENTIFIC_NAME.of(got) == SCIENTIFIC_NAME.of(want)
        if name in ("json", "csv", "raven"):
            assert (
                REFERENCE.of(got),
                REFERENCE_START.of(got),
                REFERENCE_END.of(got),
            ) == (
                REFERENCE.of(want),
                REFERENCE_START.of(want),
                REFERENCE_END.of(want),
            )
        if name in ("json", "csv"):
            assert LABEL_ID.of(got) == LABEL_ID.of(want)
        if name in ("vtt", "srt"):
            assert got.score == pytest.approx(want.score, abs=0.005)
        if name in ("json", "csv", "jams", "midi") and FREQUENCY_HZ.of(want) is not None:
            assert FREQUENCY_HZ.of(got) == FREQUENCY_HZ.of(want)
        if name in ("jams", "midi") and MIDI.of(want) is not None:
            assert _midi_of(got) == MIDI.of(want)  # a note keeps its pitch, as a number or in Hz
        if name == "midi":
            assert got.score == pytest.approx(want.score, abs=1 / 127)
        if name == "json":
            assert (MIDI.of(got), PITCH_BEND.of(got)) == (
                MIDI.of(want),
                PITCH_BEND.of(want),
            )


def test_birdnet_analyzers_own_columns() -> None:
    result = _result(BIRDS, model="birds")
    assert FORMATS["birdnet"].text(result, "site1/20250501_053000.wav").splitlines() == [
        "Start (s),End (s),Scientific name,Common name,Confidence,File",
        "0.0,3.0,Turdus migratorius,American Robin,0.8123,site1/20250501_053000.wav",
        "3.0,9.0,Cardinalis cardinalis,Northern Cardinal,0.41,site1/20250501_053000.wav",
    ]
    assert FORMATS["kaleidoscope"].text(result, "site1/20250501_053000.wav").splitlines()[:2] == [
        "INDIR,FOLDER,IN FILE,OFFSET,DURATION,scientific_name,common_name,confidence",
        "site1,,20250501_053000.wav,0.0,3.0,Turdus migratorius,American Robin,0.8123",
    ]
    raven = FORMATS["raven"].text(result, "x").splitlines()
    assert raven[0].split("\t")[-1] == "Scientific Name"
    assert raven[1].split("\t")[-3:] == ["American Robin", "0.812300", "Turdus migratorius"]


def test_fingerprint_tags_name_their_reference_in_tables() -> None:
    result = _result(KNOWN, model="jingles")
    assert FORMATS["csv"].text(result, "x").splitlines() == [
        "start,end,label,score,reference,reference_start,reference_end",
        "2.0,12.0,Station ident,0.41,3,0.0,10.0",
        '14.5,20.25,"\'=Promo, spring",0.2,12,1.5,7.25',
    ]
    raven = FORMATS["raven"].text(result, "x").splitlines()
    assert raven[0].split("\t")[-3:] == ["Reference", "Reference Begin (s)", "Reference End (s)"]
    assert raven[1].split("\t")[-3:] == ["3", "0.000000", "10.000000"]
    events = FORMATS["csv"].text(_result(EVENTS, model="events"), "x").splitlines()
    assert events == ["start,end,label,score,label_id", "0.0,0.96,Speech,0.8,/m/09x0r",
                      "1.0,2.0,Dog,0.5,"]  # fmt: skip


def test_fingerprint_tags_say_the_speed_and_pitch_they_were_played_at() -> None:
    fast = Tag(
        2.0,
        11.5,
        "Station ident",
        0.3,
        extra=Extra(
            reference="3", reference_start=0.0, reference_end=10.0, speed=1.0512, pitch=1.0498
        ),
    )
    result = _result((fast,), model="jingles")
    assert FORMATS["csv"].text(result, "x").splitlines() == [
        "start,end,label,score,reference,reference_start,reference_end,speed,pitch",
        "2.0,11.5,Station ident,0.3,3,0.0,10.0,1.0512,1.0498",
    ]
    for name in ("json", "csv"):
        [got] = FORMATS[name].parse(FORMATS[name].encode(result, "x"))
        assert (SPEED.of(got), PITCH.of(got)) == (1.0512, 1.0498)
    http = RecognizeResponse.of(result).model_dump(exclude_none=True)
    assert http == result_dict(result)


def test_json_is_the_http_body() -> None:
    for tags in (SPEECH, NOTES, POLYPHONIC, BIRDS):
        result = _result(tags)
        http = RecognizeResponse.of(result).model_dump(exclude_none=True)
        assert json.loads(FORMATS["json"].text(result, "x")) == http == result_dict(result)


def test_exact_text_of_each_format() -> None:
    result = _result(SPEECH[:1])
    assert FORMATS["csv"].text(result, "x") == "start,end,label,score\n0.034,2.59,speech,0.9683\n"
    assert FORMATS["txt"].text(result, "x") == "0.034000\t2.590000\tspeech\n"
    assert FORMATS["rttm"].text(result, "my talk") == (
        "SPEAKER my_talk 1 0.034 2.556 <NA> <NA> speech <NA> <NA>\n"
    )
    assert FORMATS["vtt"].text(result, "x") == (
        "WEBVTT\n\n1\n00:00:00.034 --> 00:00:02.590\nspeech (0.97)\n"
    )
    assert FORMATS["srt"].text(result, "x") == "1\n00:00:00,034 --> 00:00:02,590\nspeech (0.97)\n"
    raven = FORMATS["raven"].text(result, "x").splitlines()
    assert raven[0].split("\t")[:8] == [
        "Selection",
        "View",
        "Channel",
        "Begin Time (s)",
        "End Time (s)",
        "Low Freq (Hz)",
        "High Freq (Hz)",
        "Annotation",
    ]
    assert raven[1].split("\t")[:8] == [
        "1",
        "Spectrogram 1",
        "1",
        "0.034000",
        "2.590000",
        "0.000",
        "22050.000",
        "speech",
    ]


def test_cue_times_past_an_hour() -> None:
    text = FORMATS["srt"].text(_result(SPEECH), "x")
    assert "00:59:59,999 --> 01:02:03,500" in text


def test_pitch_columns() -> None:
    result = _result(NOTES, "pitch")
    assert FORMATS["csv"].text(result, "x").splitlines()[0] == "start,end,label,score,frequency_hz"
    low, high = FORMATS["raven"].text(result, "x").splitlines()[1].split("\t")[5:7]
    assert float(low) < 440 < float(high) < 466


def test_unknown_format_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as raised:
        get_format("xml")
    assert str(raised.value).endswith(
        "known formats: json, csv, txt (audacity), raven (selections), birdnet, kaleidoscope, "
        "rttm, vtt (webvtt), "
        "srt (subrip), textgrid (praat), eaf (elan), jams, midi (mid), ndjson"
    )


def test_text_of_a_binary_format_is_refused() -> None:
    with pytest.raises(TypeError, match="midi is binary"):
        FORMATS["midi"].text(_result(NOTES), "x")
    assert FORMATS["midi"].encode(_result(NOTES), "x").startswith(b"MThd")


def test_aliases_name_their_format() -> None:
    assert get_format("audacity") is FORMATS["txt"]
    assert get_format("praat") is FORMATS["textgrid"] and get_format("elan") is FORMATS["eaf"]
    names = [*FORMATS, *(a for f in FORMATS.values() for a in f.aliases)]
    assert len(names) == len(set(names)), "an alias shadows a name"


def test_accept_header_negotiation() -> None:
    assert negotiate("text/csv") == "csv"
    assert negotiate("text/html, text/vtt;q=0.9") == "vtt"
    assert negotiate("application/x-subrip") == "srt"
    assert negotiate("application/x-ndjson") == "ndjson"
    assert negotiate("*/*") is None
    assert negotiate(None) is None


HOSTILE = [
    "two\nrows",
    "carriage\rreturn",
    "crlf\r\n0.0\t9.0\tforged",
    '=HYPERLINK("http://x","y")',
    "+1",
    "-2+3",
    "@SUM(A1)",
    "'=quoted",
    "x --> y",
    "00:00:01.000 --> 00:00:02.000",
    "<b>bold</b> &amp; &",
    "control\x00\x01\x07\x1b\x7f",
    "tab\there",
    '"quoted',
    "line\u2028separator",
]


def _reading(name: str, label: str) -> str:
    """What each format can keep of a label: the same text, less what it cannot hold."""
    if name == "rttm":
        return re.sub(r"\s+", "_", label.strip())
    if name == "raven":  # tab-separated lines: spaces stay, as BirdNET's tables have them
        return re.sub(r"[\t\r\n]+", " ", label).strip() or "_"
    if name in ("vtt", "srt"):
        return " ".join(label.split())
    if name == "txt":  # one cell: a tab would start a column where a spreadsheet opens it
        return re.sub("[\t\r\n\u2028]", " ", label)
    if name in ("eaf", "textgrid"):
        text = re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f]", "\ufffd", label)
        return text.replace("\r\n", "\n").replace("\r", "\n")  # as the readers normalise
    return label


@pytest.mark.parametrize("name", sorted(n for n, f in FORMATS.items() if not f.notes_only))
def test_a_hostile_label_reads_back_as_one_label(name: str) -> None:
    """A label is data: newlines, cue arrows, markup, control characters and formula starts
    round-trip through the format's own reader as one label, between untouched neighbours."""
    fmt = FORMATS[name]
    for label in HOSTILE:
        tags = (
            Tag(0.5, 1.0, "before", 0.5),
            Tag(1.0, 2.0, label, 0.6),
            Tag(2.5, 3.0, "after", 0.7),
        )
        parsed = fmt.parse(fmt.encode(_result(tags), "talk"))
        assert [t.label for t in parsed] == ["before", _reading(name, label), "after"], label
        assert [t.start for t in parsed] == pytest.approx([0.5, 1.0, 2.5], abs=fmt.precision_s)


def test_no_csv_cell_starts_a_formula() -> None:
    tags = tuple(Tag(0.0, 1.0, label, 0.5, model=label) for label in HOSTILE)
    text = FORMATS["csv"].text(_result(tags), "x")
    for row in list(csv.reader(io.StringIO(text)))[1:]:
        assert not row[2].startswith(("=", "+", "-", "@")), row
        assert not row[4].startswith(("=", "+", "-", "@")), row


@pytest.mark.parametrize("name", ["birdnet", "kaleidoscope"])
def test_no_cell_of_the_bird_csvs_starts_a_formula(name: str) -> None:
    tags = tuple(Tag(0.0, 1.0, label, 0.5, extra=Extra(scientific_name=label)) for label in HOSTILE)
    text = FORMATS[name].text(_result(tags), "=cmd|x/-y.wav")
    for row in list(csv.reader(io.StringIO(text)))[1:]:
        assert not any(cell.startswith(("=", "+", "@")) for cell in row), row
        assert [cell for cell in row if cell.startswith("-")] == [], row


def test_cue_text_holds_no_markup_or_arrow() -> None:
    tags = tuple(Tag(float(i), i + 0.5, label, 0.5) for i, label in enumerate(HOSTILE))
    for name in ("vtt", "srt"):
        text = FORMATS[name].text(_result(tags), "x")
        assert text.count("-->") == len(HOSTILE), name  # one per cue timing, none from a label
        assert "<b>" not in text and "& " not in text


def test_eaf_of_control_characters_is_xml_elan_can_open() -> None:
    text = FORMATS["eaf"].text(_result((Tag(0.0, 1.0, "a\x01b\x1b", 0.5),)), "x")
    root = ElementTree.fromstring(text.encode("utf-8"))  # raises on characters XML forbids
    assert root.find(".//ANNOTATION_VALUE") is not None


def test_midi_bridges_gaps_past_four_byte_delta_times() -> None:
    """A note 80 hours in: no delta time may pass 0x0FFFFFFF ticks (4 bytes), so the gap is
    bridged by empty markers and the note keeps its time."""
    late = (Tag(288_000.0, 288_001.0, "A4", 0.9, extra=Extra(midi=69)),)
    data = FORMATS["midi"].encode(_result(late, "notes"), "x")
    track = mido.MidiFile(file=io.BytesIO(data)).tracks[0]
    assert max(message.time for message in track) <= 0x0FFFFFFF
    [note] = FORMATS["midi"].parse(data)
    assert (note.start, note.end, note.label) == (288_000.0, 288_001.0, "A4")


def test_overlapping_tags_of_one_label_fill_the_first_free_tier() -> None:
    """Ten thousand overlapping tags of one label: each in the first tier free at its start,
    no overlap inside a tier (it tried every tier for every tag: quadratic)."""
    tags = tuple(Tag(i * 0.01, i * 0.01 + 1.0, "x", 0.5) for i in range(10_000))
    tiers = _tiers(tags)
    assert len(tiers) == 101
    for tier in tiers.values():
        assert all(a.end <= b.start for a, b in itertools.pairwise(tier))
    assert [t.start for t in tiers["x"][:3]] == [0.0, 1.0, 2.0]


def _recorded(tags: tuple[Tag, ...], at: str | None) -> Result:
    result = _result(tags, model="birds")
    return dataclasses.replace(result, audio=dataclasses.replace(result.audio, recorded_at=at))


def test_the_recordings_wall_clock_time_in_the_table_formats() -> None:
    result = _recorded(BIRDS, "2025-05-01T05:30:00+01:00")
    rows = list(csv.DictReader(io.StringIO(FORMATS["csv"].text(result, "x"))))
    assert [(row["start_at"], row["end_at"]) for row in rows] == [
        ("2025-05-01T05:30:00.000+01:00", "2025-05-01T05:30:03.000+01:00"),
        ("2025-05-01T05:30:03.000+01:00", "2025-05-01T05:30:09.000+01:00"),
    ]
    birdnet = list(csv.DictReader(io.StringIO(FORMATS["birdnet"].text(result, "x"))))
    assert birdnet[1]["Start Date Time"] == "2025-05-01T05:30:03.000+01:00"
    assert birdnet[1]["End Date Time"] == "2025-05-01T05:30:09.000+01:00"
    raven = FORMATS["raven"].text(result, "x")
    selections = list(csv.DictReader(io.StringIO(raven), delimiter="\t"))
    assert selections[0]["Begin Date Time"] == "2025-05-01T05:30:00.000+01:00"
    assert selections[1]["End Date Time"] == "2025-05-01T05:30:09.000+01:00"
    naive = _recorded(BIRDS, "2025-12-31T23:59:58.500000")  # the recorder's own clock: no zone
    kaleidoscope = FORMATS["kaleidoscope"].text(naive, "site1/a.wav")
    rows = list(csv.DictReader(io.StringIO(kaleidoscope)))
    assert [(row["DATE"], row["TIME"], row["HOUR"]) for row in rows] == [
        ("2025-12-31", "23:59:58", "23")
    ] * 2
    late = list(csv.DictReader(io.StringIO(FORMATS["csv"].text(naive, "x"))))
    assert late[1]["end_at"] == "2026-01-01T00:00:07.500"  # over midnight and the year
    for name in ("csv", "birdnet", "raven", "kaleidoscope"):
        assert FORMATS[name].parse(FORMATS[name].encode(result, "x")) == list(BIRDS)


def test_no_wall_clock_columns_when_the_time_is_unknown() -> None:
    result = _recorded(BIRDS, None)
    for name in ("csv", "birdnet", "raven", "kaleidoscope"):
        header = FORMATS[name].text(result, "x").splitlines()[0]
        assert not re.search("_at|Date|DATE", header), (name, header)


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59", "9999-12-31T23:59:59+01:00", "not a time"])
def test_a_time_no_tag_s_wall_clock_can_follow_gives_no_wall_clock(at: str) -> None:
    """A result sent to `/v1/render` may hold a time whose tags run past the last date: every
    format is written, without the wall clock (the table formats answered 500)."""
    result = _recorded(BIRDS, at)
    for name, fmt in FORMATS.items():
        if fmt.accepts([t.label for t in result.tags]):
            assert fmt.encode(result, "x"), name
    for name in ("csv", "birdnet", "raven", "kaleidoscope"):
        header = FORMATS[name].text(result, "x").splitlines()[0]
        assert not re.search("_at|Date|DATE", header), (name, header)


@pytest.mark.parametrize("name", ["textgrid", "eaf"])
def test_a_label_that_reads_like_a_further_tier_keeps_its_own_tier(name: str) -> None:
    """`A` twice overlapping and a label `A (2)`: TextGrid answered 500 (two tiers of one
    name), EAF put `A (2)`'s tag in the tier of A's second one."""
    tags = (
        Tag(0.0, 2.0, "A", 0.5),
        Tag(1.0, 3.0, "A", 0.5),
        Tag(1.5, 2.5, "A (2)", 0.5),
        Tag(1.6, 2.6, "A (2)", 0.5),
        Tag(1.7, 2.7, "A (2) (2)", 0.5),
    )
    tiers = _tiers(tags)
    assert len(tiers) == 5 and sorted(len(tier) for tier in tiers.values()) == [1] * 5
    assert tiers["A (2)"] == [tags[2]] and tiers["A (2) (2)"] == [tags[4]]
    fmt = FORMATS[name]
    parsed = fmt.parse(fmt.encode(_result(tags), "talk"))
    assert sorted(t.label for t in parsed) == sorted(t.label for t in tags)


FORMULAS = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", " =1+1", "\t=1+1", "x\t=1"]


@pytest.mark.parametrize("name", ["txt", "raven"])
def test_no_cell_of_the_tab_separated_tables_starts_a_formula(name: str) -> None:
    """Raven and Audacity tables are opened in spreadsheets as the CSVs are: a reference title
    `=HYPERLINK(...)` ran there, and Raven's trimming made the inert ` =1+1` a formula."""
    tags = tuple(
        Tag(0.0, 1.0, label, 0.5, extra=Extra(scientific_name=label)) for label in FORMULAS
    )
    text = FORMATS[name].text(_result(tags, "birds"), "x")
    for row in list(csv.reader(io.StringIO(text), delimiter="\t"))[1 if name == "raven" else 0 :]:
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in row), row
    parsed = [t.label for t in FORMATS[name].parse(text)]
    if name == "raven":
        assert parsed == [" ".join(label.split()) for label in FORMULAS]
    else:
        assert parsed == [label.replace("\t", " ") for label in FORMULAS]

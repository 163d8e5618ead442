"""TextGrid, EAF, JAMS and MIDI read back by the libraries each field uses, not by arengine."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import mido
import pytest
from praatio import textgrid
from pympi import Elan

from arengine.kinds.pitch.fields import FREQUENCY_HZ
from arengine.outputs.formats import FORMATS
from arengine.types import AudioInfo, Extra, Result, Tag, Timings

SPEECH = (
    Tag(0.25, 1.5, "speech", 0.9),
    Tag(1.0, 2.0, "speech", 0.6),  # overlaps the first: another tier
    Tag(3.0, 4.125, "music", 0.7),
)
NOTES = (
    Tag(0.5, 1.0, "A4", 0.9, extra=Extra(frequency_hz=440.0)),
    Tag(
        0.75, 1.25, "C#5", 0.4, extra=Extra(frequency_hz=570.0)
    ),  # half a semitone sharp of C#5 (554.37 Hz)
    Tag(2.0, 2.5, "E4", 1.0, extra=Extra(frequency_hz=329.63)),
)


def _result(tags: tuple[Tag, ...], model: str = "speech") -> Result:
    timings = Timings(0.001, 0.002, 0.003, 0.004, 0.01)
    return Result(model, AudioInfo("WAV", "PCM_16", 16000, 1, 16000 * 5), tags, timings)


def _save(tmp_path: Path, name: str, tags: tuple[Tag, ...]) -> Path:
    fmt = FORMATS[name]
    path = tmp_path / f"out.{fmt.extension}"
    path.write_bytes(fmt.encode(_result(tags), "talk"))
    return path


def test_textgrid_opens_in_praatio_with_a_tier_per_label(tmp_path: Path) -> None:
    grid = textgrid.openTextgrid(str(_save(tmp_path, "textgrid", SPEECH)), False)
    assert list(grid.tierNames) == ["speech", "speech (2)", "music"]
    assert grid.maxTimestamp == 5.0
    intervals = {name: [tuple(e) for e in grid.getTier(name).entries] for name in grid.tierNames}
    assert intervals == {
        "speech": [(0.25, 1.5, "speech")],
        "speech (2)": [(1.0, 2.0, "speech")],
        "music": [(3.0, 4.125, "music")],
    }


def test_eaf_opens_in_pympi_with_millisecond_times(tmp_path: Path) -> None:
    eaf = Elan.Eaf(str(_save(tmp_path, "eaf", SPEECH)))
    assert sorted(eaf.get_tier_names()) == ["music", "speech", "speech (2)"]
    assert eaf.get_annotation_data_for_tier("speech") == [(250, 1500, "speech")]
    assert eaf.get_annotation_data_for_tier("music") == [(3000, 4125, "music")]
    assert eaf.get_full_time_interval() == (250, 4125)


def _load_jams(path: Path):  # type: ignore[no-untyped-def]
    import jams

    with warnings.catch_warnings():
        # jams 0.3.5 calls jsonschema and pandas APIs their current releases deprecate.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        loaded = jams.load(str(path), validate=True, strict=True)
        loaded.validate(strict=True)
    return loaded


def test_jams_validates_against_the_jams_schema(tmp_path: Path) -> None:
    speech = _load_jams(_save(tmp_path, "jams", SPEECH))
    (annotation,) = speech.annotations
    assert annotation.namespace == "tag_open"
    assert [(o.time, o.duration, o.value, o.confidence) for o in annotation.data] == [
        (0.25, 1.25, "speech", 0.9),
        (1.0, 1.0, "speech", 0.6),
        (3.0, 1.125, "music", 0.7),
    ]
    assert speech.file_metadata.duration == 5.0
    notes = _load_jams(_save(tmp_path, "jams", NOTES))
    (annotation,) = notes.annotations
    assert annotation.namespace == "note_midi"
    values = [o.value for o in annotation.data]
    assert values[0] == pytest.approx(69.0) and values[1] == pytest.approx(73.48, abs=0.01)


def _pretty(data: bytes):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pkg_resources, on import
        import pretty_midi

        return pretty_midi.PrettyMIDI(io.BytesIO(data))


def test_midi_opens_in_pretty_midi_with_velocity_and_bends() -> None:
    data = FORMATS["midi"].encode(_result(NOTES, "pitch"), "song")
    assert len(mido.MidiFile(file=io.BytesIO(data)).tracks) == 1
    song = _pretty(data)
    notes = sorted(
        (note for instrument in song.instruments for note in instrument.notes),
        key=lambda n: n.start,
    )
    assert [n.pitch for n in notes] == [69, 73, 64]
    assert [n.velocity for n in notes] == [round(0.9 * 127), round(0.4 * 127), 127]
    for note, tag in zip(notes, NOTES, strict=True):
        assert note.start == pytest.approx(tag.start, abs=5e-4)
        assert note.end == pytest.approx(tag.end, abs=5e-4)
    bends = [b for instrument in song.instruments for b in instrument.pitch_bends if b.pitch]
    # C#5 at 570 Hz is 0.48 semitone sharp: a quarter of the +-2 semitone wheel, at its start.
    assert len(bends) == 1
    assert pretty_semitones(bends[0].pitch) == pytest.approx(0.48, abs=0.01)
    assert bends[0].time == pytest.approx(0.75, abs=5e-4)
    # the bent note has a channel of its own: the A4 sounding with it stays unbent
    bent = next(i for i in song.instruments if any(b.pitch for b in i.pitch_bends))
    assert [n.pitch for n in bent.notes] == [73]


def pretty_semitones(pitch: int) -> float:
    return pitch / 8192 * 2


def test_midi_takes_the_note_models_fields_and_frequency_only_tags() -> None:
    tags = (
        Tag(0.0, 0.5, "note", 0.5, extra=Extra(midi=72, pitch_bend=(0.0, 1.5, 3.0, 0.0))),
        Tag(
            1.0, 1.5, "voiced", 0.5, extra=Extra(frequency_hz=220.0)
        ),  # no note name: the number from its frequency
        Tag(2.0, 2.5, "speech", 0.5),  # no pitch at all: left out
    )
    data = FORMATS["midi"].encode(_result(tags, "notes"), "x")
    song = _pretty(data)
    notes = sorted((n for i in song.instruments for n in i.notes), key=lambda n: n.start)
    assert [n.pitch for n in notes] == [72, 57]
    bends = sorted((b.time, b.pitch) for i in song.instruments for b in i.pitch_bends)
    assert bends[:4] == [
        pytest.approx((0.0, 0)),
        pytest.approx((0.125, 2048)),
        pytest.approx((0.25, 4096)),
        pytest.approx((0.375, 0)),
    ]


def test_midi_parse_reads_back_the_bent_frequency() -> None:
    data = FORMATS["midi"].encode(_result(NOTES, "pitch"), "x")
    parsed = FORMATS["midi"].parse(data)
    assert [t.label for t in parsed] == ["A4", "C#5", "E4"]
    assert FREQUENCY_HZ.of(parsed[1]) == pytest.approx(570.0, abs=0.2)
    with pytest.raises(TypeError):
        FORMATS["midi"].parse(data.decode("latin-1"))


def test_jams_text_is_plain_json_with_the_model_named() -> None:
    body = json.loads(FORMATS["jams"].text(_result(SPEECH), "talk"))
    assert body["annotations"][0]["annotation_metadata"]["annotator"]["model"] == "speech"
    assert body["file_metadata"]["title"] == "talk"


def test_jams_takes_the_note_models_midi_field(tmp_path: Path) -> None:
    tags = (
        Tag(0.0, 0.5, "note", 0.5, extra=Extra(midi=72)),
        Tag(1.0, 1.5, "note", 0.7, extra=Extra(midi=60)),
    )
    path = tmp_path / "notes.jams"
    path.write_bytes(FORMATS["jams"].encode(_result(tags, "notes"), "x"))
    (annotation,) = _load_jams(path).annotations
    assert annotation.namespace == "note_midi"
    assert [o.value for o in annotation.data] == [72.0, 60.0]

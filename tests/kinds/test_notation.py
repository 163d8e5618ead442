"""Note names, shared by the pitch and notes kinds and the MIDI and JAMS formats."""

from __future__ import annotations

from arengine.kinds.notation import NAMES, note_name


def test_note_names_in_scientific_pitch_notation() -> None:
    assert [note_name(m) for m in (0, 24, 60, 61, 69, 70, 107, 127)] == [
        "C-1",
        "C1",
        "C4",
        "C#4",
        "A4",
        "A#4",
        "B7",
        "G9",
    ]


def test_an_octave_names_each_pitch_class_once() -> None:
    assert [note_name(60 + k)[:-1] for k in range(12)] == list(NAMES)
    assert len(set(NAMES)) == 12

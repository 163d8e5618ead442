"""Note names in scientific pitch notation (`C#4`, `A4`), shared by the kinds that tag notes
(pitch, notes) and by the formats that write or read notes (MIDI, JAMS)."""

from __future__ import annotations

NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
"""The twelve pitch classes from C, sharps for the black keys."""


def note_name(midi: int) -> str:
    """Scientific pitch notation of MIDI note `midi`.

    >>> note_name(69), note_name(61), note_name(24)
    ('A4', 'C#4', 'C1')
    """
    return f"{NAMES[midi % 12]}{midi // 12 - 1}"

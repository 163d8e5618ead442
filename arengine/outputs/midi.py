"""Note tags as a Standard MIDI File (one track), written and read with `mido`.

A note's number comes from its MIDI-number field when its kind declares one (`Role.MIDI_NOTE`),
else from its label (a note name such as `C#4`), else from its pitch in Hz (`Role.PITCH_HZ`); its
velocity is its score. Where the measured pitch is off the note's centre (or the tag carries a
pitch-bend contour, `Role.PITCH_BEND`), the note gets pitch-wheel events on a channel of its own,
so that bends of overlapping notes do not bend each other.

Example, with a `Result` whose first note is an A4::

    data = render_midi(result, "song")  # the bytes of a type-0 .mid file
    label = parse_midi(data)[0].label  # 'A4'
"""

from __future__ import annotations

import io
import math
import re
import struct
from dataclasses import dataclass

import mido

from arengine.kinds.fields import Role
from arengine.kinds.notation import note_name
from arengine.outputs.columns import role_extra, role_of
from arengine.types import Result, Tag

TICKS_PER_BEAT = 500
TEMPO = 500_000
"""120 beats per minute at 500 ticks per beat: one tick is one millisecond."""
BEND_RANGE = 2.0
"""Semitones at full pitch-wheel deflection: the General MIDI default."""
BEND_BINS_PER_SEMITONE = 3
"""A pitch-bend contour counts in thirds of a semitone (basic-pitch's contour bins)."""
MIN_BEND = 0.05
"""Semitones (5 cents): below this a note is written without a bend."""
_CHANNELS = [channel for channel in range(16) if channel != 9]  # channel 10 is drums in GM
_NAME = re.compile(r"^([A-G])(#?)(-1|[0-9])$")
"""A note name of the MIDI range's octaves (`C-1` is 0, `G9` is 127): never a long number."""
MAX_DELTA = 0x0FFFFFFF
"""The largest delta time a MIDI file holds (4 bytes of 7 bits: 74.5 hours at 1 ms a tick)."""
_STEPS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}


def midi_number(label: str) -> int | None:
    """The MIDI number of a note name (`A4` is 69, `C#4` is 61); None for any other label."""
    match = _NAME.match(label)
    if match is None:
        return None
    step, sharp, octave = match.groups()
    number = (int(octave) + 1) * 12 + _STEPS[step] + (1 if sharp else 0)
    return number if 0 <= number <= 127 else None


def fractional_midi(hz: float) -> float:
    """69 is A4 (440 Hz)."""
    return 69 + 12 * math.log2(hz / 440)


@dataclass(frozen=True, slots=True)
class _Note:
    start: int
    end: int
    number: int
    velocity: int
    bends: tuple[tuple[int, float], ...]
    """(tick, semitones) pitch-wheel positions while the note sounds."""


def _note(tag: Tag) -> _Note | None:
    number = role_of(tag, Role.MIDI_NOTE)
    number = number if number is not None else midi_number(tag.label)
    frequency = role_of(tag, Role.PITCH_HZ)
    if number is None and frequency:
        number = round(fractional_midi(frequency))
    if number is None or not 0 <= number <= 127:
        return None
    start = round(tag.start * 1000)
    end = max(round(tag.end * 1000), start + 1)
    velocity = min(max(round(tag.score * 127), 1), 127)
    return _Note(start, end, number, velocity, _bends(tag, number, start, end))


def _bends(tag: Tag, number: int, start: int, end: int) -> tuple[tuple[int, float], ...]:
    """Semitone offsets from `number`: the tag's pitch-bend contour (thirds of a semitone, one
    per frame) spread evenly over the note as basic-pitch's own MIDI writer does, else one offset
    from its mean frequency."""
    contour = role_of(tag, Role.PITCH_BEND)
    if contour:  # a wheel position where the contour changes: the wheel holds it meanwhile
        step = (end - start) / len(contour)
        return tuple(
            (start + round(i * step), v / BEND_BINS_PER_SEMITONE)
            for i, v in enumerate(contour)
            if i == 0 or v != contour[i - 1]
        )
    frequency = role_of(tag, Role.PITCH_HZ)
    if frequency:
        offset = fractional_midi(frequency) - number
        if abs(offset) >= MIN_BEND:
            return ((start, offset),)
    return ()


def _wheel(semitones: float) -> int:
    return min(max(round(semitones / BEND_RANGE * 8192), -8192), 8191)


def render_midi(result: Result, source: str) -> bytes:
    """A type-0 MIDI file of the result's note tags (other tags have no pitch: left out).

    The bytes are written here (mido, which reads them back in the tests, built and checked an
    object per event: 30 s for 100,000 notes)."""
    notes = sorted(filter(None, map(_note, result.tags)), key=lambda n: (n.start, n.number))
    events: list[tuple[int, int, bytes]] = []  # (tick, order, event without its delta time)
    free_at = dict.fromkeys(_CHANNELS, 0)
    for note in notes:
        channel = min(free_at, key=lambda c: (free_at[c] > note.start, c))
        free_at[channel] = note.end
        for tick, semitones in note.bends:
            events.append((tick, 1, _pitchwheel(channel, _wheel(semitones))))
        events.append((note.start, 2, bytes([0x90 | channel, note.number, note.velocity])))
        events.append((note.end, 0, bytes([0x80 | channel, note.number, 64])))
        if note.bends:  # back to the centre so the channel's next note starts unbent
            events.append((note.end, 0, _pitchwheel(channel, 0)))
    name = source[:120].encode("latin-1", errors="replace")
    track = bytearray(b"\x00\xff\x03" + _number(len(name)) + name)
    track += b"\x00\xff\x51\x03" + TEMPO.to_bytes(3, "big")
    now = 0
    for tick, _, event in sorted(events, key=lambda e: (e[0], e[1])):
        while tick - now > MAX_DELTA:  # a longer gap is bridged by empty markers
            track += _number(MAX_DELTA) + b"\xff\x06\x00"
            now += MAX_DELTA
        track += _number(tick - now) + event
        now = tick
    track += b"\x00\xff\x2f\x00"
    header = b"MThd" + struct.pack(">IHHH", 6, 0, 1, TICKS_PER_BEAT)
    return header + b"MTrk" + struct.pack(">I", len(track)) + bytes(track)


def _pitchwheel(channel: int, pitch: int) -> bytes:
    value = pitch + 8192
    return bytes([0xE0 | channel, value & 0x7F, value >> 7])


def _number(value: int) -> bytes:
    """A MIDI variable-length quantity: 7 bits a byte, high bit set on all but the last."""
    out = [value & 0x7F]
    while value := value >> 7:
        out.append(0x80 | (value & 0x7F))
    return bytes(reversed(out))


def parse_midi(data: bytes) -> list[Tag]:
    """Notes of a MIDI file as tags: label the note name, score the velocity, frequency with the
    channel's pitch bend; times in seconds (tempo changes followed)."""
    tags: list[Tag] = []
    sounding: dict[tuple[int, int], tuple[float, int, float]] = {}
    bend = [0.0] * 16
    now = 0.0
    for message in mido.MidiFile(file=io.BytesIO(data)):  # times in seconds, tempo applied
        now += message.time
        if message.type == "pitchwheel":
            bend[message.channel] = message.pitch / 8192 * BEND_RANGE
        elif message.type == "note_on" and message.velocity > 0:
            key = (message.channel, message.note)
            sounding[key] = (now, message.velocity, bend[message.channel])
        elif message.type in ("note_on", "note_off"):
            started = sounding.pop((message.channel, message.note), None)
            if started is not None:
                tags.append(_tag(message.note, now, *started))
    return sorted(tags, key=lambda t: (t.start, t.end))


def _tag(number: int, end: float, start: float, velocity: int, bend: float) -> Tag:
    frequency = 440 * 2 ** ((number + bend - 69) / 12)
    extra = role_extra((Role.PITCH_HZ, round(frequency, 2)))
    return Tag(round(start, 6), round(end, 6), note_name(number), velocity / 127, extra=extra)

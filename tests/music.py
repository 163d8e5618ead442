"""Real instrument recordings with known notes: MIDI written here, rendered by fluidsynth with
Debian's FluidR3_GM soundfont (`fluid-soundfont-gm`), and note F1 against the MIDI (mir_eval)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from tests.recordings import speak

SOUNDFONT = Path("/usr/share/sounds/sf2/FluidR3_GM.sf2")
PIANO, GUITAR, VIOLIN, STRINGS, FLUTE = 0, 24, 40, 48, 73


@dataclass(frozen=True)
class Note:
    start: float
    end: float
    midi: int
    program: int = PIANO
    velocity: int = 90


def _vlq(value: int) -> bytes:
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.insert(0, (value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out)


def write_midi(notes: list[Note], path: Path) -> Path:
    """A type-0 MIDI file at 120 bpm (480 ticks a beat: 960 a second), one channel per program."""
    channels = {program: i for i, program in enumerate(sorted({n.program for n in notes}))}
    events = [(0, 0, b"\xff\x51\x03" + (500000).to_bytes(3, "big"))]
    events += [(0, 0, bytes([0xC0 | ch, program])) for program, ch in channels.items()]
    for note in notes:
        ch = channels[note.program]
        events.append((round(note.start * 960), 2, bytes([0x90 | ch, note.midi, note.velocity])))
        events.append((round(note.end * 960), 1, bytes([0x80 | ch, note.midi, 0])))
    events.sort(key=lambda e: (e[0], e[1]))
    data, last = b"", 0
    for tick, _, message in events:
        data += _vlq(tick - last) + message
        last = tick
    data += b"\x00\xff\x2f\x00"
    path.write_bytes(
        b"MThd" + struct.pack(">IHHH", 6, 0, 1, 480) + b"MTrk" + struct.pack(">I", len(data)) + data
    )
    return path


def render(notes: list[Note], folder: Path, rate: int = 22050) -> np.ndarray:
    """The notes played by FluidR3_GM, mono float32 at `rate`."""
    if shutil.which("fluidsynth") is None or not SOUNDFONT.is_file():
        raise RuntimeError(
            "fluidsynth or fluid-soundfont-gm is missing: run deploy/setup.sh --test"
        )
    midi = write_midi(notes, folder / f"notes-{abs(hash(tuple(notes)))}.mid")
    wav = midi.with_suffix(".wav")
    subprocess.run(
        [
            "fluidsynth",
            "-ni",
            "-g",
            "0.6",
            "-r",
            "44100",
            "-F",
            str(wav),
            str(SOUNDFONT),
            str(midi),
        ],
        check=True,
        capture_output=True,
    )
    audio, source = sf.read(wav, dtype="float32", always_2d=True)
    mono: np.ndarray = soxr.resample(audio.mean(axis=1), source, rate).astype(np.float32)
    return mono


def polyphonic_piece(seconds: float, seed: int = 0) -> list[Note]:
    """Chords under a melody: piano melody (eighths and quarters), guitar chords on the beat,
    string bass and pad held for each bar; a C-major progression in 2-second bars."""
    rng = np.random.default_rng(seed)
    progression = [(60, 64, 67), (57, 60, 64), (53, 57, 60), (55, 59, 62)]
    scale = [72, 74, 76, 77, 79, 81, 83, 84]
    notes: list[Note] = []
    for bar in range(int(seconds // 2)):
        at = bar * 2.0
        chord = progression[bar % len(progression)]
        notes.append(Note(at, at + 1.95, chord[0] - 24, STRINGS, 80))
        notes += [
            Note(at + beat * 0.5, at + beat * 0.5 + 0.45, p, GUITAR, 70)
            for beat in (0, 2)
            for p in chord
        ]
        t = at
        while t < at + 2.0 - 1e-9:
            length = float(rng.choice([0.25, 0.5]))
            notes.append(Note(t, t + length * 0.9, int(rng.choice(scale)), PIANO, 100))
            t += length
    return notes


def melody(start: float, seconds: float, program: int, seed: int) -> list[Note]:
    """A one-voice melody (C4 .. C6) of quarters and eighths."""
    rng = np.random.default_rng(seed)
    notes, t = [], start
    pitch = 67
    while t < start + seconds - 0.25:
        length = float(rng.choice([0.25, 0.5]))
        pitch = int(np.clip(pitch + rng.integers(-4, 5), 60, 84))
        notes.append(Note(t, t + length * 0.9, pitch, program, 100))
        t += length
    return notes


def f1(reference: list[Note], estimated: list[tuple[float, float, int]]) -> tuple[float, ...]:
    """mir_eval note precision, recall and F1: onset within 50 ms, pitch within 50 cents,
    offsets ignored. `estimated` holds `(start, end, midi)`."""
    from mir_eval.transcription import precision_recall_f1_overlap

    def arrays(items: list[tuple[float, float, int]]) -> tuple[np.ndarray, np.ndarray]:
        if not items:
            return np.zeros((0, 2)), np.zeros(0)
        intervals = np.array([[s, max(e, s + 1e-3)] for s, e, _ in items])
        return intervals, 440.0 * 2 ** ((np.array([m for _, _, m in items]) - 69) / 12)

    ref_i, ref_p = arrays([(n.start, n.end, n.midi) for n in reference])
    est_i, est_p = arrays(estimated)
    precision, recall, score, _ = precision_recall_f1_overlap(
        ref_i, ref_p, est_i, est_p, onset_tolerance=0.05, offset_ratio=None
    )
    return float(precision), float(recall), float(score)


def speech_and_melodies(folder: Path) -> Path:
    """About 45 s of espeak-ng phrases and FluidR3 melodies in turn, as 44.1 kHz stereo FLAC:
    speech, notes and music tags to find, and a rate that each model's differs from."""
    parts = []
    for turn in range(4):
        voice, rate = speak(f"Part {turn} of a recording with speech and music.", folder)
        tune = render(melody(0.0, 8.0, (PIANO, FLUTE)[turn % 2], seed=turn), folder, rate)
        parts += [voice, np.zeros(rate // 2, np.float32), tune[: 8 * rate]]
    audio = soxr.resample(np.concatenate(parts), rate, 44100).astype(np.float32)
    path = folder / "speech-and-music.flac"
    sf.write(path, np.stack([audio, 0.8 * audio], axis=1), 44100)
    return path

"""The notes kind: basic-pitch's note creation ported, streamed in chunks, and the recognizer's
segments on basic-pitch's window grid."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio.segments import Segment, Segmenter
from arengine.errors import InvalidInput
from arengine.kinds.notes.fields import MIDI, PITCH_BEND
from arengine.kinds.notes.recognizer import KEPT_FRAMES, STEP, NotesRecognizer
from arengine.kinds.notes.tagger import (
    COLUMNS,
    KEYS,
    NOTE_COLUMNS,
    FrameGrid,
    NotesParams,
    NotesTagger,
    inferred_onsets,
    note_events,
)
from arengine.service.engine import Engine
from arengine.settings import Settings
from arengine.types import Tag, tag_dict
from tests.music import GUITAR, PIANO, STRINGS, Note, f1, polyphonic_piece, render
from tests.recordings import tones

NOTES = Path(__file__).resolve().parents[3] / "models" / "notes"
PREDICT = NotesParams(onset_threshold=0.5, frame_threshold=0.3, min_note_ms=127.7)
"""basic-pitch's predict() thresholds."""


@pytest.fixture(scope="module")
def recognizer() -> NotesRecognizer:
    return NotesRecognizer(NOTES / "nmp.pt", segment_s=30)


def _with_pauses(seconds: float) -> list[Note]:
    """The polyphonic piece with a 0.6 s rest after every 2-second bar, so the tagger can cut."""
    notes = []
    for note in polyphonic_piece(seconds, seed=4):
        shift = 0.6 * (note.start // 2.0)
        notes.append(Note(note.start + shift, note.end + shift, note.midi, note.program))
    return notes


@pytest.fixture(scope="module")
def piece(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, list[Note]]:
    notes = _with_pauses(30)  # 39 s: the tagger cuts twice
    return render(notes, tmp_path_factory.mktemp("piece")), notes


@pytest.fixture(scope="module")
def scores(recognizer: NotesRecognizer, piece: tuple[np.ndarray, list[Note]]) -> np.ndarray:
    audio, _ = piece
    parts = [recognizer.infer(recognizer.features(s), s) for s in _segments(recognizer, audio)]
    return np.concatenate(parts)


def _segments(recognizer: NotesRecognizer, audio: np.ndarray) -> Iterator[Segment]:
    return Segmenter(
        iter([audio[i : i + 5000] for i in range(0, len(audio), 5000)]), recognizer.plan
    )


def _tags(tagger: NotesTagger, scores: np.ndarray, sizes: list[int], samples: int) -> list[Tag]:
    tags, at = [], 0
    for size in sizes:
        tags += tagger.push(scores[at : at + size])
        at += size
    return tags + tagger.push(scores[at:]) + tagger.finish(samples)


def _s(sample: int) -> float:
    return round(sample / 22050, 3)


@pytest.mark.parametrize("melodia", [0, 1])
def test_note_events_equal_basic_pitchs_own(melodia: int) -> None:
    """On the reference window, the port gives basic-pitch's `output_to_notes_polyphonic` events
    (stored by models/notes/convert_basic_pitch.py from the package itself)."""
    reference = np.load(NOTES / "reference.npz")
    params = dataclasses.replace(PREDICT, melodia=melodia)
    ours = sorted(note_events(reference["note"], reference["onset"], params))
    theirs = sorted(tuple(row) for row in reference[f"events_melodia{melodia}"])
    assert len(ours) == len(theirs) > 5
    for (s, e, k, a), (ts, te, tk, ta) in zip(ours, theirs, strict=True):
        assert (s, e, k) == (int(ts), int(te), int(tk))
        assert a == pytest.approx(ta, abs=1e-6)


def _whole(scores: np.ndarray, samples: int, params: NotesParams) -> list[tuple[float, float, int]]:
    """basic-pitch's note creation on the whole recording at once, as tag times."""
    grid = FrameGrid()
    # The last window's frames past the recording's end are zero padding; the tagger drops them.
    kept = scores[: sum(grid.sample(g) < samples for g in range(len(scores)))]
    events = note_events(kept[:, :KEYS], kept[:, KEYS : 2 * KEYS], params)
    return sorted((_s(grid.sample(s)), _s(grid.sample(e)), k + 21) for s, e, k, _ in events)


def test_streamed_in_any_pieces_equals_the_whole_recording(
    scores: np.ndarray, piece: tuple[np.ndarray, list[Note]]
) -> None:
    """Chunks cut at quiet runs: the notes of the whole recording at once, none split or
    repeated, whatever the sizes of the pushes (one frame, a window, odd sizes). Exact without
    inferred onsets (their scale is the chunk's largest onset, not the recording's)."""
    audio, _ = piece
    rng = np.random.default_rng(0)
    for infer_onsets in (0, 1):
        params = dataclasses.replace(PREDICT, melodia=1, infer_onsets=infer_onsets)
        whole = _whole(scores, len(audio), params)
        for sizes in ([len(scores)], [7] * 400, [KEPT_FRAMES] * 20, list(rng.integers(1, 300, 40))):
            tags = _tags(NotesTagger(params), scores, sizes, len(audio))
            got = [(t.start, t.end, MIDI.of(t)) for t in tags]
            assert [t.start for t in tags] == sorted(t.start for t in tags)
            assert len(whole) > 20
            if infer_onsets:
                truth = [Note(s, e, m) for s, e, m in whole]
                assert f1(truth, [(s, e, m or 0) for s, e, m in got])[2] >= 0.95
            else:
                assert sorted(got) == whole


def test_tags_come_before_the_end_and_the_buffer_stays_small(
    scores: np.ndarray, piece: tuple[np.ndarray, list[Note]]
) -> None:
    tagger = NotesTagger(NotesParams())
    assert len(scores) > 3000
    early = tagger.push(scores[:2500])
    assert early, "notes are final before the recording ends"
    # Cut at 1290 frames: kept from 4 frames before it.
    assert len(tagger._buffer) == 2500 - 1290 + 4
    assert max(tag.start for tag in early) < 2500 / 86


def test_a_note_held_for_minutes_forces_a_cut_and_the_buffer_stays_bounded() -> None:
    """A drone that never ends keeps every cut waiting; after 60 s one is forced."""
    rows = np.zeros((12000, COLUMNS), np.float32)
    rows[:, 40] = 0.9  # C5 held
    rows[::50, KEYS + 40] = 0.95  # re-struck twice a second... as onset peaks
    rows[:, 10] = 0.9  # a drone on another key, never quiet
    tagger = NotesTagger(NotesParams())
    tags = []
    for start in range(0, 12000, 500):
        tags += tagger.push(rows[start : start + 500])
        assert len(tagger._buffer) <= 4 + 1290 + 8 * 430 + 142 + 500
    tags += tagger.finish(12000 * 256)
    assert sum(MIDI.of(t) == 61 for t in tags) > 200


def test_pitch_bends_and_json(scores: np.ndarray, piece: tuple[np.ndarray, list[Note]]) -> None:
    audio, _ = piece
    tagger = NotesTagger(NotesParams(pitch_bends=1))
    tags = tagger.push(scores) + tagger.finish(len(audio))
    for tag in tags:
        assert PITCH_BEND.of(tag) is not None
        # One per frame; the window grid's step is 141.27 frames, so a duration may round off 1.
        assert abs(len(PITCH_BEND.at(tag)) - (tag.end - tag.start) * 22050 / 256) <= 1.5
        # FluidR3's samples are in tune: the contour peak is within a semitone of the key.
        assert np.median(np.abs(PITCH_BEND.at(tag))) <= 3
    plain = NotesTagger(NotesParams())
    first = (plain.push(scores) + plain.finish(len(audio)))[0]
    assert set(tag_dict(first)) == {"start", "end", "label", "score", "midi"}
    assert first.label[-1].isdigit() and 21 <= (MIDI.of(first) or 0) <= 108


def test_known_notes_are_found(scores: np.ndarray, piece: tuple[np.ndarray, list[Note]]) -> None:
    """Piano melody, guitar chords, string bass: note F1 (onset within 50 ms) against the MIDI."""
    audio, truth = piece
    tagger = NotesTagger(NotesParams())
    tags = tagger.push(scores) + tagger.finish(len(audio))
    precision, recall, score = f1(truth, [(t.start, t.end, MIDI.of(t) or 0) for t in tags])
    assert score >= 0.75, (precision, recall)
    assert {n.program for n in truth} == {PIANO, GUITAR, STRINGS}


def test_overrides_are_checked(recognizer: NotesRecognizer) -> None:
    with pytest.raises(InvalidInput, match=r"onset_threshold must be 0\.05 <= x <= 1, got 1\.5"):
        recognizer.tagger({"onset_threshold": 1.5})
    with pytest.raises(InvalidInput, match="median_frames does not apply to notes models"):
        recognizer.tagger({"median_frames": 5})
    with pytest.raises(InvalidInput, match="pitch_bends must be a whole number"):
        recognizer.tagger({"pitch_bends": 0.5})
    assert recognizer.defaults()["onset_threshold"] == 0.8


@pytest.mark.parametrize("name", ["onset_threshold", "frame_threshold"])
def test_the_degenerate_thresholds_are_refused(recognizer: NotesRecognizer, name: str) -> None:
    """A frame threshold of 0 never ends a note: every onset made a note to the chunk's end."""
    with pytest.raises(InvalidInput, match=rf"{name} must be 0\.05 <= x <= 1, got 0"):
        recognizer.tagger({name: 0})
    assert recognizer.tagger({name: 0.05}) is not None


def test_every_option_at_its_floor_gives_a_bounded_answer() -> None:
    """Noise-like activations, every threshold at its floor, melodia, one-frame notes and pitch
    bends: at most 50 notes a second of audio and 24 sounding at once on average (the strongest
    kept), where they were thousands of notes and millions of bend values."""
    rng = np.random.default_rng(7)
    seconds = 20
    frames = int(seconds * 22050 / 256)
    rows = rng.random((frames, COLUMNS)).astype(np.float32)
    params = NotesParams(
        onset_threshold=0.05, frame_threshold=0.05, min_note_ms=0, melodia=1, pitch_bends=1
    )
    tagger = NotesTagger(params)
    tags = _tags(tagger, rows, [300] * (frames // 300), frames * 256)
    assert 100 < len(tags) <= 50 * seconds
    bends = sum(len(PITCH_BEND.of(tag) or ()) for tag in tags)
    assert bends <= 24 * frames
    assert all(isinstance(bend, int) for tag in tags for bend in PITCH_BEND.of(tag) or ())


def test_segments_are_whole_basic_pitch_windows(recognizer: NotesRecognizer) -> None:
    audio = np.random.default_rng(1).standard_normal(3 * STEP + 1000).astype(np.float32) * 0.1
    segments = list(Segmenter(iter([audio]), recognizer.plan))
    assert [s.frames for s in segments] == [4]
    windows = recognizer.features(segments[0])
    assert windows.shape == (4, 43844)
    # basic-pitch's predict(): 3840 zeros, then windows every 36,164 samples.
    padded = np.concatenate([np.zeros(3840, np.float32), audio])
    np.testing.assert_array_equal(windows[1].numpy(), padded[STEP : STEP + 43844])
    assert recognizer.infer(windows, segments[0]).shape == (4 * KEPT_FRAMES, COLUMNS)


def test_engine_segments_and_threads_give_the_whole_file_result(
    tmp_path: Path, piece: tuple[np.ndarray, list[Note]]
) -> None:
    """Two engine threads, 2-window segments in any order: the same tags as 30-s segments."""
    audio, _ = piece
    path = tmp_path / "piece.flac"
    sf.write(path, audio, 22050)
    results = []
    for segment_s in (30.0, 3.3):
        engine = Engine(Settings(engine_threads=2, models="notes", segment_s=segment_s))
        engine.load_models()
        try:
            recognizers = engine.check("notes", {})
            job = engine.recognize(path, recognizers, {}, f"t-{segment_s}")
            results.append(job.future.result(timeout=300).tags)
        finally:
            engine.close()
    assert results[0] == results[1]
    assert len(results[0]) > 20


def test_a_note_struck_at_the_first_frame_is_found() -> None:
    """A pluck at 0 s has its onset peak at frame 0, which had no frame before it to be higher
    than: the note was missed (found with 0.5 s of silence first). Before the recording is
    silence; inside a chunk, frame 0 still needs its neighbours."""
    rows = np.zeros((300, COLUMNS), np.float32)
    rows[0:60, 48] = 0.9  # A4 sounds from the first frame
    rows[0:3, KEYS + 48] = [0.95, 0.6, 0.2]  # its onset falls from frame 0
    tagger = NotesTagger(NotesParams())
    tags = tagger.push(rows) + tagger.finish(300 * 256)
    assert [(t.label, t.start) for t in tags] == [("A4", 0.0)]
    inside = note_events(rows[:, :KEYS], rows[:, KEYS : 2 * KEYS], NotesParams())
    assert inside == []  # a chunk that does not begin the recording: no neighbour, no peak


@pytest.mark.parametrize("amplitude", [0.3, 0.8])
def test_plain_sine_tones_are_notes_at_predicts_onset_threshold(
    recognizer: NotesRecognizer, tmp_path: Path, amplitude: float
) -> None:
    """Plain sines have no attack: basic-pitch's onset head peaks at about 0.7 on them, under the
    tuned default `onset_threshold` 0.8, so the defaults find no note; the model card says so and
    names the setting that finds each tone."""
    midis = [60, 69, 76]
    path, starts = tones(
        tmp_path / "tones.flac", [440 * 2 ** ((m - 69) / 12) for m in midis], 22050, amplitude
    )
    audio, _ = sf.read(path, dtype="float32")
    parts = [recognizer.infer(recognizer.features(s), s) for s in _segments(recognizer, audio)]
    scores = np.concatenate(parts)
    onsets = inferred_onsets(scores[:, KEYS : 2 * KEYS], scores[:, :KEYS])
    assert 0.5 < onsets.max() < NotesParams().onset_threshold

    def notes(overrides: dict[str, float]) -> list[tuple[int | None, float]]:
        tagger = recognizer.tagger(overrides)
        tags = [tag for part in parts for tag in tagger.push(part)] + tagger.finish(len(audio))
        return [(MIDI.of(tag), tag.start) for tag in tags]

    assert notes({}) == []
    card = (NOTES / "README.md").read_text(encoding="utf-8")
    setting = re.search(r"tones, .*? pass `onset_threshold=([0-9.]+)`", " ".join(card.split()))
    assert setting is not None, "the model card names the setting for plain tones"
    found = notes({"onset_threshold": float(setting[1])})
    assert [midi for midi, _ in found] == midis
    assert [start for _, start in found] == pytest.approx(starts, abs=0.05)


def test_without_pitch_bends_the_contour_is_not_needed(
    scores: np.ndarray, piece: tuple[np.ndarray, list[Note]]
) -> None:
    """A job's kept scores are read without their contour for new parameters without pitch
    bends: fed only the note and onset columns, the tagger gives the same tags; with pitch
    bends it reads every column."""
    audio, _ = piece
    sizes = [KEPT_FRAMES] * 10
    full = _tags(NotesTagger(NotesParams()), scores, sizes, len(audio))
    cut = NotesTagger(NotesParams())
    assert cut.columns_read == NOTE_COLUMNS
    assert _tags(cut, np.ascontiguousarray(scores[:, :NOTE_COLUMNS]), sizes, len(audio)) == full
    assert len(full) > 20
    bends = NotesTagger(NotesParams(pitch_bends=1))
    assert bends.columns_read == COLUMNS
    assert [PITCH_BEND.of(t) is not None for t in _tags(bends, scores, sizes, len(audio))] == [
        True
    ] * len(full)

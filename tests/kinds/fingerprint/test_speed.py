"""Recordings played fast or slow (resampled: tempo and pitch together), with only their tempo
or only their pitch changed, or talked over: found once, at the right offsets, with the factor
they were played at; a library of the landmark pairs before triplets is refused."""

from __future__ import annotations

from pathlib import Path

import librosa
import numpy as np
import pytest
import soxr

from arengine.kinds.fingerprint.fields import (
    PITCH,
    REFERENCE,
    REFERENCE_END,
    REFERENCE_START,
    SPEED,
)
from arengine.kinds.fingerprint.landmarks import SAMPLE_RATE, add_recording
from arengine.kinds.fingerprint.library import Library
from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
from arengine.types import Tag
from tests.fingerprints import Placed, mix, piece
from tests.kinds.fingerprint.test_recognizer import recognize
from tests.recordings import speak


@pytest.fixture(scope="module")
def pieces(tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """Three references of 20 s."""
    folder = tmp_path_factory.mktemp("pieces")
    return [piece(seed, folder, seconds=20.0) for seed in (11, 12, 13)]


@pytest.fixture(scope="module")
def library(pieces: list[np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> Library:
    library = Library.create(tmp_path_factory.mktemp("library") / "library.sqlite")
    for i, samples in enumerate(pieces):
        add_recording(library, f"piece {i}", samples, {})
    return library


def changed(samples: np.ndarray, change: str, factor: float) -> np.ndarray:
    """Played `factor` times as fast (`speed`: resampled, as a turntable or a broadcast's
    sample rate does), as fast with its pitch kept (`tempo`) or as high at its tempo (`pitch`)."""
    if change == "speed":
        out = soxr.resample(samples, SAMPLE_RATE * factor, SAMPLE_RATE)
    elif change == "tempo":  # a phase vocoder of 46-ms frames (librosa's 2048 is for 22 kHz)
        out = librosa.effects.time_stretch(samples, rate=factor, n_fft=512)
    else:
        steps = 12 * np.log2(factor)
        out = librosa.effects.pitch_shift(samples, sr=SAMPLE_RATE, n_steps=steps, n_fft=512)
    return np.asarray(out, dtype=np.float32)


@pytest.mark.parametrize("factor", [0.95, 1.05])
@pytest.mark.parametrize("change", ["speed", "tempo", "pitch"])
def test_a_changed_recording_is_found_with_its_factors(
    library: Library, pieces: list[np.ndarray], change: str, factor: float
) -> None:
    """A whole piece and an excerpt (from 4 s into its reference) under noise at 10 dB SNR."""
    played = [changed(samples, change, factor) for samples in pieces]
    tempo = factor if change != "pitch" else 1.0
    pitch = factor if change != "tempo" else 1.0
    whole = Placed(0, 3.0, 0.0, len(played[0]) / SAMPLE_RATE)
    excerpt = Placed(2, 30.0, 4.0 / tempo, 16.0 / tempo)  # in the played piece's seconds
    recording = mix(50.0, played, [whole, excerpt], snr_db=10.0, seed=2)
    recognizer = FingerprintRecognizer(library.path, segment_s=10.0)
    tags = recognize(recognizer, recording)
    assert [(t.label, REFERENCE.of(t)) for t in tags] == [("piece 0", "1"), ("piece 2", "3")], tags
    # A phase vocoder smears the notes' onsets: the first and last matches of an excerpt cut
    # mid-note come later and earlier than a resampling's (measured: up to 0.51 s here).
    bounds = 0.5 if change == "speed" else 0.75
    for tag, item in zip(tags, [whole, excerpt], strict=True):
        assert abs(tag.start - item.at) <= bounds, (tag, item)
        assert abs(tag.end - item.end) <= bounds, (tag, item)
        _assert_offset(tag, item.at, item.ref_start * tempo)
        assert SPEED.of(tag) == pytest.approx(tempo, rel=0.01), tag
        assert PITCH.of(tag) == pytest.approx(pitch, rel=0.01), tag


def _assert_offset(tag: Tag, at: float, ref_start: float) -> None:
    """The tag's reference offset is right at its speed: the stretch it names is the one played."""
    assert REFERENCE_START.of(tag) is not None and SPEED.of(tag) is not None
    assert abs(REFERENCE_START.at(tag) - (ref_start + (tag.start - at) * SPEED.at(tag))) <= 0.5, tag


def test_talk_over_is_one_occurrence(
    library: Library, pieces: list[np.ndarray], tmp_path: Path
) -> None:
    """A presenter talks over 4 s in the middle of the piece, at 5 dB under the music: one tag
    over the whole piece, not fragments."""
    speech, rate = speak("Good morning, and that was the weather for the whole region.", tmp_path)
    voice = soxr.resample(speech, rate, SAMPLE_RATE).astype(np.float32)[: 4 * SAMPLE_RATE]
    placed = Placed(1, 5.0, 0.0, 20.0)
    recording = mix(35.0, pieces, [placed], snr_db=30.0, seed=4)
    at = round(13.0 * SAMPLE_RATE)
    music = recording[at : at + len(voice)]
    gain = np.sqrt(np.mean(music**2) / np.mean(voice**2)) * 10 ** (-5 / 20)
    recording[at : at + len(voice)] += voice * gain
    recognizer = FingerprintRecognizer(library.path, segment_s=10.0)
    [tag] = recognize(recognizer, recording)
    assert REFERENCE.of(tag) == "2"
    assert abs(tag.start - 5.0) <= 0.5 and abs(tag.end - 25.0) <= 0.5, tag
    assert REFERENCE_START.at(tag) == 0.0 and abs(REFERENCE_END.at(tag) - 20.0) <= 0.5
    assert SPEED.of(tag) == pytest.approx(1.0, rel=0.01)


def test_a_library_of_the_old_scheme_is_refused(tmp_path: Path) -> None:
    """Its references were stored as landmark pairs (hash, anchor frame) without the scheme's
    marker: they would never match, so the model refuses to load and says what to do."""
    library = Library.create(tmp_path / "library.sqlite")
    FingerprintRecognizer(library.path, segment_s=10.0)  # empty: nothing to refuse
    pairs = np.array([[1 << 12 | 5, 40], [2 << 12 | 9, 41]], dtype=np.int64)
    library.add("Station ident", 10.0, {}, pairs)
    with pytest.raises(ValueError, match=r"older scheme .* index its recordings again"):
        FingerprintRecognizer(library.path, segment_s=10.0)


def test_an_excerpt_between_other_music_keeps_its_bounds(
    library: Library, pieces: list[np.ndarray], tmp_path: Path
) -> None:
    """A broadcast's excerpt: 10 s of a reference with music that is not in the library
    (from the same instruments and note grid) straight before and after it: one tag, its
    start and end within 0.5 s of the excerpt's, not run on into the music around it."""
    bed = [piece(seed, tmp_path, seconds=20.0) for seed in (21, 22)]
    placed = [Placed(3, 0.0, 0.0, 12.0), Placed(1, 12.0, 4.0, 14.0), Placed(4, 22.0, 0.0, 12.0)]
    recording = mix(34.0, [*pieces, *bed], placed, snr_db=30.0, seed=5)
    recognizer = FingerprintRecognizer(library.path, segment_s=10.0)
    [tag] = recognize(recognizer, recording)
    assert REFERENCE.at(tag) == "2"
    assert abs(tag.start - 12.0) <= 0.5 and abs(tag.end - 22.0) <= 0.5, tag
    _assert_offset(tag, 12.0, 4.0)

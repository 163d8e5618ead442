"""Note tags: a melody through Segmenter + PitchRecognizer + PitchTagger; the tagger alone."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from arengine.audio.segments import Segmenter
from arengine.kinds.pitch.fields import FREQUENCY_HZ
from arengine.kinds.pitch.recognizer import PitchRecognizer
from arengine.kinds.pitch.tagger import (
    HIGHEST_MIDI,
    LOWEST_MIDI,
    NOTE_LABELS,
    PitchParams,
    PitchTagger,
    _Note,
)
from arengine.types import Extra, Tag
from tests.conftest import ROOT

WEIGHTS = ROOT / "models" / "pitch" / "tiny.pth"
RATE = 16000
MELODY = [("A4", 440.0), ("C5", 523.25), ("E5", 659.26), ("C#4", 277.18)]
"""Four 0.5 s notes starting at 0.3 s, 1.0 s, 1.7 s, 2.4 s, silence between them."""


def _melody() -> np.ndarray:
    silence = np.zeros(int(0.2 * RATE), np.float32)
    pieces = [np.zeros(int(0.3 * RATE), np.float32)]
    t = np.arange(int(0.5 * RATE)) / RATE
    fade = np.minimum(1, np.minimum(t, t[::-1]) / 0.005)  # 5 ms ramps: no clicks
    for _, frequency in MELODY:
        wave = sum(np.sin(2 * np.pi * frequency * k * t) / k for k in (1, 2, 3, 4))
        pieces += [(0.2 * fade * wave).astype(np.float32), silence]
    return np.concatenate(pieces)


def _recognize(audio: np.ndarray, segment_s: float, block: int) -> list[Tag]:
    recognizer = PitchRecognizer(WEIGHTS, segment_s=segment_s)
    tagger = recognizer.tagger({})
    blocks = (audio[i : i + block] for i in range(0, len(audio), block))
    segmenter = Segmenter(blocks, recognizer.plan)
    tags: list[Tag] = []
    for segment in segmenter:
        tags += tagger.push(recognizer.infer(recognizer.features(segment), segment))
    assert segmenter.total_samples == len(audio)
    return tags + tagger.finish(len(audio))


@pytest.mark.parametrize(("segment_s", "block"), [(0.37, 1000), (0.23, 4096), (30.0, 16000)])
def test_a_melody_gives_its_notes_across_segment_cuts(segment_s: float, block: int) -> None:
    onsets = [0.3, 1.0, 1.7, 2.4]
    cuts = np.arange(segment_s, 3.0, segment_s)
    if segment_s < 1:  # every note straddles at least one cut
        assert all(np.any((cuts > on) & (cuts < on + 0.5)) for on in onsets)
    tags = _recognize(_melody(), segment_s, block)
    assert [t.label for t in tags] == [name for name, _ in MELODY]
    for tag, onset, (_, frequency) in zip(tags, onsets, MELODY, strict=True):
        assert abs(tag.start - onset) <= 0.03  # measured: 15 ms early at most
        assert abs(tag.end - (onset + 0.5)) <= 0.03
        assert FREQUENCY_HZ.of(tag) is not None
        assert abs(1200 * np.log2(FREQUENCY_HZ.at(tag) / frequency)) < 20
        assert tag.score > 0.8


def test_noise_and_silence_give_no_notes() -> None:
    rng = np.random.default_rng(5)
    audio = np.concatenate(
        [np.zeros(RATE, np.float32), (0.1 * rng.standard_normal(2 * RATE)).astype(np.float32)]
    )
    assert _recognize(audio, 0.5, 4096) == []


def _scores(*runs: tuple[float, float, int]) -> np.ndarray:
    """`(frequency_hz, periodicity, frames)` runs of constant scores."""
    return np.concatenate([np.tile([[f, p]], (n, 1)) for f, p, n in runs]).astype(np.float32)


def _tag_all(
    scores: np.ndarray, params: PitchParams | None = None, chunks: list[int] | None = None
) -> list[Tag]:
    tagger = PitchTagger(params or PitchParams(), sample_rate=RATE, hop=160)
    tags: list[Tag] = []
    for chunk in np.split(scores, chunks or []):
        tags += tagger.push(chunk)
    return tags + tagger.finish(len(scores) * 160)


def test_notes_from_made_up_scores() -> None:
    scores = _scores((0, 0.1, 20), (440, 0.9, 50), (0, 0.2, 20), (523.25, 0.7, 30), (0, 0.1, 5))
    assert _tag_all(scores) == [
        Tag(start=0.195, end=0.695, label="A4", score=0.9, extra=Extra(frequency_hz=440.0)),
        Tag(start=0.895, end=1.195, label="C5", score=0.7, extra=Extra(frequency_hz=523.25)),
    ]


def test_a_note_at_the_edges_is_clipped_to_the_recording() -> None:
    scores = _scores((440, 0.9, 30), (0, 0.1, 10), (220, 0.8, 25))
    tagger = PitchTagger(PitchParams(), sample_rate=RATE, hop=160)
    # The last frame (64) is centred on sample 10240 but the audio ends at 10300, not 10320.
    tags = tagger.push(scores) + tagger.finish(10_300)
    assert [(t.start, t.end, t.label) for t in tags] == [(0.0, 0.295, "A4"), (0.395, 0.644, "A3")]


def test_the_median_bridges_one_frame_dropouts_and_octave_jumps() -> None:
    scores = _scores((440, 0.9, 20), (0, 0.1, 1), (440, 0.9, 20), (880, 0.9, 2), (440, 0.9, 20))
    assert [t.label for t in _tag_all(scores)] == ["A4"]
    unfiltered = _tag_all(scores, PitchParams(median_frames=1, min_duration_ms=0))
    assert [t.label for t in unfiltered] == ["A4", "A4", "A5", "A4"]


def test_within_one_semitone_is_one_note_and_a_semitone_step_is_two() -> None:
    drift = np.stack([440 * 2 ** (np.linspace(-0.4, 0.4, 40) / 12), np.full(40, 0.9)], axis=1)
    assert [t.label for t in _tag_all(drift)] == ["A4"]
    step = _scores((440, 0.9, 20), (466.16, 0.9, 20))
    tags = _tag_all(step)
    assert [t.label for t in tags] == ["A4", "A#4"]
    assert tags[0].end == tags[1].start  # back to back, sharing the boundary


def test_threshold_and_minimum_duration() -> None:
    scores = _scores((440, 0.6, 30), (0, 0.1, 10), (330, 0.9, 9), (0, 0.1, 10), (330, 0.9, 11))
    assert [t.label for t in _tag_all(scores)] == ["E4"]  # 0.6 < 0.65; 9 frames < 100 ms
    low = _tag_all(scores, PitchParams(threshold=0.5, min_duration_ms=80))
    assert [t.label for t in low] == ["A4", "E4", "E4"]


@pytest.mark.parametrize("width", [1, 3, 5, 9])
def test_random_chunking_gives_the_same_tags_as_one_push(width: int) -> None:
    rng = np.random.default_rng(width)
    runs = []
    for _ in range(40):
        voiced = rng.random() < 0.7
        runs.append(
            (
                float(rng.uniform(60, 1500)) if voiced else 0.0,
                float(rng.uniform(0.66, 1.0) if voiced else rng.uniform(0, 0.6)),
                int(rng.integers(1, 40)),
            )
        )
    scores = _scores(*runs)
    scores[:, 1] = np.clip(scores[:, 1] + rng.normal(0, 0.05, len(scores)), 0, 1)
    params = PitchParams(median_frames=width, min_duration_ms=50)
    whole = _tag_all(scores, params)
    assert len(whole) >= 10
    for _ in range(20):
        cuts = np.sort(rng.choice(np.arange(1, len(scores)), size=rng.integers(1, 30)))
        assert _tag_all(scores, params, chunks=list(cuts)) == whole
    single_frames = list(range(1, len(scores)))
    assert _tag_all(scores, params, chunks=single_frames) == whole


def test_note_labels_are_every_note_from_c1_to_b7() -> None:
    assert NOTE_LABELS[0] == "C1" and NOTE_LABELS[-1] == "B7"
    assert len(NOTE_LABELS) == 84
    assert len(set(NOTE_LABELS)) == 84


@pytest.mark.parametrize("width", [3, 5, 101])
def test_medians_of_all_frames_at_once_equal_one_frame_at_a_time(width: int) -> None:
    """The tagger takes every voiced frame's median in one call (a 2-hour job's new parameters
    took seconds one frame at a time); its tags rely on these being the same numbers."""
    rng = np.random.default_rng(width)
    pitch = 60 + 12 * rng.random(5000)
    pitch[rng.random(5000) < 0.4] = np.nan  # unvoiced frames
    windows = sliding_window_view(pitch, width)
    voiced = np.count_nonzero(~np.isnan(windows), axis=1) > width // 2
    at_once = np.nanmedian(windows[voiced], axis=1)
    one_by_one = [float(np.nanmedian(row)) for row in windows[voiced]]
    assert at_once.tolist() == one_by_one and len(one_by_one) > 1000


class _FrameByFrame(PitchTagger):
    """The tagger as it stepped every frame in Python before runs of one note were stepped at
    once: the reference the tags must equal to the byte."""

    def _advance(self, rows: np.ndarray) -> list[Tag]:
        self.window = np.concatenate([self.window, rows])
        width = 2 * self.half + 1
        out: list[Tag] = []
        if len(self.window) < width:
            return out
        pitch = sliding_window_view(self.window[:, 0], width)
        voiced = np.count_nonzero(~np.isnan(pitch), axis=1) > self.half
        medians = np.full(len(pitch), np.nan)
        if voiced.any():
            medians[voiced] = np.nanmedian(pitch[voiced], axis=1)
        first = self.window_start + self.half
        for offset in range(len(pitch)):
            if not voiced[offset]:
                self._close(out)
                continue
            median = float(medians[offset])
            frequency = 440 * 2 ** ((median - 69) / 12)
            periodicity = float(self.window[offset + self.half, 1])
            self._step(first + offset, round(median), periodicity, frequency, out)
        self.window = self.window[len(pitch) :]
        self.window_start += len(pitch)
        return out

    def _step(
        self, frame: int, midi: int, periodicity: float, frequency: float, out: list[Tag]
    ) -> None:
        if not LOWEST_MIDI <= midi <= HIGHEST_MIDI:
            self._close(out)
            return
        note = self.note
        if note is not None and note.midi == midi and note.last == frame - 1:
            note.last = frame
            note.periodicity += periodicity
            note.frequency += frequency
            return
        self._close(out)
        self.note = _Note(midi, frame, frame, periodicity, frequency)


@pytest.mark.parametrize("width", [1, 5, 9])
def test_runs_of_a_note_at_once_give_the_frame_by_frame_tags_to_the_byte(width: int) -> None:
    rng = np.random.default_rng(100 + width)
    frames = 20_000
    # A wandering melody over the whole range (and past it), with dropouts and noisy voicing.
    midi = np.clip(np.cumsum(rng.choice([-1, 0, 0, 0, 0, 0, 1], frames)) + 60, 10, 120)
    hz = 440 * 2 ** ((midi + rng.normal(0, 0.2, frames) - 69) / 12)
    scores = np.stack([hz, rng.uniform(0.4, 1.0, frames)], axis=1).astype(np.float32)
    scores[rng.random(frames) < 0.05, 0] = 0
    params = PitchParams(median_frames=width, min_duration_ms=20)
    for cuts in ([], sorted(rng.choice(np.arange(1, frames), 50, replace=False).tolist())):
        taggers = [PitchTagger(params, RATE, 160), _FrameByFrame(params, RATE, 160)]
        found = []
        for tagger in taggers:
            tags: list[Tag] = []
            for chunk in np.split(scores, cuts):
                tags += tagger.push(chunk)
            found.append(tags + tagger.finish(frames * 160))
        assert len(found[0]) > 300
        assert found[0] == found[1]

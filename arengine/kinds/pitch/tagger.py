"""Note tags from per-frame pitch, streamed: voicing, a median filter, notes by semitone.

Scores are `(frames, 2)` arrays of `[frequency_hz, periodicity]`, pushed in timestamp order,
segment after segment. Each frame is voiced when its periodicity reaches the threshold; then a
median filter of odd width `median_frames` runs over the stream (the voicing by majority, the pitch
in semitones by the median of the voiced frames), so one frame's dropout or octave jump does not
split a note. A streaming median needs `median_frames // 2` frames after a frame before that frame
is final: they are kept across pushes, and `finish` flushes them as if the recording ended in
silence. Consecutive filtered frames on the same MIDI note form one note tag; its score is the
mean periodicity of its frames and its `frequency_hz` the mean of their filtered frequencies.

Times: frame `i` is centred on sample `i * hop`. A note over frames `a..b` spans
`[a * hop - hop / 2, b * hop + hop / 2]` (clipped to the recording), so back-to-back notes share
their boundary and a note's length is its frame count times the hop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from arengine.errors import ErrorCode, InvalidInput
from arengine.kinds.fields import extra_of
from arengine.kinds.notation import note_name
from arengine.kinds.pitch.fields import FREQUENCY_HZ
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag

LOWEST_MIDI = 24
"""C1 (32.7 Hz); CREPE's lowest bin is 31.7 Hz."""
HIGHEST_MIDI = 107
"""B7 (3951 Hz); CREPE's highest bin is 2006 Hz, so the top octave is never reached."""


def _runs(medians: np.ndarray) -> list[tuple[int, int, int]]:
    """`(begin, end, midi)` of each run of frames of one note: voiced (a median), rounded into
    `LOWEST_MIDI..HIGHEST_MIDI`, the same note as the frame before."""
    voiced = ~np.isnan(medians)
    midi = np.zeros(len(medians), np.int64)
    midi[voiced] = np.rint(medians[voiced])  # round half to even, as `round` does
    usable = voiced & (midi >= LOWEST_MIDI) & (midi <= HIGHEST_MIDI)
    same = usable[1:] & usable[:-1] & (midi[1:] == midi[:-1])
    begins = np.flatnonzero(usable & np.r_[True, ~same])
    ends = np.flatnonzero(usable & np.r_[~same, True]) + 1
    return list(zip(begins.tolist(), ends.tolist(), midi[begins].tolist(), strict=True))


NOTE_LABELS = tuple(note_name(m) for m in range(LOWEST_MIDI, HIGHEST_MIDI + 1))
"""Every label a note tag can have: C1 .. B7."""


def semitones(frequency_hz: np.ndarray) -> np.ndarray:
    """Fractional MIDI note numbers: 69 is A4 (440 Hz)."""
    result: np.ndarray = 69 + 12 * np.log2(np.maximum(frequency_hz, 1e-6) / 440)
    return result


@dataclass(frozen=True, slots=True)
class PitchParams(Params):
    """Post-processing parameters of pitch models."""

    kind: ClassVar[str] = "pitch"

    # Measured with CREPE tiny: sine and harmonic tones from 110 to 1000 Hz gave at least 0.80 on
    # every frame; white and brown noise at various levels at most 0.61 (99.9th percentile 0.53).
    threshold: float = param(
        0.65,
        "Voicing: a frame is pitched when its periodicity (CREPE's peak activation) reaches this.",
        Bounds(0, 1),
    )
    min_duration_ms: float = param(100, "Shorter notes are dropped.", Bounds(0, 3_600_000))
    median_frames: int = param(
        5,
        "Odd width of the median filter, in frames (10 ms each); 1 turns it off.",
        Bounds(1, 101, whole=True),
    )

    def check(self) -> None:
        if self.median_frames % 2 == 0:
            raise InvalidInput(
                f"median_frames must be odd, got {self.median_frames}",
                code=ErrorCode.INVALID_PARAMETER,
            )


@dataclass(slots=True)
class _Note:
    midi: int
    first: int
    last: int
    periodicity: float
    frequency: float

    @property
    def frames(self) -> int:
        return self.last - self.first + 1


class PitchTagger:
    """Feed `(frames, 2)` `[frequency_hz, periodicity]` scores with `push`, then `finish`.

    Example::

        tagger = PitchTagger(PitchParams(), sample_rate=16000, hop=160)
        tags = tagger.push(scores) + tagger.finish(audio_samples)  # e.g. [Tag(..., label='A4')]
    """

    def __init__(self, params: PitchParams, sample_rate: int, hop: int) -> None:
        self.params = params
        self.sample_rate = sample_rate
        self.hop = hop
        self.half = params.median_frames // 2
        # Frames not yet final, plus the `half` frames before them that their windows need:
        # columns are semitones (NaN when unvoiced) and periodicity. The recording is preceded by
        # `half` unvoiced frames.
        self.window = np.full((self.half, 2), np.nan)
        self.window_start = -self.half
        """Frame index of `window[0]`."""
        self.next_frame = 0
        """Frame index of the next pushed frame."""
        self.note: _Note | None = None
        min_frames = params.min_duration_ms / 1000 * sample_rate / hop
        self.min_frames = max(1, math.ceil(min_frames - 1e-9))

    def push(self, scores: np.ndarray) -> list[Tag]:
        """The next frames' `[frequency_hz, periodicity]`; returns the notes now final."""
        scores = np.asarray(scores, dtype=np.float64).reshape(-1, 2)
        frequency, periodicity = scores[:, 0], scores[:, 1]
        voiced = (periodicity >= self.params.threshold) & (frequency > 0)
        pitch = np.where(voiced, semitones(frequency), np.nan)
        rows = np.stack([pitch, periodicity], axis=1)
        self.next_frame += len(rows)
        return self._advance(rows)

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at the model's rate): the remaining notes."""
        out = self._advance(np.full((self.half, 2), np.nan))
        self._close(out, audio_samples)
        return out

    def _advance(self, rows: np.ndarray) -> list[Tag]:
        """Append rows; filter every frame whose window is complete; group them into notes."""
        self.window = np.concatenate([self.window, rows])
        width = 2 * self.half + 1
        out: list[Tag] = []
        if len(self.window) < width:
            return out
        pitch = sliding_window_view(self.window[:, 0], width)
        voiced = np.count_nonzero(~np.isnan(pitch), axis=1) > self.half
        # Every voiced frame's median at once (the same values as one frame's at a time; a
        # 2-hour job's new parameters took seconds in a median per frame).
        medians = np.full(len(pitch), np.nan)
        if voiced.any():
            medians[voiced] = np.nanmedian(pitch[voiced], axis=1)
        first = self.window_start + self.half
        done = len(pitch)
        periodicity = self.window[self.half : self.half + done, 1].tolist()
        semitones_at = medians.tolist()
        # Runs of frames of one note are found in numpy; Python steps a note at a time and only
        # adds within it (a frame at a time, with its checks and calls, held the GIL for each of
        # CREPE's 100 frames a second).
        runs = _runs(medians)
        for begin, end, midi in runs:
            if self.note is not None and (begin > 0 or not self._continues(first, midi)):
                self._close(out)  # a frame before it (unvoiced, out of range, another note)
            self._extend(
                first + begin,
                first + end - 1,
                midi,
                periodicity[begin:end],
                semitones_at[begin:end],
            )
            if end < done:
                self._close(out)  # the frame after it
        if not runs and done and self.note is not None:
            self._close(out)
        self.window = self.window[done:]
        self.window_start += done
        return out

    def _continues(self, frame: int, midi: int) -> bool:
        note = self.note
        return note is not None and note.midi == midi and note.last == frame - 1

    def _extend(
        self, first: int, last: int, midi: int, periodicity: list[float], medians: list[float]
    ) -> None:
        """Frames `first..last` of one note: the open note's, if any, else a new one. Summed in
        frame order in Python floats, so the sums are the ones a frame at a time gave."""
        note = self.note
        if note is None:
            note = self.note = _Note(midi, first, first, 0.0, 0.0)
        periodicity_sum, frequency_sum = note.periodicity, note.frequency
        for value, median in zip(periodicity, medians, strict=True):
            periodicity_sum += value
            frequency_sum += 440 * 2 ** ((median - 69) / 12)
        note.last = last
        note.periodicity, note.frequency = periodicity_sum, frequency_sum

    def _close(self, out: list[Tag], audio_samples: int | None = None) -> None:
        """End the current note, if any; tag it if it is long enough."""
        note = self.note
        if note is None:
            return
        self.note = None
        if note.frames < self.min_frames:
            return
        start = max(0.0, (note.first - 0.5) * self.hop)
        end = (note.last + 0.5) * self.hop
        if audio_samples is not None:
            end = min(end, float(audio_samples))
        out.append(
            Tag(
                start=round(start / self.sample_rate, 3),
                end=round(end / self.sample_rate, 3),
                label=note_name(note.midi),
                score=round(min(max(note.periodicity / note.frames, 0.0), 1.0), 4),
                extra=extra_of((FREQUENCY_HZ, round(note.frequency / note.frames, 2))),
            )
        )

"""Polyphonic note tags from basic-pitch's activations, streamed: its note creation, in chunks.

Scores are `(frames, 440)` rows: note (88 keys, A0 .. C8), onset (88) and contour (264 bins, a
third of a semitone each), pushed in order. `note_events` is basic-pitch 0.4.0's
`output_to_notes_polyphonic` (Apache-2.0): onset peaks over a threshold, latest first, each extended
while the key's note activation stays over `frame_threshold` (gaps under 11 frames allowed) and
claiming that stretch and the neighbouring keys; then the "melodia trick" turns the strongest
remaining activity into notes. Pitch bends are its `get_pitch_bends`.

That algorithm looks at the whole recording; the tagger runs it on chunks. It handles onsets
latest first, so a note is shaped only by notes that start after it. Every `_CHUNK` frames (15 s)
there is a cut: the chunk's notes are those starting before the cut, computed on the frames up
to `_LOOKAHEAD` (5 s) after it, a lookahead doubled while a note reaches its end (up to 40 s: a
note sounding longer past a cut is the only one that can split). The next chunk starts `_MARGIN`
frames before the cut (onset peaks need their neighbours) and keeps the notes from the cut on.
So a segment cut never splits or repeats a note; the cuts depend only on the frames, so the
notes do not depend on the segments; and they are the whole recording's notes, except that
- basic-pitch rescales its inferred onsets by the recording's largest onset and frame rise; here
  by the chunk's;
- the melodia trick (off by default) takes the strongest remaining activity of the whole
  recording first; here of the chunk.

Every request's work and answer are bounded whatever its parameters: both thresholds are at least
0.05 (at 0 a note never ends), a chunk examines at most `MAX_ONSETS_PER_S` onset peaks a second
and keeps at most `MAX_NOTES_PER_S` notes a second and `MAX_SOUNDING` at once on average (the
strongest), and every loop is linear in the frames (the scans in numpy, the melodia trick over
one sort).
The last window pushed is never used before `finish`: its frames may be zero padding past the
recording's end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from arengine.kinds.fields import extra_of
from arengine.kinds.notation import note_name
from arengine.kinds.notes.fields import MIDI, PITCH_BEND
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag

KEYS = 88
LOWEST_MIDI = 21
CONTOUR_BINS = 264
COLUMNS = 2 * KEYS + CONTOUR_BINS
"""Note, onset and contour activations per frame."""
NOTE_COLUMNS = 2 * KEYS
"""The columns notes are made of (note and onset); the contour after them gives pitch bends."""
FRAMES_PER_S = 22050 / 256
ENERGY_TOL = 11
"""Frames under `frame_threshold` that end a note (basic-pitch's `energy_tol`)."""
_MARGIN = 4
_CHUNK = 1290
"""Frames (15 s) from one cut to the next."""
_LOOKAHEAD = 430
"""Frames (5 s) after a cut that the notes before it see; doubled while a note reaches its end."""
_MAX_LOOKAHEAD = 8 * _LOOKAHEAD
"""40 s: a note still going on then is cut (only such a note can split)."""
MAX_NOTES_PER_S = 50
"""Most notes tagged per second of audio (the strongest are kept): a fast pianist plays ~20."""
MAX_SOUNDING = 24
"""Most notes sounding at once, on average over a chunk: bounds the note frames, so the pitch
bends, a request's output holds (the strongest notes are kept)."""
MAX_ONSETS_PER_S = 4 * MAX_NOTES_PER_S
"""Most onset peaks a chunk examines per second (the highest): bounds the work whatever the
thresholds."""
_BEND_TOLERANCE = 25
_BEND_WINDOW = np.exp(-0.5 * (np.arange(-_BEND_TOLERANCE, _BEND_TOLERANCE + 1) / 5.0) ** 2)
"""scipy's `gaussian(51, std=5)`, as basic-pitch weights the contour for pitch bends."""


@dataclass(frozen=True, slots=True)
class NotesParams(Params):
    """Post-processing parameters of `notes` models (basic-pitch's `predict()` names)."""

    kind: ClassVar[str] = "notes"

    # Tuned on FluidR3 renderings (loadtests/notes_tuning.py, seeds the benchmark does not use):
    # basic-pitch's 0.5 / 0.3 / melodia gave mean note F1 0.73; 0.8 / 0.35 / no melodia 0.88,
    # mostly from precision (speech and noise made notes; melodia's notes lack onsets).
    # A frame threshold of 0 never ends a note, so every onset became a note to the chunk's
    # end (tens of thousands of overlapping notes from seconds of audio): 0.05 is the floor.
    onset_threshold: float = param(
        0.8, "A note starts at an onset activation peak at least this high.", Bounds(0.05, 1)
    )
    frame_threshold: float = param(
        0.35,
        "A note lasts while its note activation stays at least this high.",
        Bounds(0.05, 1),
    )
    min_note_ms: float = param(127.7, "Notes this short or shorter are dropped.", Bounds(0, 10_000))
    melodia: int = param(
        0,
        "1: also make notes of strong activity without an onset (basic-pitch's melodia "
        "trick); 0: only from onsets.",
        Bounds(0, 1, whole=True),
    )
    infer_onsets: int = param(
        1, "1: sudden rises of the note activation count as onsets too.", Bounds(0, 1, whole=True)
    )
    pitch_bends: int = param(
        0,
        "1: each note tag carries its pitch bends (thirds of a semitone, one per frame).",
        Bounds(0, 1, whole=True),
    )

    @property
    def min_note_frames(self) -> int:
        return round(self.min_note_ms / 1000 * round(FRAMES_PER_S))


Event = tuple[int, int, int, float]
"""`(start_frame, end_frame, key, amplitude)`: end exclusive, key 0 is A0."""


def inferred_onsets(onsets: np.ndarray, frames: np.ndarray, n_diff: int = 2) -> np.ndarray:
    """basic-pitch's `get_infered_onsets`: onsets or sharp rises of the frame activations."""
    diffs = []
    for n in range(1, n_diff + 1):
        shifted = np.concatenate([np.zeros((n, frames.shape[1])), frames])
        diffs.append(shifted[n:, :] - shifted[:-n, :])
    frame_diff = np.min(diffs, axis=0)
    frame_diff[frame_diff < 0] = 0
    frame_diff[:n_diff, :] = 0
    peak = np.max(frame_diff)
    if peak > 0:
        frame_diff = np.max(onsets) * frame_diff / peak
    result: np.ndarray = np.max([onsets, frame_diff], axis=0)
    return result


def _scan(energy: np.ndarray, key: int, start: int, threshold: float, step: int) -> tuple[int, int]:
    """basic-pitch's inner loop: from `start` (exclusive) in `step` direction until ENERGY_TOL
    frames in a row are under `threshold` or the chunk's edge; where it stopped, and how many
    quiet frames it had counted. Vectorised over growing stretches, so its cost is the distance
    it went (in numpy), not a Python step per frame."""
    column = energy[:, key]
    edge = len(energy) - 1 if step > 0 else 0  # the loop stops before reading the edge frame
    at, quiet, width = start + step, 0, 2 * ENERGY_TOL
    if (at >= edge) if step > 0 else (at <= edge):
        return at, 0
    while at != edge:
        stop = min(at + width, edge) if step > 0 else max(at - width, edge)
        stretch = column[at:stop] if step > 0 else column[at:stop:-1]
        runs = _quiet_runs(stretch < threshold, quiet)
        over = np.flatnonzero(runs >= ENERGY_TOL)
        if len(over):
            return at + step * (int(over[0]) + 1), ENERGY_TOL
        quiet = int(runs[-1])
        at, width = stop, 2 * width
    return edge, quiet


def _quiet_runs(quiet: np.ndarray, carried: int) -> np.ndarray:
    """For each frame, how many quiet frames in a row end there (`carried` before the first)."""
    index = np.arange(len(quiet))
    last_loud = np.maximum.accumulate(np.where(quiet, -1 - carried, index))
    return index - last_loud


def _claim(energy: np.ndarray, first: int, last: int, key: int) -> None:
    energy[first:last, max(key - 1, 0) : key + 2] = 0


def note_events(
    frames: np.ndarray, onsets: np.ndarray, params: NotesParams, at_start: bool = False
) -> list[Event]:
    """basic-pitch's `output_to_notes_polyphonic` on one chunk of `(frames, 88)` activations;
    `at_start`: the chunk begins the recording, whose first frame follows silence."""
    threshold, min_len = params.frame_threshold, params.min_note_frames
    if len(frames) < 3:  # no onset peak (it needs two neighbours), no note
        return []
    if params.infer_onsets:
        onsets = inferred_onsets(onsets, frames)
    # scipy's argrelmax along time: strictly above both neighbours; the edges never are.
    peaks = np.zeros(onsets.shape)
    inner = onsets[1:-1]
    peaks[1:-1] = np.where((inner > onsets[:-2]) & (inner > onsets[2:]), inner, 0)
    if at_start:  # silence before the recording: a note struck at 0 s peaks at frame 0
        peaks[0] = np.where(onsets[0] > onsets[1], onsets[0], 0)
    times, keys = _strongest_peaks(peaks, params.onset_threshold)
    energy = frames.astype(np.float64, copy=True)
    n = len(frames)
    events: list[Event] = []
    for start, key in zip(times[::-1], keys[::-1], strict=True):
        if start >= n - 1:
            continue
        i, k = _scan(energy, int(key), int(start), threshold, 1)
        end = i - k
        if end - start <= min_len:
            continue
        _claim(energy, int(start), end, int(key))
        events.append((int(start), end, int(key), float(np.mean(frames[start:end, key]))))
    if params.melodia:
        events += _melodia(frames, energy, threshold, min_len)
    return events


def _strongest_peaks(peaks: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The onset peaks at least `threshold`, in (time, key) order; only the highest
    `MAX_ONSETS_PER_S` per second of the chunk."""
    times, keys = np.nonzero(peaks >= threshold)
    most = max(1, int(MAX_ONSETS_PER_S * len(peaks) / FRAMES_PER_S))
    if len(times) <= most:
        return times, keys
    kept = np.sort(np.argsort(-peaks[times, keys], kind="stable")[:most])
    return times[kept], keys[kept]


def _melodia(frames: np.ndarray, energy: np.ndarray, threshold: float, min_len: int) -> list[Event]:
    """The strongest remaining activity, grown both ways, claiming every frame its scans visit.

    basic-pitch takes the maximum of the whole chunk once per note. A frame's energy only ever
    keeps its value or becomes 0, so the strongest remaining frame is the first one still
    unclaimed in one sort of the frames over `threshold` (ties in `argmax` order): the same
    notes in n log n instead of once per note over the chunk."""
    events: list[Event] = []
    flat = energy.ravel()
    candidates = np.flatnonzero(flat > threshold)
    order = candidates[np.argsort(-flat[candidates], kind="stable")]
    for middle, key in zip(*np.unravel_index(order, energy.shape), strict=True):
        middle, key = int(middle), int(key)
        if energy[middle, key] <= threshold:  # claimed by an earlier note
            continue
        energy[middle, key] = 0
        # Each scan reads a frame of `key` before zeroing it, so reading first is the same.
        forward, k_forward = _scan(energy, key, middle, threshold, 1)
        backward, k_backward = _scan(energy, key, middle, threshold, -1)
        _claim(energy, middle + 1, forward, key)
        _claim(energy, backward + 1, middle, key)
        end, start = forward - 1 - k_forward, backward + 1 + k_backward
        if end - start <= min_len:
            continue
        events.append((start, end, key, float(np.mean(frames[start:end, key]))))
    return events


def pitch_bends(contour: np.ndarray, event: Event) -> tuple[int, ...]:
    """basic-pitch's `get_pitch_bends` for one note: per frame, the contour peak near the key
    (Gaussian-weighted, 25 bins either side), in thirds of a semitone from the key."""
    start, end, key, _ = event
    centre = 3 * key
    low, high = max(centre - _BEND_TOLERANCE, 0), min(CONTOUR_BINS, centre + _BEND_TOLERANCE + 1)
    weights = _BEND_WINDOW[low - (centre - _BEND_TOLERANCE) : high - (centre - _BEND_TOLERANCE)]
    peaks = np.argmax(contour[start:end, low:high] * weights, axis=1)
    # Whole numbers: Python keeps one shared object per small int, where a float per frame
    # took 24 bytes more.
    bends: tuple[int, ...] = tuple((peaks - (centre - low)).tolist())
    return bends


@dataclass(frozen=True, slots=True)
class FrameGrid:
    """Where frames sit: `per_window` frames `hop` apart, windows `step` samples apart."""

    hop: int = 256
    per_window: int = 142
    step: int = 36164

    def sample(self, frame: int) -> int:
        """The sample a frame is centred on."""
        window, inside = divmod(frame, self.per_window)
        return window * self.step + inside * self.hop


def _within_budget(events: list[Event], frames: int) -> list[Event]:
    """The strongest notes of `frames` frames, within `MAX_NOTES_PER_S` and `MAX_SOUNDING`."""
    most_notes = max(1, int(MAX_NOTES_PER_S * frames / FRAMES_PER_S))
    most_frames = MAX_SOUNDING * max(frames, 1)
    if len(events) <= most_notes and sum(e[1] - e[0] for e in events) <= most_frames:
        return events
    kept: list[Event] = []
    total = 0
    for event in sorted(events, key=lambda e: (-e[3], e[0], e[2])):
        length = event[1] - event[0]
        if len(kept) < most_notes and total + length <= most_frames:
            kept.append(event)
            total += length
    return kept


class NotesTagger:
    """Feed `(frames, 440)` activations with `push`, then `finish`; tags in start order.

    Without pitch bends it reads only the first `columns_read` (176) columns: it may be fed
    `(frames, 176)` (a job's kept scores read without their contour).

    >>> scores = np.zeros((300, COLUMNS), np.float32)
    >>> scores[20:120, 39] = 0.9  # key 39 (C4) sounds from frame 20 to 119
    >>> scores[20, KEYS + 39] = 0.95  # with an onset at frame 20
    >>> tagger = NotesTagger(NotesParams())
    >>> [(t.label, MIDI.of(t), t.start, t.end) for t in tagger.push(scores) + tagger.finish(76800)]
    [('C4', 60, 0.232, 1.393)]
    """

    def __init__(
        self, params: NotesParams, sample_rate: int = 22050, grid: FrameGrid | None = None
    ) -> None:
        self.params = params
        self.sample_rate = sample_rate
        self.grid = grid or FrameGrid()
        self.columns_read = COLUMNS if params.pitch_bends else NOTE_COLUMNS
        self._buffer = np.zeros((0, self.columns_read), dtype=np.float32)
        self._start = 0
        """Frame index of `_buffer[0]` in the recording."""
        self._done = 0
        """Notes that start before this frame have been tagged."""

    def push(self, scores: np.ndarray) -> list[Tag]:
        """The next frames' activations; returns the notes now final."""
        rows = np.asarray(scores, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] not in (COLUMNS, self.columns_read):
            rows = rows.reshape(-1, COLUMNS)
        self._buffer = np.concatenate([self._buffer, rows[:, : self.columns_read]])
        tags: list[Tag] = []
        while (events := self._next_chunk()) is not None:
            cut = self._done - self._start + _CHUNK
            tags += self._tags(events, cut)
            drop = cut - _MARGIN
            self._buffer = self._buffer[drop:].copy()
            self._start += drop
        return tags

    def _next_chunk(self) -> list[Event] | None:
        """The notes of the next chunk, or None until enough frames are here. Cuts and lookaheads
        depend only on the frames, never on how they were pushed, so neither do the notes."""
        cut = self._done - self._start + _CHUNK
        lookahead = _LOOKAHEAD
        while cut + lookahead + self.grid.per_window <= len(self._buffer):
            events = self._events(cut, cut + lookahead)
            edge = cut + lookahead - ENERGY_TOL
            if lookahead >= _MAX_LOOKAHEAD or all(end < edge for _, end, _, _ in events):
                return events
            lookahead *= 2  # a note may go on past the lookahead
        return None

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at 22.05 kHz): the remaining notes."""
        # Frames centred past the end belong to the last window's zero padding.
        frames = self._start + len(self._buffer)
        while frames > self._start and self.grid.sample(frames - 1) >= audio_samples:
            frames -= 1
        self._buffer = self._buffer[: frames - self._start]
        end = len(self._buffer)
        tags = self._tags(self._events(end, end), end)
        end_s = round(audio_samples / self.sample_rate, 3)
        return [tag if tag.end <= end_s else dataclasses.replace(tag, end=end_s) for tag in tags]

    def _events(self, cut: int, end: int) -> list[Event]:
        """The notes that start in `[done, cut)`, from the buffer's first `end` frames."""
        chunk = self._buffer[:end]
        done = self._done - self._start
        onsets = chunk[:, KEYS : 2 * KEYS]
        events = note_events(chunk[:, :KEYS], onsets, self.params, at_start=self._start == 0)
        kept = _within_budget([e for e in events if done <= e[0] < cut], cut - done)
        return sorted(kept, key=lambda e: (e[0], e[2]))

    def _tags(self, events: list[Event], cut: int) -> list[Tag]:
        self._done = self._start + cut
        contour = self._buffer[:, 2 * KEYS :]
        return [self._tag(event, contour) for event in events]

    def _tag(self, event: Event, contour: np.ndarray) -> Tag:
        start, end, key, amplitude = event
        bends = pitch_bends(contour, event) if self.params.pitch_bends else None
        return Tag(
            start=round(self.grid.sample(self._start + start) / self.sample_rate, 3),
            end=round(self.grid.sample(self._start + end) / self.sample_rate, 3),
            label=note_name(key + LOWEST_MIDI),
            score=round(amplitude, 4),
            extra=extra_of((MIDI, key + LOWEST_MIDI), (PITCH_BEND, bends)),
        )

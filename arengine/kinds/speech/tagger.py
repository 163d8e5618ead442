"""Speech tags from per-frame speech probabilities, streamed.

A faithful, incremental port of silero-vad's `get_speech_timestamps_from_probs`: probabilities are
pushed in timestamp order, segment after segment, and the state machine runs across segment
boundaries, so a cut between segments never splits or duplicates a tag. The defaults are
silero-vad's.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from arengine.errors import ErrorCode, InvalidInput
from arengine.postprocess.palette import Palette
from arengine.postprocess.params import Bounds, Params, param
from arengine.types import Tag

_PROBABILITY = Bounds(0, 1, low_open=True, high_open=True)
_MS = Bounds(0, 60_000, whole=True)


@dataclass(frozen=True, slots=True)
class SpeechParams(Params):
    """Thresholds and durations, named and defaulted as in silero-vad's `get_speech_timestamps`."""

    kind: ClassVar[str] = "speech"

    threshold: float = param(0.5, "Speech starts at or above this probability.", _PROBABILITY)
    neg_threshold: float | None = param(
        None,
        "Hysteresis: speech ends below this probability (default threshold - 0.15, at least "
        "0.01); at most threshold.",
        _PROBABILITY,
    )
    min_speech_duration_ms: int = param(250, "Shorter speech is dropped.", _MS)
    max_speech_duration_s: float | None = param(
        None,
        "Longer speech is split at its longest pause (default: no limit).",
        Bounds(0.5, 86_400),
    )
    min_silence_duration_ms: int = param(100, "Shorter pauses do not end speech.", _MS)
    speech_pad_ms: int = param(
        30, "Padding added to each side of a speech tag.", Bounds(0, 10_000, whole=True)
    )
    min_silence_at_max_speech: int = 98
    use_max_poss_sil_at_max_speech: bool = True

    def check(self) -> None:
        if self.neg_threshold is not None and self.neg_threshold > self.threshold:
            raise InvalidInput(
                f"neg_threshold ({self.neg_threshold}) must be at most threshold "
                f"({self.threshold}): speech would end above the level that starts it",
                code=ErrorCode.INVALID_PARAMETER,
            )

    def as_dict(self) -> dict[str, float]:
        """As numbers within their ranges: `neg_threshold` its effective value; no
        `max_speech_duration_s` when there is no limit (-1 and 0 stood for those, outside the
        ranges the same listing documents)."""
        out = Params.as_dict(self)
        out.setdefault("neg_threshold", round(self.effective_neg_threshold, 6))
        return out

    @property
    def effective_neg_threshold(self) -> float:
        """Where speech ends: `neg_threshold`, or threshold - 0.15 (at least 0.01)."""
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


class _NextTrue:
    """For an index i (up to len(mask)), the first index >= i where `mask` is true, else len:
    the mask as bytes and where its runs of true begin, not a Python int per frame (a 2-hour
    job's 225,000 frames at once, `SpeechTagger.whole`)."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask.tobytes()
        rising = np.flatnonzero(mask[1:] & ~mask[:-1]) + 1
        self.begins: list[int] = ([0] if len(mask) and mask[0] else []) + rising.tolist()
        self.size = len(mask)

    def __getitem__(self, i: int) -> int:
        if i < self.size and self.mask[i]:
            return i
        at = bisect_left(self.begins, i)
        return self.begins[at] if at < len(self.begins) else self.size


@dataclass(slots=True)
class _Speech:
    start: int
    end: int
    score: float


class SpeechTagger:
    """Feed probabilities with `push`, then `finish`; both return the tags that became final.

    >>> tagger = SpeechTagger(SpeechParams(), sample_rate=16000, hop=512)
    >>> import numpy as np
    >>> probabilities = np.r_[np.zeros(20), np.full(40, 0.9), np.zeros(20)]  # 32-ms windows
    >>> [(t.start, t.end, t.score) for t in tagger.push(probabilities) + tagger.finish(80 * 512)]
    [(0.61, 1.95, 0.9)]
    """

    def __init__(self, params: SpeechParams, sample_rate: int, hop: int) -> None:
        self.sample_rate = sample_rate
        self.hop = hop
        rate = sample_rate / 1000
        self.threshold = params.threshold
        self.neg_threshold = params.effective_neg_threshold
        self.min_speech = rate * params.min_speech_duration_ms
        self.pad = rate * params.speech_pad_ms
        max_speech_s = params.max_speech_duration_s or math.inf
        self.max_speech = sample_rate * max_speech_s - hop - 2 * self.pad
        self.min_silence = rate * params.min_silence_duration_ms
        self.min_silence_at_max = rate * params.min_silence_at_max_speech
        self.use_max_poss = params.use_max_poss_sil_at_max_speech
        self.triggered = False
        self.start: int | None = None
        self.temp_end = self.prev_end = self.next_start = 0
        self.possible_ends: list[tuple[int, int]] = []
        self.frame = 0
        self.sum = 0.0
        self.sum_at: dict[int, float] = {}
        """Sum of probabilities before a sample that may become a boundary; gives tag scores."""
        self.pending: _Speech | None = None
        """The last raw speech: final once the next one (or the end) fixes its padding."""

    def push(self, probabilities: Iterable[float]) -> list[Tag]:
        """Run the state machine over the next frames; return tags that can no longer change.

        Only the frames that can change the state are stepped in Python; numpy finds them, and
        the frames between them only add to the running sum (a sequential `cumsum`, so the sums
        and scores are the ones a frame-by-frame loop gives). This loop held the GIL for 5% of
        a loaded server's GIL-holding samples (loadtests/gil_profile.py).
        """
        if isinstance(probabilities, np.ndarray):
            values = probabilities.astype(np.float64)
        else:
            values = np.fromiter(probabilities, dtype=np.float64)
        sums = np.cumsum(np.concatenate(([self.sum], values)))
        above = _NextTrue(values >= self.threshold)
        below = _NextTrue(values < self.neg_threshold)
        out: list[Tag] = []
        first, n = self.frame, len(values)
        i = self._next_event(0, above, below, n)
        while i < n:
            self.sum = float(sums[i])
            self._step((first + i) * self.hop, float(values[i]), out)
            i = self._next_event(i + 1, above, below, n)
        self.sum = float(sums[n])
        self.frame = first + n
        self._settle(out)
        return out

    def _settle(self, out: list[Tag]) -> None:
        """Release the pending speech once its padding is fixed: when no next speech can start
        within two pads of its end, its end is padded by one pad whatever comes next. Without
        this a tag would wait for the next speech to start (a live stream's tag would come a
        whole pause late); the tags are the same, only sooner."""
        pending = self.pending
        if pending is None or (self.triggered and self.start is None):
            return
        earliest = self.start if self.start is not None else self.frame * self.hop
        if earliest - pending.end >= 2 * self.pad:
            pending.end = int(pending.end + self.pad)
            out.append(self._tag(pending))
            self.pending = None

    def _next_event(self, i: int, above: _NextTrue, below: _NextTrue, n: int) -> int:
        """The first frame from `i` on that `_step` would not pass over (`n` if none).

        Not triggered: only a frame at or above the threshold starts speech. Triggered: a frame
        below the negative threshold starts (or extends) a silence, and while a silence is open
        a frame at or above the threshold ends it; any frame may hit a finite maximum length.
        """
        if i >= n or (self.triggered and self.max_speech != math.inf):
            return i
        if not self.triggered:
            return above[i]
        if not self.temp_end:
            return below[i]
        return min(above[i], below[i])

    def whole(self, scores: np.ndarray | Palette, audio_samples: int) -> list[Tag]:
        """A whole recording's scores at once, on a fresh tagger (`WholeTagger`): one `push`,
        which gives the tags of any cut into segments, then `finish`."""
        array = scores.decode() if isinstance(scores, Palette) else scores
        return self.push(array) + self.finish(audio_samples)

    def finish(self, audio_samples: int) -> list[Tag]:
        """End of the recording (`audio_samples` at the model's rate): flush the last tags."""
        out: list[Tag] = []
        self._mark(audio_samples)
        if self.start is not None and audio_samples - self.start > self.min_speech:
            self._close(audio_samples, out)
        if self.pending is not None:
            self.pending.end = int(min(audio_samples, self.pending.end + self.pad))
            out.append(self._tag(self.pending))
            self.pending = None
        return out

    def _step(self, sample: int, probability: float, out: list[Tag]) -> None:
        if probability >= self.threshold and self.temp_end:
            silence = sample - self.temp_end
            if silence > self.min_silence_at_max:
                self._mark(sample)
                self.possible_ends.append((self.temp_end, silence))
            self.temp_end = 0
            if self.next_start < self.prev_end:
                self.next_start = self._mark(sample)
        if probability >= self.threshold and not self.triggered:
            self.triggered = True
            self.start = self._mark(sample)
            return
        over_long = self.start is not None and sample - self.start > self.max_speech
        if self.triggered and over_long and self._cut_at_max_speech(sample, out):
            return
        if probability < self.neg_threshold and self.triggered:
            if not self.temp_end:
                self.temp_end = self._mark(sample)
            silence_now = sample - self.temp_end
            if not self.use_max_poss and silence_now > self.min_silence_at_max:
                self.prev_end = self.temp_end
            if silence_now < self.min_silence:
                return
            if self.start is not None and self.temp_end - self.start > self.min_speech:
                self._close(self.temp_end, out)
            self._reset(triggered=False)

    def _cut_at_max_speech(self, sample: int, out: list[Tag]) -> bool:
        """silero-vad's cut of an over-long speech; True when the frame needs no more work."""
        if self.use_max_poss and self.possible_ends:
            self.prev_end, silence = max(self.possible_ends, key=lambda end: end[1])
            self._close(self.prev_end, out)
            self.next_start = self.prev_end + silence
            keep_going = self.next_start < self.prev_end + sample
            restart = self.next_start
            self._reset(triggered=keep_going)
            self.start = restart if keep_going else None
            return False
        if self.prev_end:
            self._close(self.prev_end, out)
            keep_going = self.next_start >= self.prev_end
            restart = self.next_start
            self._reset(triggered=keep_going)
            self.start = restart if keep_going else None
            return False
        self._close(self._mark(sample), out)
        self._reset(triggered=False)
        return True

    def _reset(self, *, triggered: bool) -> None:
        self.start = None
        self.prev_end = self.next_start = self.temp_end = 0
        self.possible_ends = []
        self.triggered = triggered

    def _mark(self, sample: int) -> int:
        self.sum_at[sample] = self.sum
        return sample

    def _close(self, end: int, out: list[Tag]) -> None:
        """A raw speech ended: pad it against the previous one, which is then final."""
        assert self.start is not None
        frames = max((end - self.start) / self.hop, 1.0)
        score = (self.sum_at.get(end, self.sum) - self.sum_at.get(self.start, 0.0)) / frames
        speech = _Speech(self.start, end, score)
        self.start = None
        if self.pending is None:  # the first speech of the recording
            speech.start = int(max(0, speech.start - self.pad))
        else:
            self._pad_between(self.pending, speech)
            out.append(self._tag(self.pending))
        self.pending = speech
        self.sum_at = {k: v for k, v in self.sum_at.items() if k >= end}

    def _pad_between(self, first: _Speech, second: _Speech) -> None:
        silence = second.start - first.end
        if silence < 2 * self.pad:
            first.end += int(silence // 2)
            second.start = int(max(0, second.start - silence // 2))
        else:
            first.end = int(first.end + self.pad)
            second.start = int(max(0, second.start - self.pad))

    def _tag(self, speech: _Speech) -> Tag:
        return Tag(
            start=round(speech.start / self.sample_rate, 3),
            end=round(speech.end / self.sample_rate, 3),
            label="speech",
            score=round(min(max(speech.score, 0.0), 1.0), 4),
        )

"""Cutting the decoded stream into segments with pre-roll (the first half of stage 2, features).

A segment carries the samples its model call needs: `context` samples of audio context, up to
`preroll` frames of audio before it (so recurrent state is warm at the segment's start), then the
segment's own frames. Segments are independent: the engine runs them in any order, on any thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """How a model's input stream is cut, all in samples at the model's rate."""

    hop: int
    """Samples per output frame."""
    context: int
    """Samples before the first frame that the model sees (zeros at the recording's start)."""
    segment_frames: int
    preroll_frames: int
    lookahead: int = 0
    """Samples after the last frame that the model sees (zeros at the recording's end)."""

    @property
    def segment_samples(self) -> int:
        return self.segment_frames * self.hop


@dataclass(frozen=True, slots=True)
class Segment:
    """One independent unit of work: model input plus where its output frames belong."""

    index: int
    first_frame: int
    """Index of the first output frame of this segment in the whole recording."""
    skip_frames: int
    """Leading output frames that belong to the pre-roll and are dropped."""
    frames: int
    """Output frames that belong to this segment."""
    samples: np.ndarray
    """`context + (skip_frames + frames) * hop + lookahead` float32 samples."""


class Segmenter:
    """Iterate over the segments of a mono stream; `total_samples` is known once exhausted.

    Example::

        segments = Segmenter(decode(path, 44100, 16000, cap), plan)
        firsts = [s.first_frame for s in segments]  # [0, 937, 1874] for 30-s segments of 512
    """

    def __init__(self, blocks: Iterator[np.ndarray], plan: SegmentPlan) -> None:
        self._blocks = blocks
        self._plan = plan
        # The stream as the model sees it: `context` zeros, then the audio.
        self._buffer = np.zeros(plan.context, dtype=np.float32)
        self._buffer_start = 0
        """Padded-stream index of `_buffer[0]`; audio sample `a` is padded index `a + context`."""
        self._index = 0
        self._audio_samples = 0
        self._exhausted = False
        self.total_samples: int | None = None

    @property
    def index(self) -> int:
        """How many segments have been produced."""
        return self._index

    def close(self) -> None:
        """Stop decoding and release the file."""
        close = getattr(self._blocks, "close", None)
        if close is not None:
            close()

    def __iter__(self) -> Iterator[Segment]:
        return self

    def __next__(self) -> Segment:
        plan = self._plan
        start = self._index * plan.segment_samples
        preroll = min(plan.preroll_frames * plan.hop, start)
        self._fill(start + plan.segment_samples + plan.context + plan.lookahead)
        new_samples = min(self._audio_samples - start, plan.segment_samples)
        if new_samples <= 0:
            self.total_samples = self._audio_samples
            raise StopIteration
        frames = -(-new_samples // plan.hop)
        first = start - preroll - self._buffer_start
        # Empty, then the tail past the audio zeroed: `np.zeros` takes fresh pages from the
        # allocator (calloc), each faulted in again by the copy; `empty` reuses freed ones.
        samples = np.empty(
            plan.context + preroll + frames * plan.hop + plan.lookahead, dtype=np.float32
        )
        available = self._buffer[first : first + len(samples)]
        samples[: len(available)] = available
        samples[len(available) :] = 0.0
        segment = Segment(
            index=self._index,
            first_frame=start // plan.hop,
            skip_frames=preroll // plan.hop,
            frames=frames,
            samples=samples,
        )
        self._index += 1
        self._drop_before(start + plan.segment_samples - plan.preroll_frames * plan.hop)
        return segment

    def _fill(self, padded_end: int) -> None:
        pending = [self._buffer]
        held = self._buffer_start + len(self._buffer)
        while held < padded_end and not self._exhausted:
            block = next(self._blocks, None)
            if block is None:
                self._exhausted = True
                break
            pending.append(block)
            held += len(block)
            self._audio_samples += len(block)
        if len(pending) > 1:
            self._buffer = np.concatenate(pending)

    def _drop_before(self, padded_index: int) -> None:
        drop = max(0, padded_index - self._buffer_start)
        if drop:
            self._buffer = self._buffer[drop:].copy()
            self._buffer_start += drop

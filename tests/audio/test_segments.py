"""Feature extraction: segments tile the stream exactly, with pre-roll and context."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from arengine.audio.segments import Segmenter, SegmentPlan


def _blocks(audio: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(audio), size):
        yield audio[start : start + size]


@pytest.mark.parametrize("length", [1, 511, 512, 5000, 40_960, 40_961, 123_457])
@pytest.mark.parametrize("block", [100, 4096, 65536])
@pytest.mark.parametrize("lookahead", [0, 352])
def test_segments_tile_the_stream(length: int, block: int, lookahead: int) -> None:
    plan = SegmentPlan(
        hop=512, context=64, segment_frames=20, preroll_frames=3, lookahead=lookahead
    )
    audio = np.arange(1, length + 1, dtype=np.float32)
    segmenter = Segmenter(_blocks(audio, block), plan)
    segments = list(segmenter)
    assert segmenter.total_samples == length
    assert sum(s.frames for s in segments) == -(-length // 512)
    for segment in segments:
        start = segment.first_frame * 512
        assert segment.index == start // plan.segment_samples
        assert len(segment.samples) == 64 + (segment.skip_frames + segment.frames) * 512 + lookahead
        # The model input is exactly the stream (zero-padded before 0 and after the end).
        padded = np.concatenate([np.zeros(64, np.float32), audio, np.zeros(1024, np.float32)])
        first = start - segment.skip_frames * 512
        assert np.array_equal(segment.samples, padded[first : first + len(segment.samples)])
        assert segment.skip_frames == min(3, segment.first_frame)


def test_nothing_for_an_empty_stream() -> None:
    plan = SegmentPlan(hop=512, context=64, segment_frames=20, preroll_frames=3)
    segmenter = Segmenter(iter([]), plan)
    assert list(segmenter) == []
    assert segmenter.total_samples == 0


def test_holds_a_bounded_buffer_on_long_streams() -> None:
    plan = SegmentPlan(hop=512, context=64, segment_frames=10, preroll_frames=2)
    segmenter = Segmenter(_blocks(np.zeros(3_000_000, np.float32), 4096), plan)
    largest = 0
    for _ in segmenter:
        largest = max(largest, len(segmenter._buffer))
    assert largest < plan.segment_samples + 2 * 4096 + 2 * 512 + 64

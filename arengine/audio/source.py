"""The entry point the engine calls: one segment source per model from a probed upload.

A request's models share one decoding of its upload (`decode.Decoding`, which resamples once per
distinct rate through `tee`), each cutting its own segments (`segments.Segmenter`). How it is
decoded (in process, in a child, in parts by a child each: `Reading`), the frame cap and the
read-ahead of an upload still arriving are decided here, so the engine only asks each source
for its next segment.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arengine.audio.arrival import Arrival
from arengine.audio.decode import Decoding, file_block_frames
from arengine.audio.segments import Segmenter, SegmentPlan
from arengine.audio.tee import Resampler
from arengine.audio.validation import AudioLimits
from arengine.types import AudioInfo

LIVE_BLOCK_S = 0.064
"""Audio read per block from a live stream: a block is read once all of it has arrived, so it
adds to the delay before a tag (an upload's 65,536 frames would add 1.5 s at 44.1 kHz)."""

LIVE_ROUNDING_S = 0.01
"""Awaited beyond the next segment and what the resampler holds back (`resampler_hold_s`), for
the rounding of segment lengths between rates, so that decoding never waits for the client."""


@dataclass(frozen=True, slots=True)
class ModelInput:
    """What one model needs of the upload: its segments, cut at its sample rate."""

    plan: SegmentPlan
    sample_rate: int


@dataclass(frozen=True, slots=True)
class Reading:
    """How a job reads its upload; from the request and the server's settings."""

    limits: AudioLimits
    segments_ahead: int
    """Segments a model may hold decoded ahead of post-processing."""
    parts: int = 1
    """With `in_child`, a long seekable file may be decoded in up to this many parts, by a
    child each, at once (`parts.py`)."""
    arrival: Arrival | None = None
    """Set when the upload is a WAV still arriving: read as it arrives."""
    in_child: bool = False
    """FFmpeg's formats are decoded in a child process (`child.py`), off the server's GIL."""


class SegmentSources:
    """One upload's segment sources, one per model in the order asked; closed together."""

    def __init__(
        self,
        per_model: tuple[Segmenter, ...],
        decoding: Decoding,
        info: AudioInfo,
        arrival: Arrival | None,
    ) -> None:
        self.per_model = per_model
        self._decoding = decoding
        self._probed = info
        self._arrival = arrival
        self.live_first_s = 0.0
        """For a live stream: the audio the first decoding task reads (a segment, its context
        and look-ahead, and what the resampler holds back)."""
        self.live_step_s = 0.0
        """... and what each later one reads past where decoding is (a segment, and what the
        resampler holds back: the look-ahead and context were read for the segment before)."""

    def info(self) -> AudioInfo:
        """What was decoded (once every source is spent): the decoded length, truncation and
        warnings, not the header's claim."""
        return self._decoding.info()

    def arrived(self, ahead_s: float, wake: Callable[[], None]) -> bool:
        """Whether the bytes of the next decoding task are uploaded (always, once the body is
        complete); if not, `wake` is called when they are, so no engine thread waits on a client.

        `ahead_s`: the longest segment (or pre-roll) among the models, in seconds.
        """
        if self._arrival is None:
            return True
        rate = self._probed.sample_rate
        if self._arrival.open_ended:
            # A live stream: the next segment's audio and one block, no more, so that its tags
            # are not held back waiting for audio they do not need.
            decoded = self._decoding.report.frames
            reach = self.live_step_s if decoded else self.live_first_s
            span = int(reach * rate) + live_block_frames(rate)
        else:
            # One decoding task reads under a segment and its pre-roll (each at most `ahead_s`),
            # rounded up to whole blocks; more only makes it start a little later.
            span = int(2 * ahead_s * rate) + 2 * self._decoding.block_frames
        return self._arrival.ready(self._decoding.report.frames + span, wake)

    def held_samples(self, index: int) -> int:
        """Samples decoded for model `index` that its segmenter has not taken yet."""
        return self._decoding.held_samples(index)

    def close(self) -> None:
        """Stop decoding and release the file."""
        for source in self.per_model:
            source.close()
        self._decoding.close()


def segment_sources(
    path: Path, info: AudioInfo, models: Sequence[ModelInput], reading: Reading
) -> SegmentSources:
    """A segment source per model of `models` for the upload at `path`, probed as `info`.

    Example: `segment_sources(path, probe(path, limits), [ModelInput(plan, 16000)],
    Reading(limits, segments_ahead=4)).per_model[0]` gives one model's segments.
    """
    max_frames = int(reading.limits.max_duration_s * info.sample_rate)
    rates = [model.sample_rate for model in models]
    live = reading.arrival is not None and reading.arrival.open_ended
    block = live_block_frames(info.sample_rate) if live else file_block_frames(info)
    decoding = Decoding(
        path, info, rates, max_frames, reading.arrival, block, reading.in_child, reading.parts
    )
    per_model = tuple(
        Segmenter(decoding.reader(index), model.plan) for index, model in enumerate(models)
    )
    sources = SegmentSources(per_model, decoding, info, reading.arrival)
    slack = LIVE_ROUNDING_S + max(resampler_hold_s(info.sample_rate, rate) for rate in rates)
    sources.live_first_s = slack + max(
        (model.plan.segment_samples + model.plan.lookahead + model.plan.context) / model.sample_rate
        for model in models
    )
    sources.live_step_s = slack + max(
        model.plan.segment_samples / model.sample_rate for model in models
    )
    return sources


@functools.cache
def resampler_hold_s(rate_in: int, rate_out: int) -> float:
    """The most input a live stream's resampler from `rate_in` to `rate_out` holds back, in
    seconds: measured once per pair, blocks of silence fed as a stream's blocks are read
    (soxr's filter, its start included: 0 without resampling, 0.02 s from 48 to 32 kHz, 0.04 s
    from 48 to 16 kHz, 0.11 s from 8 to 16 kHz)."""
    resampler = Resampler(rate_in, rate_out)
    block = np.zeros(live_block_frames(rate_in), np.float32)
    fed = given = 0
    held = 0.0
    for _ in range(256):  # 16 s: past the filter's start-up, many block phases
        fed += len(block)
        given += len(resampler.push(block))
        held = max(held, fed / rate_in - given / rate_out)
    # An output sample either way: the phase of the blocks against the rates keeps moving.
    return held + 2 / rate_out if held else 0.0


def live_block_frames(sample_rate: int) -> int:
    """Frames per block read from a live stream at `sample_rate`."""
    return max(1, round(LIVE_BLOCK_S * sample_rate))

"""The engine's entry point to the audio: one segment source per model, decoded once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from arengine.audio import parts, sniff
from arengine.audio.arrival import Arrival
from arengine.audio.child import ChildDecoding
from arengine.audio.decode import BLOCK_FRAMES, file_block_frames
from arengine.audio.parts import PartDecoding
from arengine.audio.segments import Segmenter, SegmentPlan
from arengine.audio.source import (
    ModelInput,
    Reading,
    live_block_frames,
    resampler_hold_s,
    segment_sources,
)
from arengine.audio.tee import Resampler
from arengine.audio.validation import AudioLimits, probe
from tests.recordings import sine, write

LIMITS = AudioLimits(
    max_duration_s=3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
PLAN = SegmentPlan(hop=512, context=64, segment_frames=32, preroll_frames=8)  # 1.024 s at 16 kHz


def test_each_model_gets_its_own_segments_from_one_decoding(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.wav", 5.0, 44100, 440)
    info = probe(path, LIMITS)
    models = [ModelInput(PLAN, 16000), ModelInput(PLAN, 22050)]
    sources = segment_sources(path, info, models, Reading(LIMITS, segments_ahead=4))
    assert all(isinstance(source, Segmenter) for source in sources.per_model)
    counts, totals = [], []
    for source in sources.per_model:  # the first model reads ahead of the second: held for it
        assert isinstance(source, Segmenter)
        counts.append(sum(1 for _ in source))
        totals.append(source.total_samples)
    assert counts == [5, 7]  # 16384 samples: 1.024 s at 16 kHz, 0.743 s at 22.05 kHz
    assert totals == [5 * 16000, 5 * 22050]
    assert sources.info().duration_s == pytest.approx(5.0)
    sources.close()


@pytest.mark.parametrize(
    ("models", "arrival", "in_child", "in_parts"),
    [
        (1, False, True, True),
        (2, False, True, True),
        (1, True, True, False),
        (1, False, False, False),
    ],
    ids=["one-model", "two-models", "arriving", "in-process"],
)
def test_a_long_seekable_file_is_decoded_in_parts_by_children_once_uploaded(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    models: int,
    arrival: bool,
    in_child: bool,
    in_parts: bool,
) -> None:
    monkeypatch.setattr(parts, "MIN_PART_S", 5)
    path = sine(tmp_path / "a.mp3", 12.0, 44100, 440, "-c:a", "libmp3lame")
    info = probe(path, LIMITS)
    came = Arrival() if arrival else None
    reading = Reading(LIMITS, 4, parts=2, arrival=came, in_child=in_child)
    sources = segment_sources(path, info, [ModelInput(PLAN, 16000)] * models, reading)
    assert len(sources.per_model) == models
    assert isinstance(sources._decoding._child, PartDecoding) == in_parts
    sources.close()
    # Not asked for: one child.
    reading = Reading(LIMITS, 4, in_child=True)
    sequential = segment_sources(path, info, [ModelInput(PLAN, 16000)], reading)
    assert isinstance(sequential._decoding._child, ChildDecoding)
    sequential.close()


@pytest.mark.parametrize(("channels", "frames"), [(1, 262144), (2, 131072), (8, 65536)])
def test_a_whole_wav_is_read_in_blocks_of_one_mib(
    tmp_path: Path, channels: int, frames: int
) -> None:
    """libsndfile reads 1 MiB of float32 a time (never under BLOCK_FRAMES): each read and each
    step after it takes the GIL, whatever its size; FFmpeg's blocks keep the filter graph's
    size."""
    path = write(np.zeros(16000, dtype=np.float32), 16000, tmp_path / "a.wav", channels)
    info = probe(path, LIMITS)
    assert file_block_frames(info) == frames
    assert file_block_frames(replace(info, decoder=sniff.FFMPEG)) == BLOCK_FRAMES


@pytest.mark.parametrize(
    ("rate_in", "rate_out"), [(16000, 16000), (48000, 16000), (44100, 32000), (8000, 16000)]
)
def test_a_live_resampler_never_holds_back_more_than_its_measured_hold(
    rate_in: int, rate_out: int
) -> None:
    """Noise in the blocks a live stream is read in, for longer than the measurement ran: at
    every block, all but `resampler_hold_s` of the input has come out (the live read gate
    awaits that much beyond a segment, so decoding never waits for the client)."""
    hold = resampler_hold_s(rate_in, rate_out)
    assert (hold == 0) == (rate_in == rate_out)
    resampler = Resampler(rate_in, rate_out)
    rng = np.random.default_rng(3)
    fed = given = 0
    for _ in range(1000):
        block = rng.standard_normal(live_block_frames(rate_in)).astype(np.float32) * 0.1
        fed += len(block)
        given += len(resampler.push(block))
        assert fed / rate_in - given / rate_out <= hold + 1e-9

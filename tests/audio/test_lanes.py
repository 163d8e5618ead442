"""Parallel decoding from several offsets: the same samples and tags as sequential decoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from arengine.audio.decode import decode
from arengine.audio.lanes import LaneDecoding, parallel_lanes
from arengine.audio.segments import Segmenter, SegmentPlan
from arengine.audio.validation import AudioLimits, probe
from arengine.engine.job import JobSpec
from arengine.engine.pool import EnginePool
from arengine.models.speech import SpeechModel, SpeechRecognizer
from arengine.types import AudioInfo, Tag
from tests.conftest import RecordingFactory
from tests.recordings import ffmpeg

LIMITS = AudioLimits(
    max_duration_s=4 * 3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
PLAN = SegmentPlan(hop=512, context=64, segment_frames=125, preroll_frames=31)  # 4 s, 1 s


def _encoded(source: Path, name: str, *args: str) -> Path:
    path = source.with_name(name)
    ffmpeg("-i", str(source), "-ar", "44100", "-ac", "2", *args, str(path))
    return path


ENCODINGS = {
    "a.mp3": ["-c:a", "libmp3lame"],
    "vbr.mp3": ["-c:a", "libmp3lame", "-q:a", "4", "-write_xing", "0"],
    "a.m4a": ["-c:a", "aac"],
    "a.flac": ["-c:a", "flac"],
}


SHORT = SegmentPlan(hop=512, context=64, segment_frames=16, preroll_frames=8)
"""Half-second segments: a lane's last block reaches past its next chunk's start: it goes back."""


@pytest.mark.parametrize(
    ("name", "plan"),
    [*((name, PLAN) for name in sorted(ENCODINGS)), ("a.mp3", SHORT), ("a.flac", SHORT)],
)
def test_lanes_give_the_samples_of_sequential_decoding(
    recording: RecordingFactory, name: str, plan: SegmentPlan
) -> None:
    clip = recording("talk.wav", pieces=[("speech", 0), ("noise", 1.0), ("speech", 0)] * 5)
    path = _encoded(clip.path, name, *ENCODINGS[name])
    info = probe(path, LIMITS)
    assert parallel_lanes(info, plan, 16000, ahead=4) == 2
    cap = int(LIMITS.max_duration_s * info.sample_rate)
    sequential = list(Segmenter(decode(path, info, 16000, cap), plan))
    lanes = LaneDecoding(path, info, plan, 16000, cap, lanes=2, ahead=4)
    parallel = []
    for _ in range(10_000):
        lane = lanes.take(window_end=10**9)
        if lane is None:
            break
        segment = lanes.produce(lane)
        lanes.release(lane, ended=segment is None)
        if segment is not None:
            parallel.append(segment)
    lanes.close()
    parallel.sort(key=lambda segment: segment.index)
    assert lanes.segment_count == len(sequential) == len(parallel) > 6
    for ours, theirs in zip(parallel, sequential, strict=True):
        assert (ours.index, ours.first_frame, ours.skip_frames, ours.frames) == (
            theirs.index, theirs.first_frame, theirs.skip_frames, theirs.frames,
        )  # fmt: skip
        # MP3, FLAC, Vorbis and Opus decode identically from a seek; AAC's decoder keeps a
        # little state (noise substitution) that differs for a frame or two.
        assert np.abs(ours.samples - theirs.samples).max() < (0.05 if "m4a" in name else 1e-4)
    assert lanes.info().frames == decode_frames(path, info, cap)


@pytest.mark.parametrize("name", ["a.ogg", "a.webm"])
def test_containers_without_exact_seeking_are_decoded_sequentially(
    recording: RecordingFactory, name: str
) -> None:
    clip = recording("talk.wav", pieces=[("speech", 0), ("noise", 1.0), ("speech", 0)] * 5)
    path = _encoded(clip.path.with_suffix(".wav"), name, "-c:a", "libvorbis")
    assert parallel_lanes(probe(path, LIMITS), PLAN, 16000, ahead=4) == 1


def decode_frames(path: Path, info: AudioInfo, cap: int) -> int:
    blocks = decode(path, info, 16000, cap)
    for _ in blocks:
        pass
    return blocks.info().frames


def _frame_f1(ours: tuple[Tag, ...], theirs: tuple[Tag, ...], seconds: float) -> float:
    def mask(tags: tuple[Tag, ...]) -> np.ndarray:
        out = np.zeros(int(seconds * 100) + 1, bool)
        for tag in tags:
            out[int(tag.start * 100) : int(tag.end * 100)] = True
        return out

    a, b = mask(ours), mask(theirs)
    return float(2 * (a & b).sum() / (a.sum() + b.sum()))


def test_tags_from_parallel_decoding_match_sequential(
    speech_model: SpeechModel, recording: RecordingFactory
) -> None:
    pieces = [
        p
        for i in range(30)
        for p in [("silence", 0.3 + (i % 4) * 0.5), ("speech", 0), ("noise", 0.4)]
    ]
    clip = recording("long.wav", pieces=pieces)
    path = _encoded(clip.path, "long.mp3", "-c:a", "libmp3lame")
    pool = EnginePool(threads=2)
    results = []
    try:
        recognizer = SpeechRecognizer(speech_model, segment_s=4.0, preroll_s=1.0)
        for ahead in (1, 4):  # one lane (sequential), then two
            assert parallel_lanes(probe(path, LIMITS), recognizer.plan, 16000, ahead) == max(
                1, ahead // 2
            )
            spec = JobSpec(
                "r", path, (recognizer,), {}, LIMITS, segments_ahead=ahead, parallel_decoding=True
            )
            results.append(pool.submit(spec).future.result(timeout=300))
    finally:
        pool.close()
    sequential, parallel = results
    f1 = _frame_f1(parallel.tags, sequential.tags, clip.duration_s)
    assert f1 >= 0.99, f1
    assert parallel.audio.duration_s == sequential.audio.duration_s
    assert [t.start for t in parallel.tags] == sorted(t.start for t in parallel.tags)

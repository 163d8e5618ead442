"""Decoding in parts by `ffmpeg` children: the samples of one decoding, whatever the header says."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from arengine.audio import parts, source
from arengine.audio.decode import decode
from arengine.audio.parts import PartDecoding
from arengine.audio.segments import SegmentPlan
from arengine.audio.source import ModelInput, Reading, segment_sources
from arengine.audio.validation import AudioLimits, probe
from arengine.engine.pool import EnginePool
from arengine.engine.request import RequestSpec
from arengine.errors import ErrorCode, InvalidInput, TooLarge
from arengine.kinds.speech.network import SpeechModel
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.models.tagging import ModelTagging
from arengine.types import AudioInfo, Tag
from tests.conftest import RecordingFactory
from tests.recordings import ffmpeg

LIMITS = AudioLimits(
    max_duration_s=4 * 3600, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)
CAP = int(LIMITS.max_duration_s * 44100)
ENCODINGS = {
    "a.mp3": ["-c:a", "libmp3lame"],
    "vbr.mp3": ["-c:a", "libmp3lame", "-q:a", "4", "-write_xing", "0"],
    "a.m4a": ["-c:a", "aac"],
    "a.flac": ["-c:a", "flac"],
}
EXACT = {"a.mp3": 0.0, "vbr.mp3": 0.0, "a.flac": 0.0, "a.m4a": 0.05}
"""Largest difference from one part: MP3 and FLAC decode to the bit from a seek; AAC's decoder
keeps a little state (noise substitution) that differs for a frame or two."""

pytestmark = pytest.mark.skipif(parts.FFMPEG is None, reason="needs the ffmpeg program")


def _talk(recording: RecordingFactory, name: str, seconds_of_pieces: int = 5) -> Path:
    pieces = [("speech", 0), ("noise", 1.0), ("speech", 0), ("tone", 0.5)] * seconds_of_pieces
    clip = recording("talk.wav", pieces=pieces)
    path = clip.path.with_name(name)
    ffmpeg("-i", str(clip.path), "-ar", "44100", "-ac", "2", *ENCODINGS[name], str(path))
    return path


def _decoded(
    path: Path, info: AudioInfo, count: int, cap: int = CAP
) -> tuple[np.ndarray, AudioInfo]:
    blocks = PartDecoding(path, info, 16000, cap, count)
    try:
        samples = np.concatenate(list(blocks))
    finally:
        blocks.close()
    return samples, blocks.info()


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_parts_give_the_samples_of_one_decoding(recording: RecordingFactory, name: str) -> None:
    path = _talk(recording, name)
    info = probe(path, LIMITS)
    one, _ = _decoded(path, info, 1)
    three, decoded = _decoded(path, info, 3)
    assert len(three) == len(one) > 16000 * 20
    assert np.abs(three - one).max() <= EXACT[name]
    # Against PyAV's decoding and soxr: the same length, within the two resamplers' difference.
    whole = decode(path, info, 16000, CAP)
    sequential = np.concatenate(list(whole))
    assert abs(len(sequential) - len(three)) <= 1
    length = min(len(sequential), len(three))
    assert np.abs(sequential[:length] - three[:length]).max() < 0.1
    assert np.abs(sequential[:length] - three[:length]).mean() < 1e-3
    assert abs(decoded.frames - whole.info().frames) <= info.sample_rate
    assert not decoded.truncated and decoded.warnings == ()


def test_a_file_cut_short_ends_where_it_ends(recording: RecordingFactory) -> None:
    """The Xing header states the whole length; the later parts start past the end."""
    whole = _talk(recording, "a.mp3")
    path = whole.with_name("cut.mp3")
    path.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 5])
    info = probe(path, LIMITS)
    assert info.duration_s > 20  # the header's claim
    one, _ = _decoded(path, info, 1)
    four, decoded = _decoded(path, info, 4)
    assert len(four) == len(one) < 16000 * info.duration_s * 0.5
    assert np.abs(four - one).max() == 0.0
    assert decoded.frames < info.frames / 2


def test_a_header_that_states_too_little_decodes_everything(tmp_path: Path) -> None:
    """A VBR MP3 without a Xing header: loud noise first, so FFmpeg's length, estimated from
    the first frames' bitrate, is under half the file's."""
    path = tmp_path / "short.mp3"
    noise, silence = "anoisesrc=d=6:a=0.9:r=44100", "anullsrc=r=44100:cl=mono"
    ffmpeg("-f", "lavfi", "-i", noise, "-f", "lavfi", "-i", silence, "-filter_complex",
           "[1]atrim=0:60[s];[0][s]concat=n=2:v=0:a=1", "-ac", "2", "-c:a", "libmp3lame",
           "-q:a", "4", "-write_xing", "0", str(path))  # fmt: skip
    info = probe(path, LIMITS)
    assert info.duration_s < 33
    one, _ = _decoded(path, info, 1)
    three, decoded = _decoded(path, info, 3)
    assert len(one) > 65 * 16000
    assert len(three) == len(one)
    assert np.abs(three - one).max() == 0.0
    assert decoded.duration_s > 65


def test_the_frame_cap_is_counted_on_what_comes_out(recording: RecordingFactory) -> None:
    path = _talk(recording, "a.mp3")
    info = probe(path, LIMITS)
    with pytest.raises(TooLarge) as caught:
        _decoded(path, info, 2, cap=info.sample_rate * 15)
    assert caught.value.code is ErrorCode.AUDIO_TOO_LONG


def test_a_change_of_sample_rate_is_refused(recording: RecordingFactory) -> None:
    first = _talk(recording, "a.mp3")
    other = first.with_name("22k.mp3")
    ffmpeg("-i", str(first), "-ar", "22050", "-c:a", "libmp3lame", str(other))
    path = first.with_name("changes.mp3")
    path.write_bytes(first.read_bytes() + other.read_bytes())
    info = probe(path, LIMITS)
    with pytest.raises(InvalidInput) as caught:
        _decoded(path, info, 2)
    assert caught.value.code is ErrorCode.AUDIO_FORMAT_CHANGED


def test_closing_early_ends_the_children_and_leaves_no_files(
    recording: RecordingFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spool files have no names, so a server killed mid-request leaves none behind."""
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    path = _talk(recording, "a.mp3")
    blocks = PartDecoding(path, probe(path, LIMITS), 16000, CAP, 3)
    next(blocks)
    assert list(spool.iterdir()) == []
    children = [part.process for part in blocks._parts]
    blocks.close()
    assert all(child.returncode is not None for child in children)


@pytest.mark.parametrize("name", ["a.webm", "a.ogg"])
def test_containers_without_exact_seeking_are_not_decoded_in_parts(
    recording: RecordingFactory, name: str
) -> None:
    clip = recording("talk.wav", pieces=[("speech", 0)] * 3)
    path = clip.path.with_name(name)
    ffmpeg(
        "-i", str(clip.path), "-c:a", "libopus" if name.endswith("webm") else "libvorbis", str(path)
    )
    assert not parts.usable(probe(path, LIMITS))


def test_a_long_file_for_one_model_is_decoded_in_parts(
    recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts, "MIN_PART_S", 5)
    path = _talk(recording, "a.mp3")
    info = probe(path, LIMITS)
    plan = SegmentPlan(hop=512, context=64, segment_frames=125, preroll_frames=31)
    model = ModelInput(plan, 16000)
    reading = Reading(LIMITS, segments_ahead=4, parallel=True)
    sources = segment_sources(path, info, [model], reading)
    try:
        assert isinstance(sources._decoding, PartDecoding)
        segments = list(sources.per_model[0])
    finally:
        sources.close()
    sequential = segment_sources(path, info, [model], Reading(LIMITS, segments_ahead=4))
    try:
        expected = list(sequential.per_model[0])
    finally:
        sequential.close()
    assert [s.index for s in segments] == [s.index for s in expected]
    assert sources.info().duration_s == pytest.approx(sequential.info().duration_s, abs=1.0)


def test_without_the_ffmpeg_program_pyav_decodes(
    recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts, "FFMPEG", None)
    path = _talk(recording, "a.mp3")
    assert not parts.usable(probe(path, LIMITS))


def test_a_cap_beyond_what_ffmpeg_can_count_is_no_cap(recording: RecordingFactory) -> None:
    """ffmpeg refuses a `-t` over 2^63 microseconds: the last part would decode nothing."""
    path = _talk(recording, "a.mp3")
    info = probe(path, LIMITS)
    one, _ = _decoded(path, info, 1)
    two, decoded = _decoded(path, info, 2, cap=2**62)
    assert len(two) == len(one)
    assert decoded.warnings == ()


def test_a_video_track_is_skipped_without_a_warning(recording: RecordingFactory) -> None:
    """The codec allowlist refuses the video decoder while ffmpeg probes the streams: the
    refusal is the allowlist working, not something the result should warn about."""
    talk = _talk(recording, "a.m4a")
    path = talk.with_name("video.mp4")
    ffmpeg("-i", str(talk), "-f", "lavfi", "-i", "testsrc=size=64x48:rate=1", "-map", "1:v",
           "-map", "0:a", "-shortest", "-c:v", "mpeg4", "-c:a", "copy", str(path))  # fmt: skip
    info = probe(path, LIMITS)
    samples, decoded = _decoded(path, info, 2)
    assert len(samples) > 16000 * 20
    assert decoded.warnings == ()


def test_damaged_packets_are_skipped_and_counted(recording: RecordingFactory) -> None:
    whole = _talk(recording, "a.mp3")
    data = bytearray(whole.read_bytes())
    rng = np.random.default_rng(1)
    for tenth in range(2, 9):  # garbage over a few frames in each part
        at = len(data) * tenth // 10
        data[at : at + 300] = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
    path = whole.with_name("damaged.mp3")
    path.write_bytes(bytes(data))
    info = probe(path, LIMITS)
    one, _ = _decoded(path, info, 1)
    three, decoded = _decoded(path, info, 3)
    # FFmpeg conceals some damaged frames and drops others, by where decoding began: a part's
    # length moves by a few frames, and no part ends the file early.
    assert abs(len(three) - len(one)) < 16000 * 0.5
    assert len(one) > 16000 * 20
    damaged = [warning for warning in decoded.warnings if "damaged packet" in warning]
    assert len(damaged) == 1 and int(damaged[0].split()[0]) >= 1, decoded.warnings
    assert not any("FFmpeg reported" in warning for warning in decoded.warnings)


def test_a_job_decoded_in_parts_tags_as_one_decoded_in_process(
    speech_model: SpeechModel, recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the engine, `parallel_decoding` on: the job reads the parts' segments to the end,
    with the tags and the length of decoding in the server's process."""
    monkeypatch.setattr(parts, "MIN_PART_S", 5)
    made: list[int] = []

    class Counted(PartDecoding):
        def __init__(self, path: Path, info: AudioInfo, rate: int, cap: int, count: int) -> None:
            super().__init__(path, info, rate, cap, count)
            made.append(count)

    monkeypatch.setattr(source, "PartDecoding", Counted)
    pieces = [
        p
        for i in range(30)
        for p in [("silence", 0.3 + (i % 4) * 0.5), ("speech", 0), ("noise", 0.4)]
    ]
    clip = recording("long.wav", pieces=pieces)
    path = clip.path.with_name("long.mp3")
    ffmpeg("-i", str(clip.path), "-ar", "44100", "-ac", "2", "-c:a", "libmp3lame", str(path))
    recognizer = SpeechRecognizer(speech_model, segment_s=4.0, preroll_s=1.0)
    pool = EnginePool(threads=2)
    try:
        results = [
            pool.submit(
                RequestSpec(
                    "r",
                    path,
                    (recognizer,),
                    ModelTagging((recognizer,), {}),
                    LIMITS,
                    4,
                    parallel_decoding=parallel,
                )
            ).future.result(timeout=300)
            for parallel in (False, True)
        ]
    finally:
        pool.close()
    assert made == [2]  # the second job only, in two parts
    in_process, in_parts = results
    assert _frame_f1(in_parts.tags, in_process.tags, clip.duration_s) >= 0.99
    assert in_parts.audio.duration_s == pytest.approx(in_process.audio.duration_s, abs=0.05)
    assert [t.start for t in in_parts.tags] == sorted(t.start for t in in_parts.tags)


def _frame_f1(ours: tuple[Tag, ...], theirs: tuple[Tag, ...], seconds: float) -> float:
    def mask(tags: tuple[Tag, ...]) -> np.ndarray:
        out = np.zeros(int(seconds * 100) + 1, bool)
        for tag in tags:
            out[int(tag.start * 100) : int(tag.end * 100)] = True
        return out

    a, b = mask(ours), mask(theirs)
    return float(2 * (a & b).sum() / (a.sum() + b.sum()))

"""Decoding in parts, a forked child each: one child's samples and answers, whatever the
header says."""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from arengine.audio import child, parts, spans
from arengine.audio.child import ChildDecoding
from arengine.audio.decode import (
    MAX_BAD_PACKETS,
    Damage,
    DecodeReport,
    decode,
    read_blocks,
    to_mono,
)
from arengine.audio.parts import PartDecoding
from arengine.audio.segments import SegmentPlan
from arengine.audio.source import ModelInput, Reading, segment_sources
from arengine.audio.spans import Span, SpanReport, read_span
from arengine.audio.validation import AudioLimits, probe
from arengine.engine.pool import EnginePool
from arengine.engine.request import RequestSpec
from arengine.errors import CorruptAudio, ErrorCode, InvalidInput, TooLarge
from arengine.kinds.speech.network import SpeechModel
from arengine.kinds.speech.recognizer import SpeechRecognizer
from arengine.models.tagging import ModelTagging
from arengine.types import AudioInfo, Tag
from tests.conftest import RecordingFactory, wait_until
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
    "a.webm": ["-c:a", "libopus"],
}
EXACT = {"a.mp3": 0.0, "vbr.mp3": 0.0, "a.flac": 0.0, "a.webm": 0.0, "a.m4a": 0.05}
"""Largest difference from one child: MP3, FLAC and Opus decode to the bit from a seek; AAC's
decoder keeps a little state (noise substitution) that differs for a frame or two."""


def _talk(recording: RecordingFactory, name: str, seconds_of_pieces: int = 5) -> Path:
    pieces = [("speech", 0), ("noise", 1.0), ("speech", 0), ("tone", 0.5)] * seconds_of_pieces
    clip = recording("talk.wav", pieces=pieces)
    path = clip.path.with_name(name)
    rate = "48000" if name.endswith(".webm") else "44100"  # Opus's one rate
    ffmpeg("-i", str(clip.path), "-ar", rate, "-ac", "2", *ENCODINGS[name], str(path))
    return path


def _decoded(
    path: Path, info: AudioInfo, count: int, cap: int = CAP, rate: int = 16000
) -> tuple[np.ndarray, AudioInfo]:
    """`count` 1: one child; more: that many parts (`MIN_PART_S` permitting)."""
    blocks = decode(path, info, rate, cap, None, in_child=True, parts=count)
    try:
        assert isinstance(blocks._child, PartDecoding if count > 1 else ChildDecoding)
        samples = np.concatenate(list(blocks))
    finally:
        blocks.close()
    return samples, blocks.info()


@pytest.fixture(autouse=True)
def _short_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of 5 s, so that recordings of 20 s are split."""
    monkeypatch.setattr(parts, "MIN_PART_S", 5)


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_parts_give_the_samples_of_one_child(recording: RecordingFactory, name: str) -> None:
    path = _talk(recording, name)
    info = probe(path, LIMITS)
    one, alone = _decoded(path, info, 1)
    three, decoded = _decoded(path, info, 3)
    assert len(three) == len(one) > 16000 * 20
    assert np.abs(three - one).max() <= EXACT[name]
    assert decoded == alone
    # At the file's own rate too (no resampler between): the parts' edges are sample-exact.
    native, _ = _decoded(path, info, 3, rate=44100)
    whole = decode(path, info, 44100, CAP)
    sequential = np.concatenate(list(whole))
    assert len(native) == len(sequential)
    assert np.abs(native - sequential).max() <= EXACT[name]
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


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_the_later_parts_decode_to_their_end_while_the_first_is_read(
    recording: RecordingFactory,
) -> None:
    """Parts of 13 s at 44.1 kHz, over twice what a pipe holds: the later parts' children write
    to a file, so they decode to their ends while the engine reads the first part, rather than
    stop at a full pipe until their turn comes."""
    path = _talk(recording, "a.mp3")
    blocks = decode(path, probe(path, LIMITS), 16000, CAP, None, in_child=True, parts=3)
    try:
        next(blocks)
        assert isinstance(blocks._child, PartDecoding)
        later = [child._pid for child in blocks._child._children[1:]]
        assert len(later) == 2 and wait_until(lambda: _gone(later))
        assert len(np.concatenate(list(blocks))) > 16000 * 30
    finally:
        blocks.close()


def test_a_spool_that_cannot_grow_hands_the_rest_to_one_child(
    recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The later parts spool to a nameless temporary file; where it cannot grow (the temporary
    directory full; here a file size limit on the decoders) the samples given so far stand and
    one child decodes the rest of the file: one child's samples, and nothing refused."""
    path = _talk(recording, "a.mp3")
    info = probe(path, LIMITS)
    one, alone = _decoded(path, info, 1)
    monkeypatch.setattr(child, "_SERVER", [])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, hard))
    try:
        limited = child._server()  # its children inherit the limit: 13-s parts need 2.3 MB
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        blocks = decode(path, info, 16000, CAP, None, in_child=True, parts=3)
        try:
            samples = np.concatenate(list(blocks))
        finally:
            blocks.close()
    finally:
        limited.stop()
    assert isinstance(blocks._child, PartDecoding)
    spooled = blocks._child._children
    assert len(spooled) == 4 and not isinstance(spooled[-1], PartDecoding)
    assert any(decoding.found.broken for decoding in spooled[1:3])
    assert len(samples) == len(one) and np.abs(samples - one).max() == 0
    assert blocks.info() == alone


def test_closing_early_ends_the_children(recording: RecordingFactory) -> None:
    path = _talk(recording, "a.mp3")
    blocks = decode(path, probe(path, LIMITS), 16000, CAP, None, in_child=True, parts=3)
    next(blocks)
    assert isinstance(blocks._child, PartDecoding)
    pids = [child._pid for child in blocks._child._children]
    blocks.close()
    assert len(pids) == 3 and wait_until(lambda: _gone(pids))


@pytest.mark.parametrize(("name", "codec"), [("a.webm", "libvorbis"), ("a.ogg", "libvorbis")])
def test_containers_without_exact_seeking_are_not_decoded_in_parts(
    recording: RecordingFactory, name: str, codec: str
) -> None:
    """Ogg (a first Vorbis frame shorter than its timestamps say) and Vorbis in WebM (44.1 kHz
    on Matroska's millisecond timestamps): one child."""
    clip = recording("talk.wav", pieces=[("speech", 0)] * 3)
    path = clip.path.with_name(name)
    ffmpeg("-i", str(clip.path), "-ar", "44100", "-c:a", codec, str(path))
    assert not parts.usable(probe(path, LIMITS))


def test_opus_in_webm_without_a_stream_length_is_split_by_the_container_s(
    recording: RecordingFactory,
) -> None:
    """Matroska states the segment's length, not the stream's: the plan takes it as its guess."""
    path = _talk(recording, "a.webm")
    info = probe(path, LIMITS)
    assert info.frames == 0 and parts.usable(info)
    assert parts.part_count(info, 3) == 1
    assert parts.part_count(info, 3, path) == 3


def test_opus_in_webm_parts_start_across_the_container_s_length(
    recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its parts start at thirds of the container's length, not all at 0 (the stream's length,
    0, split: the last part decoded the whole file alone, one child's time)."""
    path = _talk(recording, "a.webm")
    info = probe(path, LIMITS)
    spans: list[Span] = []
    real = ChildDecoding

    def recorded(*args: Any) -> ChildDecoding:
        spans.append(args[5])
        return real(*args)

    monkeypatch.setattr(parts, "ChildDecoding", recorded)
    three, _ = _decoded(path, info, 3)
    seconds = parts.length_s(info, path)
    assert seconds > 20
    assert [span.first for span in spans] == [int(seconds * k / 3) * 48000 for k in range(3)]
    assert len(three) > 16000 * 20


@pytest.mark.parametrize("models", [1, 2])
def test_a_long_file_is_decoded_in_parts_for_every_model(
    recording: RecordingFactory, models: int
) -> None:
    """Each model's segments are those of one child: the parts' samples are resampled by the
    server, once per model rate, as one child's are."""
    path = _talk(recording, "a.mp3")
    info = probe(path, LIMITS)
    plan = SegmentPlan(hop=512, context=64, segment_frames=125, preroll_frames=31)
    wanted = [ModelInput(plan, 16000), ModelInput(plan, 22050)][:models]
    found = []
    for count in (2, 1):
        reading = Reading(LIMITS, segments_ahead=4, parts=count, in_child=True)
        sources = segment_sources(path, info, wanted, reading)
        try:
            assert isinstance(
                sources._decoding._child, PartDecoding if count > 1 else ChildDecoding
            )
            found.append([list(per_model) for per_model in sources.per_model])
        finally:
            sources.close()
    for in_parts, in_one in zip(*found, strict=True):
        assert [s.index for s in in_parts] == [s.index for s in in_one]
        assert all(
            np.array_equal(a.samples, b.samples) for a, b in zip(in_parts, in_one, strict=True)
        )


def test_parts_need_no_ffmpeg_program(
    recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The children decode with PyAV's libraries, as the image has them: no `ffmpeg` on PATH."""
    path = _talk(recording, "a.mp3")
    monkeypatch.setenv("PATH", "/nonexistent")
    samples, decoded = _decoded(path, probe(path, LIMITS), 2)
    assert len(samples) > 16000 * 20 and decoded.warnings == ()


def test_a_cap_beyond_a_year_is_no_cap(recording: RecordingFactory) -> None:
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


def _damaged(whole: Path, name: str, at: list[float], size: int = 300, seed: int = 1) -> Path:
    """`whole` with `size` random bytes at each fraction of its length in `at`."""
    data = bytearray(whole.read_bytes())
    rng = np.random.default_rng(seed)
    for fraction in at:
        where = int(len(data) * fraction)
        data[where : where + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    path = whole.with_name(name)
    path.write_bytes(bytes(data))
    return path


def test_damaged_packets_are_skipped_and_counted_as_one_child_counts_them(
    recording: RecordingFactory,
) -> None:
    whole = _talk(recording, "a.mp3")
    path = _damaged(whole, "damaged.mp3", [tenth / 10 for tenth in range(2, 9)])
    info = probe(path, LIMITS)
    one, alone = _decoded(path, info, 1)
    three, decoded = _decoded(path, info, 3)
    # Each packet is counted by the part its timestamp lies in: one child's counts, one warning.
    assert any("damaged packet" in warning for warning in alone.warnings)
    assert decoded.warnings == alone.warnings
    assert len(three) == len(one) > 16000 * 20
    assert np.abs(three - one).max() <= 0.05


def _with_damaged_packets(whole: Path, name: str, packets: list[int]) -> Path:
    """`whole`, an MP3, with the side information of each packet numbered in `packets` made
    undecodable (its decoder refuses that packet alone)."""
    with av.open(str(whole)) as container:
        stream = container.streams.audio[0]
        where = [int(packet.pos or 0) for packet in container.demux(stream) if packet.size]
    data = bytearray(whole.read_bytes())
    for number in packets:
        data[where[number] + 4 : where[number] + 12] = b"\xff" * 8
    path = whole.with_name(name)
    path.write_bytes(bytes(data))
    return path


def test_damaged_packets_of_every_part_are_added_up_and_refused(
    recording: RecordingFactory,
) -> None:
    """Eight damaged packets at the end of the first of eight parts, five at the start of the
    second: neither part is past the policy alone (8 at most), the file is (13 of about 200
    packets, when the 13th is met), and it is refused as one child refuses it."""
    whole = _talk(recording, "a.mp3")  # 40 s, about 1550 packets: parts of about 192
    path = _with_damaged_packets(whole, "broken.mp3", [*range(180, 188), *range(196, 201)])
    info = probe(path, LIMITS)
    with pytest.raises(CorruptAudio) as in_one:
        _decoded(path, info, 1)
    with pytest.raises(CorruptAudio) as in_parts:
        _decoded(path, info, 8)
    assert in_one.value.code is in_parts.value.code is ErrorCode.CORRUPT_AUDIO


def test_a_burst_at_a_part_s_start_is_counted_against_the_whole_file(
    recording: RecordingFactory,
) -> None:
    """Nine damaged packets at the start of the second of four parts: past the policy within
    that part (9 of about 13), not within the file (9 of about 400 when the 9th is met):
    accepted as one child accepts it, with its warning."""
    whole = _talk(recording, "a.mp3")
    path = _with_damaged_packets(whole, "burst.mp3", list(range(388, 397)))
    info = probe(path, LIMITS)
    one, alone = _decoded(path, info, 1)
    four, decoded = _decoded(path, info, 4)
    assert decoded.warnings == alone.warnings
    assert len(alone.warnings) == 1 and alone.warnings[0].startswith("9 damaged packet(s) of")
    assert np.array_equal(four, one)


def test_the_policy_over_parts_is_one_decoders() -> None:
    """`Damage.refused` against the rule applied packet by packet over the whole file, for
    random runs of damaged packets split at random places."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        damaged = rng.random(int(rng.integers(20, 400))) < rng.choice([0.02, 0.05, 0.1, 0.3])
        cut = int(rng.integers(0, len(damaged)))
        bad = 0
        refused_at = None
        for number, broken in enumerate(damaged):
            total = number + 1
            bad += int(broken)
            if broken and bad > MAX_BAD_PACKETS and bad * 20 > total:
                refused_at = number
                break
        before = damaged[:cut]
        part = Damage()
        part_bad = 0
        for number, broken in enumerate(damaged[cut:], start=1):
            if broken:
                part_bad += 1
                part.note(part_bad, number)
        first_refuses = any(
            broken and sum(before[: i + 1]) > MAX_BAD_PACKETS and sum(before[: i + 1]) * 20 > i + 1
            for i, broken in enumerate(before)
        )
        refused = first_refuses or part.refused(int(before.sum()), len(before))
        assert refused == (refused_at is not None)


def test_a_job_decoded_in_parts_tags_as_one_decoded_in_process(
    speech_model: SpeechModel, recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the engine, `parallel_decoding` on: the job reads the parts' segments to the end,
    with the tags and the length of one child's decoding (off: one child)."""
    made: list[int] = []

    class Counted(PartDecoding):
        def __init__(self, *args: object, **named: object) -> None:
            super().__init__(*args, **named)  # type: ignore[arg-type]
            made.append(len(self._children))

    monkeypatch.setattr(parts, "PartDecoding", Counted)
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
                    decode_in_child=True,
                )
            ).future.result(timeout=300)
            for parallel in (False, True)
        ]
    finally:
        pool.close()
    assert made == [2]  # the second job only, in two parts
    in_one, in_parts = results
    assert _frame_f1(in_parts.tags, in_one.tags, clip.duration_s) >= 0.99
    assert in_parts.audio.duration_s == pytest.approx(in_one.audio.duration_s, abs=0.05)
    assert [t.start for t in in_parts.tags] == sorted(t.start for t in in_parts.tags)


def _frame_f1(ours: tuple[Tag, ...], theirs: tuple[Tag, ...], seconds: float) -> float:
    def mask(tags: tuple[Tag, ...]) -> np.ndarray:
        out = np.zeros(int(seconds * 100) + 1, bool)
        for tag in tags:
            out[int(tag.start * 100) : int(tag.end * 100)] = True
        return out

    a, b = mask(ours), mask(theirs)
    return float(2 * (a & b).sum() / (a.sum() + b.sum()))


def test_timestamps_that_go_back_hand_the_rest_to_one_child(recording: RecordingFactory) -> None:
    """Two WebM files one after the other (a MediaRecorder restarted): the second's timestamps
    start again at 0, so no part's samples can be placed by them past that point; the part
    that meets it stops, and one child decoding the file whole gives the rest."""
    first = _talk(recording, "a.webm").read_bytes()
    second = _talk(recording, "a.webm", 3)  # the same name: written over the first
    path = second.with_name("twice.webm")
    path.write_bytes(first + second.read_bytes())
    info = probe(path, LIMITS)
    one, alone = _decoded(path, info, 1)
    three, decoded = _decoded(path, info, 3)
    assert len(one) > 16000 * 60
    assert np.array_equal(three, one) and decoded == alone


def test_a_seek_that_lands_late_is_redone_from_the_start(
    recording: RecordingFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index that sends the seek past the part's start: the part is decoded from the start
    of the file instead, its samples still one decoding's (in process: the chain a child runs)."""
    path = _talk(recording, "a.mp3")
    info = probe(path, LIMITS)
    rate = info.sample_rate
    real = spans._seek

    def late(container: object, stream: Any, timestamp: int) -> None:
        real(container, stream, timestamp + round(3 / stream.time_base))

    monkeypatch.setattr(spans, "_seek", late)
    span = Span(10 * rate, 20 * rate, rate)
    found = SpanReport()
    part = read_span(path, info, CAP, DecodeReport(), found, 65536, span)
    samples = np.concatenate(list(to_mono(part)))
    whole = np.concatenate(list(to_mono(read_blocks(path, info, CAP))))
    assert found.reached_end
    assert np.array_equal(samples, whole[10 * rate : 20 * rate])

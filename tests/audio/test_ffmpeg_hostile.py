"""Hostile and lying files through the decoders: a clear 4xx, or the documented partial answer.

Playlists and scripts (nothing opened, no connection), forged containers and streams changing
midway, durations taken from what is decoded rather than what a header claims, and files that
libsndfile alone decoded short or refused.
Each test says what the code before FFmpeg decoding did with the same file.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from arengine.audio import ffmpeg, parts
from arengine.audio.decode import decode
from arengine.audio.validation import AudioLimits, probe
from arengine.errors import ArengineError, CorruptAudio, InvalidInput, UnsupportedFormat
from arengine.types import AudioInfo
from tests.recordings import ffmpeg as run
from tests.recordings import sine

LIMITS = AudioLimits(
    max_duration_s=120, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)


@pytest.fixture(autouse=True)
def _parts_of_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of a second, so that the hostile files, short, are decoded in parts too."""
    monkeypatch.setattr(parts, "MIN_PART_S", 1)


def _decoded(path: Path) -> AudioInfo:
    """What decoding `path` finds, in the server's process, in a child (`child.py`), and in
    parts of a second or more by a child each (`parts.py`, the server's default where the
    file is seekable): the same answer, samples, report or error, every way (the parts' samples
    within AAC's gate of `test_parts.py`, and their error's message may count its packets
    otherwise)."""
    info = probe(path, LIMITS)
    found = [_decode_once(path, info, in_child) for in_child in (False, True)]
    (samples, answer, error), (child_samples, child_answer, _) = found
    assert child_answer == answer
    assert np.array_equal(child_samples, samples)
    part_samples, part_answer, _ = _decode_once(path, info, True, parts=3)
    if error is None:
        assert part_answer == answer
        assert len(part_samples) == len(samples)
        assert not len(samples) or np.abs(part_samples - samples).max() <= 0.05
    else:
        assert isinstance(part_answer, tuple) and part_answer[:2] == _told(error)[:2]
    if error is not None:
        raise error
    assert isinstance(answer, AudioInfo)
    return answer


def _decode_once(
    path: Path, info: AudioInfo, in_child: bool, parts: int = 1
) -> tuple[np.ndarray, object, ArengineError | None]:
    cap = int(LIMITS.max_duration_s * info.sample_rate)
    blocks = decode(path, info, 16000, cap, None, in_child, parts)
    taken: list[np.ndarray] = []
    try:
        taken.extend(blocks)
    except ArengineError as error:
        return np.concatenate([np.zeros(0, np.float32), *taken]), _told(error), error
    finally:
        blocks.close()
    return np.concatenate([np.zeros(0, np.float32), *taken]), blocks.info(), None


def _told(error: ArengineError) -> tuple[type, str, str]:
    return type(error), error.code.value, error.message


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on 127.0.0.1 that records every connection made to it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                seen.append(connection.recv(1024))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join()
    server.close()


def _playlists(folder: Path, port: int) -> list[Path]:
    hls = "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{}\n#EXT-X-ENDLIST\n"
    files = {
        "net.mp3": hls.format(f"http://127.0.0.1:{port}/segment.ts"),
        "net.m3u8": hls.format(f"http://127.0.0.1:{port}/segment.ts"),
        "passwd.wav": hls.format("file:///etc/passwd"),
        "script.ogg": f"ffconcat version 1.0\nfile {folder / 'inner.wav'}\n",
        "script.ffconcat": f"ffconcat version 1.0\nfile {folder / 'inner.wav'}\n",
    }
    sf.write(folder / "inner.wav", np.zeros(16000, np.float32), 16000)
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def test_playlists_and_scripts_are_refused_without_opening_anything(
    tmp_path: Path, listener: tuple[int, list[bytes]]
) -> None:
    port, seen = listener
    for path in _playlists(tmp_path, port):
        with pytest.raises(UnsupportedFormat, match="not audio; accepted containers"):
            probe(path, LIMITS)
    assert seen == []


def test_ffmpeg_itself_is_opened_narrowly(
    tmp_path: Path, listener: tuple[int, list[bytes]]
) -> None:
    # Below the sniffing: FFmpeg given the playlist directly still opens nothing else, whether it
    # probes (hls, concat are not allowed demuxers) or is told the demuxer.
    port, seen = listener
    for path in _playlists(tmp_path, port):
        with pytest.raises(av_errors()), ffmpeg.open_upload(path):
            pass
    with pytest.raises(ValueError, match="not allowed"), ffmpeg.open_upload(path, "hls"):
        pass
    assert seen == []


def av_errors() -> type[Exception]:
    import av

    return av.error.FFmpegError


def test_an_mp4_whose_moov_claims_gigabytes(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.m4a", 2.0, 44100, 440, "-c:a", "aac", "-movflags", "+faststart")
    data = bytearray(path.read_bytes())
    at = data.find(b"moov")
    data[at - 4 : at] = struct.pack(">I", 0xFFFFFFF0)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptAudio, match="'moov' box claims 4294967280 bytes"):
        probe(path, LIMITS)


def test_an_mp4_whose_sample_table_claims_a_billion_entries(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.m4a", 2.0, 44100, 440, "-c:a", "aac", "-movflags", "+faststart")
    data = bytearray(path.read_bytes())
    at = data.find(b"stsz")
    data[at + 12 : at + 16] = struct.pack(">I", 0x3FFFFFFF)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptAudio, match="starts like MP4/MOV"):
        probe(path, LIMITS)


def test_matroska_with_hundreds_of_tracks(tmp_path: Path) -> None:
    source = sine(tmp_path / "a.wav", 0.2, 16000)
    maps = [arg for _ in range(300) for arg in ("-map", "0:a")]
    path = tmp_path / "tracks.mkv"
    run("-i", str(source), *maps, "-c:a", "pcm_s16le", str(path))
    with pytest.raises(InvalidInput, match="300 streams; accepted: at most 64") as caught:
        probe(path, LIMITS)
    assert caught.value.code == "too_many_streams"


@pytest.mark.parametrize("claimed_s", [1.0, 36_000.0])
def test_a_webm_lying_about_its_duration(tmp_path: Path, claimed_s: float) -> None:
    path = sine(tmp_path / "a.webm", 6.0, 48000, 440, "-c:a", "libopus")
    data = bytearray(path.read_bytes())
    at = data.find(b"\x44\x89\x88")  # Segment Info's Duration, a float64 in milliseconds
    data[at + 3 : at + 11] = struct.pack(">d", claimed_s * 1000)
    path.write_bytes(bytes(data))
    info = _decoded(path)  # neither refused as 10 hours long nor cut at 1 s
    assert info.duration_s == pytest.approx(6.0, abs=0.05)


@pytest.mark.parametrize("kind", ["ogg", "adts"])
def test_a_stream_changing_rate_and_layout_midway(tmp_path: Path, kind: str) -> None:
    codec = ["-c:a", "libvorbis"] if kind == "ogg" else ["-c:a", "aac", "-f", "adts"]
    first = sine(tmp_path / f"a.{kind}", 2.0, 44100, 440, *codec)
    second = sine(tmp_path / f"b.{kind}", 2.0, 22050, 440, "-ac", "2", *codec)
    path = tmp_path / f"chained.{kind}"
    path.write_bytes(first.read_bytes() + second.read_bytes())
    with pytest.raises(InvalidInput, match="accepted: one sample rate") as caught:
        _decoded(path)
    assert caught.value.code == "audio_format_changed"
    assert caught.value.status == 422


CODEC_CHANGES = {
    "webm": (("-c:a", "libopus", "-f", "webm"), ("-c:a", "libvorbis", "-f", "webm")),
    "ogg": (("-c:a", "libopus"), ("-c:a", "libvorbis")),
}
"""Opus then Vorbis, each a file of its own, concatenated: a chained Ogg, or two WebM files."""


@pytest.mark.parametrize("kind", CODEC_CHANGES)
def test_a_stream_changing_codec_midway(tmp_path: Path, kind: str) -> None:
    """Before: the WebM decoded to 32 s for 24 s of audio, the second file's Vorbis packets fed
    to the first file's Opus decoder, without a warning; the chained Ogg ended at 12 s,
    `truncated` with a warning about an "Invalid argument"."""
    opus, vorbis = CODEC_CHANGES[kind]
    first = sine(tmp_path / f"a.{kind}", 12.0, 48000, 440, *opus)
    second = sine(tmp_path / f"b.{kind}", 12.0, 48000, 660, *vorbis)
    path = tmp_path / f"changed.{kind}"
    path.write_bytes(first.read_bytes() + second.read_bytes())
    with pytest.raises(InvalidInput, match=r"\(Opus to Vorbis\) after 12\.0 s") as caught:
        _decoded(path)
    assert caught.value.code == "audio_format_changed"
    assert caught.value.status == 422


def test_two_webm_files_of_one_codec_are_decoded_whole(tmp_path: Path) -> None:
    """A MediaRecorder restarted, its files sent one after the other: the same Opus track twice,
    decoded as before (FFmpeg reads the second file's packets on)."""
    first = sine(tmp_path / "a.webm", 2.0, 48000, 440, "-c:a", "libopus", "-f", "webm")
    second = sine(tmp_path / "b.webm", 3.0, 48000, 660, "-c:a", "libopus", "-f", "webm")
    path = tmp_path / "twice.webm"
    path.write_bytes(first.read_bytes() + second.read_bytes())
    info = _decoded(path)
    assert info.duration_s == pytest.approx(5.0, abs=0.05)


def test_a_truncated_m4a_returns_what_is_there_and_says_so(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.m4a", 6.0, 44100, 440, "-c:a", "aac", "-movflags", "+faststart")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    info = _decoded(path)
    assert info.truncated
    assert 2.0 < info.duration_s < 4.0
    assert any("the file ends at" in warning for warning in info.warnings)


def test_an_m4a_cut_before_its_index_is_corrupt(tmp_path: Path) -> None:
    # Written without faststart, the index (moov) is at the end: cut, nothing can be located.
    path = sine(tmp_path / "a.m4a", 4.0, 44100, 440, "-c:a", "aac")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptAudio, match="cut short or damaged") as caught:
        probe(path, LIMITS)
    assert caught.value.status == 400


def test_a_truncated_wav_says_so_on_the_libsndfile_path(tmp_path: Path) -> None:
    path = tmp_path / "cut.wav"
    sf.write(path, np.zeros(32000, np.float32), 16000, subtype="PCM_16")
    data = path.read_bytes()
    path.write_bytes(data[: 44 + 16000 * 2])
    info = _decoded(path)
    assert (info.truncated, info.duration_s) == (True, 1.0)
    assert "the WAV header states 64000 bytes" in info.warnings[0]


def test_damaged_packets_are_counted_not_hidden(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.mp3", 10.0, 44100, 440, "-c:a", "libmp3lame")
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(3)
    middle = len(data) // 2
    data[middle : middle + 400] = rng.integers(0, 256, 400, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    info = _decoded(path)
    assert info.duration_s == pytest.approx(10.0, abs=0.5)
    assert info.warnings and "skipped" in " ".join(info.warnings)


def test_random_bytes_after_a_real_header_are_corrupt(tmp_path: Path) -> None:
    path = sine(tmp_path / "a.mp3", 10.0, 44100, 440, "-c:a", "libmp3lame")
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(4)
    data[2000:] = rng.integers(0, 256, len(data) - 2000, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(ArengineError) as caught:
        _decoded(path)
    assert 400 <= caught.value.status < 500


# Lengths from what is decoded, never audio dropped silently, and messages that say what was
# found.


def _id3(payload_bytes: int) -> bytes:
    """An ID3v2.3 tag holding one APIC (cover picture) frame of `payload_bytes` noise."""
    picture = b"\x00image/jpeg\x00\x03\x00" + np.random.default_rng(5).bytes(payload_bytes)
    frame = b"APIC" + struct.pack(">I", len(picture)) + b"\x00\x00" + picture
    size = len(frame)
    syncsafe = bytes((size >> shift) & 0x7F for shift in (21, 14, 7, 0))
    return b"ID3\x03\x00\x00" + syncsafe + frame


def test_an_mp3_behind_a_large_cover_picture_keeps_its_length(tmp_path: Path) -> None:
    # Before: libsndfile estimated the length from the file size, tag included: 400+ s, refused
    # under a 120 s cap.
    plain = sine(
        tmp_path / "plain.mp3",
        8.0,
        44100,
        440,
        "-c:a",
        "libmp3lame",
        "-b:a",
        "32k",
        "-write_xing",
        "0",
        "-id3v2_version",
        "0",
    )
    path = tmp_path / "cover.mp3"
    path.write_bytes(_id3(1_400_000) + plain.read_bytes())
    info = _decoded(path)
    assert info.duration_s == pytest.approx(8.0, abs=0.1)
    assert not info.truncated


def test_a_flac_header_stating_less_than_the_file_holds(tmp_path: Path) -> None:
    # Before: 10 s returned with a 200, the other 20 s dropped silently.
    path = sine(tmp_path / "a.flac", 30.0, 16000, 440, "-c:a", "flac")
    data = bytearray(path.read_bytes())
    (packed,) = struct.unpack(">Q", data[18:26])
    data[18:26] = struct.pack(">Q", (packed & ~(2**36 - 1)) | 160_000)  # 10 s at 16 kHz
    path.write_bytes(bytes(data))
    assert probe(path, LIMITS).duration_s == 10.0
    info = _decoded(path)
    assert info.duration_s == pytest.approx(30.0, abs=0.01)
    assert "the header states 10.0 s; all 30.0 s in the file were decoded" in info.warnings


def test_concatenated_mp3s_are_decoded_whole(tmp_path: Path) -> None:
    # Before: only the first file's 3 s (its Xing header's count) came back.
    first = sine(tmp_path / "a.mp3", 3.0, 44100, 440, "-c:a", "libmp3lame")
    second = sine(tmp_path / "b.mp3", 5.0, 44100, 660, "-c:a", "libmp3lame")
    path = tmp_path / "both.mp3"
    path.write_bytes(first.read_bytes() + second.read_bytes())
    assert _decoded(path).duration_s == pytest.approx(8.0, abs=0.1)


def test_mp3s_under_200_bytes(tmp_path: Path) -> None:
    # Before: a one-frame MP3 was a 400 "does not exist or is not a regular file".
    path = sine(
        tmp_path / "tiny.mp3",
        0.03,
        8000,
        440,
        "-c:a",
        "libmp3lame",
        "-b:a",
        "8k",
        "-write_xing",
        "0",
        "-id3v2_version",
        "0",
        "-map_metadata",
        "-1",
    )
    data = path.read_bytes()
    path.write_bytes(data[:150])  # two frames
    info = _decoded(path)
    assert (info.format, info.sample_rate, info.frames) == ("MP3", 8000, 1728)
    path.write_bytes(data[:72])  # one frame: too little for FFmpeg to find the stream
    with pytest.raises(CorruptAudio, match=r"starts like MP3 but .* cut short or damaged"):
        probe(path, LIMITS)


def test_a_wav_with_sample_rate_0(tmp_path: Path) -> None:
    # Before: 400 "SF_INFO struct incomplete".
    path = tmp_path / "zero.wav"
    sf.write(path, np.zeros(1600, np.float32), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    data[24:28] = struct.pack("<I", 0)
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidInput, match="sample rate 0 Hz; accepted: 8000 to 192000") as caught:
        probe(path, LIMITS)
    assert (caught.value.status, caught.value.code) == (422, "unsupported_sample_rate")


def test_a_valid_chained_ogg_is_decoded_whole(tmp_path: Path) -> None:
    # Before: 400 "written to a pipe?".
    first = sine(tmp_path / "a.ogg", 2.0, 44100, 440, "-c:a", "libvorbis")
    second = sine(tmp_path / "b.ogg", 3.0, 44100, 660, "-c:a", "libvorbis")
    path = tmp_path / "chained.ogg"
    path.write_bytes(first.read_bytes() + second.read_bytes())
    info = _decoded(path)
    assert info.duration_s == pytest.approx(5.0, abs=0.05)

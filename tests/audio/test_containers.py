"""The input-format table: each container declared once, and the modules reading it agree on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from arengine.audio import containers, ffmpeg, sniff
from arengine.audio.containers import CONTAINERS
from arengine.audio.validation import AudioLimits, probe
from tests.recordings import sine

LIMITS = AudioLimits(
    max_duration_s=120, max_channels=8, min_sample_rate=8000, max_sample_rate=192000
)

FILES = [  # name, ffmpeg arguments
    ("a.mp3", ["-c:a", "libmp3lame"]),
    ("a.m4a", ["-c:a", "aac"]),
    ("a.ogg", ["-c:a", "libvorbis"]),
    ("a.flac", ["-c:a", "flac"]),
    ("a.webm", ["-c:a", "libopus"]),
    ("a.wma", ["-c:a", "wmav2"]),
    ("a.aac", ["-c:a", "aac", "-f", "adts"]),
    ("a.wav", ["-c:a", "pcm_s16le"]),
]


@pytest.mark.parametrize(("name", "args"), FILES)
def test_a_file_is_recognised_reported_and_reopened_as_one_container(
    tmp_path: Path, name: str, args: list[str]
) -> None:
    # Before: a WMA was recognised as "ASF (WMA/WMV)" but reported as "ASF (WMA)", so decoding
    # found no demuxer to insist on for what validation had opened.
    path = sine(tmp_path / name, 1.0, 44100, 440, *args)
    info = probe(path, LIMITS)
    found = containers.recognise(sniff.head(path))
    assert found is not None
    if info.decoder == sniff.FFMPEG:
        assert found.name == info.format
        with ffmpeg.open_upload(path) as container:
            assert containers.demuxer_for(info.format) == ffmpeg.demuxer_name(container)
    else:
        assert info.format in found.sndfile


def test_each_name_demuxer_and_libsndfile_name_belongs_to_one_container() -> None:
    names = [c.name for c in CONTAINERS]
    demuxers = [c.demuxer for c in CONTAINERS if c.demuxer is not None]
    sndfile = [name for c in CONTAINERS for name in c.sndfile]
    assert len(set(names)) == len(names)
    assert len(set(demuxers)) == len(demuxers)
    assert len(set(sndfile)) == len(sndfile)
    # What is refused by name is never given to a decoder.
    assert all(c.demuxer is None and not c.sndfile for c in CONTAINERS if not c.audio)
    assert all(c.demuxer is not None for c in CONTAINERS if c.audio)


@pytest.mark.parametrize(
    ("head", "name"),
    [
        (b"\xff\xfb\x90\x00", "MP3"),
        (b"ID3\x04\x00", "MP3"),
        (b"\xff\xf1\x50\x80", "AAC (ADTS)"),
        (b"\xef\xbb\xbf#EXTM3U\n", "an HLS/M3U playlist"),
        (b"\x00\x00\x00\x20ftypM4A ", "MP4/MOV"),
        (b"RF64\xff\xff\xff\xffWAVE", "WAV"),
        (b"hello", None),
    ],
)
def test_first_bytes_name_their_container(head: bytes, name: str | None) -> None:
    found = containers.recognise(head)
    assert (found.name if found else None) == name

"""`Links`: a chained Ogg or WebM stream's files, found in the bytes however they are cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from arengine.audio.chains import EBML, OGG, Links
from tests.recordings import sine

ENCODINGS = {
    ("ogg", "opus"): ("-c:a", "libopus"),
    ("ogg", "vorbis"): ("-c:a", "libvorbis"),
    ("webm", "opus"): ("-c:a", "libopus", "-f", "webm"),
    ("webm", "vorbis"): ("-c:a", "libvorbis", "-f", "webm"),
}
DEMUXERS = {"ogg": "ogg", "webm": "matroska"}


def _file(folder: Path, kind: str, codec: str, seconds: float, rate: int = 48000) -> bytes:
    name = f"{codec}-{seconds}-{rate}.{kind}"
    return sine(folder / name, seconds, rate, 440, *ENCODINGS[kind, codec]).read_bytes()


def _links(kind: str, data: bytes, size: int) -> Links:
    links = Links(DEMUXERS[kind])
    for at in range(0, len(data), size):
        links.seen(at, data[at : at + size])
    return links


@pytest.mark.parametrize("kind", ["ogg", "webm"])
def test_a_change_of_codec_is_found_however_the_bytes_come(tmp_path: Path, kind: str) -> None:
    first = _file(tmp_path, kind, "opus", 2.0)
    data = first + _file(tmp_path, kind, "vorbis", 2.0)
    for size in (1, 3, 1000, 4096, len(data)):
        links = _links(kind, data, size)
        assert (links.changed, links.changed_at) == ("Opus to Vorbis", len(first)), size


@pytest.mark.parametrize("kind", ["ogg", "webm"])
def test_one_file_or_the_same_codec_again_is_no_change(tmp_path: Path, kind: str) -> None:
    one = _file(tmp_path, kind, "opus", 2.0)
    again = one + _file(tmp_path, kind, "opus", 3.0)
    for data in (one, again):
        assert _links(kind, data, 1000).changed is None


def test_a_webm_track_with_another_rate_is_a_change(tmp_path: Path) -> None:
    """Vorbis at 48 kHz then at 22.05 kHz: the second file's packets would reach a decoder set up
    for the first's."""
    data = _file(tmp_path, "webm", "vorbis", 2.0) + _file(tmp_path, "webm", "vorbis", 2.0, 22050)
    assert _links("webm", data, 1000).changed == "Vorbis, other parameters"


@pytest.mark.parametrize(("kind", "magic"), [("ogg", OGG), ("webm", EBML)])
def test_a_magic_by_chance_or_a_header_cut_short_is_not_a_file(
    tmp_path: Path, kind: str, magic: bytes
) -> None:
    first = _file(tmp_path, kind, "opus", 2.0)
    second = _file(tmp_path, kind, "vorbis", 2.0)
    noise = (magic + bytes(range(256))) * 50
    assert _links(kind, first + noise, 1000).changed is None
    assert _links(kind, first + second[:20], 7).changed is None


def test_a_seek_drops_a_header_read_in_part(tmp_path: Path) -> None:
    """A file read out of order (FFmpeg seeks in a posted file): the bytes after a seek do not
    complete a header begun before it."""
    first = _file(tmp_path, "webm", "opus", 2.0)
    second = _file(tmp_path, "webm", "vorbis", 2.0)
    links = Links("matroska")
    links.seen(0, first)
    links.seen(len(first), second[:30])
    links.seen(10, first[10:2000])
    assert links.changed is None
    links.seen(len(first), second)
    assert links.changed == "Opus to Vorbis"

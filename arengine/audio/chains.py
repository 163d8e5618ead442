"""Chained streams: where an Ogg or Matroska stream starts another file, and its codec.

An Ogg stream may be a chain of files (a web radio's tracks), and so may a WebM stream
(MediaRecorder restarted, files concatenated). FFmpeg meets a new file in its own way per
container: its Ogg demuxer stops with a bare "Invalid argument" where the codec changes, and its
Matroska demuxer ignores the second file's track list and hands the second file's packets to the
first file's decoder (a WebM of 12 s of Opus then 12 s of Vorbis decoded to 32 s of noise). So
`Links` watches the bytes FFmpeg reads and keeps what each file's audio is: a later file whose
codec differs from the first's (for Matroska, whose track differs in any way: its codec, its
codec's headers, its rate or channels, since its packets reach the first file's decoder) is a
change of format, which `ffmpeg.packets` refuses as such. The same codec again goes on as before.

Only headers are read, each within a few hundred bytes (`_MAX_HEADER`): Ogg's beginning-of-stream
page, Matroska's EBML header, its segment's first elements and its track list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OGG = b"OggS"
EBML = b"\x1a\x45\xdf\xa3"

_MAX_HEADER = {"ogg": 27 + 255 + 8, "matroska": 256 << 10}
"""Bytes after a magic that its header may take: an Ogg page's header, segment table and the
first 8 bytes of its first packet; Matroska's headers up to the end of the track list (a Vorbis
track's codec headers take a few KiB)."""

_MAX_PENDING = 8
"""Magics whose headers are still being read at once: a real header is known in a few hundred
bytes, and the bytes after a magic that occurs by chance in audio are rejected as soon as read."""

_NEED_MORE = object()
"""A header parser's answer when the bytes so far end before the header does."""


class Links:
    """What each file of a chained `demuxer` ("ogg" or "matroska") stream carries, from the bytes
    read (`seen`); `changed` says how a later file differs from the first. Example::

        links = Links("ogg")
        links.seen(0, data)  # each read, at its offset in the stream
        links.changed  # None, or "OpusHead to \\x01vorbis"
    """

    def __init__(self, demuxer: str) -> None:
        self._parse: Callable[[bytes], Any] = _ogg_page if demuxer == "ogg" else _matroska
        self._magic = OGG if demuxer == "ogg" else EBML
        self._bound = _MAX_HEADER[demuxer]
        self._ogg = demuxer == "ogg"
        self._end = 0
        self._tail = b""
        self._pending: list[tuple[int, bytearray]] = []
        """Where each magic whose header is still being read lies, and the bytes from it."""
        self._first: set[object] = set()
        self._data_seen = False
        self.changed: str | None = None
        self.changed_at = -1
        """Where the file that changed the format starts, once `changed`."""

    @classmethod
    def of(cls, demuxer: str | None) -> Links | None:
        """A `Links` for a demuxer whose streams may be chained; None for the others."""
        return cls(demuxer) if demuxer in _MAX_HEADER else None

    def seen(self, at: int, data: bytes) -> None:
        """`data` was read at offset `at` of the stream."""
        if at != self._end:  # a seek: what was pending does not go on here
            self._tail, self._pending = b"", []
        self._end = at + len(data)
        for _, pending in self._pending:
            pending += data[: self._bound - len(pending)]
        self._pending = [item for item in self._pending if not self._resolved(*item)]
        window = self._tail + data
        start = window.find(self._magic)
        while start >= 0:  # in order: a file's header is taken before the next file's
            item = (at - len(self._tail) + start, bytearray(window[start : start + self._bound]))
            if not self._resolved(*item):
                self._pending = [*self._pending, item][-_MAX_PENDING:]
            start = window.find(self._magic, start + 1)
        self._tail = window[-(len(self._magic) - 1) :]

    def _resolved(self, offset: int, pending: bytearray) -> bool:
        """Whether the header at `offset` (`pending`, the bytes from there) is read (and taken
        into account) or not one."""
        try:
            found = self._parse(bytes(pending))
        except _Incomplete:
            found = _NEED_MORE
        except _NotAHeader:
            return True
        if found is _NEED_MORE:
            return len(pending) >= self._bound
        if found is None:  # an Ogg page that begins no stream: the first file's data has come
            self._data_seen = True
        elif not self._data_seen:
            self._first.add(found)
            self._data_seen = not self._ogg  # Matroska: one track list per file
        elif found not in self._first and self.changed is None:
            first, then = _shown(self._first), _shown({found})
            self.changed = f"{first} to {then}" if first != then else f"{first}, other parameters"
            self.changed_at = offset
        return True


class _NotAHeader(Exception):
    """The bytes after a magic are no header (the magic occurred by chance)."""


_NAMES = {"OpusHead": "Opus", "\x01vorbis": "Vorbis", "A_OPUS": "Opus", "A_VORBIS": "Vorbis"}


def _shown(found: set[object]) -> str:
    """The codecs of what a file carries, named for a message."""
    names: set[str] = set()
    for item in found:
        codecs = (
            [track[0].decode("latin-1") for track in item] if isinstance(item, tuple) else [item]
        )
        names.update(_NAMES.get(str(codec), repr(codec)) for codec in codecs)
    return " and ".join(sorted(names)) or "no audio"


def _ogg_page(data: bytes) -> object:
    """An Ogg page's first packet's codec magic if it begins a stream, None if not."""
    if len(data) < 27:
        return _NEED_MORE
    if data[4] != 0:
        raise _NotAHeader
    segments = data[26]
    payload = 27 + segments
    if not data[5] & 0x02:  # not a beginning-of-stream page
        return None
    if len(data) < payload + 8:
        return _NEED_MORE
    return data[payload : payload + 8].decode("latin-1").rstrip("\0")


def _matroska(data: bytes) -> object:
    """The audio tracks of the Matroska file whose EBML header `data` starts with."""
    header, at = _element(data, 0)
    if header[0] != 0x1A45DFA3 or not 0 <= header[1] <= 256:
        raise _NotAHeader
    if at + header[1] > len(data):
        return _NEED_MORE
    if _child(data, at, at + header[1], 0x4282) not in (b"webm", b"matroska"):
        raise _NotAHeader
    segment, at = _element(data, at + header[1])
    if segment[0] != 0x18538067:
        raise _NotAHeader
    while True:
        (ident, size), at = _element(data, at)
        if ident == 0x1654AE6B:  # Tracks
            if at + size > len(data):
                return _NEED_MORE
            return _tracks(data[at : at + size])
        if ident == 0x1F43B675 or size < 0:  # a cluster, or an element of unknown size
            return ()
        at += size


def _tracks(data: bytes) -> tuple[tuple[bytes, ...], ...]:
    """Each audio track's CodecID, its number, codec headers and `Audio` element, raw."""
    tracks = []
    at = 0
    while at < len(data):
        (ident, size), at = _element(data, at)
        if ident == 0xAE and _child(data, at, at + size, 0x83) == b"\x02":  # an audio TrackEntry
            fields = (0x86, 0xD7, 0x63A2, 0xE1)
            tracks.append(tuple(_child(data, at, at + size, field) or b"" for field in fields))
        at += max(size, 0)
    return tuple(tracks)


def _child(data: bytes, at: int, end: int, wanted: int) -> bytes | None:
    """The value of the first element `wanted` among the elements in `data[at:end]`."""
    while at < end:
        (ident, size), at = _element(data, at)
        if size < 0:
            raise _NotAHeader
        if ident == wanted:
            return data[at : at + size]
        at += size
    return None


class _Incomplete(Exception):
    """The bytes end inside an element's ID or size."""


def _element(data: bytes, at: int) -> tuple[tuple[int, int], int]:
    """The element at `at`: (its ID, its size, -1 if unknown), and where its value starts."""
    ident, at = _vint(data, at, keep_marker=True)
    size, after = _vint(data, at, keep_marker=False)
    length = after - at
    return (ident, -1 if size == (1 << (7 * length)) - 1 else size), after


def _vint(data: bytes, at: int, keep_marker: bool) -> tuple[int, int]:
    if at >= len(data):
        raise _Incomplete
    first = data[at]
    if first == 0:
        raise _NotAHeader
    length = 9 - first.bit_length()
    if at + length > len(data):
        raise _Incomplete
    value = first if keep_marker else first & ((1 << (8 - length)) - 1)
    for byte in data[at + 1 : at + length]:
        value = value << 8 | byte
    return value, at + length

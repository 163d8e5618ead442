"""An upload in progress, written piece by piece as the HTTP layer's spool writes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from arengine.audio.arrival import HEADER_BYTES, Arrival, wav_layout


class WatchedArrival(Arrival):
    """The real `Arrival`, counting the times a job found the bytes it needs not there yet (and
    so left it to wake the engine when they come): a job that has asked, and holds no segment,
    has nothing left to do until more bytes arrive."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def ready(self, frames: int, callback: Callable[[], None]) -> bool:
        there = super().ready(frames, callback)
        self.refused += not there
        return there


class Arriving:
    """Copies `source` into `target` piece by piece, as the spool does, counting in `arrival`."""

    def __init__(self, source: Path, target: Path) -> None:
        self.data = source.read_bytes()
        self.target = target
        self.sent = 0
        self.arrival = WatchedArrival()
        target.write_bytes(b"")
        self.arrival.opened(target)

    def send(self, size: int) -> None:
        piece = self.data[self.sent : self.sent + size]
        with self.target.open("ab") as out:
            out.write(piece)
        self.sent += len(piece)
        self.arrival.add(len(piece))

    def start(self) -> None:
        """Send the header and read its layout, as the HTTP layer does before submitting."""
        self.send(HEADER_BYTES)
        self.arrival.layout = wav_layout(self.target, len(self.data))

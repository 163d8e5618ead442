"""One decoded stream read by several models: each distinct rate resampled once, each reader
with its own queue.

A request for several models (`?model=speech,notes,music`) decodes its upload once. The mono
blocks at the file's rate go through one soxr stream per distinct model rate, and each reader
(one per model) takes the blocks of its rate from its own queue. A reader that is ahead pulls
the next block for everyone, so the audio held is what lies between the slowest reader and the
fastest: the engine bounds that by letting no model decode far ahead of the slowest one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np
import soxr


class Resampler:
    """A mono float32 stream from `rate_in` to `rate_out` with soxr (band-limited, high
    quality), block by block; the identity when the rates are equal."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        self._stream = (
            None
            if rate_in == rate_out
            else soxr.ResampleStream(rate_in, rate_out, 1, dtype="float32", quality="HQ")
        )

    def push(self, block: np.ndarray, last: bool = False) -> np.ndarray:
        """The output for `block` (possibly empty); `last=True` flushes the filter's tail."""
        if self._stream is None:
            return block
        out: np.ndarray = self._stream.resample_chunk(block, last=last)
        return out


class Tee:
    """`readers` consumers of one mono stream at `rate_in`, reader `i` at `rates[i]`.

    Example::

        tee = Tee(mono_blocks, 44100, [16000, 22050, 16000])
        speech, notes, music = (tee.reader(i) for i in range(3))  # 16 kHz resampled once
    """

    def __init__(self, source: Iterator[np.ndarray], rate_in: int, rates: Sequence[int]) -> None:
        self._source = source
        self._rates = tuple(rates)
        self._resamplers = {rate: Resampler(rate_in, rate) for rate in set(rates)}
        self._queues: list[deque[np.ndarray]] = [deque() for _ in rates]
        self._ended = False

    def reader(self, index: int) -> Iterator[np.ndarray]:
        """Reader `index`'s blocks at its rate, until the stream ends."""
        queue = self._queues[index]
        while True:
            while not queue:
                if self._ended:
                    return
                self._pull()
            yield queue.popleft()

    def held_samples(self, index: int) -> int:
        """Samples queued for reader `index` and not yet taken."""
        return sum(len(block) for block in self._queues[index])

    def close(self) -> None:
        """Stop decoding (closes the source) and drop what is queued."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()
        self._ended = True
        for queue in self._queues:
            queue.clear()

    def _pull(self) -> None:
        pulled = next(self._source, None)
        last = pulled is None
        if last:
            self._ended = True
        block = np.zeros(0, dtype=np.float32) if pulled is None else pulled
        for rate, resampler in self._resamplers.items():
            out = resampler.push(block, last)
            if len(out):
                for index, reader_rate in enumerate(self._rates):
                    if reader_rate == rate:
                        self._queues[index].append(out)
